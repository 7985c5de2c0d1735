"""SampleAggregator: joins every requested metric of a sample into one SampleScored, the
evaluation pipeline's terminal event. The join is in the store, keyed by the sample."""

from __future__ import annotations

from typing import ClassVar

from ragjury.agents.joins import JoinState
from ragjury.schemas import MetricResult, MetricScored, SampleScored, SampleSubmitted


class SampleAggregator:
    role: ClassVar[str] = "sample_aggregator"
    consumes: ClassVar[tuple[type[SampleSubmitted | MetricScored], ...]] = (
        SampleSubmitted,
        MetricScored,
    )

    def __init__(self, joins: JoinState) -> None:
        self._joins = joins

    async def handle(self, event: SampleSubmitted | MetricScored) -> list[SampleScored]:
        if isinstance(event, SampleSubmitted):
            part = {"s:sample": event.model_dump_json()}
        else:
            part = {f"s:m:{event.metric}": event.result.model_dump_json()}
        state = await self._joins.add(part, "s:")
        if "s:sample" not in state:
            return []
        submitted = (  # the event itself when it is what the join kept (not parsed again)
            event
            if isinstance(event, SampleSubmitted) and state["s:sample"] == part["s:sample"]
            else SampleSubmitted.model_validate_json(state["s:sample"])
        )
        if any(f"s:m:{m}" not in state for m in submitted.metrics):
            return []
        return [
            SampleScored(
                sample=submitted.sample,
                metrics={
                    m: MetricResult.model_validate_json(state[f"s:m:{m}"])
                    for m in submitted.metrics
                },
                answered_by_target=submitted.answered_by_target,
            )
        ]
