"""One calibration's outcome: the judge's results beside the person's labels, and the
figures (:mod:`ragjury.calibration.agreement`), as kept in the run's summary and printed.

A sample the judge found not applicable (an answer that states nothing, for faithfulness) or
failed to judge (its output never validated) has no verdict to compare: it is counted, never
compared, and never counted as a disagreement.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from ragjury.calibration.agreement import RESAMPLES, Agreement, Judgement, agreement
from ragjury.calibration.labels import LabelKind, LabelledSamples
from ragjury.config import EvaluationOptions
from ragjury.metrics import Metric
from ragjury.schemas import MetricResult

SUMMARY_KEY = "calibration"
"""Where a run's summary keeps the calibration (``ragjury report`` reads it)."""


class Calibration(BaseModel):
    """How far one judge agreed with people on one labelled set."""

    model_config = ConfigDict(frozen=True)

    metric: str
    source: str
    """A bundled set's name, or the labelled file."""
    model: str
    label_field: str
    label_kind: LabelKind
    label_pass_at: int | None
    threshold: float | None
    """The judge's pass mark in this run."""
    labelled: int
    """Labelled samples in the source."""
    drawn: int
    """Samples judged (``--sample N`` draws N of them)."""
    compared: int
    not_applicable: int
    failed: int
    unfinished: int = 0
    """Samples not judged yet (a budget or a signal stopped the run; the same command
    finishes them)."""
    human_pass: int
    """Of the samples compared, those the person passed."""
    agreement: Agreement | None
    """None when no sample could be compared."""
    by_judge: dict[str, Calibration] = Field(default_factory=dict)
    """With a panel (``--judges``, ``--repeats``): each judge's own calibration (its
    repeats' mean score and majority verdict against the people); this one is then the
    panel's combined verdict."""


def judgements(
    labelled: LabelledSamples,
    results: Mapping[str, MetricResult],
    metric: Metric,
    options: EvaluationOptions,
) -> tuple[list[Judgement], int, int, int]:
    """The judged samples as judgements (in the labelled order), and how many were not
    applicable, failed, and not judged yet."""
    found: list[Judgement] = []
    not_applicable = failed = unfinished = 0
    for item in labelled.items:
        result = results.get(item.sample.id)
        if result is None:
            unfinished += 1
            continue
        if result.outcome == "failed":
            failed += 1
            continue
        if result.outcome == "not_applicable" or result.score is None:
            not_applicable += 1
            continue
        passing = result.passing
        if passing is None:
            passing = bool(metric.passes(result.score, options))
        found.append(Judgement(item.human_pass, passing, result.score))
    return found, not_applicable, failed, unfinished


def calibrate(
    labelled: LabelledSamples,
    results: Mapping[str, MetricResult],
    metric: Metric,
    options: EvaluationOptions,
    *,
    model: str,
    seed: int = 0,
    resamples: int = RESAMPLES,
) -> Calibration:
    judged, not_applicable, failed, unfinished = judgements(labelled, results, metric, options)
    bar = metric.bar(options)
    figures = None
    if judged:
        figures = agreement(
            judged,
            threshold=bar,
            higher_is_better=metric.scale.higher_is_better,
            graded=metric.scale.kind != "boolean",
            resamples=resamples,
            seed=seed,
        )
    return Calibration(
        metric=metric.name,
        source=labelled.source,
        model=model,
        label_field=labelled.label_field,
        label_kind=labelled.kind,
        label_pass_at=labelled.pass_at,
        threshold=bar,
        labelled=labelled.total,
        drawn=len(labelled.items),
        compared=len(judged),
        not_applicable=not_applicable,
        failed=failed,
        unfinished=unfinished,
        human_pass=sum(j.human_pass for j in judged),
        agreement=figures,
    )


def judge_results(results: Mapping[str, MetricResult], judge: str) -> dict[str, MetricResult]:
    """One panel judge's results (as :func:`ragjury.evaluation.panel.combine_results` keeps
    them in each combined result's ``panel``): its score and verdict over its repeats."""
    found: dict[str, MetricResult] = {}
    for sample_id, result in results.items():
        panel = result.details.get("panel")
        views = panel.get("judges") if isinstance(panel, Mapping) else None
        view = views.get(judge) if isinstance(views, Mapping) else None
        if not isinstance(view, Mapping):
            continue
        outcome = view.get("outcome")
        if outcome == "scored":
            score, passing = view.get("score"), view.get("passing")
            found[sample_id] = MetricResult(
                outcome="scored",
                score=float(score) if isinstance(score, int | float) else None,
                passing=passing if isinstance(passing, bool) else None,
            )
        elif outcome in ("failed", "not_applicable"):
            reason = view.get("reason")
            found[sample_id] = MetricResult(
                outcome="failed" if outcome == "failed" else "not_applicable",
                reason=reason if isinstance(reason, str) else None,
            )
    return found
