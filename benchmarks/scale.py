"""Scale: `ragjury evaluate` and `ragjury generate` from start to written outputs at growing
sizes, as a user runs them, and the commands that read what a run left behind.

Each size runs the real command line in its own process: `evaluate` on a JSONL file of
samples, keywords only (no LLM call: what is left is ragjury's own bookkeeping; each sample
has two real documentation contexts of 1-2 KB, from ../shared/data's anthropic-docs chunks or,
in a fresh clone, the example corpus, about 4 KB a record; ``--contexts tiny`` gives the
one-sentence samples of earlier figures) and faithfulness against the fake endpoint with no
latency (the LLM path's bookkeeping), and
`generate` on a folder of small generated documents (one chunk, one pair, three critics each)
against the same endpoint. Beside each keywords evaluate it runs `evaluate --dry-run` on the
same samples, a plain Python loop over the same file with the same keyword checks
(plain_keywords.py, no ragjury: the yardstick any machine gives), and `status --json` and
`export --results` on the database it left. It reports
seconds per item, items per second, peak RSS (``os.wait4``) and database bytes per item, each
with its ratio to the smallest size of its kind and command: flat ratios mean linear time and
flat memory. Start-up weighs on the small sizes, so it also reports the marginal time per item
from one size to the next, which a linear command keeps flat too.

    python benchmarks/scale.py          # keywords 2k, 20k; faithfulness, generate 1k-100k (~1 h)
    python benchmarks/scale.py --quick  # keywords 2k, 20k; faithfulness 500, 2k; generate 200, 800
    python benchmarks/scale.py --keywords 2000,20000 --million --faithfulness 0 --generate 0
    python benchmarks/scale.py --keywords 1000,1000000 --generate 1000,100000

``--million`` adds a keywords run of 1,000,000 samples: about 35 GB of disk at the peak (4.3 GB
of input and as much again of its samples' JSON kept while the run lasts, 15 GB of database
(its write-ahead log checkpointed at 64 MiB), the output and the export 4.7 GB each) and
about 600 CPU seconds for the evaluate alone (21 minutes of wall time on a loaded 2-core
machine). The keywords rows say whether the
no-LLM targets hold, a line each: at least 2,000 samples/s at 20k as a whole process, time
per sample and peak RSS within 1.5x and 1.25x of the smallest size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from _harness import FakeEndpoint, base_parser, quiet, show, write_result
from corpus import SHARED_CHUNKS, keyword_records, write_documents

_RUN_CLI = "import sys; from ragjury.cli import main; sys.exit(main(sys.argv[1:]))"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--keywords", type=str, default=None, help="sizes, e.g. 1000,10000")
    parser.add_argument("--faithfulness", type=str, default=None, help="sizes, e.g. 1000 (0: skip)")
    parser.add_argument(
        "--generate", type=str, default=None, help="documents, e.g. 1000 (0: skip generate)"
    )
    parser.add_argument(
        "--million", action="store_true", help="add a keywords run of 1,000,000 samples"
    )
    parser.add_argument(
        "--contexts",
        choices=("real", "tiny"),
        default="real",
        help="keywords samples: two real 1-2 KB contexts (default) or one sentence",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        default=SHARED_CHUNKS,
        help="a JSON list of {text} chunks for the real contexts (default: ../shared/data's "
        "anthropic-docs; the example corpus where it is not)",
    )
    args = parser.parse_args(argv)
    full = "1000,10000,100000"  # the sizes the scale targets are set at
    args.generate = _sizes(args.generate or ("200,800" if args.quick else full))
    args.keywords = _sizes(args.keywords or "2000,20000") + ([1_000_000] if args.million else [])
    args.faithfulness = _sizes(args.faithfulness or ("500,2000" if args.quick else full))
    return args


def _sizes(text: str) -> list[int]:
    """Comma-separated sizes; 0 (or nothing) leaves a kind out."""
    return [int(n) for n in text.split(",") if n.strip() and int(n) > 0]


def write_keyword_samples(path: Path, n: int, corpus: Path) -> None:
    """``n`` keyword-test records with two real 1-2 KB contexts each (see corpus.py)."""
    with path.open("w", encoding="utf-8") as out:
        for record in keyword_records(n, corpus):
            out.write(json.dumps(record) + "\n")


def write_samples(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            sentence = f"Setting {i} is value {i}."
            record = {
                "id": f"s{i}",
                "question": f"What is setting {i}?",
                "answer": sentence,
                "contexts": [sentence],
                "must_contain": [f"value {i}"],
            }
            out.write(json.dumps(record) + "\n")


def run_evaluate(work: Path, samples: Path, metric: str, base_url: str | None) -> dict[str, Any]:
    command = [
        sys.executable, "-c", _RUN_CLI, "evaluate", str(samples), "--metrics", metric,
        "--db", str(work / "run.db"), "--out", str(work / "results.jsonl"),
        "--summary", str(work / "summary.json"), "--concurrency", "16",
    ]  # fmt: skip
    if base_url is not None:
        command += ["--base-url", base_url, "--api-key", "scale", "--model", "fake-model"]
    measured = run_command(work, command)
    summary = json.loads((work / "summary.json").read_text(encoding="utf-8"))
    figures = summary["metrics"][metric]
    return {**measured, "failed": figures["failed"], "scored": figures["scored"]}


def run_dry_run(work: Path, samples: Path) -> dict[str, Any]:
    """``evaluate --dry-run``: the samples are read and estimated, nothing is stored."""
    command = [
        sys.executable, "-c", _RUN_CLI, "evaluate", str(samples), "--metrics", "keywords",
        "--dry-run", "--db", str(work / "dry.db"), "--out", str(work / "dry.jsonl"),
        "--summary", str(work / "estimate.json"),
    ]  # fmt: skip
    measured = run_command(work, command)
    estimate = json.loads((work / "estimate.json").read_text(encoding="utf-8"))
    return {**measured, "failed": 0, "scored": estimate["samples"]}


def run_plain(work: Path, samples: Path) -> dict[str, Any]:
    """The yardstick: a plain Python loop over the same file with the same keyword checks
    (plain_keywords.py), no ragjury."""
    plain = Path(__file__).with_name("plain_keywords.py")
    command = [sys.executable, str(plain), str(samples), str(work / "plain.jsonl")]
    measured = run_command(work, command)
    with (work / "plain.jsonl").open("rb") as lines:
        written = sum(1 for _ in lines)
    return {**measured, "db_bytes": 0, "failed": 0, "scored": written}


def run_status(work: Path) -> dict[str, Any]:
    """``status --json`` on the database a finished evaluate left."""
    command = [sys.executable, "-c", _RUN_CLI, "status", "--db", str(work / "run.db"), "--json"]
    measured = run_command(work, command, stdout=work / "status.json")
    status = json.loads((work / "status.json").read_text(encoding="utf-8"))
    return {**measured, "failed": status["failed"], "scored": status["done"]}


def run_export(work: Path) -> dict[str, Any]:
    """``export --results`` of the judged samples of a finished evaluate."""
    out = work / "exported.jsonl"
    command = [
        sys.executable, "-c", _RUN_CLI, "export", "--db", str(work / "run.db"),
        "--results", str(out),
    ]  # fmt: skip
    measured = run_command(work, command)
    with out.open("rb") as lines:
        exported = sum(1 for _ in lines)
    return {**measured, "failed": 0, "scored": exported}


def run_generate(work: Path, documents: Path, base_url: str) -> dict[str, Any]:
    command = [
        sys.executable, "-c", _RUN_CLI, "generate", str(documents), "--whole-documents",
        "--db", str(work / "run.db"), "--out", str(work / "dataset.jsonl"),
        "--rejected", str(work / "rejected.jsonl"), "--summary", str(work / "summary.json"),
        "--concurrency", "16", "--base-url", base_url, "--api-key", "scale",
        "--model", "fake-model",
    ]  # fmt: skip
    measured = run_command(work, command)
    summary = json.loads((work / "summary.json").read_text(encoding="utf-8"))
    failed = summary["chunks_failed"] + summary["failed"]
    return {**measured, "failed": failed, "scored": summary["kept"]}


def run_command(work: Path, command: list[str], stdout: Path | None = None) -> dict[str, Any]:
    """Run a ragjury command line (its standard output to ``stdout``, else discarded); its
    wall time, peak RSS and database size."""
    started = time.perf_counter()
    with contextlib.ExitStack() as files:
        stderr = files.enter_context((work / "stderr.txt").open("w", encoding="utf-8"))
        out = files.enter_context(stdout.open("wb")) if stdout else subprocess.DEVNULL
        process = subprocess.Popen(command, stdout=out, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        errors = (work / "stderr.txt").read_text(encoding="utf-8")
        raise RuntimeError(f"{command[1:4]} exited {status}:\n{errors[-2000:]}")
    return {
        "seconds": round(seconds, 2),
        # user + system CPU of the command: far less moved by a busy machine than the wall time
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "db_bytes": sum(p.stat().st_size for p in work.glob("run.db*")),
    }


def measure(
    tmp: Path, metric: str, sizes: list[int], base_url: str | None, real: Path | None = None
) -> list[dict[str, Any]]:
    """Rows of every size for one kind; keywords adds `evaluate --dry-run`, `status` and
    `export` rows for each size beside its `evaluate` row."""
    rows = []
    for n in sizes:
        work = tmp / f"{metric}-{n}"
        work.mkdir()
        if metric == "generate":
            assert base_url is not None
            write_documents(work / "docs", n, filler_chars=200)
            runs = {"generate": partial(run_generate, work, work / "docs", base_url)}
        else:
            samples = work / "samples.jsonl"
            if real is not None:
                write_keyword_samples(samples, n, real)
            else:
                write_samples(samples, n)
            runs = {"evaluate": partial(run_evaluate, work, samples, metric, base_url)}
            if metric == "keywords":
                runs = {
                    "evaluate --dry-run": partial(run_dry_run, work, samples),
                    "plain python loop": partial(run_plain, work, samples),
                    **runs,
                    "status": partial(run_status, work),
                    "export": partial(run_export, work),
                }
        for command, run in runs.items():
            measured = run()
            if command == "evaluate" and real is not None:
                measured["input_bytes_per_item"] = round(samples.stat().st_size / n)
            rows.append(
                {
                    "metric": metric,
                    "command": command,
                    "samples": n,
                    **measured,
                    "items_per_second": round(n / measured["seconds"], 1),
                    "ms_per_item": round(1000 * measured["seconds"] / n, 3),
                    "db_bytes_per_item": round(measured["db_bytes"] / n),
                }
            )
    first: dict[str, dict[str, Any]] = {}
    previous: dict[str, dict[str, Any]] = {}
    for row in rows:
        base = first.setdefault(row["command"], row)
        row["time_per_item_ratio"] = round(row["ms_per_item"] / base["ms_per_item"], 2)
        row["rss_ratio"] = round(row["peak_rss_mib"] / base["peak_rss_mib"], 2)
        # the time each item added since the previous size: what start-up (a second or so,
        # which dwarfs the per-item time of the readers at small sizes) leaves out
        before = previous.get(row["command"])
        row["marginal_ms_per_item"] = (
            None
            if before is None or row["samples"] <= before["samples"]
            else round(
                1000 * (row["seconds"] - before["seconds"]) / (row["samples"] - before["samples"]),
                4,
            )
        )
        previous[row["command"]] = row
    return sorted(rows, key=lambda r: list(first).index(r["command"]))


def no_llm_targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The keywords-only evaluate's figures against the issue's targets: samples/s of the
    largest size up to 20k, and the largest size's time per sample and peak RSS as ratios to
    the smallest's."""
    runs = [r for r in rows if r["metric"] == "keywords" and r["command"] == "evaluate"]
    if len(runs) < 2:
        return {}
    plain = {
        r["samples"]: r
        for r in rows
        if r["metric"] == "keywords" and r["command"] == "plain python loop"
    }
    first, upto = runs[0], [r for r in runs if r["samples"] <= 20_000][-1]
    figures: dict[str, Any] = {
        "sizes": [r["samples"] for r in runs],
        "samples_per_second": {str(r["samples"]): r["items_per_second"] for r in runs},
        "samples_per_cpu_second": {
            str(r["samples"]): round(r["samples"] / r["cpu_seconds"], 1) for r in runs
        },
        # the same samples through a plain Python loop with the same checks, in the same run:
        # ragjury's whole-process time and CPU as multiples of it (a figure any machine gives)
        "plain_loop_samples_per_second": {str(n): r["items_per_second"] for n, r in plain.items()},
        "plain_loop_samples_per_cpu_second": {
            str(n): round(n / r["cpu_seconds"], 1) for n, r in plain.items() if r["cpu_seconds"]
        },
        "time_vs_plain_loop": {
            str(r["samples"]): round(r["seconds"] / plain[r["samples"]]["seconds"], 2)
            for r in runs
            if r["samples"] in plain
        },
        "cpu_vs_plain_loop": {
            str(r["samples"]): round(r["cpu_seconds"] / plain[r["samples"]]["cpu_seconds"], 2)
            for r in runs
            if r["samples"] in plain
        },
        "time_per_sample_ratio": upto["time_per_item_ratio"],
        "peak_rss_ratio": upto["rss_ratio"],
        "at_least_2000_per_second": upto["items_per_second"] >= 2000,
        "time_within_1_5x": upto["time_per_item_ratio"] <= 1.5,
        "rss_within_1_25x": upto["rss_ratio"] <= 1.25,
        "compared": [first["samples"], upto["samples"]],
    }
    million = [r for r in runs if r["samples"] >= 1_000_000]
    if million:
        figures["million"] = {
            k: million[0][k] for k in ("seconds", "peak_rss_mib", "items_per_second")
        }
    return figures


def target_lines(figures: dict[str, Any]) -> list[str]:
    """The no-LLM targets, a line each, with whether they hold (see :func:`no_llm_targets`)."""
    small, large = figures["compared"]
    rate = figures["samples_per_second"][str(large)]
    lines = [
        f"no-LLM target: per-sample time {large:,} vs {small:,}: "
        f"{figures['time_per_sample_ratio']}x (at most 1.5x: "
        f"{'yes' if figures['time_within_1_5x'] else 'NO'})",
        f"no-LLM target: peak RSS {large:,} vs {small:,}: {figures['peak_rss_ratio']}x "
        f"(at most 1.25x: {'yes' if figures['rss_within_1_25x'] else 'NO'})",
        f"no-LLM target: {rate:,.0f} samples/s at {large:,} as a whole process on this machine "
        f"(at least 2,000: {'yes' if figures['at_least_2000_per_second'] else 'NO'})",
    ]
    multiple = figures["cpu_vs_plain_loop"].get(str(large))
    plain = figures["plain_loop_samples_per_cpu_second"].get(str(large))
    if multiple is not None and plain is not None:
        own = figures["samples_per_cpu_second"][str(large)]
        lines.append(
            f"no-LLM target: CPU {multiple}x the plain loop's at {large:,} (here {own:,.0f} "
            f"samples per CPU second against the loop's {plain:,.0f}): 2,000 samples/s needs a "
            f"machine where the loop does 2,000 x {multiple} = {2000 * multiple:,.0f} per CPU "
            "second, and a process whose wall time is no longer than its CPU time"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder, FakeEndpoint(latency_ms=0.0) as fake:
        tmp = Path(folder)
        real = args.corpus if args.contexts == "real" else None
        rows = measure(tmp, "keywords", args.keywords, None, real)
        rows += measure(tmp, "faithfulness", args.faithfulness, fake.base_url)
        rows += measure(tmp, "generate", args.generate, fake.base_url)
    no_llm = no_llm_targets(rows)
    result = {
        "settings": {"quick": args.quick, "contexts": args.contexts},
        # other work on the machine: wall seconds are only comparable within one run
        "load_average": {"start": load_before, "end": os.getloadavg()[0]},
        "sizes": rows,
        "no_llm": no_llm,
    }
    path = write_result("scale", result, args.out)
    columns = [
        "metric", "command", "samples", "seconds", "CPU s", "items/s", "ms/item", "time ratio",
        "marginal ms/item", "peak RSS MiB", "RSS ratio", "db bytes/item", "failed",
    ]  # fmt: skip
    table = [
        [
            r["metric"], r["command"], r["samples"], r["seconds"], r["cpu_seconds"],
            r["items_per_second"],
            r["ms_per_item"], r["time_per_item_ratio"], r["marginal_ms_per_item"] or "-",
            r["peak_rss_mib"], r["rss_ratio"], r["db_bytes_per_item"], r["failed"],
        ]
        for r in rows
    ]  # fmt: skip
    show("ragjury at growing sizes (ratios to the smallest)", columns, table, path)
    if no_llm:
        print(f"keywords-only evaluate: {json.dumps(no_llm)}")
        for line in target_lines(no_llm):
            print(line)
    readers = (
        "evaluate --dry-run",
        "plain python loop",
        "status",
        "export",
    )  # each saw every sample, or not
    complete = all(
        r["failed"] == 0 and (r["command"] not in readers or r["scored"] == r["samples"])
        for r in rows
    )
    return 0 if complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
