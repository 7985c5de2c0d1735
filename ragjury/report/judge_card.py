"""The judge card of the HTML report: how far a calibrated judge agrees with people.

A run of ``ragjury calibrate`` keeps its figures in the run's summary (``calibration``); the
report of that job shows them beside the metric's own figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import ValidationError

from ragjury.calibration.agreement import FIGURES, Figure
from ragjury.calibration.results import SUMMARY_KEY, Calibration


@dataclass(frozen=True)
class JudgeCard:
    title: str
    lede: str
    figures: list[tuple[str, str, str, str]]
    """(figure, value, 95% interval, what it means)."""
    confusion: list[tuple[str, str, str]]
    """(person, judge passes, judge fails)."""
    threshold: str | None
    judges: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    """With a panel, each judge then the panel: (judge, compared, accuracy, balanced
    accuracy, Cohen's kappa), each figure with its interval."""


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def judge_card(summary: Mapping[str, object]) -> JudgeCard | None:
    """The card of a calibration run's summary; None for any other run (or one whose
    figures do not read back)."""
    kept = summary.get(SUMMARY_KEY)
    if not isinstance(kept, Mapping):
        return None
    try:
        c = Calibration.model_validate(kept)
    except ValidationError:
        return None
    lede = (
        f"{c.metric} judged {c.drawn} labelled sample(s) of {c.source} with {c.model}; "
        f"{c.compared} compared with the people's verdicts ({c.human_pass} passed, "
        f"{c.compared - c.human_pass} failed), {c.not_applicable} not applicable, "
        f"{c.failed} failed" + (f", {c.unfinished} not judged yet." if c.unfinished else ".")
    )
    a = c.agreement
    if a is None:
        return JudgeCard(f"How far to trust {c.metric}", lede, [], [], None)
    figures = []
    for name, meaning, read in FIGURES:
        figure = read(a)
        if figure is None:
            continue
        interval = (
            "-"
            if figure.low is None or figure.high is None
            else f"{figure.low:.3f} to {figure.high:.3f}"
        )
        figures.append((name, _number(figure.value), interval, meaning))
    k = a.confusion
    confusion = [
        ("person passes", str(k.agreed_pass), f"{k.false_alarms} false alarm(s)"),
        ("person fails", f"{k.missed} missed", f"{k.caught} caught"),
    ]
    threshold = None
    if a.threshold is not None:
        t = a.threshold
        current = "-" if t.current is None else f"{t.current:g}"
        threshold = (
            f"Pass mark in use {current} (balanced accuracy "
            f"{_number(t.current_balanced_accuracy)}); best on these samples {t.best:g} "
            f"({_number(t.best_balanced_accuracy)}), chosen on them, so optimistic."
        )
    return JudgeCard(
        f"How far to trust {c.metric}", lede, figures, confusion, threshold, _judges(c)
    )


def _with_interval(figure: Figure) -> str:
    if figure.low is None or figure.high is None:
        return _number(figure.value)
    return f"{_number(figure.value)} ({figure.low:.3f} to {figure.high:.3f})"


def _row(name: str, judged: Calibration) -> tuple[str, str, str, str, str]:
    a = judged.agreement
    if a is None:
        return (name, str(judged.compared), "-", "-", "-")
    return (
        name,
        str(judged.compared),
        _with_interval(a.accuracy),
        _with_interval(a.balanced_accuracy),
        _with_interval(a.kappa),
    )


def _judges(c: Calibration) -> list[tuple[str, str, str, str, str]]:
    if not c.by_judge:
        return []
    rows = [_row(f"{n} ({j.model})", j) for n, j in c.by_judge.items()]
    return [*rows, _row("the panel", c)]
