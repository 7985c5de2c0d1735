"""Deduplicator: drops drafted questions that nearly repeat one already kept in the job.

Similarity is measured over words, not characters: two questions built on one template but
asking about different things ("... setting alpha ..." / "... setting bravo ...") share most
characters yet differ in the word that matters, while a re-punctuated or re-cased copy of a
question scores 1.0.

Its decisions are stored, one per pair, in a step serialised per job across processes
(:meth:`~ragjury.store.base.Store.decide_questions`): a pair decided before is decided the
same way again (a redelivered message), and a worker keeps a copy of the job's kept
questions that it brings up to date from the store at each step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from rapidfuzz import process
from rapidfuzz.distance import Indel

from ragjury.schemas import DuplicateDropped, PairDrafted, QuestionsDrafted
from ragjury.store.base import QuestionDecision, Store

_NOT_WORD = re.compile(r"[^\w\s]+")


def normalise(question: str) -> str:
    """Lower case, no punctuation, single spaces: what two wordings of one question share."""
    return " ".join(_NOT_WORD.sub(" ", question.casefold()).split())


class Deduplicator:
    role: ClassVar[str] = "deduplicator"
    consumes: ClassVar[tuple[type[QuestionsDrafted]]] = (QuestionsDrafted,)

    def __init__(self, threshold: float, store: Store, job_id: str) -> None:
        self._cutoff = threshold
        self._store, self._job_id = store, job_id
        self._seen: list[list[str]] = []
        self._ids: list[str] = []
        self._since = 0

    async def handle(self, event: QuestionsDrafted) -> list[PairDrafted | DuplicateDropped]:
        if not event.pairs:
            return []
        pairs = {pair.id: pair for pair in event.pairs}
        try:
            decisions, self._since = await self._store.decide_questions(
                self._job_id, [(p.id, p.question) for p in event.pairs], self._since, self._decide
            )
        except BaseException:
            self._seen, self._ids, self._since = [], [], 0  # the copy may be ahead of the store
            raise
        out: list[PairDrafted | DuplicateDropped] = []
        for decision in decisions:
            pair = pairs[decision.pair_id]
            if decision.duplicate_of is None:
                out.append(PairDrafted(pair=pair))
            else:
                similarity = round(decision.similarity or 0.0, 3)
                out.append(
                    DuplicateDropped(
                        pair=pair, duplicate_of=decision.duplicate_of, similarity=similarity
                    )
                )
        return out

    def _decide(
        self, kept: Sequence[tuple[int, str, str]], pairs: Sequence[tuple[str, str]]
    ) -> list[QuestionDecision]:
        for _, pair_id, question in kept:
            self._remember(pair_id, question)
        decisions = []
        for pair_id, question in pairs:
            match = process.extractOne(
                normalise(question).split(),
                self._seen,
                scorer=Indel.normalized_similarity,
                score_cutoff=self._cutoff,
            )
            if match is None:
                self._remember(pair_id, question)
                decisions.append(QuestionDecision(pair_id, None, None))
            else:
                _, score, index = match
                decisions.append(QuestionDecision(pair_id, self._ids[index], float(score)))
        return decisions

    def _remember(self, pair_id: str, question: str) -> None:
        self._seen.append(normalise(question).split())
        self._ids.append(pair_id)
