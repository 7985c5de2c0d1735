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


def metrics_command(args: argparse.Namespace, settings: Settings) -> int:
    judges = load_judges([*settings.judges, *args.judge])
    metrics = list(registry(judges))
    if args.json:
        print(json.dumps([m.describe() for m in metrics], indent=2))
        return 0
    console = Console(soft_wrap=False)
    console.print(metrics_table(metrics))
    for metric in metrics:
        console.print(f"[bold]{metric.name}[/bold]: {metric.description}", highlight=False)
    return 0
