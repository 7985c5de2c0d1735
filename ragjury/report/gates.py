"""CI gates: bars on a run's metrics, and on a comparison's regressions.

``--fail-under faithfulness=0.8,correctness=4`` puts a bar under the mean of the scored
samples; ``pass_rate:faithfulness=0.9`` under the share of scored samples that passed. The bar
is compared with the figure itself (``--gate-on point``, the default) or with the lower bound
of its 95% interval (``--gate-on lower-bound``: the run passes only when the samples leave no
reasonable doubt). ``compare --fail-on-regression faithfulness=0.05`` bars a drop of a mean
(``ragjury.report.compare``). A gate that fails
makes the command exit 5 (``EXIT_GATE`` in ``commands/_run.py``) with a one-line reason.
Each bar is read on its metric's declared scale (``ragjury metrics``):
``correctness=4`` on 1-5, ``faithfulness=0.8`` on 0-1.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ragjury._json import JSONData, json_list, json_number, json_object
from ragjury.errors import ConfigurationError
from ragjury.metrics import Registry, registry

Statistic = Literal["mean", "pass_rate"]
GateOn = Literal["point", "lower-bound"]
GATE_ON: tuple[GateOn, ...] = ("point", "lower-bound")


@dataclass(frozen=True)
class Threshold:
    metric: str
    statistic: Statistic
    bar: float

    @property
    def spec(self) -> str:
        prefix = "pass_rate:" if self.statistic == "pass_rate" else ""
        return f"{prefix}{self.metric}={self.bar:g}"

    @property
    def label(self) -> str:
        return f"{self.metric} {'pass rate' if self.statistic == 'pass_rate' else 'mean'}"


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict: its name (as given on the command line) and why, in a line."""

    name: str
    passed: bool
    message: str
    metric: str | None = None
    """The metric the gate bars (None: a gate on the whole run, such as ``--max-failed``)."""


def _split(text: str, flag: str, example: str) -> list[tuple[str, float]]:
    found = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not sep or not name.strip() or number != number:
            raise argparse.ArgumentTypeError(
                f"{flag} expects METRIC=NUMBER[,METRIC=NUMBER...], got {part!r}; e.g. {example}"
            )
        found.append((name.strip(), number))
    return found


def _statistic(name: str) -> tuple[Statistic, str]:
    if name.startswith("pass_rate:"):
        return "pass_rate", name.removeprefix("pass_rate:").strip()
    return "mean", name


def parse_thresholds(text: str) -> list[Threshold]:
    """``--fail-under`` (argparse ``type=``): the syntax only. What the bars mean is checked
    against the metrics' declarations by :func:`check_gates`, before any LLM call."""
    thresholds = []
    for name, bar in _split(text, "--fail-under", "faithfulness=0.8,pass_rate:correctness=0.75"):
        statistic, metric = _statistic(name)
        thresholds.append(Threshold(metric, statistic, bar))
    return thresholds


def check_gates(
    thresholds: Sequence[Threshold], metrics: Registry, requested: Sequence[str] | None = None
) -> None:
    """Each bar names a metric (one the run judges, when ``requested`` is given) and lies on
    that metric's scale: a bar that can never fail or never pass is refused with the scale."""
    flag = "--fail-under"
    for threshold in thresholds:
        name = threshold.metric
        if name not in metrics:
            raise ConfigurationError(metrics.unknown(name, flag))
        scale = metrics[name].scale
        bar = threshold.bar
        if threshold.statistic == "pass_rate":
            if not 0 <= bar <= 1:
                raise ConfigurationError(f"{flag} {threshold.spec}: a pass rate is between 0 and 1")
        elif not scale.higher_is_better:
            raise ConfigurationError(
                f"{flag} {threshold.spec}: lower {name} is better, so a bar under it means "
                f"nothing; use pass_rate:{name}=... or leave it out"
            )
        elif bar <= scale.low or (scale.high is not None and bar > scale.high):
            raise ConfigurationError(
                f"{flag} {threshold.spec}: {name} scores run {scale.describe()}, so this bar "
                f"can never {'fail' if bar <= scale.low else 'pass'}; give a bar on that "
                f"scale (e.g. {name}={scale.example()}) or use pass_rate:{name}=0.75"
            )
        if requested is not None and name not in requested:
            raise ConfigurationError(
                f"{flag} {threshold.spec}: {name} is not judged in this run (metrics: "
                f"{', '.join(requested)}); add it to --metrics or drop the gate"
            )


def parse_regressions(text: str) -> dict[str, float]:
    """``--fail-on-regression faithfulness=0.05``: the largest drop of a mean allowed."""
    flag = "--fail-on-regression"
    found = {}
    for name, delta in _split(text, flag, "faithfulness=0.05"):
        if name not in registry():
            raise argparse.ArgumentTypeError(registry().unknown(name, flag))
        if delta < 0:
            raise argparse.ArgumentTypeError(
                f"{flag} {name}={delta:g}: give the drop allowed as a positive number, "
                f"e.g. {name}={-delta:g}"
            )
        found[name] = delta
    return found


def check_thresholds(
    stats: Mapping[str, JSONData],
    thresholds: Sequence[Threshold],
    gate_on: GateOn = "point",
) -> list[GateResult]:
    """Each bar against a run's per-metric figures (as in the ``--summary``): against the
    figure (``point``) or the lower bound of its 95% interval (``lower-bound``)."""
    results = []
    for t in thresholds:
        kept = stats.get(t.metric)
        name = f"--fail-under {t.spec}"
        if kept is None:
            judged = ", ".join(stats) or "none"
            message = f"{t.metric} was not evaluated in this run (metrics: {judged})"
            results.append(GateResult(name, False, message, t.metric))
            continue
        figures = json_object(kept)
        figure = figures.get(t.statistic)
        interval = [
            json_number(bound) for bound in json_list(figures.get(f"{t.statistic}_interval"))
        ]
        if figure is None:
            message = f"{t.label} is undefined: no sample was scored (bar {t.bar:g})"
            results.append(GateResult(name, False, message, t.metric))
            continue
        value = json_number(figure)
        shown = f"[{interval[0]:g}, {interval[1]:g}]" if interval else "none"
        if gate_on == "lower-bound":
            compared = interval[0] if interval else value
            what = (
                f"{t.label}'s 95% lower bound {compared:g} ({t.label} {value:g}, interval {shown})"
            )
        else:
            compared = value
            what = f"{t.label} {value:g} (point estimate; 95% interval {shown})"
        if compared < t.bar:
            results.append(GateResult(name, False, f"{what} is below {t.bar:g}", t.metric))
        else:
            results.append(GateResult(name, True, f"{what} is at least {t.bar:g}", t.metric))
    return results


def reason_line(results: Sequence[GateResult]) -> str | None:
    """The one line a failed gate prints, naming each metric, its value and its bar."""
    failed = [r for r in results if not r.passed]
    if not failed:
        return None
    return "gate failed: " + "; ".join(f"{r.message} ({r.name})" for r in failed)
