"""The step cache: every successful LLM agent step's output, keyed by what shapes it.

The key is a hash of the agent's role, its fingerprint (prompt version, model, endpoint and
the settings that change its output) and the input event. A step whose output carries a
failure is not cached, so a re-run tries it again. A finished step is committed with its
outputs' publication (in the acknowledging transaction, on the durable bus) or before it,
never after: a published output's step is always cached.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, TypeAdapter

from ragjury._json import JSONData
from ragjury.schemas import BusEvent, ChunkFailed, Event, MetricScored, ReferenceWritten

if TYPE_CHECKING:
    from ragjury.config import Settings
    from ragjury.store.base import CallLog


@functools.cache
def _events() -> TypeAdapter[list[BusEvent]]:
    """The adapter of a cached step's output, built when a step is first replayed: building it
    at import would cost every ``ragjury --help`` (the agents import this module)."""
    return TypeAdapter(list[Event])


def carries_failure(event: BaseModel) -> bool:
    """True for an output that records a failure: such a step is tried again next time."""
    if isinstance(event, ChunkFailed):
        return True
    if isinstance(event, MetricScored):
        return event.result.outcome == "failed"
    if isinstance(event, ReferenceWritten):
        return event.judged.error is not None
    return getattr(event, "error", None) is not None


def fingerprint(*parts: JSONData) -> str:
    """A short stable hash of the things that change an agent's output."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def llm_fingerprint(settings: Settings) -> str:
    """The settings of the LLM that change what it answers. A local model (``--llm local``,
    ``--llm local:PATH``, or the bundled one taken when no endpoint is configured) adds
    which one, so its judgements are never taken for an endpoint's or another file's; an
    endpoint's fingerprint is what it always was."""
    parts: list[JSONData] = [
        settings.base_url,
        settings.model,
        settings.mode,
        settings.temperature,
        settings.logprobs,
        settings.max_retries,
    ]
    local = local_model(settings)
    if local is not None:
        parts.append(local)
    return fingerprint(*parts)


def local_model(settings: Settings) -> str | None:
    """Which local model the run uses, as ``choose_llm`` decides it (without loading
    anything): ``local:`` and the GGUF file's absolute path, ``local:bundled``, or None for
    an OpenAI-compatible endpoint."""
    spec = settings.llm
    if spec == "openai" or (spec is None and (settings.base_url or settings.api_key)):
        return None
    if spec is not None and spec.startswith("local:"):
        return "local:" + str(Path(spec.removeprefix("local:")).expanduser().resolve())
    return "local:bundled"


class StepCache:
    """Cached agent outputs in the store; ``enabled=False`` (``--no-cache``) bypasses it."""

    def __init__(self, store: CallLog, *, enabled: bool = True) -> None:
        self.store = store
        self.enabled = enabled
        self.hits = 0

    @staticmethod
    def key(role: str, agent_fingerprint: str, event: BaseModel) -> str:
        return StepCache.key_of(role, agent_fingerprint, event.model_dump_json())

    @staticmethod
    def key_of(role: str, agent_fingerprint: str, payload: str) -> str:
        """:meth:`key` of the event whose JSON (``model_dump_json()``) is ``payload``."""
        text = f"{role}\n{agent_fingerprint}\n{payload}"
        return hashlib.sha256(text.encode()).hexdigest()

    async def get(self, key: str) -> list[BusEvent] | None:
        if not self.enabled:
            return None
        output = await self.store.get_step(key)
        if output is None:
            return None
        return self.replay(output)

    def replay(self, output: str) -> list[BusEvent]:
        """A step's events from its cached output (found with the message, see
        :attr:`~ragjury.bus.base.Delivery.cached`)."""
        self.hits += 1
        return list(_events().validate_json(output))

    def row(self, key: str, role: str, events: Sequence[BaseModel]) -> tuple[str, str, str] | None:
        """The step's row for the store (key, agent, output), or None when it is not cached
        (the cache is off, or an output carries a failure)."""
        if not self.enabled or any(map(carries_failure, events)):
            return None
        return key, role, "[" + ",".join(event.model_dump_json() for event in events) + "]"

    async def put(self, key: str, role: str, events: Sequence[BaseModel]) -> None:
        row = self.row(key, role, events)
        if row is not None:
            await self.store.put_step(*row)
