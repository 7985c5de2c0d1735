"""The ``--summary`` of an evaluation run: means over scored samples only, never a failure.

The figures are tallied one judged sample at a time (:class:`SummaryTally`), so a summary of a
million samples holds a million floats (for the medians), not a million results.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from ragjury.evaluation.keywords import KeywordTally
from ragjury.llm import UsageLedger
from ragjury.schemas import KeywordCheck, MetricName, MetricResult, SampleScored


@dataclass
class MetricTally:
    """One metric's figures so far."""

    scores: array[float] = field(default_factory=lambda: array("d"))
    passed: int = 0
    verdicts: int = 0
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
            self.verdicts += 1
            self.passed += result.passing

    def figures(self) -> dict[str, Any]:
        scores = self.scores
        return {
            "mean": round(sum(scores) / len(scores), 4) if scores else None,
            "median": round(median_of(scores), 4) if scores else None,
            "pass_rate": round(self.passed / self.verdicts, 4) if self.verdicts else None,
            **self.outcomes,
            "llm_calls": self.llm_calls,
        }


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


_RETRIEVAL_FIGURES = ("hit_rate", "mrr", "recall", "precision", "ndcg")


@dataclass
class RetrievalTally:
    """The retrieval figures at each k, summed over the samples that were scored."""

    samples: int = 0
    sums: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, at_k: dict[str, dict[str, float]]) -> None:
        self.samples += 1
        for k, figures in at_k.items():
            sums = self.sums.setdefault(k, dict.fromkeys(_RETRIEVAL_FIGURES, 0.0))
            for name, value in figures.items():
                sums["hit_rate" if name == "hit" else name] += value

    def figures(self) -> dict[str, dict[str, float]]:
        """Per k (as text, in increasing order): the means of hit, mrr, recall, precision,
        ndcg over the scored samples."""
        return {
            k: {name: round(total / self.samples, 4) for name, total in sums.items()}
            for k, sums in sorted(self.sums.items(), key=lambda item: int(item[0]))
        }


@dataclass
class SummaryTally:
    """Every metric's figures, and the keyword checks, tallied as samples are read."""

    metrics: Sequence[MetricName]
    samples: int = 0
    tallies: dict[str, MetricTally] = field(default_factory=dict)
    keywords: KeywordTally = field(default_factory=KeywordTally)
    retrieval: RetrievalTally = field(default_factory=RetrievalTally)

    def add(self, scored: SampleScored) -> None:
        self.samples += 1
        for name in self.metrics:
            result = scored.metrics.get(name)
            if result is None:
                continue
            self.tallies.setdefault(name, MetricTally()).add(result)
            if name == "keywords" and result.outcome == "scored":
                checks = result.details["checks"]
                self.keywords.add(KeywordCheck.model_validate(c) for c in checks)
            if name == "retrieval" and result.outcome == "scored":
                self.retrieval.add(result.details["at_k"])

    def metric_figures(self) -> dict[str, dict[str, Any]]:
        figures: dict[str, dict[str, Any]] = {
            m: self.tallies.get(m, MetricTally()).figures() for m in self.metrics
        }
        if "keywords" in figures:
            figures["keywords"]["failure_rates"] = self.keywords.rates()
        if "retrieval" in figures:
            figures["retrieval"]["at_k"] = self.retrieval.figures()
        return figures


def metric_summary(results: Iterable[SampleScored], metric: MetricName) -> dict[str, Any]:
    tally = SummaryTally([metric])
    for scored in results:
        tally.add(scored)
    return tally.metric_figures()[metric]


def summarise(
    results: Iterable[SampleScored] | SummaryTally,
    metrics: Sequence[MetricName],
    usage: UsageLedger,
    *,
    invalid: Sequence[dict[str, Any]],
    wall_seconds: float,
    model: str,
) -> dict[str, Any]:
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
        "by_stage": usage.by_stage(),
        "invalid": list(invalid),
        "model": model,
    }
