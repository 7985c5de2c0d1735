"""Join state for the agents that wait for several messages (the aggregators, the collector).

Their state lives in the store, keyed by job and item, and every change is atomic, so any
worker in any process can take any of their messages. The runtime tells them which item a
message belongs to through :data:`current_item`, as it tells the LLM client which step a
call belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar

from ragjury.store.base import Joins

current_item: ContextVar[str] = ContextVar("ragjury_current_item")
"""The item (document or sample key) of the message being handled."""


class JoinState:
    """One job's join state in ``store``."""

    def __init__(self, store: Joins, job_id: str) -> None:
        self._store, self._job_id = store, job_id

    async def add(self, parts: Mapping[str, str], prefix: str) -> dict[str, str]:
        """Add ``parts`` to the current item's state; return its parts under ``prefix``."""
        return await self._store.join(self._job_id, current_item.get(), parts, prefix)
