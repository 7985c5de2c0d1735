"""A durable bus on a :class:`~ragjury.store.base.Mailbox`: messages are rows, claimed under
leases on the database's clock, so any process on the same database can take any message.

* A group's workers in this process share one claim: the worker that finds nothing buffered
  claims as many messages as there are idle workers, so one process never holds more than it
  can work.
* Publishing in this process wakes the receiving groups here at once. Messages from other
  processes wake them too when the store can say so (PostgreSQL's LISTEN/NOTIFY, see
  ``watch``): then an idle group polls from ``poll_interval`` up to ``watched_poll`` seconds
  apart, only for messages that become due without being published (retries, leases that
  ran out). Otherwise they are found by polling, from 50 ms up to ``poll_interval``. A
  poll (and the first look at the start) asks which groups have messages, one query for
  every group that polls at that moment, and claims only for those.
* ``ack`` stores the replies and deletes the message in one transaction, so a crash between
  the two cannot lose the replies nor publish them twice.
* A delivery that keeps failing (its handler raised, or its worker died) is taken out after
  ``max_deliveries`` and its item fails with the reason; it never jams the queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import anyio
import structlog

from ragjury.bus.base import Delivery, Message
from ragjury.errors import BusError
from ragjury.schemas import ENVELOPE_ADAPTER, Envelope
from ragjury.store.base import (
    Lease,
    Mailbox,
    OutgoingMessage,
    Queue,
    StepWrites,
    StoredMessage,
)

log = structlog.get_logger("ragjury.bus")

_FIRST_POLL = 0.05
Watch = Callable[[Callable[[str], None]], Awaitable[bool]]


@dataclass
class _Put:
    """One :meth:`DurableBus.publish` call's messages, items started and joins."""

    messages: list[Message]
    started: list[int]
    joins: list[tuple[str, str, Mapping[str, str]]]
    taken: bool = False
    """In a put under way or done (by whichever caller put it)."""
    error: Exception | None = None
    """Why it could not be put."""


def _outgoing(message: Message, leased: bool = False) -> OutgoingMessage:
    envelope = message.envelope
    return OutgoingMessage(
        group=message.group,
        kind=envelope.kind,
        job_id=envelope.job_id or "",
        item_key=envelope.correlation_id,
        body=message.body or envelope.model_dump_json(),
        leased=leased,
        step_key=message.step_key if leased else "",
        joins=message.joins and leased,
    )


async def _set_within(event: anyio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set, at most ``seconds``: whether it was set (not timed out).

    An idle worker waits like this for each message it is given. On asyncio a timer callback
    ends the wait where a cancel scope with a deadline would: the scope costs about twice as
    much, a few percent of a message on the SQLite bus with four workers (benchmarks/bus.py).
    A wait that times out leaves ``event`` set, as a wake would: the caller replaces it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another backend (trio)
        with anyio.move_on_after(seconds):
            await event.wait()
        return event.is_set()
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        event.set()

    timer = loop.call_later(seconds, expire)
    try:
        await event.wait()
    finally:
        timer.cancel()
    return not expired


class _DurableSubscription:
    def __init__(self, bus: DurableBus, group: str) -> None:
        self._bus = bus
        self.group = group
        self._buffer: deque[StoredMessage] = deque()
        self._claiming = anyio.Lock()
        self._idle = 0
        self.wake = anyio.Event()
        self.due = True
        """Whether a claim may find messages: set at the start, when messages are put for
        the group (not leased to this process) and when a poll's time is up. A worker that
        finds its buffer empty claims only then, else it waits: messages leased to this
        process come with a wake and no claim."""
        self.ask = True
        """Whether ``due`` was set by the start or a poll's time (not by a wake): then the
        bus is asked first whether messages wait (:meth:`DurableBus.claimable`), one query
        for every idle group, and the claim is made only if so."""

    @property
    def buffered(self) -> list[int]:
        return [m.id for m in self._buffer]

    @property
    def buffered_calls(self) -> list[int]:
        """The in-flight records opened for the buffered messages' calls."""
        return [m.call for m in self._buffer if m.call is not None]

    async def deliveries(self) -> AsyncIterator[Delivery]:
        bus = self._bus
        while not bus.closed:
            if not self._buffer:
                self._idle += 1
                try:
                    await self._refill()
                finally:
                    self._idle -= 1
                continue
            stored = self._buffer.popleft()
            try:
                # a message this process put leased to itself: the envelope it put, not
                # its JSON read back (the same envelope: every one round-trips unchanged)
                envelope = bus.envelopes.pop(stored.id, None)
                if envelope is None:
                    envelope = ENVELOPE_ADAPTER.validate_json(stored.body)
            except ValueError as exc:  # e.g. written by a newer ragjury: never handleable here
                reason = f"unreadable {self.group} message: {exc}"
                await bus.store.nack_message(stored.id, reason, max_attempts=1, retry_after=0)
                await bus.store.fail_item(stored.job_id, stored.item_key, reason)
                continue
            bus.held.add(stored.id)
            yield Delivery(
                envelope,
                self.group,
                stored.id,
                stored.attempts,
                stored.step,
                stored.step_key,
                stored.call,
                stored.joined,
            )

    def room(self) -> int:
        """Messages this process's workers of the group wait for now (beyond its buffer)."""
        return self._idle - len(self._buffer)

    def take(self, messages: Sequence[StoredMessage]) -> None:
        """Messages put leased to this process: its idle workers take them without a claim."""
        if messages:
            self._buffer.extend(messages)
            self.wake.set()

    async def _refill(self) -> None:
        bus = self._bus
        async with self._claiming:
            poll = await bus.first_poll()
            while not self._buffer and not bus.closed:
                if self.due and self.ask:
                    self.due = self.ask = False
                    found = await bus.claimable(self.group)
                    self.due = self.due or found  # (or woken meanwhile)
                if self.due:
                    self.due = False
                    wanted = max(1, self._idle)
                    claim = await bus.store.claim_messages(
                        bus.owner,
                        [self.group],
                        wanted,
                        lease_seconds=bus.lease_seconds,
                        max_attempts=bus.max_deliveries,
                        job_ids=bus.job_ids,
                    )
                    if claim.dead:
                        log.warning(
                            "messages_taken_out",
                            group=self.group,
                            count=claim.dead,
                            say=f"{claim.dead} message(s) of the {self.group} agent were taken "
                            "out after killing their worker each time; their items end failed",
                        )
                    if claim.messages:
                        self._buffer.extend(await bus.looked_up(claim.messages))
                        # there may be more only if it took all it asked for: the others
                        # come with a wake (put here, a notice, a poll's time up)
                        self.due = len(claim.messages) >= wanted
                        return
                woken = await _set_within(self.wake, poll)
                if self.wake.is_set():
                    self.wake = anyio.Event()
                if woken:
                    if self.due:
                        poll = await bus.first_poll()
                else:
                    self.due = self.ask = True
                    poll = min(poll * 2, await bus.longest_poll())


class Backing(Mailbox, Queue, Protocol):
    """What the durable bus needs of a store: its messages (claimed ones' steps looked up
    with them), and to fail the item of one that reached the delivery limit."""

    async def park_message(self, message_id: int, key: str) -> None:
        """Batch mode: keep the message until the batched request ``key`` has ended."""
        ...


class DurableBus:
    """A :class:`~ragjury.bus.base.Bus` whose messages live in ``store``."""

    def __init__(
        self,
        store: Backing,
        owner: str,
        *,
        lease_seconds: float = 30.0,
        max_deliveries: int = 5,
        poll_interval: float = 0.5,
        watched_poll: float = 5.0,
        job_ids: Sequence[str] | None = None,
        run_id: str = "",
    ) -> None:
        """``run_id``: the run whose books this process's LLM calls are on; the store may
        open a leased message's first call's record as it puts it (:class:`Lease`)."""
        self.store = store
        self.owner = owner
        self.run_id = run_id
        self.lease_seconds = lease_seconds
        self._lease = Lease(owner, lease_seconds, run_id)
        """What this bus puts leased to itself is leased by (a publish and an ack each need it)."""
        self.max_deliveries = max_deliveries
        self.poll_interval = poll_interval
        self.watched_poll = watched_poll
        self._watch: Watch | None = getattr(store, "watch", None)
        self.job_ids = list(job_ids) if job_ids is not None else None
        self.held: set[int] = set()
        self.envelopes: dict[int, Envelope] = {}
        """The envelopes of the messages this process put leased to itself, or claimed and
        read, and has not delivered yet, by message id."""
        self.step_key: Callable[[str, Envelope], Awaitable[str]] | None = None
        """The step key of a message's envelope to a group ('': not cached), when the
        workers set it: the steps of the messages a claim takes are then looked up in the
        step cache together, under a run with their first calls' in-flight records opened,
        in one statement a claim (as a put leased here does), not one a message as each is
        handled and one a call as each starts."""
        self.closed = False
        self._subscriptions: dict[str, _DurableSubscription] = {}
        self._asking: set[str] = set()
        self._answers: dict[str, bool] = {}
        self._looking = anyio.Lock()
        self._puts: list[_Put] = []
        """Publishes waiting to be put (see :meth:`publish`)."""
        self._putting = anyio.Lock(fast_acquire=True)

    def subscribe(self, group: str) -> _DurableSubscription:
        if self.closed:
            raise BusError(f"cannot subscribe {group!r}: the bus is closed")
        return self._subscriptions.setdefault(group, _DurableSubscription(self, group))

    async def _watched(self) -> bool:
        """Whether other processes' messages wake this one (restoring a lost watch)."""
        return self._watch is not None and await self._watch(self._woken)

    async def claimable(self, group: str) -> bool:
        """Whether messages of ``group`` wait to be claimed. The groups that ask while a
        look is out are answered together by the next one: at the start and at each poll,
        a process's idle groups cost one or two queries, not one claim each."""
        self._asking.add(group)
        async with self._looking:
            if group in self._asking:
                groups = sorted(self._asking)
                self._asking.clear()
                found = await self.store.claimable_groups(groups, self.job_ids)
                self._answers.update((g, g in found) for g in groups)
            return self._answers.pop(group, True)

    async def looked_up(self, claimed: Sequence[StoredMessage]) -> list[StoredMessage]:
        """``claimed`` with their steps' keys and cached outputs (see :attr:`step_key`), their
        envelopes read, and, under a run, the in-flight record of the first call of each whose
        step is not cached, opened with the look-up as a put leased here opens them (the call
        then makes no write of its own). A message whose envelope cannot be read, or whose
        key cannot be worked out, is left as it is: its delivery says why or asks the cache
        itself."""
        keyer = self.step_key
        if keyer is None:
            return list(claimed)
        keyed: list[tuple[StoredMessage, str]] = []
        for m in claimed:
            key = ""
            if not m.step_key and m.id not in self.envelopes:
                try:
                    envelope = ENVELOPE_ADAPTER.validate_json(m.body)
                    self.envelopes[m.id] = envelope
                    key = await keyer(m.group, envelope)
                except Exception:  # unreadable, or an unknown job: its delivery tells
                    key = ""
            keyed.append((m, key))
        wanted = [(m.group, key) for m, key in keyed if key]
        if not wanted:
            return [m for m, _ in keyed]
        found = iter(await self.store.claimed_steps(wanted, run_id=self.run_id))
        looked: list[StoredMessage] = []
        for m, key in keyed:
            if key:
                output, call = next(found)
                m = replace(m, step=output, step_key=key, call=call)
            looked.append(m)
        return looked

    async def first_poll(self) -> float:
        if self._watch is None:
            return _FIRST_POLL
        return self.poll_interval if await self._watched() else _FIRST_POLL

    async def longest_poll(self) -> float:
        return self.watched_poll if await self._watched() else self.poll_interval

    def _woken(self, group: str) -> None:
        """A store's notice: ``group`` has new messages (``*``: any group may)."""
        for name, subscription in self._subscriptions.items():
            if group in (name, "*"):
                subscription.due, subscription.ask = True, False
                subscription.wake.set()

    def _wake(self, rows: Sequence[OutgoingMessage]) -> None:
        """Messages were put: the groups of those not leased here have some to claim."""
        for group in {m.group for m in rows if not m.leased}:
            subscription = self._subscriptions.get(group)
            if subscription is not None:
                subscription.due, subscription.ask = True, False
                subscription.wake.set()

    def _leasing(self, messages: Sequence[Message]) -> list[OutgoingMessage]:
        """The messages as rows, those for which a worker of this process waits leased to it
        (it takes them from the put's answer: no claim, no wait for a notice)."""
        room: dict[str, int] = {}
        rows = []
        for message in messages:
            group = message.group
            if group not in room:
                subscription = self._subscriptions.get(group)
                room[group] = 0 if subscription is None else subscription.room()
            leased = room[group] > 0
            if leased:
                room[group] -= 1
            rows.append(_outgoing(message, leased))
        return rows

    async def _taken(
        self,
        stored: Sequence[StoredMessage],
        rows: Sequence[OutgoingMessage] = (),
        messages: Sequence[Message] = (),
    ) -> None:
        """Messages put leased to this process (``stored``), to its subscribed groups;
        ``rows``: what was put, made from ``messages``, whose envelopes the deliveries take
        (a row whose text the store had to clean is read back from its JSON)."""
        if not stored:
            return
        if self.closed:  # closed meanwhile: give them back at once, as aclose does
            with anyio.CancelScope(shield=True):
                calls = [m.call for m in stored if m.call is not None]
                await self.store.release_messages(self.owner, [m.id for m in stored], calls=calls)
            _given_back([], sorted(m.id for m in stored))
            return
        put = {row.body: m.envelope for row, m in zip(rows, messages, strict=True) if row.leased}
        for m in stored:
            envelope = put.get(m.body)
            if envelope is not None:
                self.envelopes[m.id] = envelope
        for group in {m.group for m in stored}:
            subscription = self._subscriptions.get(group)
            if subscription is not None:  # leased here only for a subscribed group
                subscription.take([m for m in stored if m.group == group])

    async def publish(
        self,
        messages: Sequence[Message],
        *,
        started: Sequence[int] = (),
        joins: Sequence[tuple[str, str, Mapping[str, str]]] = (),
    ) -> None:
        """Put ``messages`` on the bus; ``started``: the items whose first messages they are,
        marked running with them (:meth:`~ragjury.store.base.Queue.items_started`);
        ``joins``: (job, item, parts) stored in the items' join state with them."""
        if self.closed:
            raise BusError("cannot publish: the bus is closed")
        # A publish goes at once when no put is in flight, with no pass of the event loop
        # first (a yield there made the durable bus 1.7x slower a message on
        # benchmarks/bus.py with four workers: a lone publisher's write missed the commits
        # of the acknowledgements made with it). Those made while a put is in flight (the
        # rest of the items an intake claimed at once) go in the next put together: one
        # statement, one transaction. Each is put whole or not at all, as on its own; one
        # that fails together with others is tried again alone, so it fails alone.
        put = _Put(list(messages), list(started), list(joins))
        self._puts.append(put)
        try:
            async with self._putting:
                if not put.taken:
                    await self._put_waiting(put)
        except BaseException:
            if not put.taken:
                self._puts.remove(put)
            raise
        if put.error is not None:
            raise put.error

    async def _put_waiting(self, own: _Put) -> None:
        """Put every publish waiting (:meth:`publish`), ``own`` among them, under
        ``_putting``. A put that holds other callers' publishes is shielded from the
        cancellation of this one's caller: cut off once the store had committed it, they
        could not tell whether their messages were put (given back to be put again, they
        would be put twice). It ends as the store ends it, and the cancellation reaches this
        caller after it."""
        batch, self._puts = self._puts, []
        for put in batch:
            put.taken = True
        if len(batch) == 1:
            try:
                await self._put(batch)
            except Exception as exc:
                own.error = exc
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._put(batch)
            except Exception:
                for put in batch:  # each alone: only what cannot be put fails
                    try:
                        await self._put([put])
                    except Exception as alone:
                        put.error = alone

    async def _put(self, batch: Sequence[_Put]) -> None:
        messages = [m for put in batch for m in put.messages]
        rows = self._leasing(messages)
        stored = await self.store.put_messages(
            rows,
            lease=self._lease,
            started=[i for put in batch for i in put.started],
            joins=[j for put in batch for j in put.joins],
        )
        await self._taken(stored, rows, messages)
        self._wake(rows)

    async def ack(self, delivery: Delivery, replies: Sequence[Message] = ()) -> None:
        await self.ack_step(delivery, replies)

    async def ack_step(
        self, delivery: Delivery, replies: Sequence[Message] = (), writes: StepWrites | None = None
    ) -> bool | None:
        """Acknowledge ``delivery``, putting ``replies`` on the bus and storing ``writes`` in
        the same transaction; whether that ended the item (None: ``writes`` ends none)."""
        lease = self._lease
        rows = self._leasing(replies) if replies else []
        acked = await self.store.ack_message(delivery.receipt, rows, writes, lease=lease)
        await self._taken(acked.leased, rows, replies)
        self.held.discard(delivery.receipt)
        if rows:
            self._wake(rows)
        return acked.ended

    async def nack(self, delivery: Delivery, error: str) -> bool:
        retry_after = min(0.2 * 2 ** (delivery.attempt - 1), 10.0)
        dead = await self.store.nack_message(
            delivery.receipt, error, max_attempts=self.max_deliveries, retry_after=retry_after
        )
        self.held.discard(delivery.receipt)
        return dead

    async def park(self, delivery: Delivery, key: str) -> None:
        """Batch mode: the message waits in the store for the answer to request ``key``,
        holding no worker; the answer's arrival offers it again (its attempt not counted)."""
        await self.store.park_message(delivery.receipt, key)
        self.held.discard(delivery.receipt)

    async def renew(self) -> None:
        ids = sorted(self.held.union(*(s.buffered for s in self._subscriptions.values())))
        await self.store.renew_messages(self.owner, ids, self.lease_seconds)

    async def aclose(self) -> None:
        """Stop delivering; give back what is held or buffered, so others take it at once."""
        if self.closed:
            return
        self.closed = True
        for subscription in self._subscriptions.values():
            subscription.wake.set()
        unstarted = sorted(set().union(*(s.buffered for s in self._subscriptions.values())))
        calls = [c for s in self._subscriptions.values() for c in s.buffered_calls]
        with anyio.CancelScope(shield=True):
            # a message a worker took counts its attempt: a crash-looping one reaches the
            # delivery limit even when every process that takes it is stopped cleanly
            await self.store.release_messages(self.owner, sorted(self.held), started=True)
            await self.store.release_messages(self.owner, unstarted, calls=calls)
        if self.held or unstarted:
            _given_back(sorted(self.held), unstarted)
        self.held.clear()
        self.envelopes.clear()
        unwatch = getattr(self.store, "unwatch", None)
        if unwatch is not None:
            unwatch(self._woken)


def _given_back(started: list[int], unstarted: list[int]) -> None:
    """Log the messages a stopping process gave back: those a worker had started keep the
    attempt their claim counted, the others (claimed, never started) are given it back."""
    log.info(
        "messages_given_back",
        started=started,
        unstarted=unstarted,
        say=f"stopping: {len(started)} message(s) a worker had started given back with "
        f"their attempts counted, {len(unstarted)} never started given back uncounted",
    )
