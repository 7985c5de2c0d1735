"""``ragjury metrics``: every metric available here, as its declaration says."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from ragjury.agents.custom_judge import load_judges
from ragjury.config import Settings
from ragjury.metrics import Metric, registry


def _inputs(metric: Metric) -> str:
    needed = ", ".join(metric.inputs)
    return needed + (f" (optional: {', '.join(metric.optional)})" if metric.optional else "")


def metrics_table(metrics: list[Metric]) -> Table:
    table = Table(title="metrics", title_justify="left", show_lines=False)
    for column in ("metric", "scale", "pass rule", "needs", "LLM calls per sample", "from"):
        table.add_column(column, overflow="fold")
    for metric in metrics:
        scale = metric.scale.describe() + (
            "" if metric.scale.higher_is_better else ", lower is better"
        )
        calls = metric.calls if metric.llm else "none (no LLM)"
        table.add_row(metric.name, scale, metric.rule(), _inputs(metric), calls, metric.origin)
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
    console = Console(soft_wrap=False)
    console.print(metrics_table(metrics))
    for metric in metrics:
        console.print(f"[bold]{metric.name}[/bold]: {metric.description}", highlight=False)
    return 0
