"""Deduplicator: drops drafted questions that nearly repeat one already kept in the job.

Similarity is measured over words, not characters: two questions built on one template but
asking about different things ("... setting alpha ..." / "... setting bravo ...") share most
characters yet differ in the word that matters, while a re-punctuated or re-cased copy of a
question scores 1.0.

Its decisions are stored, one per pair, in a step serialised per job across processes
(:meth:`~ragjury.store.base.Joins.decide_questions`): a pair decided before is decided the
same way again (a redelivered message). The kept questions live in the store, indexed so
that a drafted question is compared only with those it could nearly repeat
(:mod:`ragjury.agents.question_index`): time per question and worker memory stay flat
however many questions a job keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.question_index import QuestionIndex
from ragjury.schemas import DuplicateDropped, PairDrafted, QuestionsDrafted

if TYPE_CHECKING:
    from ragjury.store.base import Joins


class Deduplicator:
    role: ClassVar[str] = "deduplicator"
    consumes: ClassVar[tuple[type[QuestionsDrafted]]] = (QuestionsDrafted,)

    def __init__(self, threshold: float, store: Joins, job_id: str) -> None:
        self._index = QuestionIndex(threshold)
        self._store, self._job_id = store, job_id

    async def handle(self, event: QuestionsDrafted) -> list[PairDrafted | DuplicateDropped]:
        if not event.pairs:
            return []
        pairs = {pair.id: pair for pair in event.pairs}
        decisions = await self._store.decide_questions(
            self._job_id, [(p.id, p.question) for p in event.pairs], self._index
        )
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
