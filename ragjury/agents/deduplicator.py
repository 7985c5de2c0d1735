"""Deduplicator: drops drafted questions that nearly repeat one already drafted in the run.

Similarity is measured over words, not characters: two questions built on one template but
asking about different things ("... setting alpha ..." / "... setting bravo ...") share most
characters yet differ in the word that matters, while a re-punctuated or re-cased copy of a
question scores 1.0. It keeps the run's questions in memory, so it runs as a single worker;
a resumed job seeds it with the questions of the documents already finished (:meth:`seed`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import ClassVar

import anyio
from rapidfuzz import process
from rapidfuzz.distance import Indel

from ragjury.schemas import DuplicateDropped, PairDrafted, QuestionsDrafted

_NOT_WORD = re.compile(r"[^\w\s]+")


def normalise(question: str) -> str:
    """Lower case, no punctuation, single spaces: what two wordings of one question share."""
    return " ".join(_NOT_WORD.sub(" ", question.casefold()).split())


class Deduplicator:
    role: ClassVar[str] = "deduplicator"
    consumes: ClassVar[tuple[type[QuestionsDrafted]]] = (QuestionsDrafted,)
    max_workers: ClassVar[int] = 1

    def __init__(self, threshold: float) -> None:
        self._cutoff = threshold
        self._seen: list[list[str]] = []
        self._ids: list[str] = []
        self._known: set[str] = set()
        self._lock = anyio.Lock()

    async def handle(self, event: QuestionsDrafted) -> list[PairDrafted | DuplicateDropped]:
        out: list[PairDrafted | DuplicateDropped] = []
        async with self._lock:
            for pair in event.pairs:
                if pair.id in self._known:  # the same pair again (a replayed step)
                    out.append(PairDrafted(pair=pair))
                    continue
                key = normalise(pair.question).split()
                match = process.extractOne(
                    key, self._seen, scorer=Indel.normalized_similarity, score_cutoff=self._cutoff
                )
                if match is not None:
                    _, score, index = match
                    out.append(
                        DuplicateDropped(
                            pair=pair, duplicate_of=self._ids[index], similarity=round(score, 3)
                        )
                    )
                    continue
                self._remember(pair.id, pair.question)
                out.append(PairDrafted(pair=pair))
        return out

    def seed(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Remember (pair id, question) pairs that passed before, e.g. from the store."""
        for pair_id, question in pairs:
            if pair_id not in self._known:
                self._remember(pair_id, question)

    def _remember(self, pair_id: str, question: str) -> None:
        self._seen.append(normalise(question).split())
        self._ids.append(pair_id)
        self._known.add(pair_id)
