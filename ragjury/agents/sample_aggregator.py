"""SampleAggregator: joins every requested metric of a sample into one SampleScored, the
evaluation pipeline's terminal event. The join is in the store, keyed by the sample."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel

from ragjury.agents.joins import JoinState, Part, part_model
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
        part: dict[str, BaseModel]
        if isinstance(event, SampleSubmitted):
            part = {"s:sample": event}
        else:
            part = {f"s:m:{event.metric}": event.result}
        judged: list[tuple[Mapping[str, Part], list[SampleScored]]] = []

        def scored(state: Mapping[str, Part]) -> list[SampleScored]:
            # the state add_models found complete comes back as it was: not made twice
            for seen, made in judged:
                if seen is state:
                    return made
            judged.append((state, _scored(state)))
            return judged[-1][1]

        state = await self._joins.add_models(part, "s:", lambda state: bool(scored(state)))
        return scored(state)


def _scored(state: Mapping[str, Part]) -> list[SampleScored]:
    """The sample's result if ``state`` holds the sample and each of its metrics' results."""
    if "s:sample" not in state:
        return []
    submitted = part_model(state["s:sample"], SampleSubmitted)
    if any(f"s:m:{m}" not in state for m in submitted.metrics):
        return []
    return [
        SampleScored(
            sample=submitted.sample,
            metrics={m: part_model(state[f"s:m:{m}"], MetricResult) for m in submitted.metrics},
            answered_by_target=submitted.answered_by_target,
        )
    ]
