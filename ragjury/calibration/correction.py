"""``evaluate --correct-with labels.jsonl``: a judge's aggregate corrected by human labels.

A person labelled some of the run's samples (the file ``ragjury calibrate`` takes: samples
with the person's verdict in ``--label-field``, matched to the run's samples by id). The
judge's pass rate over every scored sample is corrected by the mean of (person - judge) over
the labelled ones, with its interval: prediction-powered inference
(``ragjury.intervals.corrected_mean``), clipped to the figure's range. When the labels are
1-5 ratings and the metric scores 1-5, its mean is corrected the same way. The judge's own
figure stays beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from ragjury.calibration import LABEL_FIELD
from ragjury.calibration.correct_with import CorrectWith
from ragjury.calibration.labels import LabelledSamples, load_labelled
from ragjury.errors import ConfigurationError
from ragjury.intervals import Corrected, corrected_mean, mean_interval
from ragjury.metrics import Scale
from ragjury.schemas import MetricResult


class CorrectedFigure(TypedDict):
    """One figure (a pass rate or a mean): the judge's own and the corrected one."""

    judge: float | None
    judge_interval: list[float] | None
    corrected: float | None
    interval: list[float] | None
    judge_bias: float | None
    labelled: int


class Correction(TypedDict):
    """What the summary keeps under ``corrected``, per metric."""

    labels: str
    label_field: str
    labelled: int
    matched: int
    unmatched: int
    pass_rate: CorrectedFigure
    mean: NotRequired[CorrectedFigure]


def load_correction(
    given: CorrectWith | None,
    metrics: Sequence[str],
    scales: Mapping[str, Scale],
    *,
    label_field: str | None,
    pass_at: int | None,
    fields: Mapping[str, str],
    reviewed: LabelledSamples | None = None,
) -> CorrectionTally | None:
    """The labels of ``--correct-with`` read and checked (before any LLM call), ready to
    tally; None without ``--correct-with``. ``reviewed``: the labels ``review import``
    stored, when ``--correct-with`` names them."""
    if given is None:
        extra = [
            flag
            for flag, value in (("--label-field", label_field), ("--label-pass-at", pass_at))
            if value is not None
        ]
        if extra:
            raise ConfigurationError(
                f"{' and '.join(extra)} only apply with --correct-with FILE (the human "
                "labels); add it or drop them"
            )
        return None
    metric = corrected_metric(given, metrics)
    labels = reviewed or load_labelled(
        given.path, label_field or LABEL_FIELD, fields=fields, pass_at=pass_at
    )
    return CorrectionTally(metric, labels, scales[metric])


def corrected_metric(given: CorrectWith, metrics: Sequence[str]) -> str:
    """The metric the labels correct: the one named, or the run's only metric."""
    if given.metric is None:
        if len(metrics) == 1:
            return metrics[0]
        raise ConfigurationError(
            f"--correct-with {given.spec}: this run judges {', '.join(metrics)}; name the "
            f"metric the labels are for, e.g. --correct-with {metrics[0]}={given.path}"
        )
    if given.metric not in metrics:
        raise ConfigurationError(
            f"--correct-with {given.spec}: {given.metric} is not judged in this run (metrics: "
            f"{', '.join(metrics)}); add it to --metrics or name one of them"
        )
    return given.metric


@dataclass
class CorrectionTally:
    """The judge's verdicts (and scores) on every scored sample, and on the labelled ones
    beside the person's, gathered one judged sample at a time."""

    metric: str
    labels: LabelledSamples
    scale: Scale
    judge_passes: list[float] = field(default_factory=list)
    judge_scores: list[float] = field(default_factory=list)
    labelled_passes: list[tuple[float, float]] = field(default_factory=list)
    labelled_scores: list[tuple[float, float]] = field(default_factory=list)
    matched: set[str] = field(default_factory=set)
    _labels: dict[str, tuple[bool | int, bool]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._labels = {item.sample.id: (item.label, item.human_pass) for item in self.labels.items}

    @property
    def corrects_mean(self) -> bool:
        """1-5 labels correct the mean of a metric that scores 1-5 too."""
        return (
            self.labels.kind == "rating"
            and self.scale.kind == "rating"
            and (self.scale.low, self.scale.high) == (1, 5)
        )

    def add(self, sample_id: str, result: MetricResult | None) -> None:
        if result is None or result.outcome != "scored":
            return
        label = self._labels.get(sample_id)
        if result.passing is not None:
            self.judge_passes.append(float(result.passing))
            if label is not None:
                self.matched.add(sample_id)
                self.labelled_passes.append((float(result.passing), float(label[1])))
        if result.score is not None and self.corrects_mean:
            self.judge_scores.append(result.score)
            if label is not None:
                self.matched.add(sample_id)
                self.labelled_scores.append((result.score, float(label[0])))

    def figures(self) -> Correction:
        """What the summary keeps: the labels used, and per corrected figure the judge's
        own value and interval beside the corrected value and interval."""
        found: Correction = {
            "labels": self.labels.source,
            "label_field": self.labels.label_field,
            "labelled": len(self.labels.items),
            "matched": len(self.matched),
            "unmatched": len(self.labels.items) - len(self.matched),
            "pass_rate": _figure(self.judge_passes, self.labelled_passes, (0.0, 1.0)),
        }
        if self.corrects_mean:
            bounds = (self.scale.low, self.scale.high or math.inf)
            found["mean"] = _figure(self.judge_scores, self.labelled_scores, bounds)
        return found


def _figure(
    judge: Sequence[float],
    labelled: Sequence[tuple[float, float]],
    bounds: tuple[float, float],
) -> CorrectedFigure:
    """The judge's figure and the corrected one; the corrected value and interval are
    clipped to ``bounds`` (a pass rate lies in 0..1 however few the labels)."""
    raw = mean_interval(judge)
    corrected: Corrected | None = corrected_mean(
        judge, [j for j, _ in labelled], [h for _, h in labelled]
    )

    def clip(value: float) -> float:
        return round(min(max(value, bounds[0]), bounds[1]), 4)

    return {
        "judge": round(sum(judge) / len(judge), 4) if judge else None,
        "judge_interval": None if raw is None else [round(raw[0], 4), round(raw[1], 4)],
        "corrected": None if corrected is None else clip(corrected.value),
        "interval": (None if corrected is None else [clip(corrected.low), clip(corrected.high)]),
        "judge_bias": None if corrected is None else round(corrected.bias, 4),
        "labelled": len(labelled),
    }


def correction_lines(metric: str, figures: Correction) -> list[str]:
    """The corrected figures as the terminal shows them, one line each."""
    lines = []
    shown = (("pass rate", figures["pass_rate"]), ("mean", figures.get("mean")))
    for name, f in shown:
        if f is None:
            continue
        if f["corrected"] is None or f["interval"] is None or f["judge_interval"] is None:
            lines.append(
                f"{metric} {name}: no labelled sample of {figures['labels']} was scored in "
                "this run, so nothing to correct with (labels match samples by id)"
            )
            continue
        low, high = f["interval"]
        j_low, j_high = f["judge_interval"]
        lines.append(
            f"{metric} {name} corrected by {f['labelled']} human label(s) from "
            f"{figures['labels']}: {f['corrected']:.3f} [{low:.3f}, {high:.3f}]; the judge "
            f"alone {f['judge']:.3f} [{j_low:.3f}, {j_high:.3f}], judge bias "
            f"{f['judge_bias']:+.3f}"
        )
    if figures.get("unmatched"):
        lines.append(
            f"{figures['unmatched']} label(s) of {figures['labels']} matched no sample "
            f"scored by {metric} in this run (labels match samples by id)"
        )
    return lines
