"""How ``ragjury calibrate`` looks on a terminal: the figures with their intervals, the
confusion matrix, the pass mark in use beside the best one, and the bundled sets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from ragjury.calibration.agreement import FIGURES, Figure
from ragjury.calibration.results import Calibration
from ragjury.calibration.sets import BundledSet

_FEW = 100
"""Below this many compared samples, say plainly how little the intervals pin down."""


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _mark(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _interval(figure: Figure) -> str:
    if figure.low is None or figure.high is None:
        return "-"
    return f"{figure.low:.3f} to {figure.high:.3f}"


def calibration_tables(
    calibration: Calibration, summary: Mapping[str, object]
) -> list[RenderableType]:
    """A line saying what was compared, then the figures, the confusion matrix and the pass
    marks (only the line when nothing could be compared)."""
    c = calibration
    title = (
        f"ragjury calibrate: {c.metric} on {c.source} with {c.model}: {c.compared} of "
        f"{c.drawn} sample(s) compared ({c.human_pass} passed and "
        f"{c.compared - c.human_pass} failed by people; {c.not_applicable} not applicable, "
        f"{c.failed} failed"
        + (f", {c.unfinished} not judged yet" if c.unfinished else "")
        + f"), {summary.get('llm_calls', 0)} LLM calls"
    )
    a = c.agreement
    if a is None:
        return [Text(title)]
    figures = Table()
    for column in ("figure", "value", "95% interval", "means"):
        figures.add_column(column, justify="right" if column in ("value",) else "left")
    for name, meaning, read in FIGURES:
        figure = read(a)
        if figure is not None:
            figures.add_row(name, _number(figure.value), _interval(figure), meaning)
    matrix = Table(title="people (rows) against the judge (columns)", title_justify="left")
    for column in ("", "judge passes", "judge fails"):
        matrix.add_column(column, justify="right" if column else "left")
    k = a.confusion
    matrix.add_row("person passes", str(k.agreed_pass), f"{k.false_alarms} (false alarm)")
    matrix.add_row("person fails", f"{k.missed} (missed)", f"{k.caught} (caught)")
    tables: list[RenderableType] = [Text(title), figures, matrix]
    if a.threshold is not None:
        t = a.threshold
        marks = Table(
            title="pass mark",
            title_justify="left",
            caption="the best mark is chosen on these samples, so its figure is optimistic: "
            "check it on others",
            caption_justify="left",
        )
        for column in ("pass mark", "value", "balanced accuracy"):
            marks.add_column(column, justify="left" if column == "pass mark" else "right")
        marks.add_row("in use", _mark(t.current), _number(t.current_balanced_accuracy))
        marks.add_row("best", _mark(t.best), _number(t.best_balanced_accuracy))
        tables.append(marks)
    if c.by_judge:
        tables.append(_judges_table(c))
    if c.compared < _FEW:
        note = Table(show_header=False, box=None)
        note.add_row(
            f"Only {c.compared} sample(s) compared: read the intervals, not the values. "
            "Judge more (leave --sample out) to narrow them."
        )
        tables.append(note)
    return tables


def _judges_table(c: Calibration) -> Table:
    """Each judge of the panel against the people, beside the panel's combined verdict."""
    table = Table(title="each judge against the people", title_justify="left")
    for column in ("judge", "compared", "accuracy", "balanced accuracy", "Cohen's kappa"):
        table.add_column(column, justify="left" if column == "judge" else "right")

    def row(name: str, judged: Calibration) -> None:
        a = judged.agreement
        if a is None:
            table.add_row(name, "0", "-", "-", "-")
            return
        cells = [
            f"{_number(f.value)} ({_interval(f)})"
            for f in (a.accuracy, a.balanced_accuracy, a.kappa)
        ]
        table.add_row(name, str(judged.compared), *cells)

    for name, judged in c.by_judge.items():
        row(f"{name} ({judged.model})", judged)
    row("the panel", c)
    return table


def sets_table(sets: Sequence[BundledSet]) -> Table:
    table = Table(title="bundled labelled sets (ragjury calibrate NAME)", title_justify="left")
    for column in ("set", "samples", "people passed", "calibrates", "source", "licence"):
        table.add_column(column, overflow="fold", no_wrap=column in ("set", "calibrates"))
    for s in sets:
        licence = s.licence.split(" (")[0]
        table.add_row(s.name, str(s.size), str(s.passed), s.metric, s.title, licence)
    return table


def sets_notes(sets: Sequence[BundledSet]) -> list[str]:
    """A paragraph per set: what is judged, what the label means, where it came from."""
    return [
        f"[bold]{s.name}[/bold]: {s.description} Label: {s.human}. From {s.source}; {s.licence}."
        for s in sets
    ]
