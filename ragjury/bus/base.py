"""The bus contract: what every implementation honours, in one process or across many.

* ``publish`` puts messages on the bus, each addressed to one consumer group (an agent role);
  which groups receive an event is the pipeline's routing, not the bus's.
* ``subscribe(group)`` is a group's view; the workers of a group compete for its deliveries,
  from one process or from several.
* A :class:`Delivery` carries a receipt. ``ack(delivery, replies)`` publishes what handling it
  caused and acknowledges it (in one transaction where the bus can); it is called only after
  the handler's outputs are stored. ``nack`` gives it back after a failure: it is offered
  again, until it has been delivered ``max_deliveries`` times; then it is taken out and
  ``nack`` returns True (the caller fails its item).
* Durable buses lease each delivery; ``renew`` extends the leases of every delivery this bus
  object holds (the runtime calls it while handlers work). A worker that dies leaves its
  deliveries to come back when their leases run out.
* ``aclose`` stops delivering and gives back what was held but not handled.

Nothing above the bus relies on one process's memory: no counters of pending messages, no
waiting for a bus to be idle. An item is done when its pipeline's terminal event is stored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from ragjury.schemas import Envelope


@dataclass(frozen=True)
class Message:
    """An envelope addressed to one consumer group."""

    group: str
    envelope: Envelope
    step_key: str = ""
    """Its step's key in the step cache ('': none): a durable bus that gives the message
    to a worker of its own process looks the step up as it puts the message."""
    body: str = ""
    """The envelope as JSON when the sender has written it already ('': a bus that stores
    messages writes it)."""
    joins: bool = False
    """Its step may complete its item's join (an evaluation's sample): a durable bus that
    puts it leased to a worker of its own process may read the item's join state with it."""


@dataclass(frozen=True)
class Delivery:
    """One message handed to one worker of its group."""

    envelope: Envelope
    group: str
    receipt: int
    """What the bus needs to acknowledge it (a row id, a stream entry id, ...)."""
    attempt: int = 1
    """1 the first time it is delivered; more when a worker died or failed on it."""
    cached: str | None = None
    """Its step's output in the step cache, when the bus looked it up (``step_key``)."""
    step_key: str = ""
    """The step key the bus looked ``cached`` up by ('': it did not, ask the cache)."""
    call: int | None = None
    """The in-flight record the bus opened for its step's first LLM call, if it did: the
    call takes it (:data:`ragjury.llm.client.opened_call`)."""
    joined: str | None = None
    """Its item's join state (a JSON object of parts) as the bus read it when the message
    was put, if it did (:data:`ragjury.agents.joins.seen_joins`)."""


class Subscription(Protocol):
    """A consumer group's view of the bus. Iterate it from each worker."""

    def deliveries(self) -> AsyncIterator[Delivery]:
        """Yield deliveries until the bus closes. Safe to call from several workers."""
        ...


class Bus(Protocol):
    """Publish, subscribe by consumer group, acknowledge with replies, renew leases, close."""

    def subscribe(self, group: str) -> Subscription: ...

    async def publish(self, messages: Sequence[Message]) -> None: ...

    async def ack(self, delivery: Delivery, replies: Sequence[Message] = ()) -> None: ...

    async def nack(self, delivery: Delivery, error: str) -> bool: ...

    async def renew(self) -> None: ...

    async def aclose(self) -> None: ...
