"""``ragjury report --db FILE --history``: one page of every run in a database.

Per metric, the trend of its mean over the evaluation runs, oldest first, as a small line
chart drawn in inline SVG (no script, no request: the page's Content Security Policy allows
none); a table of the runs (a job resumed or run again has one row a run) with a link to
each one's report and the gates that failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ragjury._json import JSONData
from ragjury.metrics import Scale, scale_of
from ragjury.report.html import page
from ragjury.report.load import HistoryRun

_WIDTH, _HEIGHT = 360, 130
_LEFT, _RIGHT, _TOP, _BOTTOM = 34, 10, 10, 22


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    job: str
    run: str | None
    value: float
    gates_failed: bool


@dataclass(frozen=True)
class Trend:
    """One metric's means over the runs, placed in the chart's box."""

    metric: str
    scale: Scale
    points: list[Point]
    width: int = _WIDTH
    height: int = _HEIGHT

    @property
    def line(self) -> str:
        """The ``points`` attribute of the chart's polyline."""
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)

    @property
    def axis(self) -> list[tuple[float, str]]:
        """(y, label) of the scale's bottom and top."""
        low, high = _bounds(self.scale, [p.value for p in self.points])
        return [(_y(low, low, high), f"{low:g}"), (_y(high, low, high), f"{high:g}")]

    @property
    def bottom(self) -> int:
        return self.height - _BOTTOM

    @property
    def right(self) -> int:
        return self.width - _RIGHT

    @property
    def left(self) -> int:
        return _LEFT


def _bounds(scale: Scale, values: Sequence[float]) -> tuple[float, float]:
    low = min([scale.low, *values])
    high = scale.high if scale.high is not None else max([scale.low + 1, *values])
    high = max([high, *values])
    return low, high if high > low else low + 1


def _y(value: float, low: float, high: float) -> float:
    return _TOP + (high - value) / (high - low) * (_HEIGHT - _TOP - _BOTTOM)


def trends(runs: Sequence[HistoryRun]) -> list[Trend]:
    """Per metric judged in any run, its mean in each run that scored it; x is the run's
    place among every evaluation run, so the charts line up."""
    judged = [r for r in runs if r.kind == "evaluation"]
    metrics = list(dict.fromkeys(name for r in judged for name in r.figures))
    declared: dict[str, Mapping[str, JSONData]] = {}
    for run in judged:
        declared.update(run.declarations)
    span = max(len(judged) - 1, 1)
    found = []
    for metric in metrics:
        scale = scale_of(metric, declared)
        means = [
            (i, r, float(mean))
            for i, r in enumerate(judged)
            if isinstance(mean := r.figures.get(metric, {}).get("mean"), int | float)
        ]
        low, high = _bounds(scale, [m for _, _, m in means])
        points = [
            Point(
                x=_LEFT + (i / span if len(judged) > 1 else 0.5) * (_WIDTH - _LEFT - _RIGHT),
                y=_y(mean, low, high),
                job=run.job,
                run=run.run,
                value=mean,
                gates_failed=bool(run.gates_failed),
            )
            for i, run, mean in means
        ]
        found.append(Trend(metric, scale, points))
    return found


def history_html(
    source: str, runs: Sequence[HistoryRun], links: Mapping[str, str], *, title: str | None = None
) -> str:
    """The page: ``links`` maps a run's :attr:`~ragjury.report.load.HistoryRun.key` to the
    address of its report (relative to the page)."""
    return page(
        "history.html.j2",
        title=title or "ragjury history",
        data=None,
        source=source,
        runs=list(runs),
        trends=trends(runs),
        links=links,
        evaluations=sum(r.kind == "evaluation" for r in runs),
    )
