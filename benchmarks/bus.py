"""Bus overhead: messages per second through each bus (publish, delivery to a worker,
acknowledgement), as a ratio to a bare anyio memory object stream passing the same messages.

The memory bus is what ``Jury.evaluate`` uses; the durable bus on SQLite is what every
command and ``serve`` use: each message is a row, claimed under a lease and deleted when
acknowledged, so any process on the database can take it.

    python benchmarks/bus.py
    python benchmarks/bus.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from ragjury.bus import Bus, DurableBus, MemoryBus, Message
from ragjury.schemas import DocumentSubmitted, Envelope
from ragjury.schemas.records import Document
from ragjury.store import SQLiteStore

from _harness import base_parser, quiet, show, write_result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=None, help="messages per run (20000)")
    parser.add_argument("--buffer", type=int, default=16, help="bus buffer (the default, 16)")
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs of each")
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = 2_000 if args.quick else 20_000
    return args


def envelope(job_id: str = "j") -> Envelope:
    document = Document(id="d", source="d.md", text="x" * 200)
    return Envelope(correlation_id="d", job_id=job_id, payload=DocumentSubmitted(document=document))


async def bare_stream(messages: int, buffer: int) -> float:
    """Seconds to pass ``messages`` through one bounded memory object stream."""
    item = envelope()
    send, receive = anyio.create_memory_object_stream[Envelope](buffer)
    received = 0

    async def consume() -> None:
        nonlocal received
        async with receive:
            async for _ in receive:
                received += 1

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        async with send:
            for _ in range(messages):
                await send.send(item)
    elapsed = time.perf_counter() - started
    assert received == messages
    return elapsed


async def through_bus(bus: Bus, messages: int, workers: int, job_id: str) -> float:
    """Seconds from the first publish until every delivery is acknowledged."""
    item = Message("sink", envelope(job_id))
    handled = 0
    done = anyio.Event()

    async def work() -> None:
        nonlocal handled
        async for delivery in bus.subscribe("sink").deliveries():
            await bus.ack(delivery)
            handled += 1
            if handled == messages:
                done.set()

    async with anyio.create_task_group() as tg:
        for _ in range(workers):
            tg.start_soon(work)
        started = time.perf_counter()
        for _ in range(messages):
            await bus.publish([item])
        await done.wait()
        elapsed = time.perf_counter() - started
        await bus.aclose()
        tg.cancel_scope.cancel()
    return elapsed


async def through_memory(messages: int, buffer: int, workers: int) -> float:
    return await through_bus(MemoryBus(buffer), messages, workers, "j")


async def through_durable(messages: int, buffer: int, workers: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        async with SQLiteStore(Path(folder) / "bus.db") as store:
            job = await store.submit("generate", {}, lambda: [("d", {})])
            bus = DurableBus(store, "bench", poll_interval=0.05)
            return await through_bus(bus, messages, workers, job.id)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    n, buffer = args.messages, args.buffer
    bare = min([await bare_stream(n, buffer) for _ in range(args.repeats)])
    timed = [("bare anyio memory object stream", bare)]
    for name, path in (("MemoryBus", through_memory), ("DurableBus on SQLite", through_durable)):
        for workers in (1, 4):
            seconds = min([await path(n, buffer, workers) for _ in range(args.repeats)])
            timed.append((f"{name}, {workers} worker(s)", seconds))
    return [
        {
            "path": path,
            "seconds": round(seconds, 4),
            "messages_per_second": round(n / seconds),
            "microseconds_per_message": round(1e6 * seconds / n, 2),
            "ratio_to_bare": round(bare / seconds, 3),
        }
        for path, seconds in timed
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    rows = anyio.run(main_async, args)
    result = {
        "settings": {
            "messages": args.messages,
            "buffer": args.buffer,
            "repeats": args.repeats,
            "quick": args.quick,
        },
        "paths": rows,
    }
    path = write_result("bus", result, args.out)
    columns = ["path", "messages/s", "µs/message", "ratio to bare"]
    table = [
        [r["path"], r["messages_per_second"], r["microseconds_per_message"], r["ratio_to_bare"]]
        for r in rows
    ]
    show(f"Bus overhead, {args.messages:,} messages, buffer {args.buffer}", columns, table, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
