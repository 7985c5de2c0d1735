"""Aggregator: joins a pair with its critiques and decides kept, rejected or failed.

A pair is kept when every rating is at least ``min_score``; rejected when any is lower;
failed when any critic could not give a valid critique. The join is in the store, keyed by
the pair's id, so the aggregator can run as many workers in as many processes as wanted.

With the answerability check (``criteria`` then holds ``answerability``), a kept multi-hop
pair that one of its chunks answers alone is not multi-hop: it is rejected with
``multi_hop_strict``, else retyped to a factoid of that chunk; either way its
:class:`~ragjury.schemas.AnswerCheck` says what happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ragjury.agents.joins import JoinState
from ragjury.schemas import (
    ANSWERABILITY,
    CRITERIA,
    AnswerCheck,
    Criterion,
    CritiqueIssued,
    PairDrafted,
    PairJudged,
    QAPair,
)


class Aggregator:
    role: ClassVar[str] = "aggregator"
    consumes: ClassVar[tuple[type[PairDrafted | CritiqueIssued], ...]] = (
        PairDrafted,
        CritiqueIssued,
    )

    def __init__(
        self,
        min_score: int,
        joins: JoinState,
        criteria: Sequence[Criterion] = CRITERIA,
        *,
        multi_hop_strict: bool = False,
    ) -> None:
        """``criteria``: the critiques each pair waits for (the job's critics)."""
        self._min_score = min_score
        self._joins = joins
        self._criteria = tuple(criteria)
        self._strict = multi_hop_strict

    async def handle(self, event: PairDrafted | CritiqueIssued) -> list[PairJudged]:
        if isinstance(event, PairDrafted):
            prefix = f"p:{event.pair.id}:"
            part = {prefix + "pair": event.model_dump_json()}
        else:
            prefix = f"p:{event.pair_id}:"
            part = {prefix + event.criterion: event.model_dump_json()}
        state = await self._joins.add(part, prefix)
        if len(state) < 1 + len(self._criteria):
            return []
        drafted = PairDrafted.model_validate_json(state[prefix + "pair"])
        critiques = [CritiqueIssued.model_validate_json(state[prefix + c]) for c in self._criteria]
        return [self._judge(drafted, critiques)]

    def _judge(self, drafted: PairDrafted, issued: list[CritiqueIssued]) -> PairJudged:
        critiques = {i.criterion: i.critique for i in issued if i.critique is not None}
        check = next((i.answer_check for i in issued if i.criterion == ANSWERABILITY), None)
        errors = [i.error for i in issued if i.error is not None]
        if errors or len(critiques) < len(self._criteria):
            first = errors[0] if errors else None
            if first is not None and len(errors) > 1:
                first = first.model_copy(update={"message": "; ".join(e.message for e in errors)})
            return PairJudged(
                pair=drafted.pair,
                outcome="failed",
                critiques=critiques,
                error=first,
                answer_check=check,
            )
        kept = all(c.rating >= self._min_score for c in critiques.values())
        pair = drafted.pair
        alone = self._answered_alone_by(check)
        if check is not None and alone is not None:
            check = check.model_copy(update={"answered_alone_by": alone})
            if kept and self._strict:
                kept = False
                note = (
                    f"a multi-hop question answered from chunk {alone} alone; rejected "
                    "(--multi-hop-strict)"
                )
                check = check.model_copy(update={"note": note})
            elif kept:
                pair, check = _retyped(pair, check, alone)
        return PairJudged(
            pair=pair,
            outcome="kept" if kept else "rejected",
            critiques=critiques,
            answer_check=check,
        )

    def _answered_alone_by(self, check: AnswerCheck | None) -> str | None:
        """The first chunk whose answer alone agrees with the drafted one as well as the bar
        asks (a multi-hop question it shows is not one)."""
        return next(
            (
                attempt.chunk_id
                for attempt in (() if check is None else check.alone)
                if attempt.rating is not None and attempt.rating >= self._min_score
            ),
            None,
        )


def _retyped(pair: QAPair, check: AnswerCheck, chunk_id: str) -> tuple[QAPair, AnswerCheck]:
    """``pair`` as the factoid of the one chunk that answers it, and the check saying so."""
    update: dict[str, object] = {"question_type": "factoid", "related": (), "shared_terms": ()}
    chunk = next((c for c in pair.related if c.id == chunk_id), None)
    if chunk is not None:
        update |= {"context": chunk.text, "source": chunk.source, "chunk_id": chunk.id}
    note = (
        f"a multi-hop question answered from chunk {chunk_id} alone; retyped to factoid, "
        "of that chunk"
    )
    narrowed = check.model_copy(
        update={"retyped_from": pair.question_type, "chunk_ids": pair.chunk_ids, "note": note}
    )
    return pair.model_copy(update=update), narrowed
