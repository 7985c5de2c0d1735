"""Join state for the agents that wait for several messages (the aggregators, the collector).

Their state lives in the store, keyed by job and item, and every change is atomic, so any
worker in any process can take any of their messages. The runtime tells them which item a
message belongs to through :data:`current_item`, as it tells the LLM client which step a
call belongs to.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from ragjury.store.base import Joins

M = TypeVar("M", bound=BaseModel)


current_item: ContextVar[str] = ContextVar("ragjury_current_item")
"""The item (document or sample key) of the message being handled."""

Part = str | BaseModel
"""A join part: its JSON text, or (held in memory, see :meth:`JoinState.add_models`) the
model itself, made JSON only if it has to be stored."""

HeldJoins = dict[tuple[str, str], dict[str, Part]]
"""Join parts kept in memory, by (job, item)."""

_held: ContextVar[HeldJoins | None] = ContextVar("ragjury_held_joins", default=None)

seen_joins: ContextVar[tuple[str, str, str] | None] = ContextVar("ragjury_seen_joins", default=None)
"""(job, item, parts as a JSON object) of the message being handled: its item's join state as
the bus read it when it put the message (PostgreSQL, for a message put leased with an
acknowledgement), or None. Parts are only ever added to a join state, each keeping its first
value, until the item ends: so what was seen is part of what is stored now, and a join that
these parts and the new ones complete is complete in the store too (see
:meth:`JoinState.add_models`)."""


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
        return {name: _text(value) for name, value in _hold(held, self._job_id, parts, prefix)}

    async def add_models(
        self,
        parts: Mapping[str, BaseModel],
        prefix: str,
        complete: Callable[[Mapping[str, Part]], bool] | None = None,
    ) -> dict[str, Part]:
        """:meth:`add` for parts that are models: held in memory they stay models (never
        made JSON when the item ends where it starts); in the store they are stored as JSON.
        A part returned as the model given is the one kept; any other is its JSON text
        (read it with :func:`part_model`).

        ``complete`` says whether a state is all the caller waits for, after which the item
        ends with the caller's step (and its join state with it). When the join state seen
        with the message (:data:`seen_joins`) and ``parts`` are complete, that state is
        returned and nothing is stored: the store's state holds the same parts, and the
        item's end, in the step's acknowledgement, drops it anyway (a statement saved on
        each item's last join). Else the parts are stored as without ``complete``."""
        held = _held.get()
        if held is not None:
            return dict(_hold(held, self._job_id, parts, prefix))
        if complete is not None:
            seen = _seen(self._job_id, parts, prefix)
            if seen is not None and complete(seen):
                return seen
        texts = {name: model.model_dump_json() for name, model in parts.items()}
        state: dict[str, Part] = {}
        stored = await self._store.join(self._job_id, current_item.get(), texts, prefix)
        for name, text in stored.items():  # a part stored as given is not parsed again
            state[name] = parts[name] if texts.get(name) == text else text
        return state


def _seen(job_id: str, parts: Mapping[str, BaseModel], prefix: str) -> dict[str, Part] | None:
    """The join state seen with the message (:data:`seen_joins`) with ``parts`` added (a
    name already there keeps its value, as in the store), under ``prefix``; None if none
    was seen for this item."""
    seen = seen_joins.get()
    if seen is None or seen[0] != job_id or seen[1] != current_item.get():
        return None
    state: dict[str, Part] = {
        name: value for name, value in json.loads(seen[2]).items() if name.startswith(prefix)
    }
    for name, model in parts.items():
        state.setdefault(name, model)
    return state


def part_model(value: Part, model: type[M]) -> M:
    """A join part as ``model``: itself if it is one, else parsed from its JSON."""
    if isinstance(value, model):
        return value
    if isinstance(value, str):
        return model.model_validate_json(value)
    raise TypeError(f"a join part of type {type(value).__name__} where {model.__name__} is due")


def stored_parts(parts: Mapping[str, Part]) -> dict[str, str]:
    """Held parts as the store keeps them (JSON text)."""
    return {name: _text(value) for name, value in parts.items()}


def _text(value: Part) -> str:
    return value if isinstance(value, str) else value.model_dump_json()


def _hold(
    held: HeldJoins, job_id: str, parts: Mapping[str, Part], prefix: str
) -> Iterator[tuple[str, Part]]:
    state = held.setdefault((job_id, current_item.get()), {})
    for name, value in parts.items():  # as in the store: a part keeps its first value
        state.setdefault(name, value)
    return ((name, value) for name, value in state.items() if name.startswith(prefix))
