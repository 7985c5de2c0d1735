"""The ``--summary`` of an evaluation run: means over scored samples only, never a failure.

The figures are tallied one judged sample at a time (:class:`SummaryTally`), so a summary of a
million samples holds a million floats (for the medians and intervals) and a million bytes
(the pass verdicts), not a million results. Each mean and pass rate carries its 95% interval
over samples (``mean_interval``, ``pass_rate_interval``: ``ragjury.intervals``, seeded, so the
same results give the same interval).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

from ragjury._json import JSONData
from ragjury.intervals import BOOTSTRAP_AT_MOST, CONFIDENCE, RESAMPLES, Interval, mean_interval
from ragjury.llm.usage import UsageLedger
from ragjury.metrics import Tally, registry
from ragjury.schemas import MetricResult, SampleScored
from ragjury.schemas.evaluation import ScoredFigures


@dataclass
class MetricTally:
    """One metric's figures so far."""

    scores: array[float] = field(default_factory=lambda: array("d"))
    verdicts: array[int] = field(default_factory=lambda: array("b"))
    """1 for each scored sample that passed, 0 for each that did not."""
    outcomes: dict[str, int] = field(
        default_factory=lambda: {"scored": 0, "not_applicable": 0, "failed": 0}
    )
    llm_calls: int = 0

    def add(self, result: MetricResult) -> None:
        self.outcomes[result.outcome] += 1
        self.llm_calls += result.llm_calls
        if result.outcome != "scored":
            return
        if result.score is not None:
            self.scores.append(result.score)
        if result.passing is not None:
            self.verdicts.append(int(result.passing))

    @property
    def passed(self) -> int:
        return sum(self.verdicts)

    def figures(self) -> dict[str, JSONData]:
        scores, verdicts = self.scores, self.verdicts
        return {
            "mean": round(sum(scores) / len(scores), 4) if scores else None,
            "mean_interval": _rounded(mean_interval(scores)),
            "median": round(median_of(scores), 4) if scores else None,
            "pass_rate": round(self.passed / len(verdicts), 4) if verdicts else None,
            "pass_rate_interval": _rounded(mean_interval(verdicts)),
            **self.outcomes,
            "llm_calls": self.llm_calls,
        }


def _rounded(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [round(interval[0], 4), round(interval[1], 4)]


INTERVALS: dict[str, str | int | float] = {
    "level": CONFIDENCE,
    "method": "percentile bootstrap over samples",
    "resamples": RESAMPLES,
    "seed": 0,
    "bootstrap_at_most": BOOTSTRAP_AT_MOST,
}
"""How the summary's intervals were made (above ``bootstrap_at_most`` samples: the normal
interval, which the bootstrap of a mean tends to)."""


_SORT_AT_MOST = 50_000
_BUCKETS = 4096


def median_of(values: array[float]) -> float:
    """The median of ``values`` without a sorted copy of them all (at a million samples a
    sorted list of floats would be the run's largest object): count the values per range,
    then look only into the range that holds the middle, counting its distinct values."""
    if len(values) <= _SORT_AT_MOST:
        return median(values)
    low, high = min(values), max(values)
    if low == high:
        return low
    scale = _BUCKETS / (high - low)
    counts = [0] * (_BUCKETS + 1)
    for value in values:
        counts[int((value - low) * scale)] += 1

    def value_at(rank: int) -> float:
        before = 0
        for bucket, count in enumerate(counts):
            if before + count > rank:
                inside = Counter(v for v in values if int((v - low) * scale) == bucket)
                for value, n in sorted(inside.items()):
                    if before + n > rank:
                        return value
                    before += n
            before += count
        raise AssertionError("rank beyond the values")

    n = len(values)
    return (value_at((n - 1) // 2) + value_at(n // 2)) / 2


@dataclass
class SummaryTally:
    """Every metric's figures, and those its declaration adds (keyword failure rates,
    retrieval at each k), tallied as samples are read."""

    metrics: Sequence[str]
    samples: int = 0
    tallies: dict[str, MetricTally] = field(default_factory=dict)
    extras: dict[str, Tally] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = registry()
        for name in self.metrics:
            metric = known.get(name)
            if metric is not None and metric.tally is not None:
                self.extras[name] = metric.tally()

    def add(self, scored: SampleScored | ScoredFigures) -> None:
        self.samples += 1
        for name in self.metrics:
            result = scored.metrics.get(name)
            if result is None:
                continue
            self.tallies.setdefault(name, MetricTally()).add(result)
            extra = self.extras.get(name)
            if extra is not None:
                extra.add(result)

    def metric_figures(self) -> dict[str, dict[str, JSONData]]:
        figures: dict[str, dict[str, JSONData]] = {
            m: self.tallies.get(m, MetricTally()).figures() for m in self.metrics
        }
        for name, extra in self.extras.items():
            figures[name].update(extra.figures())
        return figures


def metric_summary(results: Iterable[SampleScored], metric: str) -> dict[str, JSONData]:
    tally = SummaryTally([metric])
    for scored in results:
        tally.add(scored)
    return tally.metric_figures()[metric]


def summarise(
    results: Iterable[SampleScored] | SummaryTally,
    metrics: Sequence[str],
    usage: UsageLedger,
    *,
    invalid: Sequence[Mapping[str, JSONData]],
    wall_seconds: float,
    model: str,
) -> dict[str, JSONData]:
    """The summary of ``results`` (or of a tally already made of them)."""
    tally = results if isinstance(results, SummaryTally) else SummaryTally(metrics)
    if not isinstance(results, SummaryTally):
        for scored in results:
            tally.add(scored)
    return {
        "samples": tally.samples,
        "invalid_input": len(invalid),
        "llm_calls": usage.requests,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "wall_seconds": round(wall_seconds, 3),
        "metrics": tally.metric_figures(),
        "intervals": dict(INTERVALS),
        "by_stage": usage.by_stage(),
        "invalid": list(invalid),
        "model": model,
    }
