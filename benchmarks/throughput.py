"""Throughput of `generate` and `evaluate` against a slow endpoint, as a ratio to the limit.

The limit is what a perfect client could do with ``--concurrency`` requests always in flight:
the latency the endpoint spent on every request, summed, divided by the concurrency (for a
fixed latency: calls x latency / concurrency). A ratio of 1.0 means the endpoint was never
left idle below the limit. The same is measured for a bare loop of the openai client (no
ragjury), which is the ceiling the fake endpoint and the HTTP stack allow on this machine,
and again with a share of 429s (Retry-After) to show that nothing fails.

Each run's client CPU per request is printed beside two yardsticks from the same process: the
bare openai client as it comes (its default HTTP stack, httpx2 over httpcore2), and the bare
client on ``openai.DefaultAioHttpClient``, the aiohttp transport ragjury uses. The first is
what a user of the plain client pays; the second shows how much of ragjury's cost is its own
work rather than the transport's. Each kind of run is warmed up once, unmeasured, before any
clock starts (:func:`warm_up`): the figures are per request, not a process's start-up.

    python benchmarks/throughput.py            # about three minutes
    python benchmarks/throughput.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import openai

from ragjury.commands._run import recorded_run
from ragjury.pipelines.generation import generation_counts
from ragjury.runner import run_job, scored_samples, submit_documents, submit_samples
from ragjury.schemas import MetricName

import corpus
from _harness import FakeEndpoint, base_parser, bench_settings, delta, quiet, show, write_result

GENERATE_CALLS_PER_DOCUMENT = 4  # one generator call, three critics
EVALUATE_METRICS: tuple[MetricName, ...] = ("faithfulness", "correctness", "rubric")
EVALUATE_CALLS_PER_SAMPLE = 4  # splitter, one verdict batch, correctness, rubric


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--calls", type=int, default=None, help="LLM calls per run (1500; --quick 500)"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--rate-429", type=float, default=0.05, help="the fault run's 429 share")
    parser.add_argument("--retry-after", type=float, default=1.0, help="seconds, on each 429")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs of each fault-free measurement; the median is reported (3; --quick 1)",
    )
    args = parser.parse_args(argv)
    if args.calls is None:
        args.calls = 500 if args.quick else 1500
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    return args


Runner = Callable[[str, Path], Awaitable[dict[str, Any]]]


async def bare_openai(
    args: argparse.Namespace, base_url: str, calls: int, aiohttp: bool = False
) -> dict[str, Any]:
    """``calls`` chat requests with ``concurrency`` always in flight, openai client only: on
    its default HTTP client, or (``aiohttp``) on ``openai.DefaultAioHttpClient``."""
    left = calls

    async def worker(client: openai.AsyncOpenAI) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await client.chat.completions.create(
                model="fake-model",
                messages=[{"role": "user", "content": "Say ok."}],
                extra_headers={"x-ragjury-agent": "bare"},
            )

    async with (
        openai.AsyncOpenAI(
            base_url=base_url,
            api_key="b",
            max_retries=0,
            http_client=openai.DefaultAioHttpClient() if aiohttp else None,
        ) as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(args.concurrency):
            tg.start_soon(worker, client)
    return {"calls": calls, "failed": 0}


def workload(kind: str, args: argparse.Namespace) -> list[Any]:
    """The documents or samples of one run, built before its clock starts."""
    if kind == "generate":
        return corpus.documents(max(1, args.calls // GENERATE_CALLS_PER_DOCUMENT))
    return corpus.samples(max(1, args.calls // EVALUATE_CALLS_PER_SAMPLE), 3)


async def generate(
    args: argparse.Namespace, base_url: str, folder: Path, docs: list[Any]
) -> dict[str, Any]:
    """What `ragjury generate` runs: its setup, the batch as a job in SQLite, its workers."""
    settings = bench_settings(base_url, folder / "generate.db", concurrency=args.concurrency)
    async with recorded_run(settings, "generate") as run:
        job = await submit_documents(run.store, settings, docs)
        result = await run_job(job, settings=settings, store=run.store, llm=run.llm)
        counts = await generation_counts(run.store, job.id)
    failed = counts.failed + counts.chunks_failed + result.counts.failed
    return {
        "documents": len(docs),
        "calls": run.llm.usage.requests,
        "kept": counts.kept,
        "failed": failed,
        "complete": counts.kept == len(docs) and failed == 0,
    }


async def evaluate(
    args: argparse.Namespace, base_url: str, folder: Path, items: list[Any]
) -> dict[str, Any]:
    """What `ragjury evaluate` runs: its setup, the samples as a job in SQLite, its workers."""
    settings = bench_settings(base_url, folder / "evaluate.db", concurrency=args.concurrency)
    outcomes: dict[str, int] = {}
    async with recorded_run(settings, "evaluate") as run:
        job = await submit_samples(run.store, settings, items, EVALUATE_METRICS)
        await run_job(job, settings=settings, store=run.store, llm=run.llm)
        for scored in await scored_samples(run.store, job.id):
            for result in scored.metrics.values():
                outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1
    scored_count = outcomes.get("scored", 0)
    return {
        "samples": len(items),
        "calls": run.llm.usage.requests,
        "scored": scored_count,
        "failed": sum(outcomes.values()) - scored_count,
        "complete": scored_count == len(items) * len(EVALUATE_METRICS),
    }


async def measure(
    args: argparse.Namespace, name: str, rate_429: float, body: Runner
) -> dict[str, Any]:
    """Run ``body`` against a fresh fake endpoint; the ratio of its wall time to the limit."""
    with (
        FakeEndpoint(
            latency_ms=args.latency_ms, rate_429=rate_429, retry_after=args.retry_after
        ) as fake,
        tempfile.TemporaryDirectory() as tmp,
    ):
        before = fake.stats()
        cpu, main_cpu = time.process_time(), time.thread_time()
        started = time.perf_counter()
        outcome = await body(fake.base_url, Path(tmp))
        wall = time.perf_counter() - started
        cpu, main_cpu = time.process_time() - cpu, time.thread_time() - main_cpu
        served = delta(fake.stats(), before)
    limit = served["delay_seconds"] / args.concurrency
    requests = int(served.get("chat_requests", 0))
    return {
        "run": name,
        "rate_429": rate_429,
        **outcome,
        "requests_served": requests,
        "status_429": int(served.get("status_429", 0)),
        "in_flight_max": int(served["in_flight_max"]),
        "wall_seconds": round(wall, 3),
        "limit_seconds": round(limit, 3),
        "ratio": round(limit / wall, 3) if wall else 0.0,
        "client_cpu_ms_per_request": round(1000 * cpu / max(requests, 1), 2),
        # the CPU of threads other than the event loop's: the SQLite store's, DNS, to_thread
        "client_cpu_ms_per_request_off_loop": round(
            1000 * max(cpu - main_cpu, 0.0) / max(requests, 1), 2
        ),
        "server_cpu_ms_per_request": round(
            1000 * served.get("cpu_seconds", 0.0) / max(requests, 1), 2
        ),
    }


async def median_of(
    args: argparse.Namespace, name: str, rate_429: float, body: Runner, times: int
) -> dict[str, Any]:
    """``times`` fresh runs of one measurement: the median run, with every ratio beside it.

    A failure in any of the runs counts (``failed`` is their sum)."""
    runs = sorted(
        [await measure(args, name, rate_429, body) for _ in range(times)],
        key=lambda run: float(run["ratio"]),
    )
    median = dict(runs[len(runs) // 2])
    median["ratios"] = [run["ratio"] for run in runs]
    median["failed"] = sum(int(run["failed"]) for run in runs)
    return median


async def warm_up(args: argparse.Namespace) -> None:
    """One small unmeasured run of each kind before any clock starts. What each imports and
    builds at its first request (the openai client's default HTTP stack, about a hundred
    modules; instructor, jinja2 and the agents, about 350, loaded as ragjury's run begins)
    is the process's start-up, paid once (``benchmarks/startup.py`` measures it): counted in
    the first run of its kind only, it moved that run's CPU per request by the run's size
    and by the order of the runs (``generate`` comes first)."""
    with FakeEndpoint(latency_ms=0.0) as fake, tempfile.TemporaryDirectory() as tmp:
        await bare_openai(args, fake.base_url, 2)
        await bare_openai(args, fake.base_url, 2, aiohttp=True)
        await generate(args, fake.base_url, Path(tmp), corpus.documents(1))
        await evaluate(args, fake.base_url, Path(tmp), corpus.samples(1, 3))


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    docs, samples = workload("generate", args), workload("evaluate", args)
    await warm_up(args)

    async def bare(url: str, _: Path) -> dict[str, Any]:
        return await bare_openai(args, url, args.calls)

    async def bare_aio(url: str, _: Path) -> dict[str, Any]:
        return await bare_openai(args, url, args.calls, aiohttp=True)

    async def gen(url: str, folder: Path) -> dict[str, Any]:
        return await generate(args, url, folder, docs)

    async def ev(url: str, folder: Path) -> dict[str, Any]:
        return await evaluate(args, url, folder, samples)

    faults = f"{args.rate_429:.0%} 429s"
    runs = [
        await median_of(args, "openai client alone (the fake's ceiling)", 0.0, bare, args.repeat),
        await median_of(
            args,
            "openai client alone on aiohttp (ragjury's transport)",
            0.0,
            bare_aio,
            args.repeat,
        ),
        await median_of(args, "generate", 0.0, gen, args.repeat),
        await median_of(args, "evaluate", 0.0, ev, args.repeat),
        # one run each: these show that nothing fails, and each takes about a minute
        await median_of(args, f"generate, {faults}", args.rate_429, gen, 1),
        await median_of(args, f"evaluate, {faults}", args.rate_429, ev, 1),
    ]
    bare_cpu = float(runs[0]["client_cpu_ms_per_request"])
    aiohttp_cpu = float(runs[1]["client_cpu_ms_per_request"])
    for run in runs:  # each run's client CPU per request beside the bare client's, same run
        cpu = float(run["client_cpu_ms_per_request"])
        run["client_cpu_x_bare"] = round(cpu / bare_cpu, 2)
        run["client_cpu_x_bare_aiohttp"] = round(cpu / aiohttp_cpu, 2)
    return runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    runs = anyio.run(main_async, args)
    result = {
        "settings": {
            "concurrency": args.concurrency,
            "latency_ms": args.latency_ms,
            "calls": args.calls,
            "rate_429": args.rate_429,
            "retry_after": args.retry_after,
            "repeat": args.repeat,
            "quick": args.quick,
        },
        "target_ratio": 0.9,
        "runs": runs,
    }
    path = write_result("throughput", result, args.out)
    columns = [
        "run", "requests", "429s", "failed", "peak in flight", "wall s", "limit s",
        "ratio (median)", "all ratios", "client CPU ms/req", "x bare client",
        "x bare client on aiohttp", "of it off the loop", "fake CPU ms/req",
    ]  # fmt: skip
    rows = [
        [
            r["run"], r["requests_served"], r["status_429"], r["failed"], r["in_flight_max"],
            r["wall_seconds"], r["limit_seconds"], r["ratio"],
            " ".join(f"{ratio:.3f}" for ratio in r["ratios"]),
            r["client_cpu_ms_per_request"], r["client_cpu_x_bare"],
            r["client_cpu_x_bare_aiohttp"], r["client_cpu_ms_per_request_off_loop"],
            r["server_cpu_ms_per_request"],
        ]
        for r in runs
    ]  # fmt: skip
    title = (
        f"Throughput at concurrency {args.concurrency}, {args.latency_ms:.0f} ms per call "
        "(ratio = limit / wall; target >= 0.9)"
    )
    show(title, columns, rows, path)
    return 0 if all(r["failed"] == 0 for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
