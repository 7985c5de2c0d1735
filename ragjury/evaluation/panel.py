"""Judge panels and repeats: several judges, each asked one or more times, one verdict.

The panel (:class:`ragjury.schemas.panel.Panel`) is part of an evaluation job's stored
options; each (judge, repeat) of an LLM-judged metric is a lane of its own.

:func:`combine_results` makes one :class:`MetricResult` of a sample's lanes: each judge's
repeats are reduced to the judge's score (their mean) and verdict (their majority), then the
judges are combined (``majority``, ``mean``, ``median`` or ``min``). Only the judges that
answered vote, and the result says how many answered of how many, which failed (and why) and
which dissented: a vote of two is never shown as a vote of three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean, median
from typing import TYPE_CHECKING, TypeVar

from ragjury.schemas import MetricResult
from ragjury.schemas.panel import Combine, Panel

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.metrics import Metric


def panel_metrics(metrics: Sequence[Metric]) -> tuple[str, ...]:
    """The metrics a panel judges: those an LLM judges with a prompt (not embeddings, not
    keyword tests)."""
    return tuple(m.name for m in metrics if m.llm and (m.prompts or m.own_prompt is not None))


def _majority(votes: Sequence[bool]) -> bool:
    """More passes than fails; a tie fails (a split panel has not passed the sample)."""
    return sum(votes) * 2 > len(votes)


def _judge_view(results: Sequence[MetricResult]) -> dict[str, object]:
    """One judge's repeats reduced: the mean score, the majority verdict, and whether its
    verdict flips between repeats."""
    scored = [r for r in results if r.outcome == "scored"]
    failed = [r for r in results if r.outcome == "failed"]
    if not scored:
        outcome = "failed" if failed else "not_applicable"
        first = (failed or list(results))[0]
        return {"outcome": outcome, "reason": first.reason, "repeats": len(results)}
    scores = [r.score for r in scored if r.score is not None]
    passes = [r.passing for r in scored if r.passing is not None]
    return {
        "outcome": "scored",
        "score": fmean(scores) if scores else None,
        "passing": _majority(passes) if passes else None,
        "scores": scores,
        "passes": passes,
        "flaky": len(set(passes)) > 1,
        "repeats": len(results),
        "failed_repeats": len(failed),
    }


def _combined_score(scores: Sequence[float], combine: Combine, higher_is_better: bool) -> float:
    if combine == "median":
        return float(median(scores))
    if combine == "min":  # the harshest judge
        return min(scores) if higher_is_better else max(scores)
    return fmean(scores)


def combine_results(
    metric: Metric,
    options: EvaluationOptions,
    panel: Panel,
    lanes: Mapping[tuple[str, int], MetricResult],
) -> MetricResult:
    """One metric's result for a sample from its lanes' results (see the module docstring)."""
    views = {
        name: _judge_view([lanes[(name, r)] for r in range(panel.repeats) if (name, r) in lanes])
        for name in panel.names
    }
    calls = sum(r.llm_calls for r in lanes.values())
    answered = {n: v for n, v in views.items() if v["outcome"] == "scored"}
    failed = [n for n, v in views.items() if v["outcome"] == "failed"]
    summary: dict[str, object] = {
        "combine": panel.combine,
        "repeats": panel.repeats,
        "judges": views,
        "answered": len(answered),
        "of": len(panel.names),
        "failed": failed,
    }
    if not answered:
        results = list(lanes.values())
        failures = [r for r in results if r.outcome == "failed"]
        if failures:
            reasons = "; ".join(f"{n}: {views[n]['reason']}" for n in failed)
            error = failures[0].error
            assert error is not None  # a failed result always carries its error
            return MetricResult(
                outcome="failed",
                reason=f"every judge failed ({reasons})",
                error=error.model_copy(update={"message": f"every judge failed ({reasons})"}),
                details={"panel": summary},
                llm_calls=calls,
            )
        return MetricResult(
            outcome="not_applicable",
            reason=results[0].reason if results else "no judge answered",
            details={"panel": summary},
            llm_calls=calls,
        )
    scores = {n: v["score"] for n, v in answered.items() if isinstance(v["score"], float | int)}
    passes = {n: v["passing"] for n, v in answered.items() if isinstance(v["passing"], bool)}
    score = (
        _combined_score(list(scores.values()), panel.combine, metric.scale.higher_is_better)
        if scores
        else None
    )
    passing: bool | None = None
    if passes:
        if panel.combine == "majority" or score is None or metric.pass_rule is not None:
            votes = list(passes.values())
            passing = all(votes) if panel.combine == "min" else _majority(votes)
        else:
            passing = metric.passes(score, options)
    dissenters = [n for n, p in passes.items() if passing is not None and p != passing]
    spread = max(scores.values()) - min(scores.values()) if scores else None
    summary.update(
        dissenters=dissenters,
        spread=spread,
        agree=not dissenters,
        flaky=any(v.get("flaky") for v in answered.values()),
    )
    verdict = "" if passing is None else ("passed" if passing else "did not pass")
    said = (
        f"{verdict} by {panel.combine} of {len(answered)} of {len(panel.names)} judges"
        if verdict
        else f"{panel.combine} of {len(answered)} of {len(panel.names)} judges"
    )
    if dissenters:
        said += f"; dissent: {', '.join(dissenters)}"
    if failed:
        named = [f"{n} ({views[n]['reason']})" for n in failed]
        said += "; failed: " + ", ".join(named)
    # the details (statements, reasoning) of the first judge that sided with the verdict
    source = next((n for n in answered if n not in dissenters), next(iter(answered)))
    shown = next(
        lanes[(source, r)]
        for r in range(panel.repeats)
        if (source, r) in lanes and lanes[(source, r)].outcome == "scored"
    )
    return MetricResult(
        outcome="scored",
        score=score,
        passing=passing,
        reason=said,
        details={**shown.details, "details_from": source, "panel": summary},
        llm_calls=calls,
    )


def _disagreed(record: Mapping[str, object]) -> bool:
    metrics = record.get("metrics")
    if not isinstance(metrics, Mapping):
        return False
    for entry in metrics.values():
        panel = entry.get("panel") if isinstance(entry, Mapping) else None
        if isinstance(panel, Mapping) and panel.get("dissenters"):
            return True
    return False


Record = TypeVar("Record", bound=Mapping[str, object])


def disagreeing_first(records: Sequence[Record]) -> list[Record]:
    """Exported records with the samples whose judges disagree first (the HTML report's
    order), the others after them, each group in its own order."""
    return sorted(records, key=lambda record: not _disagreed(record))
