"""The ``panel`` part of an evaluation summary: how far the judges agree, how often a repeated
judge flips, the standard error of each aggregate, and what each judge cost.

Read one judged sample at a time (:class:`PanelTally`), from the ``panel`` details each
combined result carries (:func:`ragjury.evaluation.panel.combine_results`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import TypedDict

from ragjury.evaluation.panel_stats import (
    aggregate_stderr,
    fleiss_kappa,
    krippendorff_alpha,
    widened,
    within_variance,
)
from ragjury.metrics import Scale, scale_of
from ragjury.schemas import MetricResult, SampleScored
from ragjury.schemas.evaluation import ScoredFigures
from ragjury.schemas.panel import Panel
from ragjury.urls import redacted

_IDS_KEPT = 100


class JudgeFigures(TypedDict):
    scored: int
    failed: int
    not_applicable: int
    dissented: int
    flaky: int
    mean: float | None
    pass_rate: float | None


class JudgeCost(TypedDict):
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _numbers(value: object) -> list[float]:
    if not isinstance(value, list):
        return []
    return [float(v) for v in value if isinstance(v, int | float)]


@dataclass
class _JudgeTally:
    scores: list[float] = field(default_factory=list)
    passes: list[float] = field(default_factory=list)
    failed: int = 0
    not_applicable: int = 0
    dissented: int = 0
    flaky: int = 0

    def figures(self) -> JudgeFigures:
        return {
            "scored": len(self.scores),
            "failed": self.failed,
            "not_applicable": self.not_applicable,
            "dissented": self.dissented,
            "flaky": self.flaky,
            "mean": _rounded(fmean(self.scores)) if self.scores else None,
            "pass_rate": _rounded(fmean(self.passes)) if self.passes else None,
        }


@dataclass
class _MetricPanel:
    samples: int = 0
    disagreements: int = 0
    flaky: int = 0
    disagreeing: list[str] = field(default_factory=list)
    flaky_ids: list[str] = field(default_factory=list)
    votes: list[list[bool]] = field(default_factory=list)
    """Per sample every judge answered with a verdict: the judges' verdicts."""
    units: list[list[float]] = field(default_factory=list)
    """Per sample: the scores of the judges that answered."""
    score_groups: list[list[float]] = field(default_factory=list)
    """Per sample: every (judge, repeat) score, for the intervals that count the repeats."""
    pass_groups: list[list[float]] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    """Per sample: the combined score (what the summary's mean is over)."""
    passes: list[float] = field(default_factory=list)
    judges: dict[str, _JudgeTally] = field(default_factory=dict)

    def add(self, sample_id: str, result: MetricResult) -> None:
        panel = result.details.get("panel")
        if not isinstance(panel, dict) or result.outcome != "scored":
            return
        views = {
            str(name): view
            for name, view in (panel.get("judges") or {}).items()
            if isinstance(view, dict)
        }
        dissenters = [str(n) for n in panel.get("dissenters") or []]
        self.samples += 1
        if result.score is not None:
            self.scores.append(result.score)
        if result.passing is not None:
            self.passes.append(float(result.passing))
        if dissenters:
            self.disagreements += 1
            if len(self.disagreeing) < _IDS_KEPT:
                self.disagreeing.append(sample_id)
        if panel.get("flaky"):
            self.flaky += 1
            if len(self.flaky_ids) < _IDS_KEPT:
                self.flaky_ids.append(sample_id)
        verdicts = [v.get("passing") for v in views.values()]
        if len(verdicts) >= 2 and all(isinstance(p, bool) for p in verdicts):
            self.votes.append([bool(p) for p in verdicts])
        self.units.append(
            [float(v["score"]) for v in views.values() if isinstance(v.get("score"), int | float)]
        )
        scores: list[float] = []
        passes: list[float] = []
        for name, view in views.items():
            tally = self.judges.setdefault(name, _JudgeTally())
            if view.get("outcome") == "failed":
                tally.failed += 1
                continue
            if view.get("outcome") != "scored":
                tally.not_applicable += 1
                continue
            scores += _numbers(view.get("scores"))
            passes += _numbers(view.get("passes"))
            if isinstance(view.get("score"), int | float):
                tally.scores.append(float(view["score"]))
            if isinstance(view.get("passing"), bool):
                tally.passes.append(float(view["passing"]))
            tally.dissented += name in dissenters
            tally.flaky += bool(view.get("flaky"))
        if scores:
            self.score_groups.append(scores)
        if passes:
            self.pass_groups.append(passes)

    def figures(self) -> dict[str, object]:
        n = self.samples
        return {
            "samples": n,
            "fleiss_kappa": _rounded(fleiss_kappa(self.votes)) if self.votes else None,
            "kappa_samples": len(self.votes),
            "krippendorff_alpha": _rounded(krippendorff_alpha(self.units)),
            "disagreements": self.disagreements,
            "disagreeing_samples": list(self.disagreeing),
            "flaky_samples": self.flaky,
            "flaky_share": _rounded(self.flaky / n) if n else None,
            "flaky_ids": list(self.flaky_ids),
            "stderr": {
                "mean": _rounded(aggregate_stderr(self.scores, self.score_groups)),
                "pass_rate": _rounded(aggregate_stderr(self.passes, self.pass_groups)),
            },
            "judges": {name: tally.figures() for name, tally in self.judges.items()},
        }


@dataclass
class PanelTally:
    """Every panel metric's agreement and repeat figures, tallied as samples are read."""

    panel: Panel
    metrics: Sequence[str]
    scales: Mapping[str, Scale] = field(default_factory=dict)
    """Each metric's scale (a judge file's is not installed): where its intervals end."""
    tallies: dict[str, _MetricPanel] = field(default_factory=dict)

    def add(self, scored: SampleScored | ScoredFigures) -> None:
        for name in self.metrics:
            result = scored.metrics.get(name)
            if result is not None:
                self.tallies.setdefault(name, _MetricPanel()).add(scored.sample.id, result)

    def figures(self, by_stage: Mapping[str, Mapping[str, object]]) -> dict[str, object]:
        """The summary's ``panel``: the judges, each metric's figures, each judge's cost
        (from the run's usage by stage: a judge's calls are its stages ``role@judge``)."""
        return {
            "judges": [  # a password in an endpoint's URL is never written
                {"name": j.name, "model": j.model, "base_url": j.base_url and redacted(j.base_url)}
                for j in self.panel.judges
            ],
            "repeats": self.panel.repeats,
            "combine": self.panel.combine,
            "temperature": self.panel.temperature,
            "metrics": {
                name: self.tallies.get(name, _MetricPanel()).figures() for name in self.metrics
            },
            "cost_by_judge": judge_costs(by_stage, self.panel.names),
        }

    def widen(self, metrics: dict[str, dict[str, object]]) -> None:
        """Each panel metric's standard errors, and, with repeats, its intervals widened by
        the spread of a sample's repeats (:func:`ragjury.evaluation.panel_stats.widened`)."""
        for name, tally in self.tallies.items():
            figures = metrics.get(name)
            if figures is None:
                continue
            figures["stderr"] = _rounded(aggregate_stderr(tally.scores, tally.score_groups))
            figures["pass_rate_stderr"] = _rounded(
                aggregate_stderr(tally.passes, tally.pass_groups)
            )
            if self.panel.repeats <= 1:
                continue
            scale = self.scales.get(name) or scale_of(name)
            for point, key, groups, bounds in (
                ("mean", "mean_interval", tally.score_groups, (scale.low, scale.high)),
                ("pass_rate", "pass_rate_interval", tally.pass_groups, (0.0, 1.0)),
            ):
                value, interval = figures.get(point), figures.get(key)
                if isinstance(value, int | float) and isinstance(interval, list):
                    low, high = widened(
                        float(value), interval, within_variance(groups), bounds=bounds
                    )
                    figures[key] = [round(low, 4), round(high, 4)]


def judge_costs(
    by_stage: Mapping[str, Mapping[str, object]], judges: Sequence[str]
) -> dict[str, JudgeCost]:
    """Calls, tokens and cost of each judge: the sums of its stages (``role@judge``)."""
    costs: dict[str, JudgeCost] = {}
    for judge in judges:
        stages = [u for stage, u in by_stage.items() if stage.endswith(f"@{judge}")]
        prices = [u.get("cost_usd") for u in stages]
        costs[judge] = {
            "llm_calls": sum(_int(u.get("llm_calls")) for u in stages),
            "prompt_tokens": sum(_int(u.get("prompt_tokens")) for u in stages),
            "completion_tokens": sum(_int(u.get("completion_tokens")) for u in stages),
            "cost_usd": None
            if any(not isinstance(p, int | float) for p in prices)
            else round(sum(float(p) for p in prices if isinstance(p, int | float)), 6),
        }
    return costs


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
