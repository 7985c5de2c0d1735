"""Retrieval figures without an LLM: did the retriever find the contexts that hold the answer,
and at which rank.

A sample names its reference contexts (``reference_context_ids`` and/or
``reference_contexts``); its retrieved ``contexts`` are a ranked list, first = rank 1, with
``context_ids`` where the retriever gave them. A retrieved context **finds** a reference
context when

* both have ids and the ids are equal, or
* both have text and one covers the other: at least half (:data:`COVERED`) of the word
  trigrams of one occur in the other. Words are case-folded runs of letters and digits, so
  punctuation, Markdown and spacing do not matter. This holds for a retrieved chunk that
  holds the reference chunk (bigger chunks), one that lies inside it (smaller chunks), and one
  that shifts it by less than half (the same chunking with other boundaries or overlap); a
  neighbour that merely overlaps it by a few sentences does not find it. A text of fewer than
  three words has no trigram and never matches by text.

A retrieved context is **relevant** when it finds at least one reference context and is not a
duplicate: a context whose id (or, without an id, whose words) equal an earlier one's keeps
its rank but is never relevant again. The list order is the ranking: contexts the retriever
scored equally keep the order it gave.

At a cut-off ``k`` (the top ``min(k, n)`` of ``n`` retrieved; a ``k`` larger than the list
takes the whole list):

* ``hit``: 1 when any reference context is found, else 0 (the mean is the hit rate);
* ``mrr``: 1 / the rank of the first relevant context, 0 when none is within ``k``;
* ``recall``: reference contexts found / reference contexts;
* ``precision``: relevant contexts / ``min(k, n)``;
* ``ndcg``: binary-gain DCG (``sum rel_i / log2(i + 1)``) over the DCG of the best ranking:
  the relevant contexts retrieved, then one context for each reference context never found,
  all at the top. With ids this is the usual nDCG (one relevant context per reference
  context); with other chunking it never exceeds 1, and a chunk holding two reference chunks
  counts as one relevant context.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragjury._json import JSONData

__all__ = [
    "COVERED",
    "DEFAULT_K",
    "RankedReference",
    "RankedRetrieval",
    "RetrievedContext",
    "rank_retrieval",
    "text_finds",
]

COVERED = 0.5
"""The share of one text's word trigrams that must occur in the other for a text match."""
DEFAULT_K = (1, 3, 5, 10)

_WORD = re.compile(r"\w+")
_GRAM = 3


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _trigrams(text: str) -> frozenset[tuple[str, ...]]:
    words = _words(text)
    return frozenset(tuple(words[i : i + _GRAM]) for i in range(len(words) - _GRAM + 1))


def _covers(part: frozenset[tuple[str, ...]], whole: frozenset[tuple[str, ...]]) -> bool:
    return bool(part) and len(part & whole) >= COVERED * len(part)


def text_finds(retrieved: str, reference: str) -> bool:
    """Whether ``retrieved`` and ``reference`` are the same chunk by the text rule above."""
    a, b = _trigrams(retrieved), _trigrams(reference)
    return _covers(a, b) or _covers(b, a)


@dataclass(frozen=True)
class RetrievedContext:
    """One retrieved context at ``rank`` (1-based) and what it found."""

    rank: int
    id: str | None
    found: tuple[int, ...]
    """Indexes of the reference contexts this context finds."""
    duplicate: bool

    @property
    def relevant(self) -> bool:
        return bool(self.found) and not self.duplicate


@dataclass(frozen=True)
class RankedReference:
    """One reference context and the rank of the first retrieved context that finds it."""

    index: int
    id: str | None
    rank: int | None
    matched_by: str | None


@dataclass(frozen=True)
class RankedRetrieval:
    """A sample's ranking judged against its reference contexts."""

    retrieved: tuple[RetrievedContext, ...]
    references: tuple[RankedReference, ...]
    unmatchable: int
    """Retrieved contexts that could not be compared (no id and no text to compare)."""

    @property
    def first_relevant(self) -> int | None:
        return next((c.rank for c in self.retrieved if c.relevant), None)

    def at(self, k: int) -> dict[str, float]:
        """hit, mrr, recall, precision and ndcg over the top ``k`` (see the module doc)."""
        top = self.retrieved[:k]
        relevant = [c.relevant for c in top]
        found = {i for c in top if not c.duplicate for i in c.found}
        first = self.first_relevant
        dcg = sum(1 / math.log2(rank + 1) for rank, rel in enumerate(relevant, 1) if rel)
        # the best ranking: every relevant context the retriever returned, then one more for
        # each reference context it never found
        unfound = sum(r.rank is None for r in self.references)
        ideal_count = min(k, sum(c.relevant for c in self.retrieved) + unfound)
        ideal = sum(1 / math.log2(rank + 1) for rank in range(1, ideal_count + 1))
        return {
            "hit": 1.0 if found else 0.0,
            "mrr": 1 / first if first is not None and first <= k else 0.0,
            "recall": len(found) / len(self.references) if self.references else 0.0,
            "precision": sum(relevant) / len(top) if top else 0.0,
            "ndcg": dcg / ideal if ideal else 0.0,
        }

    def details(self, ks: Sequence[int]) -> dict[str, JSONData]:
        """What a judged sample records: the ranks, and the figures at each ``k``."""
        first = self.first_relevant
        return {
            "mrr": 1 / first if first else 0.0,
            "first_relevant_rank": first,
            "references": [
                {"index": r.index, "id": r.id, "rank": r.rank, "matched_by": r.matched_by}
                for r in self.references
            ],
            "retrieved": [
                {
                    "rank": c.rank,
                    "id": c.id,
                    "relevant": c.relevant,
                    "duplicate": c.duplicate,
                    "finds": list(c.found),
                }
                for c in self.retrieved
            ],
            "unmatchable": self.unmatchable,
            "at_k": {str(k): {n: round(v, 6) for n, v in self.at(k).items()} for k in ks},
        }


def rank_retrieval(
    contexts: Sequence[str],
    context_ids: Sequence[str | None],
    reference_contexts: Sequence[str],
    reference_ids: Sequence[str],
) -> RankedRetrieval:
    """Judge the ranked ``contexts`` against the reference contexts.

    References are given by ids, by texts, or both; when both, they pair up by position (the
    i-th id is the i-th text's), else each id and each text is a reference of its own.
    """
    references = _references(reference_contexts, reference_ids)
    ids = list(context_ids) + [None] * (len(contexts) - len(context_ids))
    reference_trigrams = [_trigrams(text) if text else frozenset() for _, text in references]
    seen: set[tuple[str, str | tuple[str, ...]]] = set()
    retrieved: list[RetrievedContext] = []
    first: dict[int, tuple[int, str]] = {}
    unmatchable = 0
    for rank, (text, id_) in enumerate(zip(contexts, ids, strict=True), start=1):
        grams = _trigrams(text)
        key: tuple[str, str | tuple[str, ...]] = (
            ("id", id_) if id_ is not None else ("text", tuple(_words(text)))
        )
        duplicate = key in seen
        seen.add(key)
        found: list[int] = []
        comparable = False
        for index, (ref_id, ref_text) in enumerate(references):
            how = None
            if id_ is not None and ref_id is not None:
                comparable = True
                how = "id" if id_ == ref_id else None
            if how is None and ref_text and text.strip():
                comparable = True
                grams_ref = reference_trigrams[index]
                how = "text" if _covers(grams, grams_ref) or _covers(grams_ref, grams) else None
            if how is not None:
                found.append(index)
                if not duplicate and index not in first:
                    first[index] = (rank, how)
        unmatchable += not comparable
        retrieved.append(RetrievedContext(rank, id_, tuple(found), duplicate))
    ranked = tuple(
        RankedReference(
            index=i,
            id=ref_id,
            rank=first[i][0] if i in first else None,
            matched_by=first[i][1] if i in first else None,
        )
        for i, (ref_id, _) in enumerate(references)
    )
    return RankedRetrieval(tuple(retrieved), ranked, unmatchable)


def _references(texts: Sequence[str], ids: Sequence[str]) -> list[tuple[str | None, str | None]]:
    """(id, text) of each distinct reference context."""
    texts = [t for t in texts if t.strip()]
    unique_ids = list(dict.fromkeys(i for i in ids if i))
    if unique_ids and len(unique_ids) == len(texts):
        pairs: list[tuple[str | None, str | None]] = list(zip(unique_ids, texts, strict=True))
    else:
        pairs = [(i, None) for i in unique_ids] + [(None, t) for t in texts]
    distinct: list[tuple[str | None, str | None]] = []
    seen_text: set[tuple[str, ...]] = set()
    for ref_id, text in pairs:
        words = tuple(_words(text)) if text and ref_id is None else None
        if words is not None:
            if words in seen_text:
                continue
            seen_text.add(words)
        distinct.append((ref_id, text))
    return distinct
