"""SampleAggregator: joins every requested metric of a sample into one SampleScored."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import ClassVar

import anyio

from ragjury.schemas import (
    Failure,
    MetricName,
    MetricResult,
    MetricScored,
    Sample,
    SampleScored,
    SampleSubmitted,
)


@dataclass
class _Join:
    sample: Sample | None = None
    wanted: tuple[MetricName, ...] = ()
    results: dict[MetricName, MetricResult] = field(default_factory=dict)

    def complete(self) -> bool:
        return self.sample is not None and all(m in self.results for m in self.wanted)


class SampleAggregator:
    role: ClassVar[str] = "sample_aggregator"
    consumes: ClassVar[tuple[type[SampleSubmitted], type[MetricScored]]] = (
        SampleSubmitted,
        MetricScored,
    )
    max_workers: ClassVar[int] = 1

    def __init__(self) -> None:
        self._joins: dict[str, _Join] = {}
        self._lock = anyio.Lock()

    async def handle(self, event: SampleSubmitted | MetricScored) -> list[SampleScored]:
        async with self._lock:
            if isinstance(event, SampleSubmitted):
                key = event.sample.id
                join = self._joins.setdefault(key, _Join())
                join.sample, join.wanted = event.sample, event.metrics
            else:
                key = event.sample_id
                join = self._joins.setdefault(key, _Join())
                join.results[event.metric] = event.result
            if not join.complete():
                return []
            del self._joins[key]
        return [self._scored(join)]

    def flush_incomplete(self, sample_ids: Collection[str] | None = None) -> list[SampleScored]:
        """Every sample (of ``sample_ids``, or all) still waiting for a metric, with that metric
        failed: its agent crashed."""
        flushed = []
        for key, join in list(self._joins.items()):
            if join.sample is None or (sample_ids is not None and key not in sample_ids):
                continue
            del self._joins[key]
            for metric in join.wanted:
                if metric not in join.results:
                    error = Failure(
                        stage=metric,
                        attempts=0,
                        message=f"no {metric} result arrived (see the step_failed log)",
                    )
                    join.results[metric] = MetricResult.failed(error)
            flushed.append(self._scored(join))
        return flushed

    @staticmethod
    def _scored(join: _Join) -> SampleScored:
        assert join.sample is not None
        return SampleScored(sample=join.sample, metrics={m: join.results[m] for m in join.wanted})
