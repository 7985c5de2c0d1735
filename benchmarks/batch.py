"""Batch mode against direct calls: HTTP requests, LLM calls, cost and wall time of one
`ragjury evaluate` of 1,000 samples (faithfulness and correctness), run as a user runs it.

Both runs are the real command in a process of its own against the same fake endpoint (a
200 ms latency on each direct chat request; OpenAI's Files and Batch APIs with each batch
completing ``--batch-delay`` seconds after it was created; ``--batch-poll 0.5`` for so quick a
"provider", the other batch options evaluate's defaults). Prices are a model's at $0.15 /
$0.60 per million input / output tokens, the batch price half of that (OpenAI's discount).
The results of the two runs are compared sample by sample.

    python benchmarks/batch.py
    python benchmarks/batch.py --quick

A real provider answers a batch within hours, not seconds: batch mode's wall time here is
the scripted delay times the rounds of batches the job needs (a sample's verdicts wait for
its statements), not a forecast.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import corpus
from _harness import FakeEndpoint, base_parser, delta, show, write_result

PRICES = {"fake-model": {"input": 0.15, "output": 0.60}}
METRICS = "faithfulness,correctness"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="samples judged (1000)")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="per direct request")
    parser.add_argument(
        "--batch-delay", type=float, default=2.0, help="seconds a batch takes to complete"
    )
    parser.add_argument(
        "--batch-wait",
        type=float,
        default=None,
        help="evaluate's --batch-wait (default 60, as for a user; 2 with --quick)",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    if args.samples is None:
        args.samples = 50 if args.quick else 1000
    if args.batch_wait is None:
        args.batch_wait = 2.0 if args.quick else 60.0
    return args


def write_samples(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for sample in corpus.samples(count, 3, seed=7):
            out.write(sample.model_dump_json() + "\n")


def evaluate(
    args: argparse.Namespace, fake: FakeEndpoint, folder: Path, mode: str
) -> dict[str, Any]:
    """One ``ragjury evaluate`` in a subprocess; its summary, the endpoint's counters and
    its wall time."""
    folder.mkdir()
    prices = folder / "prices.json"
    prices.write_text(json.dumps(PRICES), encoding="utf-8")
    argv = [
        sys.executable, "-m", "ragjury", "evaluate", str(folder.parent / "samples.jsonl"),
        "--out", str(folder / "results.jsonl"), "--summary", str(folder / "summary.json"),
        "--db", str(folder / "ragjury.db"), "--base-url", fake.base_url, "--api-key", "bench",
        "--model", "fake-model", "--prices", str(prices), "--metrics", METRICS,
        "--concurrency", str(args.concurrency),
    ]  # fmt: skip
    if mode == "batch":
        argv += ["--batch", "--batch-wait", str(args.batch_wait), "--batch-poll", "0.5"]
    before = fake.stats()
    started = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise SystemExit(f"{mode} run failed ({completed.returncode}): {completed.stderr}")
    counted = delta(fake.stats(), before)
    summary: dict[str, Any] = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    return {
        "mode": mode,
        "http_requests": int(counted.get("requests", 0)),
        "direct_chat_requests": int(counted.get("chat_requests", 0)),
        "batches": int(counted.get("batches_created", 0)),
        "batch_lines": int(counted.get("batch_lines_answered", 0)),
        "batch_polls": int(counted.get("batch_polls", 0)),
        "llm_calls": summary["llm_calls"],
        "calls_by_mode": summary["calls_by_mode"],
        "prompt_tokens": summary["prompt_tokens"],
        "completion_tokens": summary["completion_tokens"],
        "cost_usd": summary["cost_usd"],
        "wall_seconds": round(wall, 2),
        "failed": sum(m["failed"] for m in summary["metrics"].values()),
    }


def scores(folder: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    return {
        row["id"]: {name: (m.get("outcome"), m.get("score")) for name, m in row["metrics"].items()}
        for row in rows
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with (
        FakeEndpoint(latency_ms=args.latency_ms, batch_delay=args.batch_delay) as fake,
        tempfile.TemporaryDirectory() as tmp,
    ):
        root = Path(tmp)
        write_samples(root / "samples.jsonl", args.samples)
        runs = [evaluate(args, fake, root / mode, mode) for mode in ("direct", "batch")]
        same = scores(root / "direct") == scores(root / "batch")
    direct, batch = runs
    result = {
        "settings": {
            "samples": args.samples,
            "metrics": METRICS,
            "latency_ms": args.latency_ms,
            "batch_delay_seconds": args.batch_delay,
            "batch_wait_seconds": args.batch_wait,
            "batch_poll_seconds": 0.5,
            "concurrency": args.concurrency,
            "prices": PRICES,
            "quick": args.quick,
        },
        "runs": runs,
        "same_results": same,
        "cost_ratio": round(batch["cost_usd"] / direct["cost_usd"], 3),
        "http_requests_ratio": round(batch["http_requests"] / direct["http_requests"], 4),
    }
    path = write_result("batch", result, args.out)
    columns = [
        "mode", "HTTP requests", "batches", "LLM calls", "tokens", "cost", "wall s", "failed",
    ]  # fmt: skip
    rows = [
        [
            r["mode"],
            r["http_requests"],
            r["batches"],
            r["llm_calls"],
            r["prompt_tokens"] + r["completion_tokens"],
            f"${r['cost_usd']:.4f}",
            r["wall_seconds"],
            r["failed"],
        ]
        for r in runs
    ]
    title = (
        f"evaluate of {args.samples} samples ({METRICS}), direct vs --batch: cost ratio "
        f"{result['cost_ratio']}, same results: {same}"
    )
    show(title, columns, rows, path)
    return 0 if same and not direct["failed"] and not batch["failed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
