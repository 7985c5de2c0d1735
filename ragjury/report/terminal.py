"""The comparison on a terminal: one table of metrics, then the regressions and the samples
found on one side only."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ragjury.report.compare import Comparison

_IDS_LISTED = 10


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def _short(text: str | None, limit: int = 90) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def comparison_view(comparison: Comparison) -> RenderableType:
    table = Table(
        title=f"{comparison.baseline} (baseline) -> {comparison.candidate} (candidate): "
        f"{comparison.paired_samples} samples paired by id"
    )
    table.add_column("metric", no_wrap=True)
    for column in ("baseline", "candidate", "difference", "95% interval"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("change", no_wrap=True)
    for column in ("improved", "regressed", "same", "paired"):
        table.add_column(column, justify="right")
    for m in comparison.metrics:
        interval = (
            f"[{m.interval[0]:+.4g}, {m.interval[1]:+.4g}]" if m.interval is not None else "-"
        )
        table.add_row(
            m.metric + ("" if m.higher_is_better else " (lower better)"),
            _number(m.baseline_mean),
            _number(m.candidate_mean),
            _number(m.mean_difference, signed=True),
            interval,
            m.change,
            str(m.improved),
            str(m.regressed),
            str(m.same),
            str(m.paired),
        )
    parts: list[RenderableType] = [
        table,
        Text(
            "change: a regression or an improvement only when the 95% interval of the "
            "difference excludes 0; otherwise within the samples' noise"
        ),
    ]
    for m in comparison.metrics:
        if m.not_comparable:
            parts.append(
                Text(
                    f"{m.metric}: {m.not_comparable} sample(s) on both sides not compared: "
                    "not scored (failed or not applicable) on one side or both"
                )
            )
    for m in comparison.metrics:
        if not m.biggest_regressions:
            continue
        worst = Table(title=m.regressions_title, title_justify="left")
        worst.add_column("sample", overflow="fold")
        for column in ("baseline", "candidate"):
            worst.add_column(column, justify="right", no_wrap=True)
        for column in ("baseline's answer", "candidate's answer", "candidate's reason"):
            worst.add_column(column, overflow="fold", ratio=1)
        for change in m.biggest_regressions:
            worst.add_row(
                Text(change.id),
                _number(change.baseline),
                _number(change.candidate),
                Text(_short(change.baseline_answer, 160)),
                Text(_short(change.candidate_answer, 160)),
                Text(_short(change.candidate_reason)),
            )
        parts.append(worst)
    for side, ids in (
        (comparison.baseline, comparison.only_baseline),
        (comparison.candidate, comparison.only_candidate),
    ):
        if ids:
            listed = ", ".join(ids[:_IDS_LISTED]) + (" …" if len(ids) > _IDS_LISTED else "")
            parts.append(Text(f"Only in {side}: {len(ids)} sample(s): {listed}"))
    return Group(*parts)
