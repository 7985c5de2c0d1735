"""What every agent is: the events it consumes, a role name, and ``handle``.

An agent never touches the bus. The runner reads deliveries, calls ``handle`` and publishes
the events it returns, each as a reply to the message that caused it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

from pydantic import BaseModel

from ragjury.errors import ConfigurationError, LLMError, LLMTransportError
from ragjury.schemas import BusEvent, Failure, kind_of
from ragjury.urls import redact_text

In = TypeVar("In", bound=BusEvent)
Out = TypeVar("Out", bound=BusEvent, covariant=True)


class Agent(Protocol[In, Out]):
    """An agent that consumes events of type ``In`` and emits events of type ``Out``.
    Read-only members, so that an agent's class-level ``consumes`` tuple conforms."""

    @property
    def role(self) -> str: ...

    @property
    def consumes(self) -> tuple[type[In], ...]: ...

    async def handle(self, event: In) -> Sequence[Out]: ...


class Step:
    """An agent of a job's pipeline, as the runner calls it: any event in, the events it
    emits out (an event the agent does not consume is refused, not handed to it), and, for
    an agent whose steps are cached (every LLM agent), what shapes its output besides its
    input (prompt version, model, options)."""

    def __init__(self, agent: Agent[In, Out], fingerprint: str | None = None) -> None:
        consumes = agent.consumes
        role = agent.role

        async def handle(event: BusEvent) -> Sequence[BusEvent]:
            if not isinstance(event, consumes):
                raise ConfigurationError(
                    f"agent {role} was sent a {event.kind} event; it consumes "
                    f"{', '.join(kind_of(t) for t in consumes)}"
                )
            return await agent.handle(event)

        self.role = role
        self.consumes: tuple[type[BaseModel], ...] = consumes
        self.handle: Callable[[BusEvent], Awaitable[Sequence[BusEvent]]] = handle
        self.fingerprint = fingerprint


def failure_from(stage: str, exc: LLMError) -> Failure:
    """The record of an LLM call that gave up, for the outputs and the store."""
    return Failure(
        stage=stage,
        attempts=exc.attempts,
        last_raw_output=exc.last_raw_output,
        message=redact_text(exc.message),
        transient=isinstance(exc, LLMTransportError) and (exc.unsent or not exc.permanent),
    )
