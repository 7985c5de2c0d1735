"""Related chunks without an LLM call: the chunk that shares the most rare terms with another.

Each chunk is a bag of words (case-folded, three characters or more, common English words
left out). A chunk's query is its most distinctive terms (term frequency times BM25's
inverse document frequency over the job's chunks) among those that occur in at least one
other chunk and in at most a fifth of them (rare terms). Every other chunk is scored against
the query with BM25 (k1 = 1.2, b = 0.75, each chunk a document of the collection); the best
one that shares at least :data:`MIN_SHARED` query terms is the related chunk, and the shared
terms, the rarest first, are the relation that is recorded. Two chunks of one document that
follow each other are never related (their overlap would make them share text, not a topic),
nor are two chunks that say nearly the same (half the word trigrams of one are in the
other): a question drawn from both would need only one of them.

Everything is a pure function of the chunks, ties broken by chunk id, so any process that
builds the index over the same chunks finds the same relations.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ragjury.schemas import Chunk

MIN_SHARED = 2
"""Query terms a related chunk must share (one shared word is too often a coincidence)."""
QUERY_TERMS = 24
"""The most distinctive terms of a chunk that make its query."""
RARE_SHARE = 0.2
"""A term in more than this share of the chunks is not rare (but one in two chunks always is)."""
SHOWN_TERMS = 8
"""Shared terms recorded with a relation, the rarest first."""
NEAR_DUPLICATE = 0.5
"""Share of the word trigrams of the smaller chunk found in the other: the same text."""
_K1, _B = 1.2, 0.75

_WORD = re.compile(r"[^\W\d_][\w]{2,}")
_ALL_WORDS = re.compile(r"\w+")
_MARKUP = re.compile(r"<[^<>\n]*>|&#?\w+;")  # HTML tags and entities are not topics
_STOPWORDS = frozenset(
    " ".join(
        (
            "about above after again against all also and any are because been before being",
            "below between both but can cannot could did does doing down during each few for",
            "from further had has have having her here hers herself him himself his how into",
            "its itself just let more most much must not now off once only other our ours out",
            "over own same she should some such than that the their theirs them then there",
            "these they this those through too under until very was way were what when where",
            "which while who whom why will with would you your yours yourself use used uses",
            "using like one two get gets make makes need needs want wants see example",
            "examples ways new first thing things even still already another however",
            "therefore instead really actually probably possibly necessarily important",
            "importantly usually normally simply often always never sometimes something",
            "anything everything nothing else well able might may shall yet since without",
            "within across along around part parts case cases time times",
        )
    ).split()
)
"""Common English words: shared by chance, never a topic."""


def _trigrams(text: str) -> frozenset[int]:
    words = [word.casefold() for word in _ALL_WORDS.findall(text)]
    return frozenset(
        int.from_bytes(hashlib.blake2b(" ".join(words[i : i + 3]).encode(), digest_size=6).digest())
        for i in range(max(0, len(words) - 2))
    )


def terms(text: str) -> Counter[str]:
    """The words of ``text`` that can relate it to another: case-folded, three characters or
    more, starting with a letter, common English words left out."""
    words = (word.casefold() for word in _WORD.findall(_MARKUP.sub(" ", text)))
    return Counter(word for word in words if word not in _STOPWORDS)


@dataclass(frozen=True)
class Relation:
    """The chunk related to another, and why: the rare terms they share, the rarest first."""

    chunk_id: str
    document_id: str
    index: int
    shared_terms: tuple[str, ...]
    score: float


@dataclass
class _Entry:
    chunk_id: str
    document_id: str
    index: int
    counts: Counter[str]
    length: int
    trigrams: frozenset[int]


@dataclass
class RelatedChunks:
    """The BM25 index of a job's chunks, for :meth:`related`. Build it with :meth:`add` for
    every chunk (any order) and read it once every chunk is in."""

    _entries: dict[str, _Entry] = field(default_factory=dict)
    _postings: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    _total_length: int = 0

    @classmethod
    def of(cls, chunks: Iterable[Chunk]) -> RelatedChunks:
        index = cls()
        for chunk in chunks:
            index.add(chunk)
        return index

    def add(self, chunk: Chunk) -> None:
        if chunk.id in self._entries:
            return
        counts = terms(chunk.text)
        length = sum(counts.values())
        self._entries[chunk.id] = _Entry(
            chunk.id, chunk.document_id, chunk.index, counts, length, _trigrams(chunk.text)
        )
        self._total_length += length
        for term, count in counts.items():
            self._postings.setdefault(term, []).append((chunk.id, count))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._entries

    def _idf(self, term: str) -> float:
        n, df = len(self._entries), len(self._postings.get(term, ()))
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _rare(self, term: str) -> bool:
        df = len(self._postings.get(term, ()))
        return 2 <= df <= max(2, RARE_SHARE * len(self._entries))

    def query(self, chunk_id: str) -> list[str]:
        """The chunk's most distinctive rare terms, the most distinctive first."""
        entry = self._entries[chunk_id]
        weighted = [
            (count * self._idf(term), term)
            for term, count in entry.counts.items()
            if self._rare(term)
        ]
        weighted.sort(key=lambda item: (-item[0], item[1]))
        return [term for _, term in weighted[:QUERY_TERMS]]

    def related(self, chunk_id: str) -> Relation | None:
        """The chunk most related to ``chunk_id`` (``KeyError`` if it is not in the index),
        or None when no chunk shares :data:`MIN_SHARED` of its query terms."""
        entry = self._entries[chunk_id]
        average = self._total_length / max(1, len(self._entries))
        scores: dict[str, float] = {}
        shared: dict[str, list[str]] = {}
        for term in self.query(chunk_id):
            idf = self._idf(term)
            for other_id, count in self._postings[term]:
                if other_id == chunk_id or self._neighbours(entry, self._entries[other_id]):
                    continue
                other = self._entries[other_id]
                norm = _K1 * (1.0 - _B + _B * other.length / max(average, 1.0))
                scores[other_id] = scores.get(other_id, 0.0) + idf * count * (_K1 + 1) / (
                    count + norm
                )
                shared.setdefault(other_id, []).append(term)
        ranked = sorted(
            (-score, other_id)
            for other_id, score in scores.items()
            if len(shared[other_id]) >= MIN_SHARED
        )
        found = next((c for c in ranked if not self._same_text(entry, self._entries[c[1]])), None)
        if found is None:
            return None
        best_score, best_id = found
        best = self._entries[best_id]
        rarest = sorted(shared[best_id], key=lambda term: (-self._idf(term), term))
        return Relation(
            chunk_id=best.chunk_id,
            document_id=best.document_id,
            index=best.index,
            shared_terms=tuple(rarest[:SHOWN_TERMS]),
            score=round(-best_score, 4),
        )

    @staticmethod
    def _same_text(a: _Entry, b: _Entry) -> bool:
        smaller = min(len(a.trigrams), len(b.trigrams))
        return smaller > 0 and len(a.trigrams & b.trigrams) >= NEAR_DUPLICATE * smaller

    @staticmethod
    def _neighbours(a: _Entry, b: _Entry) -> bool:
        return a.document_id == b.document_id and abs(a.index - b.index) <= 1
