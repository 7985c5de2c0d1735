"""The bus interface.

Semantics follow broker consumer groups: every group subscribed to a kind receives each
message of that kind once; the workers inside one group compete for it. A delivery must be
acknowledged once it is handled. The interface admits a Redis Streams implementation
(consumer groups, XACK, reclaiming what a dead worker held) without changing any agent:
agents never see the bus, only the runtime does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from ragjury.schemas import Envelope


@dataclass(frozen=True)
class Delivery:
    """One message handed to one consumer group."""

    envelope: Envelope
    group: str


class Subscription(Protocol):
    """A consumer group's view of one message kind. Iterate it from each worker."""

    def deliveries(self) -> AsyncIterator[Delivery]:
        """Yield deliveries until the bus closes. Safe to call from several workers."""
        ...


class Bus(Protocol):
    """Publish, subscribe by consumer group, acknowledge, close."""

    def subscribe(self, kind: str, group: str) -> Subscription:
        """Join ``group`` for messages of ``kind``. Subscribe before publishing."""
        ...

    async def publish(self, envelope: Envelope) -> None:
        """Deliver to every group of the envelope's kind. Blocks while a group is full."""
        ...

    async def ack(self, delivery: Delivery) -> None:
        """Mark a delivery handled."""
        ...

    @property
    def pending(self) -> int:
        """Deliveries published but not yet acknowledged, over all groups."""
        ...

    async def wait_idle(self) -> None:
        """Return once nothing is pending (every delivery acknowledged)."""
        ...

    async def wait_settled(self, correlation_id: str) -> None:
        """Return once no delivery of ``correlation_id`` (one document or sample) is pending."""
        ...

    async def aclose(self) -> None:
        """Stop delivering: workers' iterations end; further publishes raise BusError."""
        ...
