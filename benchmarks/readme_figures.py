"""The README's benchmark figures, written from the results files, never typed by hand.

Each region of README.md between ``<!-- figures: NAME -->`` and ``<!-- /figures -->`` is the
text :data:`REGIONS` makes from ``benchmarks/results/NAME.json``:

    python benchmarks/readme_figures.py           # rewrite the regions from the results
    python benchmarks/readme_figures.py --check   # exit 1, with a diff, when they differ

Run a benchmark (it rewrites its results file), then this script, and commit both.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
_REGION = re.compile(r"(<!-- figures: (\w+)[^>]*-->\n)(.*?)(<!-- /figures -->)", re.DOTALL)


def _path(paths: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = next((p for p in paths if p["path"] == name), None)
    if found is None:
        raise SystemExit(f"benchmarks/results/bus.json has no path {name!r}; run bus.py again")
    return found


def _microseconds(value: float) -> str:
    return f"{value / 1000:.2g} ms" if value >= 950 else f"{value:.0f} µs"


def bus(results: dict[str, Any]) -> str:
    """The bus paragraph's figures: the durable bus with four workers and one, the memory
    bus with one, each per message."""
    paths = results["paths"]
    durable4 = _path(paths, "DurableBus on SQLite, 4 worker(s)")
    durable1 = _path(paths, "DurableBus on SQLite, 1 worker(s)")
    memory = _path(paths, "MemoryBus, 1 worker(s)")
    per_second = round(durable4["messages_per_second"], -2)
    text = (
        "**Bus overhead** (`python benchmarks/bus.py`, recorded "
        f"{results['recorded_at'][:10]}): a message published, delivered to a worker and "
        f"acknowledged costs {_microseconds(durable4['microseconds_per_message'])} on the "
        f"durable bus on SQLite with four workers ({per_second:,.0f} messages a second; each "
        "message a row, claimed under a lease and deleted with its replies stored, in "
        "group-committed transactions), "
        f"{_microseconds(durable1['microseconds_per_message'])} with one worker (each step "
        "waits for its own commit), and "
        f"{_microseconds(memory['microseconds_per_message'])} on the in-memory bus "
        f"(`Jury.evaluate`), {memory['ratio_to_bare']:.2f} of a bare anyio memory object "
        "stream. Next to a 200 ms LLM call the durable bus is what lets any process take any "
        f"message, at {durable4['microseconds_per_message'] / 200_000:.2%} of the call."
    )
    return textwrap.fill(text, width=92, break_on_hyphens=False) + "\n"


_LAYOUTS = {
    "1 process, every agent": "1 process, every agent",
    "2 processes, every agent": "2 processes, every agent",
    "4 processes, every agent": "4 processes, every agent",
    "3 processes, one per LLM agent and intake": "3 processes: intake, splitter, verdict judge",
}


def scaleout(results: dict[str, Any]) -> str:
    """The scale-out table: steady items per second per layout and store, the ratio to one
    process, and the PostgreSQL server's CPU per message (over the whole run, and between
    10% and 90% of the items done where the results have it)."""
    runs: dict[tuple[str, str], dict[str, Any]] = {
        (r["store"], r["layout"]): r for r in results["runs"]
    }
    lines = [
        "| layout | SQLite: items/s (ratio) | PostgreSQL: items/s (ratio) | PostgreSQL server "
        "CPU per message (whole run; steady) |",
        "| --- | --- | --- | --- |",
    ]
    for layout, shown in _LAYOUTS.items():
        cells = []
        for store in ("sqlite", "postgresql"):
            run = runs.get((store, layout))
            cells.append(
                "-"
                if run is None
                else f"{run['steady_items_per_second']:.0f} ({run['ratio_to_one_process']:.2f})"
            )
        pg = runs.get(("postgresql", layout))
        cpu = "-" if pg is None else f"{pg['db_cpu_ms_per_message']:.1f} ms"
        if pg is not None and "steady_db_cpu_ms_per_message" in pg:
            cpu += f"; {pg['steady_db_cpu_ms_per_message']:.1f} ms"
        lines.append(f"| {shown} | {cells[0]} | {cells[1]} | {cpu} |")
    recorded = results["recorded_at"][:10]
    return "\n".join(lines) + f"\n\n(`benchmarks/results/scaleout.json`, recorded {recorded}.)\n"


_STARTUP = {
    "python -c pass": "`python -c pass` (the interpreter alone)",
    "ragjury --version": "`ragjury --version`",
    "ragjury --help": "`ragjury --help`",
    "ragjury evaluate --help": "`ragjury evaluate --help`",
    'python -c "import openai"': '`python -c "import openai"` (no request can come sooner)',
    "openai client alone: first request": "the openai client alone: its first request",
    "evaluate: first request": "`evaluate`: its first request reaches the endpoint",
    "evaluate: whole run": "`evaluate`: the whole run",
}


def startup(results: dict[str, Any]) -> str:
    """The start-up table: median seconds of each command, and the ratio to the interpreter."""
    runs = {r["run"]: r for r in results["runs"]}
    lines = ["| command | median (min-max) | x `python -c pass` |", "| --- | --- | --- |"]
    for name, shown in _STARTUP.items():
        run = runs.get(name)
        if run is None:
            raise SystemExit(f"benchmarks/results/startup.json has no run {name!r}; run it again")
        spread = f"{run['min_seconds']:.3f}-{run['max_seconds']:.3f}"
        lines.append(
            f"| {shown} | {run['median_seconds']:.3f} s ({spread}) | {run['ratio_to_python']:.1f} |"
        )
    recorded = results["recorded_at"][:10]
    runs_made = results["settings"]["runs"]
    return (
        "\n".join(lines)
        + f"\n\n(`benchmarks/results/startup.json`, medians of {runs_made} runs, recorded "
        f"{recorded}.)\n"
    )


def batch(results: dict[str, Any]) -> str:
    """The batch table: HTTP requests, batches, LLM calls, cost and wall time of the same
    evaluate, direct and with --batch, and whether their results were the same."""
    settings = results["settings"]
    lines = [
        "| mode | HTTP requests | batches | LLM calls | cost | wall time |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in results["runs"]:
        lines.append(
            f"| {'`--batch`' if run['mode'] == 'batch' else 'direct'} | "
            f"{run['http_requests']:,} | {run['batches']} | {run['llm_calls']:,} | "
            f"${run['cost_usd']:.4f} | {run['wall_seconds']:.0f} s |"
        )
    same = "the same" if results["same_results"] else "NOT the same"
    delay = settings["batch_delay_seconds"]
    return (
        "\n".join(lines)
        + f"\n\n({settings['samples']:,} samples, {settings['metrics']}; cost ratio "
        f"{results['cost_ratio']}; results {same} sample by sample; a direct request answered "
        f"in {settings['latency_ms']:.0f} ms, a batch completed {delay:g} s "
        f"after it was created; `benchmarks/results/batch.json`, recorded "
        f"{results['recorded_at'][:10]}.)\n"
    )


_TOOLS = {
    "ragjury": "ragjury `evaluate`",
    "ragas": "RAGAS, `collections` path (instructor)",
    "ragas-legacy": "RAGAS, legacy `evaluate()` (LangChain)",
    "deepeval": "DeepEval `FaithfulnessMetric`",
}


def peers(results: dict[str, Any]) -> str:
    """The peers table: each tool's whole-process seconds, its ratio to ragjury's, its own
    in-run seconds, samples scored and lost and requests made, its requests in flight at the
    endpoint (peak and mean) and its CPU seconds, without and with faults."""
    settings = results["settings"]
    lines = [
        "| tool | bad answers | whole process | x ragjury | inside the run | scored | lost "
        "| requests | in flight: peak, mean | CPU |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["rows"]:
        in_run = row.get("in_run_seconds")
        peak, mean, cpu = (
            row.get("in_flight_max"),
            row.get("in_flight_mean"),
            row.get("cpu_seconds"),
        )
        lines.append(
            f"| {_TOOLS.get(row['tool'], row['tool'])} | {'20%' if row['faults'] else 'none'} "
            f"| {row['wall_seconds']:.1f} s | {row['ratio_to_ragjury']:.2f} "
            f"| {'-' if in_run is None else f'{in_run:.1f} s'} | {row['scored']} | {row['lost']} "
            f"| {row['requests']} | {'-' if peak is None else f'{peak}, {mean:.1f}'} "
            f"| {'-' if cpu is None else f'{cpu:.1f} s'} |"
        )
    versions = ", ".join(f"{tool} {v}" for tool, v in results["versions"].items() if v)
    return (
        "\n".join(lines)
        + f"\n\n({settings['samples']} samples, concurrency {settings['concurrency']}, "
        f"{settings['latency_ms']:.0f} ms a call; {versions}; "
        f"`benchmarks/results/peers.json`, recorded {results['recorded_at'][:10]}.)\n"
    )


REGIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "batch": batch,
    "bus": bus,
    "peers": peers,
    "scaleout": scaleout,
    "startup": startup,
}


def rendered(readme: str, results: Path = RESULTS) -> str:
    """``readme`` with every figures region made again from the results files."""

    def region(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in REGIONS:
            raise SystemExit(f"README.md has a figures region {name!r} this script cannot make")
        data = json.loads((results / f"{name}.json").read_text(encoding="utf-8"))
        return match.group(1) + REGIONS[name](data) + match.group(4)

    return _REGION.sub(region, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 when the README differs"
    )
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    made = rendered(current)
    if made == current:
        return 0
    if args.check:
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            made.splitlines(keepends=True),
            "README.md",
            "README.md from benchmarks/results",
        )
        sys.stdout.writelines(diff)
        print(
            "README.md's benchmark figures differ from benchmarks/results/*.json; run "
            "python benchmarks/readme_figures.py",
            file=sys.stderr,
        )
        return 1
    README.write_text(made, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
