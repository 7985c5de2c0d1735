"""MemoryBus: consumer-group delivery and backpressure."""

from __future__ import annotations

import anyio
import pytest

from ragjury.bus import Delivery, MemoryBus
from ragjury.errors import BusError, ConfigurationError
from ragjury.schemas import Document, DocumentSubmitted, Envelope

pytestmark = pytest.mark.anyio


def envelope(n: int) -> Envelope:
    doc = Document(id=f"d{n}", source=f"d{n}", text="x")
    return Envelope(correlation_id=doc.id, payload=DocumentSubmitted(document=doc))


async def test_each_group_receives_every_message_once_and_workers_compete() -> None:
    bus = MemoryBus(max_buffer_size=4)
    group_a = bus.subscribe("document_submitted", "a")
    group_b = bus.subscribe("document_submitted", "b")
    seen: dict[str, list[str]] = {"a": [], "b": []}

    async def worker(sub: object, name: str) -> None:
        async for delivery in sub.deliveries():  # type: ignore[attr-defined]  # Subscription
            seen[name].append(delivery.envelope.id)
            await bus.ack(delivery)

    sent = [envelope(n) for n in range(50)]
    async with anyio.create_task_group() as tg:
        for _ in range(3):  # three competing workers in group a
            tg.start_soon(worker, group_a, "a")
        tg.start_soon(worker, group_b, "b")
        for env in sent:
            await bus.publish(env)
        await bus.wait_idle()
        await bus.aclose()

    ids = [e.id for e in sent]
    assert sorted(seen["a"]) == sorted(ids)  # once each, across three workers
    assert seen["b"] == ids  # once each, in order, for the single worker


async def test_publisher_blocks_when_a_group_is_full() -> None:
    bus = MemoryBus(max_buffer_size=2)
    subscription = bus.subscribe("document_submitted", "slow")
    published = 0

    async def publisher() -> None:
        nonlocal published
        for n in range(5):
            await bus.publish(envelope(n))
            published += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(publisher)
        await anyio.wait_all_tasks_blocked()
        assert published == 2  # the buffer holds two; the third publish waits
        received: list[Delivery] = []
        deliveries = subscription.deliveries()
        received.append(await deliveries.__anext__())
        await anyio.wait_all_tasks_blocked()
        assert published == 3  # one taken out, one more let in
        tg.cancel_scope.cancel()


async def test_pending_counts_until_acknowledged() -> None:
    bus = MemoryBus()
    subscription = bus.subscribe("document_submitted", "g")
    await bus.publish(envelope(1))
    assert bus.pending == 1
    delivery = await subscription.deliveries().__anext__()
    assert bus.pending == 1
    await bus.ack(delivery)
    assert bus.pending == 0
    await bus.wait_idle()  # returns at once when idle


async def test_a_kind_nobody_subscribed_to_is_not_pending() -> None:
    bus = MemoryBus()
    await bus.publish(envelope(1))
    assert bus.pending == 0


async def test_publish_after_close_raises_bus_error() -> None:
    bus = MemoryBus()
    bus.subscribe("document_submitted", "g")
    await bus.aclose()
    with pytest.raises(BusError, match="closed"):
        await bus.publish(envelope(1))


def test_buffer_size_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="max_buffer_size must be >= 1, got 0"):
        MemoryBus(max_buffer_size=0)
