"""Aggregator: joins a pair with its three critiques and decides kept, rejected or failed.

A pair is kept when every rating is at least ``min_score``; rejected when any is lower;
failed when any critic could not give a valid critique. The join is in the store, keyed by
the pair's id, so the aggregator can run as many workers in as many processes as wanted.
"""

from __future__ import annotations

from typing import ClassVar

from ragjury.agents.joins import JoinState
from ragjury.schemas import (
    CRITERIA,
    CritiqueIssued,
    PairDrafted,
    PairJudged,
)


class Aggregator:
    role: ClassVar[str] = "aggregator"
    consumes: ClassVar[tuple[type[PairDrafted | CritiqueIssued], ...]] = (
        PairDrafted,
        CritiqueIssued,
    )

    def __init__(self, min_score: int, joins: JoinState) -> None:
        self._min_score = min_score
        self._joins = joins

    async def handle(self, event: PairDrafted | CritiqueIssued) -> list[PairJudged]:
        if isinstance(event, PairDrafted):
            prefix = f"p:{event.pair.id}:"
            part = {prefix + "pair": event.model_dump_json()}
        else:
            prefix = f"p:{event.pair_id}:"
            part = {prefix + event.criterion: event.model_dump_json()}
        state = await self._joins.add(part, prefix)
        if len(state) < 1 + len(CRITERIA):
            return []
        drafted = PairDrafted.model_validate_json(state[prefix + "pair"])
        critiques = [CritiqueIssued.model_validate_json(state[prefix + c]) for c in CRITERIA]
        return [self._judge(drafted, critiques)]

    def _judge(self, drafted: PairDrafted, issued: list[CritiqueIssued]) -> PairJudged:
        critiques = {i.criterion: i.critique for i in issued if i.critique is not None}
        errors = [i.error for i in issued if i.error is not None]
        if errors or len(critiques) < len(CRITERIA):
            first = errors[0] if errors else None
            if first is not None and len(errors) > 1:
                first = first.model_copy(update={"message": "; ".join(e.message for e in errors)})
            return PairJudged(pair=drafted.pair, outcome="failed", critiques=critiques, error=first)
        kept = all(c.rating >= self._min_score for c in critiques.values())
        return PairJudged(
            pair=drafted.pair, outcome="kept" if kept else "rejected", critiques=critiques
        )
