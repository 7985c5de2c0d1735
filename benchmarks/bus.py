"""Bus overhead: messages per second through the runtime and the MemoryBus, with an agent
that does no I/O, as a ratio to a bare anyio memory object stream passing the same messages.

The runtime path is everything a message costs in ragjury besides the agent's own work:
publish to the group's bounded stream, a worker's delivery, the step context and log call,
the acknowledgement and the idle bookkeeping. The bare path is one sender and one receiver on
a memory object stream with the same buffer size.

    python benchmarks/bus.py
    python benchmarks/bus.py --quick
"""

from __future__ import annotations

import argparse
import time
from typing import Any, ClassVar

import anyio

from ragjury.bus import MemoryBus
from ragjury.runtime import AgentSpec, Runtime
from ragjury.schemas import DocumentSubmitted, Envelope
from ragjury.schemas.records import Document

from _harness import base_parser, quiet, show, write_result


class Sink:
    """An agent that does nothing: it counts what it is handed."""

    role: ClassVar[str] = "sink"
    consumes: ClassVar[tuple[type[Any], ...]] = (DocumentSubmitted,)

    def __init__(self) -> None:
        self.handled = 0

    async def handle(self, event: Any) -> list[Any]:
        self.handled += 1
        return []


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=None, help="messages per run (100000)")
    parser.add_argument("--buffer", type=int, default=16, help="bus buffer (the default, 16)")
    parser.add_argument("--repeats", type=int, default=3, help="best of N runs of each")
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = 20_000 if args.quick else 100_000
    return args


def envelope() -> Envelope:
    document = Document(id="d", source="d.md", text="x" * 200)
    return Envelope(correlation_id="d", payload=DocumentSubmitted(document=document))


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


async def through_runtime(messages: int, buffer: int, workers: int) -> float:
    """Seconds from the first publish until every delivery is acknowledged."""
    item = envelope()
    bus = MemoryBus(buffer)
    sink = Sink()
    runtime = Runtime(bus, [AgentSpec(sink, workers)])
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        started = time.perf_counter()
        for _ in range(messages):
            await bus.publish(item)
        await bus.wait_idle()
        elapsed = time.perf_counter() - started
        await bus.aclose()
        tg.cancel_scope.cancel()
    assert sink.handled == messages
    return elapsed


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    n, buffer = args.messages, args.buffer
    bare = min([await bare_stream(n, buffer) for _ in range(args.repeats)])
    timed = [("bare anyio memory object stream", bare)]
    for workers in (1, 4):
        seconds = min([await through_runtime(n, buffer, workers) for _ in range(args.repeats)])
        timed.append((f"Runtime + MemoryBus, {workers} worker(s)", seconds))
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
