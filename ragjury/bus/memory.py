"""An in-process bus on bounded anyio memory object streams (``Jury.evaluate_one``, tests).

Each group owns one stream with a small buffer. Publishing sends to the group's stream, so a
full group blocks the publisher: that backpressure keeps memory flat. Workers of one group
share the receive end, so each message reaches exactly one of them. Nothing survives the
process, so there are no leases: ``renew`` does nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from itertools import count

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ragjury.bus.base import Delivery, Message
from ragjury.errors import BusError, ConfigurationError
from ragjury.schemas import Envelope


class _Group:
    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.send: MemoryObjectSendStream[Delivery]
        self.receive: MemoryObjectReceiveStream[Delivery]
        self.send, self.receive = anyio.create_memory_object_stream[Delivery](size)
        self.retries: deque[Delivery] = deque()


class _MemorySubscription:
    def __init__(self, group: _Group) -> None:
        self._group = group

    async def deliveries(self) -> AsyncIterator[Delivery]:
        receive = self._group.receive.clone()
        async with receive:
            while True:
                if self._group.retries:
                    yield self._group.retries.popleft()
                    continue
                try:
                    delivery = await receive.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    return
                yield delivery


class MemoryBus:
    """A bounded in-memory :class:`~ragjury.bus.base.Bus`."""

    def __init__(self, max_buffer_size: int = 16, *, max_deliveries: int = 5) -> None:
        if max_buffer_size < 1:
            raise ConfigurationError(
                f"max_buffer_size must be >= 1, got {max_buffer_size}. "
                "A bounded buffer is what gives the bus its backpressure."
            )
        self.max_buffer_size = max_buffer_size
        self.max_deliveries = max_deliveries
        self._groups: dict[str, _Group] = {}
        self._receipts = count(1)
        self._closed = False

    def _group(self, name: str) -> _Group:
        if self._closed:
            raise BusError(f"cannot use group {name!r}: the bus is closed")
        if name not in self._groups:
            self._groups[name] = _Group(name, self.max_buffer_size)
        return self._groups[name]

    def subscribe(self, group: str) -> _MemorySubscription:
        return _MemorySubscription(self._group(group))

    async def publish(self, messages: Sequence[Message]) -> None:
        for message in messages:
            group = self._group(message.group)
            delivery = Delivery(
                message.envelope, message.group, next(self._receipts), message.envelope.attempt
            )
            try:
                await group.send.send(delivery)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise BusError(
                    f"cannot publish {message.envelope.kind!r} to group {group.name!r}: "
                    "the bus closed while the message waited for room"
                ) from exc

    async def ack(self, delivery: Delivery, replies: Sequence[Message] = ()) -> None:
        await self.publish(replies)

    async def nack(self, delivery: Delivery, error: str) -> bool:
        if delivery.attempt >= self.max_deliveries:
            return True
        envelope: Envelope = delivery.envelope.model_copy(update={"attempt": delivery.attempt + 1})
        again = Delivery(envelope, delivery.group, next(self._receipts), delivery.attempt + 1)
        self._group(delivery.group).retries.append(again)
        return False

    async def renew(self) -> None:
        return None

    async def aclose(self) -> None:
        self._closed = True
        for group in self._groups.values():
            await group.send.aclose()
            await group.receive.aclose()
