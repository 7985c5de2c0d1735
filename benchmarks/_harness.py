"""What the benchmarks share: the fake endpoint in a subprocess, settings, tables and JSON."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.table import Table

from ragjury.config import EvaluationOptions, GenerationOptions, Settings
from ragjury.logs import configure_logging

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"


class FakeEndpoint:
    """``benchmarks/fakeserver.py`` in a subprocess: ``with FakeEndpoint(latency_ms=200) as f``."""

    def __init__(
        self,
        *,
        latency_ms: float = 200.0,
        per_token_ms: float = 0.0,
        rate_429: float = 0.0,
        rate_500: float = 0.0,
        retry_after: float = 1.0,
        seed: int | None = 5,
        rpm: int | None = None,
        tpm: int | None = None,
        window: float = 60.0,
        reset_means: str = "full",
        batch_delay: float | None = None,
    ) -> None:
        self._argv = [
            sys.executable,
            str(BENCHMARKS / "fakeserver.py"),
            f"--latency-ms={latency_ms}",
            f"--per-token-ms={per_token_ms}",
            f"--rate-429={rate_429}",
            f"--rate-500={rate_500}",
            f"--retry-after={retry_after}",
            *([f"--seed={seed}"] if seed is not None else []),
            *([f"--rpm={rpm}"] if rpm is not None else []),
            *([f"--tpm={tpm}"] if tpm is not None else []),
            f"--window={window}",
            f"--reset-means={reset_means}",
            *([f"--batch-delay={batch_delay}"] if batch_delay is not None else []),
        ]
        self._process: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> FakeEndpoint:
        self._process = subprocess.Popen(
            self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.base_url = self._line().strip()
        if not self.base_url.startswith("http://"):
            self.__exit__(None, None, None)
            raise RuntimeError(f"the fake endpoint did not start: {self.base_url!r}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()  # end of input stops the server
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def pid(self) -> int:
        """The endpoint's process id (for its CPU time)."""
        assert self._process is not None
        return self._process.pid

    def stats(self) -> dict[str, Any]:
        """The server's counters: requests, statuses, tokens, delay slept, in-flight peak."""
        data: dict[str, Any] = json.loads(self._command("stats"))
        return data

    def reset(self) -> None:
        """Zero the counters (the first request's arrival too); the scripts stay."""
        self._command("reset")

    def outage(self, seconds: float) -> None:
        """Answer every chat request 503 for the next ``seconds``."""
        self._command(f"outage {seconds}")

    def _command(self, command: str) -> str:
        assert self._process is not None
        assert self._process.stdin is not None
        self._process.stdin.write(command + "\n")
        self._process.stdin.flush()
        return self._line()

    def _line(self) -> str:
        assert self._process is not None
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fake endpoint exited (code {self._process.poll()})")
        return line


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, float]:
    """What the server counted between two ``stats()`` calls (in-flight peak: the later one)."""
    kept = ("in_flight_max", "ok_seconds", "first_request_at")
    out = {k: v - before.get(k, 0) for k, v in after.items() if k not in kept}
    out.update({k: after.get(k, 0) for k in kept})
    return out


def bench_settings(base_url: str, db: Path, **overrides: Any) -> Settings:
    """Settings for a benchmark run: the fake endpoint, short backoff, whole documents."""
    values: dict[str, Any] = {
        "base_url": base_url,
        "api_key": "benchmark",
        "model": "fake-model",
        "db": db,
        "generate": GenerationOptions(whole_documents=True),
        "evaluate": EvaluationOptions(),
    }
    values.update(overrides)
    return Settings(**values)


def quiet() -> None:
    """ragjury's logs as a user's run has them by default: warnings only, on stderr."""
    configure_logging("warning")


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: a fast look")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON result")
    return parser


def machine() -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


def write_result(name: str, result: dict[str, Any], out: Path | None) -> Path:
    """Write ``result`` (plus the machine and the time) as JSON; return the path."""
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": name,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        **result,
    }
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def show(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], path: Path) -> None:
    """Print a table of the results and where the JSON went."""
    table = Table(title=title)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log file or a pipe: no need to wrap at 80
    console.print(table)
    console.print(f"JSON: {path}")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
