"""How close `evaluate` gets to an endpoint's real rate limit, and what it does when 429s are
noise or the endpoint goes down.

The fake endpoint enforces a provider's budgets (token buckets, 429 with Retry-After and the
``x-ratelimit-*`` headers). For a budget of ``r`` units a second holding ``C`` at most, a
perfect client gets N units through in (N - C) / r seconds at best (the bucket starts full),
so the ratio to the limit is that over the time the endpoint spent answering (from the
first successful request to the last answer, as the fake counts them). Runs:

* requests per ``--window`` (3 s) below what ``--concurrency`` would send;
* tokens per ``--window`` below it;
* OpenAI's minute bucket: ``--minute-rpm`` requests a minute, a burst of a whole minute;
* a per-second bucket, as Azure OpenAI enforces its limits over 1-10 s windows: ``--rps``
  a second with a burst of one second;
* headers that mislead: ``--misleading-rps`` (20) a second with a burst of one second (less
  than the first requests in flight), its ``x-ratelimit-reset-requests`` the time to the
  next request rather than the time until the budget is full (read as OpenAI's, it promises
  a refill far faster than the real one);
* two ``ragjury serve`` processes on one database against one request budget;
* 5% random 429s (Retry-After 1 s) and no budget: ratio to the concurrency limit, as in
  ``throughput.py`` (today's AIMD limiter read 0.17);
* an outage of ``--outage`` seconds mid-run, at two concurrencies: the requests that reached
  the endpoint while it was down.

``--runs minute,per-second`` runs only those (the names are in ``RUNS``).

    python benchmarks/ratelimit.py            # about four minutes
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from throughput import EVALUATE_CALLS_PER_SAMPLE, EVALUATE_METRICS, evaluate

from ragjury.runner import submit_samples
from ragjury.store import open_store

import corpus
from _harness import FakeEndpoint, base_parser, bench_settings, delta, quiet, show, write_result

_RUN_CLI = "import sys; from ragjury.cli import main; sys.exit(main(sys.argv[1:]))"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--calls", type=int, default=1500, help="LLM calls per budget run")
    parser.add_argument(
        "--rps", type=float, default=50.0, help="the request budget, per second (--window)"
    )
    parser.add_argument("--tps", type=float, default=20000.0, help="the token budget, per second")
    parser.add_argument(
        "--minute-rpm", type=int, default=900, help="the minute bucket's requests a minute"
    )
    parser.add_argument(
        "--misleading-rps",
        type=float,
        default=20.0,
        help="the budget whose reset header misleads, requests a second",
    )
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"which runs, comma-separated: {', '.join(RUNS)}"
    )
    parser.add_argument(
        "--window", type=float, default=3.0, help="seconds the fake's budgets are per (burst)"
    )
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the endpoint is down")
    parser.add_argument(
        "--outage-after", type=float, default=2.0, help="seconds into the run it goes down"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.calls = min(args.calls, 500)
        args.outage = min(args.outage, 5.0)
        args.minute_rpm = min(args.minute_rpm, 300)
    args.runs = [name.strip() for name in args.runs.split(",") if name.strip()]
    unknown = sorted(set(args.runs) - set(RUNS))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    return args


def samples(calls: int) -> list[Any]:
    return corpus.samples(max(1, calls // EVALUATE_CALLS_PER_SAMPLE), 3)


def budget_ratio(served: dict[str, Any], kind: str, per_second: float, window: float) -> float:
    """(units served - burst) / rate, over the seconds the endpoint spent answering."""
    units = (
        served.get("status_200", 0)
        if kind == "requests"
        else served.get("prompt_tokens", 0) + served.get("completion_tokens", 0)
    )
    best = max(units - per_second * window, 0.0) / per_second
    return round(best / served["ok_seconds"], 3) if served["ok_seconds"] else 0.0


def row(name: str, outcome: dict[str, Any], served: dict[str, Any], ratio: float) -> dict[str, Any]:
    requests = int(served.get("chat_requests", 0))
    throttled = int(served.get("status_429", 0))
    return {
        "run": name,
        **outcome,
        "requests_served": requests,
        "status_429": throttled,
        "share_429": round(throttled / max(requests, 1), 4),
        "outage_requests": int(served.get("outage_requests", 0)),
        "in_flight_max": int(served["in_flight_max"]),
        "ok_seconds": served["ok_seconds"],
        "ratio": ratio,
    }


async def budget_run(
    args: argparse.Namespace,
    kind: str,
    per_second: float,
    window: float,
    name: str,
    *,
    reset_means: str = "full",
) -> dict[str, Any]:
    """`evaluate` in this process against a request or token budget of ``per_second`` units a
    second that holds ``window`` seconds of them."""
    budget = round(per_second * window)
    limits = {"rpm": budget} if kind == "requests" else {"tpm": budget}
    items = samples(args.calls)
    with (
        FakeEndpoint(
            latency_ms=args.latency_ms, window=window, reset_means=reset_means, **limits
        ) as fake,
        tempfile.TemporaryDirectory() as tmp,
    ):
        before = fake.stats()
        outcome = await evaluate(args, fake.base_url, Path(tmp), items)
        served = delta(fake.stats(), before)
    return row(name, outcome, served, budget_ratio(served, kind, per_second, window))


def could_send(args: argparse.Namespace) -> str:
    return (
        f"concurrency {args.concurrency} could send "
        f"{args.concurrency / (args.latency_ms / 1000):g} req/s"
    )


async def window_run(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """A request or token budget over ``--window`` seconds (3: a burst of 3 s)."""
    rate = args.rps if kind == "requests" else args.tps
    name = f"{kind}: {rate:g}/s (burst {rate * args.window:g}), {could_send(args)}"
    return await budget_run(args, kind, rate, args.window, name)


async def minute_run(args: argparse.Namespace) -> dict[str, Any]:
    """OpenAI's minute bucket: ``--minute-rpm`` a minute, all of it at once at first."""
    name = f"minute bucket: {args.minute_rpm} requests a minute (burst {args.minute_rpm})"
    return await budget_run(args, "requests", args.minute_rpm / 60.0, 60.0, name)


async def per_second_run(args: argparse.Namespace) -> dict[str, Any]:
    """A per-second bucket (Azure-like): ``--rps`` a second, a burst of one second."""
    name = f"per-second bucket: {args.rps:g} requests a second (burst {args.rps:g})"
    return await budget_run(args, "requests", args.rps, 1.0, name)


async def misleading_run(args: argparse.Namespace) -> dict[str, Any]:
    """``--misleading-rps`` a second over one second, its reset header the time to the next
    request; fewer than the requests in flight at the start, so the budget runs out."""
    rate = args.misleading_rps
    name = (
        f"misleading headers: {rate:g} requests a second (burst {rate:g}), "
        "reset = time to the next request"
    )
    return await budget_run(args, "requests", rate, 1.0, name, reset_means="next_request")


async def two_daemons(args: argparse.Namespace) -> dict[str, Any]:
    """Two `ragjury serve` processes on one SQLite database, one request budget."""
    window = args.window
    items = samples(args.calls)
    with (
        FakeEndpoint(
            latency_ms=args.latency_ms, window=window, rpm=round(args.rps * window)
        ) as fake,
        tempfile.TemporaryDirectory() as tmp,
    ):
        db = Path(tmp) / "shared.db"
        settings = bench_settings(fake.base_url, db, concurrency=args.concurrency)
        async with open_store(settings.db) as store:
            job = await submit_samples(store, settings, items, EVALUATE_METRICS)
        before = fake.stats()
        argv = ["serve", "--db", str(db), "--base-url", fake.base_url, "--api-key", "b"]
        argv += ["--model", "fake-model", "--concurrency", str(args.concurrency)]
        daemons = [
            await anyio.open_process(
                [sys.executable, "-c", _RUN_CLI, *argv],
                stdout=subprocess.DEVNULL,
                stderr=(Path(tmp) / f"serve{n}.log").open("w"),
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
            )
            for n in range(2)
        ]
        try:
            async with open_store(settings.db) as store:
                # the daemons' progress is only in the database: poll it
                while await store.unfinished([job.id]):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
                counts = await store.counts([job.id])
        finally:
            for daemon in daemons:
                daemon.terminate()
            for daemon in daemons:
                await daemon.wait()
        served = delta(fake.stats(), before)
    outcome = {"samples": len(items), "failed": counts["failed"]}
    name = f"two serve processes, requests: {args.rps:g}/s (burst {args.rps * window:g})"
    return row(name, outcome, served, budget_ratio(served, "requests", args.rps, window))


async def noise_run(args: argparse.Namespace) -> dict[str, Any]:
    """5% random 429s, no budget: the ratio to the concurrency limit (as throughput.py)."""
    items = samples(args.calls)
    with (
        FakeEndpoint(latency_ms=args.latency_ms, rate_429=0.05, retry_after=1.0) as fake,
        tempfile.TemporaryDirectory() as tmp,
    ):
        before = fake.stats()
        started = time.perf_counter()
        outcome = await evaluate(args, fake.base_url, Path(tmp), items)
        wall = time.perf_counter() - started
        served = delta(fake.stats(), before)
    limit = served["delay_seconds"] / args.concurrency
    return row(
        "5% random 429s (Retry-After 1 s), no budget", outcome, served, round(limit / wall, 3)
    )


async def outage_run(args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    """An outage of ``args.outage`` seconds, ``args.outage_after`` seconds into the run."""
    items = samples(args.calls // 2)
    local = argparse.Namespace(**{**vars(args), "concurrency": concurrency})
    with (
        FakeEndpoint(latency_ms=args.latency_ms) as fake,
        tempfile.TemporaryDirectory() as tmp,
    ):
        before = fake.stats()
        result: dict[str, Any] = {}

        async def run() -> None:
            result.update(await evaluate(local, fake.base_url, Path(tmp), items))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await anyio.sleep(args.outage_after)
            fake.outage(args.outage)
        served = delta(fake.stats(), before)
    name = f"endpoint down {args.outage:g} s, concurrency {concurrency}"
    return row(name, result, served, 0.0)


async def outage_runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [await outage_run(args, 8), await outage_run(args, args.concurrency)]


Run = Callable[[argparse.Namespace], Awaitable[dict[str, Any]]]


async def one(run: Run, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [await run(args)]


RUNS: dict[str, Callable[[argparse.Namespace], Awaitable[list[dict[str, Any]]]]] = {
    "requests": functools.partial(one, functools.partial(window_run, kind="requests")),
    "tokens": functools.partial(one, functools.partial(window_run, kind="tokens")),
    "minute": functools.partial(one, minute_run),
    "per-second": functools.partial(one, per_second_run),
    "misleading": functools.partial(one, misleading_run),
    "two-serve": functools.partial(one, two_daemons),
    "noise": functools.partial(one, noise_run),
    "outage": outage_runs,
}


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in args.runs:
        rows += await RUNS[name](args)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    runs = anyio.run(main_async, args)
    result = {
        "settings": {
            k: getattr(args, k)
            for k in (
                "concurrency",
                "latency_ms",
                "calls",
                "rps",
                "tps",
                "window",
                "minute_rpm",
                "misleading_rps",
                "outage",
                "runs",
            )
        },
        "targets": {
            "budget_ratio": 0.9,
            "share_429": 0.02,
            "misleading_share_429": 0.1,
            "misleading_failed": 0,
            "noise_ratio": 0.7,
        },
        "runs": runs,
    }
    path = write_result("ratelimit", result, args.out)
    columns = [
        "run", "requests", "429s", "429 share", "failed", "during outage", "peak in flight",
        "ratio",
    ]  # fmt: skip
    rows = [
        [
            r["run"], r["requests_served"], r["status_429"], r["share_429"], r["failed"],
            r["outage_requests"], r["in_flight_max"], r["ratio"],
        ]
        for r in runs
    ]  # fmt: skip
    show("Rate limits, noise and outages (ratio: to the endpoint's limit)", columns, rows, path)
    return 0 if all(r["failed"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
