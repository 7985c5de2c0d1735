"""Peak memory (RSS) of `ragjury generate` with 10x and 100x more documents than the bus
buffers hold: it should stay flat, because a full buffer blocks whoever publishes into it.

Each size runs the real command line (``ragjury generate FOLDER --whole-documents ...``) in
its own process against the fake endpoint, on Markdown files written to a temporary folder;
the peak RSS of that process comes from the kernel (``os.wait4``'s resource usage). The
documents are large enough (``--doc-kb``) that holding all of them at once would show.

    python benchmarks/memory.py
    python benchmarks/memory.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import corpus
from _harness import FakeEndpoint, base_parser, quiet, show, write_result

_RUN_CLI = "import sys; from ragjury.cli import main; sys.exit(main(sys.argv[1:]))"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--buffer", type=int, default=None, help="bus buffer (16; --quick 4)")
    parser.add_argument("--doc-kb", type=float, default=16.0, help="size of each document")
    parser.add_argument(
        "--multiples", type=str, default="1,10,100", help="documents as multiples of the buffer"
    )
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    if args.buffer is None:
        args.buffer = 4 if args.quick else 16
    args.multiples = [int(m) for m in str(args.multiples).split(",")]
    return args


def peak_rss_of_generate(
    args: argparse.Namespace, base_url: str, folder: Path, work: Path
) -> dict[str, Any]:
    """Run ``ragjury generate`` over ``folder`` in a child process; its peak RSS in MiB."""
    command = [
        sys.executable, "-c", _RUN_CLI, "generate", str(folder),
        "--whole-documents", "--out", str(work / "kept.jsonl"), "--db", str(work / "run.db"),
        "--summary", str(work / "summary.json"), "--base-url", base_url, "--api-key", "memory",
        "--model", "fake-model", f"--concurrency={args.concurrency}",
    ]  # fmt: skip
    env = {**os.environ, "RAGJURY_BUS_BUFFER": str(args.buffer)}
    started = time.perf_counter()
    with (work / "stderr.txt").open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)  # the child's own resource usage
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        errors = (work / "stderr.txt").read_text(encoding="utf-8")
        raise RuntimeError(f"ragjury generate exited {process.returncode}:\n{errors}")
    data = json.loads((work / "summary.json").read_text(encoding="utf-8"))
    return {
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # Linux reports KiB
        "seconds": round(seconds, 2),
        "kept": data["kept"],
        "failed": data["failed"] + data["chunks_failed"],
        "llm_calls": data["llm_calls"],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    rows: list[dict[str, Any]] = []
    with FakeEndpoint(latency_ms=args.latency_ms) as fake, tempfile.TemporaryDirectory() as tmp:
        for multiple in args.multiples:
            count = multiple * args.buffer
            folder = Path(tmp) / f"docs-{multiple}x"
            corpus.write_documents(folder, count, filler_chars=int(args.doc_kb * 1024))
            work = Path(tmp) / f"run-{multiple}x"
            work.mkdir()
            measured = peak_rss_of_generate(args, fake.base_url, folder, work)
            rows.append(
                {
                    "multiple_of_buffer": multiple,
                    "documents": count,
                    "documents_mib": round(count * args.doc_kb / 1024, 1),
                    **measured,
                }
            )
    smallest = rows[0]["peak_rss_mib"]
    for row in rows:
        row["ratio_to_smallest"] = round(row["peak_rss_mib"] / smallest, 3)
    result = {
        "settings": {
            "buffer": args.buffer,
            "doc_kb": args.doc_kb,
            "latency_ms": args.latency_ms,
            "concurrency": args.concurrency,
            "quick": args.quick,
        },
        "sizes": rows,
    }
    path = write_result("memory", result, args.out)
    columns = [
        "documents", "x buffer", "documents MiB", "peak RSS MiB", "ratio to smallest",
        "kept", "failed", "seconds",
    ]  # fmt: skip
    table = [
        [
            r["documents"], r["multiple_of_buffer"], r["documents_mib"], r["peak_rss_mib"],
            r["ratio_to_smallest"], r["kept"], r["failed"], r["seconds"],
        ]
        for r in rows
    ]  # fmt: skip
    show(f"Peak RSS of ragjury generate, bus buffer {args.buffer}", columns, table, path)
    return 0 if all(r["failed"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
