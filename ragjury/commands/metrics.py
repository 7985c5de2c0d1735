"""``ragjury metrics``: every metric available here, as its declaration says."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from ragjury.agents.custom_judge import load_judges
from ragjury.config import Settings
from ragjury.metrics import Metric, registry


def _inputs(metric: Metric) -> str:
    needed = ", ".join(metric.inputs)
    return needed + (f" (optional: {', '.join(metric.optional)})" if metric.optional else "")


def metrics_table(metrics: list[Metric]) -> Table:
    """The terminal's table: what each metric needs and costs (optional fields, origin and
    more in ``--json``)."""
    table = Table(title="metrics", title_justify="left")
    table.add_column("metric", no_wrap=True)
    for column in ("scale", "passes when", "needs", "LLM calls / sample"):
        table.add_column(column, overflow="fold")
    others = any(m.origin != "builtin" for m in metrics)
    if others:
        table.add_column("from", overflow="fold")
    for metric in metrics:
        scale = metric.scale.describe() + (
            "" if metric.scale.higher_is_better else ", lower better"
        )
        row = [
            metric.name,
            scale,
            metric.rule(),
            ", ".join(metric.inputs),
            metric.calls if metric.llm else "none",
        ]
        table.add_row(*row, *([metric.origin] if others else []))
    return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def metrics_markdown(metrics: list[Metric]) -> str:
    """The metrics as a Markdown table (the README's is this, checked by a test)."""
    head = ("metric", "scale", "passes when (default)", "needs", "LLM calls per sample", "what")
    lines = ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
    for m in metrics:
        scale = m.scale.describe() + ("" if m.scale.higher_is_better else ", lower is better")
        calls = m.calls if m.llm else "none"
        cells = (f"`{m.name}`", scale, m.rule(), _inputs(m), calls, m.description)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def metrics_command(args: argparse.Namespace, settings: Settings) -> int:
    judges = load_judges([*settings.judges, *args.judge])
    metrics = list(registry(judges))
    if args.json:
        print(json.dumps([m.describe() for m in metrics], indent=2))
        return 0
    if args.markdown:
        print(metrics_markdown(metrics), end="")
        return 0
    # piped, a table as wide as its rows (rich would take 80 columns); else the terminal's
    console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 150)
    console.print(metrics_table(metrics))
    for metric in metrics:
        console.print(f"[bold]{metric.name}[/bold]: {metric.description}", highlight=False)
    return 0
