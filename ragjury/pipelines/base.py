"""What a pipeline is: a job's agents built from its stored options, the routes between them,
the first events of an item, the terminal event that completes one, and how an ended item's
results are stored.

The runtime knows nothing of generation or evaluation: it asks the job's pipeline which
agent handles a message, where each output goes, and what to store when an item ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel

from ragjury._json import JSONObject
from ragjury.agents.base import Step as Step
from ragjury.errors import ConfigurationError
from ragjury.schemas import BusEvent, Failure, kind_of
from ragjury.store.base import Item, ItemResults, JobKind


class Pipeline(Protocol):
    """A job's pipeline. One class per job kind, registered in :mod:`ragjury.pipelines`."""

    kind: ClassVar[JobKind]

    @classmethod
    def known_roles(cls) -> tuple[str, ...]:
        """Every agent role a job of this kind may have, in pipeline order."""
        ...

    @classmethod
    def llm_roles(cls) -> frozenset[str]:
        """The roles that call the LLM (one worker per unit of --concurrency)."""
        ...

    terminal: ClassVar[type[BaseModel]]
    """The event that completes an item; storing it is what makes the item done."""

    @property
    def steps(self) -> Mapping[str, Step]:
        """Role -> its agent (and cache fingerprint)."""
        ...

    @property
    def routes(self) -> Mapping[str, tuple[str, ...]]:
        """Event kind -> the roles that receive it."""
        ...

    async def first_events(self, item: Item) -> list[BusEvent]:
        """What starts an item (may itself be the terminal event, e.g. a failed target)."""
        ...

    def results(self, terminal: Any) -> ItemResults:
        """What the store keeps of an ended item."""
        ...

    def failed(self, item_key: str, payload: JSONObject | None, reason: str) -> ItemResults | None:
        """Records to keep for an item that failed as a whole (None: just the reason)."""
        ...

    def public(self, terminal: Any) -> list[BusEvent]:
        """The events an application sees for an ended item (``Jury.events``)."""
        ...


class Steps:
    """A pipeline's agents and the routes between them (what each agent consumes)."""

    def __init__(self, steps: Mapping[str, Step]) -> None:
        self._steps = dict(steps)
        self._routes = routes_of(self._steps)

    @property
    def steps(self) -> Mapping[str, Step]:
        return self._steps

    @property
    def routes(self) -> Mapping[str, tuple[str, ...]]:
        return self._routes


def routes_of(steps: Mapping[str, Step]) -> dict[str, tuple[str, ...]]:
    """Event kind -> roles, from what each agent consumes."""
    routes: dict[str, list[str]] = {}
    for role, step in steps.items():
        for event_type in step.consumes:
            routes.setdefault(kind_of(event_type), []).append(role)
    return {kind: tuple(roles) for kind, roles in routes.items()}


def check_workers(workers: Mapping[str, int], known: Iterable[str]) -> None:
    """``--workers`` may only name agents that exist."""
    unknown = sorted(set(workers) - set(known))
    if unknown:
        raise ConfigurationError(
            f"--workers names unknown agent(s) {', '.join(unknown)}; "
            f"known agents: {', '.join(sorted(known))}"
        )
    for role, n in workers.items():
        if n < 1:
            raise ConfigurationError(f"workers for {role} must be >= 1, got {n}")


_SCALARS = (str, int, float, type(None))


def transient_failures(events: Sequence[Any]) -> int:
    """How many :class:`Failure` records with ``transient`` set the events carry."""
    count, stack = 0, list(events)
    while stack:
        value = stack.pop()
        if isinstance(value, _SCALARS):  # most of what a result holds: its text
            continue
        # containers before models: a check against a model class runs pydantic's own
        # isinstance hook in Python, about ten times the cost of a built-in type's
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, Failure):
            count += value.transient
        elif isinstance(value, BaseModel):  # its fields' values, as they are stored
            stack.extend(value.__dict__.values())
    return count
