"""An in-process bus on bounded anyio memory object streams.

Each (kind, group) pair owns one stream with a small buffer. Publishing sends to the stream of
every group subscribed to the kind, so a full group blocks the publisher: that backpressure
keeps memory flat however many documents are queued. Workers of one group share the receive
end, so each message reaches exactly one of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ragjury.bus.base import Delivery
from ragjury.errors import BusError, ConfigurationError
from ragjury.schemas import Envelope


@dataclass
class _Group:
    name: str
    send: MemoryObjectSendStream[Envelope]
    receive: MemoryObjectReceiveStream[Envelope]


class _MemorySubscription:
    def __init__(self, group: _Group) -> None:
        self._group = group

    async def deliveries(self) -> AsyncIterator[Delivery]:
        receive = self._group.receive.clone()
        async with receive:
            async for envelope in receive:
                yield Delivery(envelope=envelope, group=self._group.name)


class MemoryBus:
    """A bounded in-memory :class:`~ragjury.bus.base.Bus`."""

    def __init__(self, max_buffer_size: int = 16) -> None:
        if max_buffer_size < 1:
            raise ConfigurationError(
                f"max_buffer_size must be >= 1, got {max_buffer_size}. "
                "A bounded buffer is what gives the bus its backpressure."
            )
        self.max_buffer_size = max_buffer_size
        self._groups: dict[str, dict[str, _Group]] = {}
        self._pending = 0
        self._by_correlation: dict[str, int] = {}
        self._settled: dict[str, anyio.Event] = {}
        self._idle = anyio.Event()
        self._idle.set()
        self._closed = False

    def subscribe(self, kind: str, group: str) -> _MemorySubscription:
        if self._closed:
            raise BusError(f"cannot subscribe {group!r} to {kind!r}: the bus is closed")
        groups = self._groups.setdefault(kind, {})
        if group not in groups:
            send, receive = anyio.create_memory_object_stream[Envelope](self.max_buffer_size)
            groups[group] = _Group(group, send, receive)
        return _MemorySubscription(groups[group])

    async def publish(self, envelope: Envelope) -> None:
        if self._closed:
            raise BusError(
                f"cannot publish {envelope.kind!r} (id {envelope.id}): the bus is closed"
            )
        correlation = envelope.correlation_id
        for group in list(self._groups.get(envelope.kind, {}).values()):
            self._add_pending(1, correlation)
            try:
                await group.send.send(envelope)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                self._add_pending(-1, correlation)
                raise BusError(
                    f"cannot publish {envelope.kind!r} to group {group.name!r}: "
                    "the bus closed while the message waited for room"
                ) from exc
            except BaseException:
                self._add_pending(-1, correlation)
                raise

    async def ack(self, delivery: Delivery) -> None:
        self._add_pending(-1, delivery.envelope.correlation_id)

    @property
    def pending(self) -> int:
        return self._pending

    async def wait_idle(self) -> None:
        while self._pending:
            await self._idle.wait()

    async def wait_settled(self, correlation_id: str) -> None:
        """Return once no delivery of ``correlation_id`` is pending. Workers publish what a
        message caused before acknowledging it, so this means its whole tree is handled."""
        while self._by_correlation.get(correlation_id):
            event = self._settled.setdefault(correlation_id, anyio.Event())
            await event.wait()

    async def aclose(self) -> None:
        self._closed = True
        for groups in self._groups.values():
            for group in groups.values():
                await group.send.aclose()
                await group.receive.aclose()

    def _add_pending(self, delta: int, correlation_id: str) -> None:
        left = self._by_correlation.get(correlation_id, 0) + delta
        if left:
            self._by_correlation[correlation_id] = left
        else:
            self._by_correlation.pop(correlation_id, None)
            settled = self._settled.pop(correlation_id, None)
            if settled is not None:
                settled.set()
        self._pending += delta
        if self._pending == 0:
            self._idle.set()
        elif self._idle.is_set():
            self._idle = anyio.Event()
