"""Aggregator: joins a pair with its three critiques and decides kept, rejected or failed.

A pair is kept when every rating is at least ``min_score``; rejected when any is lower;
failed when any critic could not give a valid critique. Join state is keyed by pair id.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import ClassVar

import anyio

from ragjury.schemas import (
    CRITERIA,
    Criterion,
    CritiqueIssued,
    CritiqueResult,
    Failure,
    PairDrafted,
    PairJudged,
    QAPair,
)


@dataclass
class _Join:
    pair: QAPair | None = None
    critiques: dict[Criterion, CritiqueResult] = field(default_factory=dict)
    errors: dict[Criterion, Failure] = field(default_factory=dict)

    def complete(self) -> bool:
        return self.pair is not None and len(self.critiques) + len(self.errors) == len(CRITERIA)


class Aggregator:
    role: ClassVar[str] = "aggregator"
    consumes: ClassVar[tuple[type[PairDrafted], type[CritiqueIssued]]] = (
        PairDrafted,
        CritiqueIssued,
    )
    max_workers: ClassVar[int] = 1

    def __init__(self, min_score: int) -> None:
        self._min_score = min_score
        self._joins: dict[str, _Join] = {}
        self._lock = anyio.Lock()

    async def handle(self, event: PairDrafted | CritiqueIssued) -> list[PairJudged]:
        async with self._lock:
            if isinstance(event, PairDrafted):
                pair_id = event.pair.id
                join = self._joins.setdefault(pair_id, _Join())
                join.pair = event.pair
            else:
                pair_id = event.pair_id
                join = self._joins.setdefault(pair_id, _Join())
                if event.critique is not None:
                    join.critiques[event.criterion] = event.critique
                elif event.error is not None:
                    join.errors[event.criterion] = event.error
            if not join.complete():
                return []
            del self._joins[pair_id]
        return [self._judge(join)]

    def flush_incomplete(self, pair_ids: Collection[str] | None = None) -> list[PairJudged]:
        """Judge every pair (of ``pair_ids``, or all) still waiting for a critique as failed:
        its critic crashed."""
        judged = []
        for pair_id, join in list(self._joins.items()):
            if join.pair is None or (pair_ids is not None and pair_id not in pair_ids):
                continue
            del self._joins[pair_id]
            missing = [c for c in CRITERIA if c not in join.critiques and c not in join.errors]
            for criterion in missing:
                join.errors[criterion] = Failure(
                    stage=f"{criterion}_critic",
                    attempts=0,
                    message=f"the {criterion} critic never answered (see the step_failed log)",
                )
            judged.append(self._judge(join))
        return judged

    def _judge(self, join: _Join) -> PairJudged:
        assert join.pair is not None
        if join.errors:
            first = next(iter(join.errors.values()))
            error = (
                first
                if len(join.errors) == 1
                else first.model_copy(
                    update={"message": "; ".join(f.message for f in join.errors.values())}
                )
            )
            return PairJudged(
                pair=join.pair, outcome="failed", critiques=join.critiques, error=error
            )
        kept = all(c.rating >= self._min_score for c in join.critiques.values())
        return PairJudged(
            pair=join.pair, outcome="kept" if kept else "rejected", critiques=join.critiques
        )
