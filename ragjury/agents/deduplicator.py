"""Deduplicator: drops drafted questions that nearly repeat one already drafted in the run.

Similarity is measured over words, not characters: two questions built on one template but
asking about different things ("... setting alpha ..." / "... setting bravo ...") share most
characters yet differ in the word that matters, while a re-punctuated or re-cased copy of a
question scores 1.0. It keeps the run's questions in memory, so it runs as a single worker.
"""

from __future__ import annotations

import re
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
        self._lock = anyio.Lock()

    async def handle(self, event: QuestionsDrafted) -> list[PairDrafted | DuplicateDropped]:
        out: list[PairDrafted | DuplicateDropped] = []
        async with self._lock:
            for pair in event.pairs:
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
                self._seen.append(key)
                self._ids.append(pair.id)
                out.append(PairDrafted(pair=pair))
        return out
