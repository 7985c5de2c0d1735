"""The ``--summary`` of an evaluation run: means over scored samples only, never a failure."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import mean, median
from typing import Any

from ragjury.evaluation.keywords import failure_rates
from ragjury.llm import UsageLedger
from ragjury.schemas import KeywordCheck, MetricName, SampleScored


def metric_summary(results: Sequence[SampleScored], metric: MetricName) -> dict[str, Any]:
    entries = [r.metrics[metric] for r in results if metric in r.metrics]
    scores = [e.score for e in entries if e.outcome == "scored" and e.score is not None]
    verdicts = [e.passing for e in entries if e.outcome == "scored" and e.passing is not None]
    return {
        "mean": round(mean(scores), 4) if scores else None,
        "median": round(median(scores), 4) if scores else None,
        "pass_rate": round(sum(verdicts) / len(verdicts), 4) if verdicts else None,
        "scored": sum(e.outcome == "scored" for e in entries),
        "not_applicable": sum(e.outcome == "not_applicable" for e in entries),
        "failed": sum(e.outcome == "failed" for e in entries),
        "llm_calls": sum(e.llm_calls for e in entries),
    }


def summarise(
    results: Sequence[SampleScored],
    metrics: Sequence[MetricName],
    usage: UsageLedger,
    *,
    invalid: Sequence[dict[str, Any]],
    wall_seconds: float,
    model: str,
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "samples": len(results),
        "invalid_input": len(invalid),
        "llm_calls": usage.requests,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "wall_seconds": round(wall_seconds, 3),
        "metrics": {m: metric_summary(results, m) for m in metrics},
        "by_stage": usage.by_stage(),
        "invalid": list(invalid),
        "model": model,
    }
    if "keywords" in metrics:
        checks = [
            [KeywordCheck.model_validate(c) for c in r.metrics["keywords"].details["checks"]]
            for r in results
            if "keywords" in r.metrics and r.metrics["keywords"].outcome == "scored"
        ]
        summary["metrics"]["keywords"]["failure_rates"] = failure_rates(checks)
    return summary
