"""Start-up as a user meets it: `ragjury --version`, `--help` and `evaluate --help` as whole
processes, and how long after its start an `evaluate` sends its first request.

Each command runs as the `ragjury` console script does (``from ragjury.cli import main``), in
a fresh interpreter, ``--runs`` times after one warm-up, the commands taking turns so that a
drift of the machine's speed touches all of them alike. Figures are medians, and ratios to the
median of ``python -c pass`` (the interpreter alone) measured in the same run. The first
request's time is read at the fake endpoint (``benchmarks/fakeserver.py``): the arrival of the
first request on the machine's monotonic clock, less the clock just before the process was
started. ``python -c "import openai"`` is timed too: no `evaluate` that uses the openai client
can send a request earlier than that, so each figure is also shown as a ratio to it, and the
first request's time less it (round by round: what ragjury itself adds before its first
request) is a row of its own. The yardstick for a first request is the bare openai client's
own: a script that makes the client and sends one ``chat.completions.create`` to the same
endpoint, timed the same way (its first use of ``client.chat`` imports openai's resource
modules, which ragjury's raw ``post`` never loads). Each whole process's CPU seconds (user +
system, the operating system's accounting of the reaped child) are shown beside its wall
time: on a machine that other work shares they move far less than wall time does.

The commands run in a temporary folder (so the ragjury imported is the installed one, or the
one ``PYTHONPATH`` names, never a checkout in the current folder), with bytecode caches written
(``PYTHONDONTWRITEBYTECODE`` is dropped for them) as an installed package has them; the
warm-up writes them.
"""

from __future__ import annotations

import json
import os
import resource
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
OPENAI = 'python -c "import openai"'
FIRST_REQUEST = "evaluate: first request"
EVALUATE = "evaluate: whole run"
BARE_FIRST = "openai client alone: first request"
BARE_CLIENT = """
import asyncio, sys, openai
async def main():
    async with openai.AsyncOpenAI(base_url=sys.argv[1], api_key="b", max_retries=0) as client:
        await client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "Say ok."}],
            extra_headers={"x-ragjury-agent": "bare"},
        )
asyncio.run(main())
"""
ADDED = 'first request less "import openai"'


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


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process, from before it is started until it is
    reaped."""
    cpu = _children_cpu()
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - started, _children_cpu() - cpu


def write_samples(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            sentence = f"Setting {i} is value {i}."
            record = {"id": f"s{i}", "question": f"What is setting {i}?", "answer": sentence}
            out.write(json.dumps({**record, "contexts": [sentence]}) + "\n")


def evaluate_once(
    fake: FakeEndpoint, work: Path, samples: Path, env: dict[str, str]
) -> tuple[float, float, float]:
    """(seconds to the first request, wall and CPU seconds of the whole run) of a fresh
    ``evaluate``."""
    for stale in work.glob("run.db*"):
        stale.unlink()
    argv = [
        "-c", RUN_CLI, "evaluate", str(samples), "--metrics", "faithfulness",
        "--db", str(work / "run.db"), "--out", str(work / "results.jsonl"),
        "--base-url", fake.base_url, "--api-key", "startup", "--model", "fake-model",
    ]  # fmt: skip
    return first_request(fake, argv, env, work)


def first_request(
    fake: FakeEndpoint, argv: list[str], env: dict[str, str], work: Path
) -> tuple[float, float, float]:
    """(seconds to the first request the fake endpoint saw, wall and CPU seconds of the
    whole process) of a fresh ``python ARGV``."""
    fake.reset()
    cpu = _children_cpu()
    started = time.monotonic()
    subprocess.run([sys.executable, *argv], env=env, cwd=work, capture_output=True, check=True)
    ended = time.monotonic()
    first = float(fake.stats()["first_request_at"])
    if first < started:
        raise RuntimeError(f"{argv[:3]} sent no request to the fake endpoint")
    return first - started, ended - started, _children_cpu() - cpu


def measure(args: Any) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall seconds of every run, by name (with the first request less ``import openai`` of
    the same round), and CPU seconds of the whole processes."""
    env = child_environment()
    names = [*COMMANDS, FIRST_REQUEST, EVALUATE, BARE_FIRST]
    seconds: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names if name != FIRST_REQUEST}
    # the bare client's CPU is that of its whole (one-request) process
    with tempfile.TemporaryDirectory() as folder, FakeEndpoint(latency_ms=args.latency_ms) as fake:
        work = Path(folder)
        samples = work / "samples.jsonl"
        write_samples(samples, args.samples)

        def command(name: str, argv: list[str]) -> Callable[[], None]:
            def run() -> None:
                wall, used = timed(argv, env, work)
                seconds[name].append(wall)
                cpu[name].append(used)

            return run

        rounds = [command(name, argv) for name, argv in COMMANDS.items()]

        def evaluate() -> None:
            first, whole, used = evaluate_once(fake, work, samples, env)
            seconds[FIRST_REQUEST].append(first)
            seconds[EVALUATE].append(whole)
            cpu[EVALUATE].append(used)

        rounds.append(evaluate)

        def bare_client() -> None:
            first, _, used = first_request(fake, ["-c", BARE_CLIENT, fake.base_url], env, work)
            seconds[BARE_FIRST].append(first)
            cpu[BARE_FIRST].append(used)

        rounds.append(bare_client)
        for step in rounds:  # the warm-up: writes the bytecode caches, warms the disk cache
            step()
        for values in [*seconds.values(), *cpu.values()]:
            values.clear()
        for _ in range(args.runs):
            for step in rounds:
                step()
    seconds[ADDED] = [a - b for a, b in zip(seconds[FIRST_REQUEST], seconds[OPENAI], strict=True)]
    return seconds, cpu


def _ratio(value: float | None, to: float | None) -> float | None:
    return None if value is None or not to else round(value / to, 2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds, cpu = measure(args)
    baseline = statistics.median(seconds[BASELINE])
    openai = statistics.median(seconds[OPENAI])
    cpu_baseline = statistics.median(cpu[BASELINE])
    cpu_openai = statistics.median(cpu[OPENAI])
    runs = []
    for name, values in seconds.items():
        median = statistics.median(values)
        used = statistics.median(cpu[name]) if name in cpu else None
        runs.append(
            {
                "run": name,
                "median_seconds": round(median, 4),
                "min_seconds": round(min(values), 4),
                "max_seconds": round(max(values), 4),
                "ratio_to_python": round(median / baseline, 2),
                "ratio_to_openai": round(median / openai, 2),
                "median_cpu_seconds": None if used is None else round(used, 4),
                "cpu_ratio_to_python": _ratio(used, cpu_baseline),
                "cpu_ratio_to_openai": _ratio(used, cpu_openai),
                "seconds": [round(v, 4) for v in values],
                "cpu_seconds": [round(v, 4) for v in cpu.get(name, [])],
            }
        )
    settings = {"runs": args.runs, "samples": args.samples, "latency_ms": args.latency_ms}
    path = write_result("startup", {"settings": settings, "runs": runs}, args.out)
    columns = (
        "run", "median s", "min s", "max s", "x python -c pass", "x import openai",
        "cpu s", "cpu x python", "cpu x openai",
    )  # fmt: skip
    rows = [[r[key] if r[key] is not None else "-" for key in _COLUMNS] for r in runs]
    show(f"Start-up, medians of {args.runs} runs", columns, rows, path)
    return 0


_COLUMNS = (
    "run", "median_seconds", "min_seconds", "max_seconds", "ratio_to_python", "ratio_to_openai",
    "median_cpu_seconds", "cpu_ratio_to_python", "cpu_ratio_to_openai",
)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
