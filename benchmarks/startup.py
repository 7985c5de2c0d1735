"""Start-up as a user meets it: `ragjury --version`, `--help` and `evaluate --help` as whole
processes, and how long after its start an `evaluate` sends its first request.

Each command runs as the `ragjury` console script does (``from ragjury.cli import main``), in
a fresh interpreter, ``--runs`` times after one warm-up, the commands taking turns so that a
drift of the machine's speed touches all of them alike. Figures are medians, and ratios to the
median of ``python -c pass`` (the interpreter alone) measured in the same run. The first
request's time is read at the fake endpoint (``benchmarks/fakeserver.py``): the arrival of the
first request on the machine's monotonic clock, less the clock just before the process was
started. ``python -c "import openai"`` is timed too: no `evaluate` that uses the openai client
can send a request earlier than that.

The commands run in a temporary folder (so the ragjury imported is the installed one, or the
one ``PYTHONPATH`` names, never a checkout in the current folder), with bytecode caches written
(``PYTHONDONTWRITEBYTECODE`` is dropped for them) as an installed package has them; the
warm-up writes them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import FakeEndpoint, base_parser, show, write_result

RUN_CLI = "import sys; from ragjury.cli import main; sys.exit(main(sys.argv[1:]))"
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "ragjury --version": ["-c", RUN_CLI, "--version"],
    "ragjury --help": ["-c", RUN_CLI, "--help"],
    "ragjury evaluate --help": ["-c", RUN_CLI, "evaluate", "--help"],
    'python -c "import openai"': ["-c", "import openai"],
}
BASELINE = "python -c pass"
FIRST_REQUEST = "evaluate: first request"
EVALUATE = "evaluate: whole run"


def parse_args(argv: list[str] | None = None) -> Any:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="counted runs of each command")
    parser.add_argument("--samples", type=int, default=8, help="samples the evaluate judges")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="the fake's latency")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.samples = 3, 2
    return args


def child_environment() -> dict[str, str]:
    """The caller's environment, with bytecode caches written as an installed package has."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one whole process, from before it is started until it is reaped."""
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - started


def write_samples(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            sentence = f"Setting {i} is value {i}."
            record = {"id": f"s{i}", "question": f"What is setting {i}?", "answer": sentence}
            out.write(json.dumps({**record, "contexts": [sentence]}) + "\n")


def evaluate_once(
    fake: FakeEndpoint, work: Path, samples: Path, env: dict[str, str]
) -> tuple[float, float]:
    """(seconds to the first request, seconds of the whole run) of a fresh ``evaluate``."""
    for stale in work.glob("run.db*"):
        stale.unlink()
    fake.reset()
    argv = [
        "-c", RUN_CLI, "evaluate", str(samples), "--metrics", "faithfulness",
        "--db", str(work / "run.db"), "--out", str(work / "results.jsonl"),
        "--base-url", fake.base_url, "--api-key", "startup", "--model", "fake-model",
    ]  # fmt: skip
    started = time.monotonic()
    subprocess.run([sys.executable, *argv], env=env, cwd=work, capture_output=True, check=True)
    ended = time.monotonic()
    first = float(fake.stats()["first_request_at"])
    if first < started:
        raise RuntimeError("the evaluate sent no request to the fake endpoint")
    return first - started, ended - started


def measure(args: Any) -> dict[str, list[float]]:
    env = child_environment()
    seconds: dict[str, list[float]] = {name: [] for name in [*COMMANDS, FIRST_REQUEST, EVALUATE]}
    with tempfile.TemporaryDirectory() as folder, FakeEndpoint(latency_ms=args.latency_ms) as fake:
        work = Path(folder)
        samples = work / "samples.jsonl"
        write_samples(samples, args.samples)

        def command(name: str, argv: list[str]) -> Callable[[], None]:
            return lambda: seconds[name].append(timed(argv, env, work))

        rounds = [command(name, argv) for name, argv in COMMANDS.items()]

        def evaluate() -> None:
            first, whole = evaluate_once(fake, work, samples, env)
            seconds[FIRST_REQUEST].append(first)
            seconds[EVALUATE].append(whole)

        rounds.append(evaluate)
        for step in rounds:  # the warm-up: writes the bytecode caches, warms the disk cache
            step()
        for values in seconds.values():
            values.clear()
        for _ in range(args.runs):
            for step in rounds:
                step()
    return seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = measure(args)
    baseline = statistics.median(seconds[BASELINE])
    runs = []
    for name, values in seconds.items():
        median = statistics.median(values)
        runs.append(
            {
                "run": name,
                "median_seconds": round(median, 4),
                "min_seconds": round(min(values), 4),
                "max_seconds": round(max(values), 4),
                "ratio_to_python": round(median / baseline, 2),
                "seconds": [round(v, 4) for v in values],
            }
        )
    settings = {"runs": args.runs, "samples": args.samples, "latency_ms": args.latency_ms}
    path = write_result("startup", {"settings": settings, "runs": runs}, args.out)
    columns = ("run", "median s", "min s", "max s", "x python -c pass")
    rows = [
        (r["run"], r["median_seconds"], r["min_seconds"], r["max_seconds"], r["ratio_to_python"])
        for r in runs
    ]
    show(f"Start-up, medians of {args.runs} runs", columns, rows, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
