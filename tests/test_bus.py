"""The bus contract on every bus: the in-memory one, and the durable one on a SQLite store
and on a PostgreSQL store. Tests for one kind of bus check what only it promises
(backpressure in memory; leases and other processes for a durable bus, on both stores).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import anyio
import pytest

from ragjury.bus import Bus, Delivery, DurableBus, MemoryBus, Message
from ragjury.errors import BusError, ConfigurationError
from ragjury.schemas import Document, DocumentSubmitted, Envelope
from ragjury.store import open_store

pytestmark = pytest.mark.anyio

MakeBus = Callable[..., Awaitable[Bus]]
KEYS = [f"d{i}" for i in range(20)]


def envelope(key: str, job_id: str, text: str = "x") -> Envelope:
    document = Document(id=key, source=key, text=text)
    return Envelope(correlation_id=key, job_id=job_id, payload=DocumentSubmitted(document=document))


@pytest.fixture(params=["sqlite", "postgresql"])
def durable_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a durable bus keeps its messages."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "bus.db")


@pytest.fixture(params=["memory", "durable", "durable-postgresql"])
async def make_bus(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[MakeBus, str]]:
    """(make a bus for a worker process, the job id messages belong to)."""
    made: list[Bus] = []
    if request.param == "memory":
        shared = MemoryBus(4, max_deliveries=3)

        async def memory(owner: str = "w", lease: float = 30.0) -> Bus:
            return shared

        yield memory, "job"
        await shared.aclose()
        return
    db = str(tmp_path / "bus.db")
    if request.param == "durable-postgresql":
        db = request.getfixturevalue("pg_url")
    async with open_store(db) as store:
        job = await store.submit("generate", {}, lambda: [(k, {}) for k in KEYS])

        async def durable(owner: str = "w", lease: float = 30.0) -> Bus:
            bus = DurableBus(
                store, owner, lease_seconds=lease, max_deliveries=3, poll_interval=0.05
            )
            made.append(bus)
            return bus

        yield durable, job.id
        for bus in made:
            await bus.aclose()


async def take(bus: Bus, group: str, n: int) -> list[Delivery]:
    """The next ``n`` deliveries of ``group`` (not acknowledged)."""
    got: list[Delivery] = []
    with anyio.fail_after(10):
        async for delivery in bus.subscribe(group).deliveries():
            got.append(delivery)
            if len(got) == n:
                break
    return got


async def test_each_group_gets_every_message_once_and_its_workers_compete(
    make_bus: tuple[MakeBus, str],
) -> None:
    factory, job_id = make_bus
    bus = await factory()
    handled: dict[str, list[str]] = {"a": [], "b": []}
    done = anyio.Event()

    async def worker(group: str) -> None:
        async for delivery in bus.subscribe(group).deliveries():
            handled[group].append(delivery.envelope.correlation_id)
            await bus.ack(delivery)
            if all(len(v) == 6 for v in handled.values()):
                done.set()

    async with anyio.create_task_group() as tg:
        for group in ("a", "a", "b"):  # two competing workers in group a
            tg.start_soon(worker, group)
        for key in KEYS[:6]:
            await bus.publish(
                [Message("a", envelope(key, job_id)), Message("b", envelope(key, job_id))]
            )
        with anyio.fail_after(10):
            await done.wait()
        tg.cancel_scope.cancel()
    assert sorted(handled["a"]) == sorted(handled["b"]) == KEYS[:6]


async def test_an_acknowledgement_publishes_the_replies(make_bus: tuple[MakeBus, str]) -> None:
    factory, job_id = make_bus
    bus = await factory()
    await bus.publish([Message("a", envelope("d0", job_id))])
    (first,) = await take(bus, "a", 1)
    reply = first.envelope.reply(first.envelope.payload)
    await bus.ack(first, [Message("b", reply)])
    (second,) = await take(bus, "b", 1)
    assert second.envelope == reply  # round-trips unchanged
    assert second.envelope.causation_id == first.envelope.id
    assert second.envelope.job_id == job_id


async def test_a_failed_delivery_comes_back_until_it_is_taken_out(
    make_bus: tuple[MakeBus, str],
) -> None:
    factory, job_id = make_bus
    bus = await factory()
    await bus.publish([Message("a", envelope("d0", job_id)), Message("a", envelope("d1", job_id))])
    attempts: list[tuple[str, int]] = []
    taken_out = []
    with anyio.fail_after(20):
        async for delivery in bus.subscribe("a").deliveries():
            key = delivery.envelope.correlation_id
            attempts.append((key, delivery.attempt))
            if key == "d1":
                await bus.ack(delivery)
            elif await bus.nack(delivery, "boom"):
                taken_out.append(key)
            if taken_out and ("d1", 1) in attempts:
                break
    assert [a for k, a in attempts if k == "d0"] == [1, 2, 3]  # max_deliveries = 3
    assert taken_out == ["d0"]


async def test_nothing_is_published_or_delivered_after_close(make_bus: tuple[MakeBus, str]) -> None:
    factory, job_id = make_bus
    bus = await factory()
    await bus.aclose()
    with pytest.raises(BusError):
        await bus.publish([Message("a", envelope("d0", job_id))])


async def test_a_memory_bus_blocks_the_publisher_when_a_group_is_full() -> None:
    bus = MemoryBus(max_buffer_size=2)
    bus.subscribe("a")
    with anyio.move_on_after(0.5) as scope:
        for key in KEYS[:3]:
            await bus.publish([Message("a", envelope(key, "j"))])
    assert scope.cancelled_caught  # the third waits for room: backpressure, flat memory
    await bus.aclose()


def test_a_memory_bus_buffer_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="max_buffer_size must be >= 1, got 0"):
        MemoryBus(0)


async def test_a_dead_workers_delivery_goes_to_another_process_after_its_lease(
    durable_db: str,
) -> None:
    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [("d0", {})])
        dying = DurableBus(store, "dying", lease_seconds=0.3, poll_interval=0.05)
        living = DurableBus(store, "living", lease_seconds=30, poll_interval=0.05)
        await dying.publish([Message("a", envelope("d0", job.id))])
        (held,) = await take(dying, "a", 1)
        # the dying worker never acknowledges, renews or closes: its lease runs out
        (again,) = await take(living, "a", 1)
        assert again.envelope == held.envelope
        assert again.attempt == 2
        await living.aclose()


async def test_renewing_keeps_a_slow_delivery_from_other_processes(durable_db: str) -> None:
    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [("d0", {})])
        slow = DurableBus(store, "slow", lease_seconds=0.3, poll_interval=0.05)
        other = DurableBus(store, "other", lease_seconds=30, poll_interval=0.05)
        await slow.publish([Message("a", envelope("d0", job.id))])
        (held,) = await take(slow, "a", 1)
        for _ in range(4):  # 1.2 s of work, renewing as the runtime does
            await slow.renew()
            with anyio.move_on_after(0.3):
                got = await take(other, "a", 1)
                raise AssertionError(f"another process took a renewed delivery: {got}")
        await slow.ack(held)
        await slow.aclose()
        await other.aclose()


async def test_closing_gives_back_what_was_held_for_others_at_once(durable_db: str) -> None:
    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [("d0", {})])
        stopping = DurableBus(store, "stopping", lease_seconds=60, poll_interval=0.05)
        await stopping.publish([Message("a", envelope("d0", job.id))])
        await take(stopping, "a", 1)
        await stopping.aclose()
        other = DurableBus(store, "other", lease_seconds=60, poll_interval=0.05)
        (again,) = await take(other, "a", 1)  # not after a 60 s lease
        # a worker had taken it, so its attempt stays spent: a message that kills every
        # worker that takes it reaches the delivery limit even when each stops cleanly
        assert again.attempt == 2
        await other.aclose()


async def test_an_unreadable_message_fails_its_item_and_the_rest_go_on(durable_db: str) -> None:
    from ragjury.store.base import OutgoingMessage

    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [("d0", {}), ("d1", {})])
        await store.put_messages(
            [OutgoingMessage("a", "k", job.id, "d0", '{"payload": {"kind": "from_the_future"}}')]
        )
        bus = DurableBus(store, "w", poll_interval=0.05)
        await bus.publish([Message("a", envelope("d1", job.id))])
        (delivery,) = await take(bus, "a", 1)
        assert delivery.envelope.correlation_id == "d1"
        [failed] = await store.failed_items(job.id)
        assert failed["item"] == "d0"
        assert "unreadable a message" in failed["error"]
        await bus.aclose()


async def test_claimed_messages_come_with_their_cached_steps_looked_up_together(
    durable_db: str,
) -> None:
    """A message no worker of this process waited for is claimed later; with the workers'
    step keys (``step_key``), the claim's messages come with their steps' keys and cached
    outputs, looked up together, and under a run each whose step is not cached with its
    first call's in-flight record, as a message put leased here does. A message whose key
    cannot be worked out, or that cannot be read, comes as it is."""
    from ragjury.store.base import OutgoingMessage

    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [(k, {}) for k in KEYS[:4]])
        await store.put_messages([OutgoingMessage("a", "k", job.id, "d3", '{"payload": 1}')])
        publisher = DurableBus(store, "p", poll_interval=0.05)  # no subscriber: not leased
        await publisher.publish([Message("a", envelope(k, job.id)) for k in KEYS[:3]])
        await store.put_step("key-d0", "a", '["cached"]')
        asked: list[tuple[str, str]] = []

        async def step_key(group: str, env: Envelope) -> str:
            asked.append((group, env.correlation_id))
            if env.correlation_id == "d2":
                raise ConfigurationError("no such job")  # e.g. a job this process cannot build
            return f"key-{env.correlation_id}"

        reads: list[list[tuple[str, str]]] = []
        claimed_steps = store.claimed_steps

        async def counted(
            messages: Sequence[tuple[str, str]], *, run_id: str = ""
        ) -> list[tuple[str | None, int | None]]:
            reads.append(list(messages))
            return await claimed_steps(messages, run_id=run_id)

        store.claimed_steps = counted  # type: ignore[method-assign]  # counts the store's look-ups
        bus = DurableBus(store, "w", poll_interval=0.05, run_id="r")
        bus.step_key = step_key
        subscription = bus.subscribe("a")
        deliveries: list[Delivery] = []

        async def worker() -> None:  # three workers waiting: the first claim takes d3, d0, d1
            async for delivery in subscription.deliveries():
                deliveries.append(delivery)
                return

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(worker)
        got = {d.envelope.correlation_id: d for d in deliveries}
        assert (got["d0"].step_key, got["d0"].cached) == ("key-d0", '["cached"]')
        assert (got["d1"].step_key, got["d1"].cached) == ("key-d1", None)
        assert (got["d2"].step_key, got["d2"].cached) == ("", None)  # the cache is asked later
        assert sorted(asked) == [("a", "d0"), ("a", "d1"), ("a", "d2")]
        assert reads == [[("a", "key-d0"), ("a", "key-d1")]]  # one look-up for the claim
        # the step not cached comes with its first call's in-flight record, opened with it
        assert got["d0"].call is None
        assert got["d1"].call is not None
        [failed] = await store.failed_items(job.id)  # the unreadable one, as before
        assert failed["item"] == "d3"
        await bus.aclose()
        await publisher.aclose()


async def test_publishes_made_together_are_put_together_and_one_that_fails_fails_alone(
    durable_db: str,
) -> None:
    """Publishes made at once (the items an intake claimed start together) go to the store
    in two puts: the first at once, the rest while it is in flight; one that cannot be put
    fails alone, and the others' messages and joins are
    put (each tried again on its own)."""
    from ragjury.store.base import Lease, OutgoingMessage, StoredMessage

    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [(k, {}) for k in KEYS[:5]])
        puts: list[int] = []
        put_messages = store.put_messages

        async def counted(
            messages: Sequence[OutgoingMessage],
            *,
            lease: Lease | None = None,
            started: Sequence[int] = (),
            joins: Sequence[tuple[str, str, Mapping[str, str]]] = (),
        ) -> list[StoredMessage]:
            puts.append(len(messages))
            return await put_messages(messages, lease=lease, started=started, joins=joins)

        store.put_messages = counted  # type: ignore[method-assign]  # counts the store's puts
        bus = DurableBus(store, "p", poll_interval=0.05)  # no subscriber: nothing leased
        errors: dict[str, Exception] = {}

        async def publish(key: str) -> None:
            parts = {"p": 1} if key == "d2" else {"p": key}  # a part must be text
            try:
                message = Message("a", envelope(key, job.id))
                await bus.publish([message], joins=[(job.id, key, parts)])  # type: ignore[list-item]
            except Exception as exc:
                errors[key] = exc

        async with anyio.create_task_group() as tg:
            for key in KEYS[:5]:
                tg.start_soon(publish, key)
        assert list(errors) == ["d2"]
        # the first at once (no put in flight), those made meanwhile together, and then,
        # since one of those cannot be put, each of them on its own
        assert puts == [1, 4, 1, 1, 1, 1]
        receiver = DurableBus(store, "w", poll_interval=0.05)
        got = await take(receiver, "a", 4)
        assert sorted(d.envelope.correlation_id for d in got) == ["d0", "d1", "d3", "d4"]
        assert await store.join(job.id, "d3", {}, "") == {"p": "d3"}
        assert await store.join(job.id, "d2", {}, "") == {}
        await receiver.aclose()
        await bus.aclose()


async def test_a_put_cancelled_after_it_committed_puts_no_other_publishers_messages_twice(
    durable_db: str,
) -> None:
    """A publish whose put carries other publishes too (made while a put was in flight) is
    cancelled once the store has committed that put, before it returns: the others'
    publishes return put, and every message is stored once (not given back to be put
    again)."""
    from ragjury.store.base import Lease, OutgoingMessage, StoredMessage

    async with open_store(durable_db) as store:
        job = await store.submit("generate", {}, lambda: [(k, {}) for k in KEYS[:4]])
        puts: list[list[str]] = []
        first_may_go, combined_committed, combined_may_return = (anyio.Event() for _ in "abc")
        put_messages = store.put_messages

        async def paused(
            messages: Sequence[OutgoingMessage],
            *,
            lease: Lease | None = None,
            started: Sequence[int] = (),
            joins: Sequence[tuple[str, str, Mapping[str, str]]] = (),
        ) -> list[StoredMessage]:
            n = len(puts)
            puts.append([m.item_key for m in messages])
            if n == 0:  # the first put stays in flight while the others publish
                await first_may_go.wait()
            stored = await put_messages(messages, lease=lease, started=started, joins=joins)
            if n == 1:  # committed; its caller is cancelled before this returns
                combined_committed.set()
                await combined_may_return.wait()
            return stored

        store.put_messages = paused  # type: ignore[method-assign]  # pauses the store's puts
        bus = DurableBus(store, "p", poll_interval=0.05)  # no subscriber: nothing leased
        published: list[str] = []

        async def publish(key: str, scope: anyio.CancelScope | None = None) -> None:
            with scope or anyio.CancelScope():
                await bus.publish([Message("a", envelope(key, job.id))])
                published.append(key)

        leader = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(publish, "d0")
            await anyio.wait_all_tasks_blocked()  # d0's put in flight
            tg.start_soon(publish, "d1", leader)  # the next put's, with d2's and d3's
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(publish, "d2")
            tg.start_soon(publish, "d3")
            await anyio.wait_all_tasks_blocked()
            first_may_go.set()
            await combined_committed.wait()
            leader.cancel()
            await anyio.wait_all_tasks_blocked()
            combined_may_return.set()
        assert puts[:2] == [["d0"], ["d1", "d2", "d3"]]
        assert puts[2:] == []  # nothing put again
        assert {"d0", "d2", "d3"} <= set(published)
        assert await store.waiting_messages() == {"a": 4}
        await bus.aclose()
