"""Join state for the agents that wait for several messages (the aggregators, the collector).

Their state lives in the store, keyed by job and item, and every change is atomic, so any
worker in any process can take any of their messages. The runtime tells them which item a
message belongs to through :data:`current_item`, as it tells the LLM client which step a
call belongs to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragjury.store.base import Joins


current_item: ContextVar[str] = ContextVar("ragjury_current_item")
"""The item (document or sample key) of the message being handled."""

HeldJoins = dict[tuple[str, str], dict[str, str]]
"""Join parts kept in memory, by (job, item)."""

_held: ContextVar[HeldJoins | None] = ContextVar("ragjury_held_joins", default=None)


@contextmanager
def joins_held() -> Iterator[HeldJoins]:
    """Inside, joins are made in memory, not in the store: for an item's first start, whose
    agents run where it starts (see ``Workers.dispatch``) and no other worker can hold a
    part of it yet. The caller stores what is held before it publishes anything of the item
    (a keywords-only sample ends inline and stores none)."""
    held: HeldJoins = {}
    token = _held.set(held)
    try:
        yield held
    finally:
        _held.reset(token)


class JoinState:
    """One job's join state in ``store``."""

    def __init__(self, store: Joins, job_id: str) -> None:
        self._store, self._job_id = store, job_id

    async def add(self, parts: Mapping[str, str], prefix: str) -> dict[str, str]:
        """Add ``parts`` to the current item's state; return its parts under ``prefix``."""
        held = _held.get()
        if held is None:
            return await self._store.join(self._job_id, current_item.get(), parts, prefix)
        state = held.setdefault((self._job_id, current_item.get()), {})
        for name, value in parts.items():  # as in the store: a part keeps its first value
            state.setdefault(name, value)
        return {name: value for name, value in state.items() if name.startswith(prefix)}
