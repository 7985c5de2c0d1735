"""Progress bars while a run goes, and a summary table at the end (on a terminal only)."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ragjury._json import JSONData, json_list, json_number, json_object
from ragjury.pipelines.generation import GenerationCounts


class _Bars:
    """Rich progress bars on a terminal, nothing elsewhere; a context manager."""

    def __init__(self, console: Console) -> None:
        self.enabled = console.is_terminal
        self._progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not self.enabled,
        )

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()


class GenerationProgress(_Bars):
    """Two bars: documents done, and the pairs of those documents by outcome."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self._documents = self._progress.add_task("documents done", total=None, detail="")
        self._pairs = self._progress.add_task("pairs judged", total=None, detail="")

    def update(self, counts: GenerationCounts) -> None:
        if not self.enabled:
            return
        self._progress.update(
            self._documents,
            total=max(counts.documents, 1),
            completed=counts.documents_done,
            detail=f"{counts.chunks} chunks, {counts.chunks_failed} failed",
        )
        self._progress.update(
            self._pairs,
            total=max(counts.judged, 1),
            completed=counts.judged,
            detail=f"kept {counts.kept} rejected {counts.rejected} failed {counts.failed}",
        )


def cost_text(summary: Mapping[str, JSONData]) -> str:
    """The run's cost in words: USD, or why it is unknown."""
    if summary.get("cost_usd") is None:
        models = ", ".join(map(str, json_list(summary.get("unpriced_models")))) or "the model"
        return f"cost unknown (no price for {models}; see --prices)" + mode_text(summary)
    return f"${summary['cost_usd']:.4f}" + mode_text(summary)


def mode_text(summary: Mapping[str, object]) -> str:
    """The run's calls and cost per mode, when some went through a batch API: " (direct 2
    calls $0.0010, batch 10 calls $0.0025)"; nothing for a run without batch calls."""
    modes = summary.get("calls_by_mode")
    if not isinstance(modes, Mapping):
        return ""

    def part(mode: str) -> tuple[int, str]:
        figures = modes.get(mode)
        if not isinstance(figures, Mapping):
            return 0, f"{mode} 0 calls"
        calls, cost = figures.get("llm_calls"), figures.get("cost_usd")
        money = f"${cost:.4f}" if isinstance(cost, int | float) else "cost unknown"
        count = calls if isinstance(calls, int) else 0
        return count, f"{mode} {count} calls {money}"

    batched, batch_text = part("batch")
    return f" ({part('direct')[1]}, {batch_text})" if batched else ""


def _limit_text(summary: Mapping[str, JSONData]) -> str:
    limit = json_object(summary["rate_limit"])
    text = f"{limit['limit']} of {limit['concurrency']}"
    if limit["throttled"]:
        text += f" (lowest {limit['lowest_limit']}, {limit['throttled']} x 429)"
    return text


def summary_table(summary: Mapping[str, JSONData]) -> Table:
    table = Table(title="ragjury generate", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("count", justify="right")
    for key in (
        "documents",
        "documents_skipped",
        "chunks",
        "chunks_failed",
        "pairs_drafted",
        "duplicates_dropped",
        "kept",
        "rejected",
        "failed",
        "llm_calls",
        "prompt_tokens",
        "completion_tokens",
        "wall_seconds",
    ):
        table.add_row(key.replace("_", " "), str(summary[key]))
    table.add_row("cost", cost_text(summary))
    table.add_row("concurrency", _limit_text(summary))
    if summary.get("stopped_by_budget"):
        table.add_row("stopped by budget", f"{summary['documents_not_submitted']} documents left")
    return table


def estimate_table(estimate: dict[str, Any]) -> Table:
    """The ``--dry-run`` estimate: calls, tokens and cost by stage, then the total."""
    counted = ", ".join(
        f"{estimate[k]} {k}" for k in ("documents", "chunks", "samples") if k in estimate
    )
    batched = estimate["calls_by_mode"]["batch"]["llm_calls"] > 0
    direct = estimate.get("direct_cost_usd")
    table = Table(
        title=f"ragjury {estimate['command']} --dry-run: {counted} (estimate, no LLM called)",
        title_justify="left",
        caption="assumes "
        + "; ".join(estimate["assumptions"])
        + f". Prices as of {estimate['prices_as_of']}."
        + (
            " Batch stages at the batch price"
            + ("" if direct is None else f"; all direct: ${direct:.4f}")
            + "."
            if batched
            else ""
        ),
        caption_justify="left",
    )
    for column in ("stage", "model", "calls", "prompt tokens", "completion tokens", "cost"):
        label = column in ("stage", "model")
        table.add_column(column, justify="left" if label else "right", no_wrap=label)

    def money(cost: float | None) -> str:
        return "unknown" if cost is None else f"${cost:.4f}"

    for name, s in estimate["by_stage"].items():
        table.add_row(
            f"{name} (batch)" if s.get("mode") == "batch" else name,
            s["model"],
            str(s["llm_calls"]),
            str(s["prompt_tokens"]),
            str(s["completion_tokens"]),
            money(s["cost_usd"]),
        )
    table.add_section()
    table.add_row(
        "total",
        "",
        str(estimate["llm_calls"]),
        str(estimate["prompt_tokens"]),
        str(estimate["completion_tokens"]),
        money(estimate["cost_usd"]),
        style="bold",
    )
    return table


class EvaluationProgressBar(_Bars):
    """One bar: samples judged."""

    def __init__(self, console: Console, total: int) -> None:
        super().__init__(console)
        self._task = self._progress.add_task("samples judged", total=total, detail="")

    def update(self, done: int) -> None:
        if self.enabled:
            self._progress.update(self._task, completed=done)


def _figure(value: JSONData) -> str:
    return "-" if value is None else f"{value:.3f}"


def interval_text(interval: JSONData) -> str:
    """A 95% interval as the tables show it: ``[0.612, 0.801]``, or nothing when none."""
    if not interval:
        return ""
    low, high = json_list(interval)[:2]
    return f"[{json_number(low):.3f}, {json_number(high):.3f}]"


def evaluation_table(summary: Mapping[str, JSONData]) -> Table:
    table = Table(
        title=f"ragjury evaluate: {summary['samples']} samples, {summary['invalid_input']} "
        f"invalid, {summary['llm_calls']} LLM calls, {summary['prompt_tokens']}+"
        f"{summary['completion_tokens']} tokens, {cost_text(summary)}, "
        f"concurrency {_limit_text(summary)}, {summary['wall_seconds']} s"
        + (
            f"; stopped by budget, {summary['samples_not_submitted']} samples left"
            if summary.get("stopped_by_budget")
            else ""
        ),
        title_justify="left",
    )
    table.caption = "\\[low, high]: the 95% interval over the scored samples"
    table.add_column("metric", overflow="fold")
    for column in ("mean", "median", "pass rate"):
        table.add_column(column, justify="right", no_wrap=True)
    for column in ("scored", "n/a", "failed", "calls"):
        table.add_column(column, justify="right")
    for name, m in ((n, json_object(f)) for n, f in json_object(summary["metrics"]).items()):
        table.add_row(
            name,
            f"{_figure(m['mean'])} {interval_text(m.get('mean_interval'))}",
            _figure(m["median"]),
            f"{_figure(m['pass_rate'])} {interval_text(m.get('pass_rate_interval'))}",
            *(str(m[key]) for key in ("scored", "not_applicable", "failed", "llm_calls")),
        )
    return table


def retrieval_table(summary: Mapping[str, JSONData]) -> Table | None:
    """The retrieval figures at each k (means over the scored samples), if a metric that
    ranks the retrieved contexts ran."""
    metrics = json_object(summary["metrics"]).items()
    found = [(n, json_object(m)["at_k"]) for n, m in metrics if json_object(m).get("at_k")]
    if not found:
        return None
    name, at_k = found[0]
    table = Table(title=f"{name} at k", title_justify="left")
    for column in ("k", "hit rate", "MRR", "recall", "precision", "nDCG"):
        table.add_column(column, justify="right")
    for k, figures in json_object(at_k).items():
        f = json_object(figures)
        table.add_row(
            k,
            *(f"{f[name]:.3f}" for name in ("hit_rate", "mrr", "recall", "precision", "ndcg")),
        )
    return table
