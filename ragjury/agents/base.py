"""What every agent is: the events it consumes, a role name, and ``handle``.

An agent never touches the bus. The runtime reads deliveries, calls ``handle`` and publishes
the events it returns, each as a reply to the message that caused it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ragjury.errors import LLMError, LLMTransportError
from ragjury.schemas import Failure
from ragjury.urls import redact_text


class Agent(Protocol):
    """Read-only members, so that an agent's narrower ``consumes`` tuple still conforms."""

    @property
    def role(self) -> str: ...

    @property
    def consumes(self) -> tuple[type[Any], ...]: ...

    async def handle(self, event: Any) -> Sequence[Any]: ...


@dataclass(frozen=True)
class Step:
    """An agent of a job's pipeline and, for an agent whose steps are cached (every LLM
    agent), what shapes its output besides its input (prompt version, model, options)."""

    agent: Agent
    fingerprint: str | None = None


def failure_from(stage: str, exc: LLMError) -> Failure:
    """The record of an LLM call that gave up, for the outputs and the store."""
    return Failure(
        stage=stage,
        attempts=exc.attempts,
        last_raw_output=exc.last_raw_output,
        message=redact_text(exc.message),
        transient=isinstance(exc, LLMTransportError) and not exc.permanent,
    )
