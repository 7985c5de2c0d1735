"""What an operation of the SQL core asks its driver for: the statements, as plain values.

An operation (:mod:`ragjury.store._sql`) is a generator: it yields one of these, the driver
runs it on its database and sends the result back, and the operation goes on. It does no
I/O of its own, so SQLite runs it synchronously in its database thread and PostgreSQL with
asyncpg's awaits, and either runs it inside one transaction.

Every string a step binds is :func:`text`: both databases store the same text, whatever the
input held. The SQL is PostgreSQL's with ``?`` placeholders and a few words a driver renders
for its database (see ``render`` in each driver): ``now_epoch()`` (the database's clock in
seconds), ``x = ANY(?)`` with a list, ``LEAST``/``GREATEST``, ``FOR UPDATE [SKIP LOCKED]``
and ``seq`` (the column that orders rows as they were inserted).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ragjury.store.base import OutgoingMessage

T = TypeVar("T")
Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Fetch:
    """Rows of a query (a list of tuples)."""

    sql: str
    params: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Execute:
    """A statement; the number of rows it changed."""

    sql: str
    params: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class ExecuteMany:
    """One statement per row of parameters."""

    sql: str
    rows: Sequence[Row]


@dataclass(frozen=True, slots=True)
class Lock:
    """Hold ``name`` until the transaction ends: other transactions naming it wait. (On
    PostgreSQL an advisory lock; a SQLite write holds the database's one writer lock already.)"""

    name: str


@dataclass(frozen=True, slots=True)
class InsertItems:
    """Append a job's items: rows of (job_id, key, position, payload, created_at)."""

    rows: Sequence[Row]


@dataclass(frozen=True, slots=True)
class Publish:
    """Put messages on the durable bus (and wake the processes waiting for their groups)."""

    messages: Sequence[OutgoingMessage]


_SURROGATE = re.compile("[\ud800-\udfff]")


def text(value: str) -> str:
    """``value`` as both databases store it alike: NUL (which PostgreSQL's text refuses) and
    lone surrogates (which UTF-8 cannot hold) become U+FFFD, the replacement character."""
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = _SURROGATE.sub("\ufffd", value)
    return value


def clean(values: Sequence[Any]) -> tuple[Any, ...]:
    """Parameters with every string (and every string in a list) made :func:`text`."""
    return tuple(
        text(v) if isinstance(v, str) else [text(x) if isinstance(x, str) else x for x in v]
        if isinstance(v, list) else v
        for v in values
    )  # fmt: skip


Step = Fetch | Execute | ExecuteMany | Lock | InsertItems | Publish
Steps = Generator[Step, Any, T]
"""An operation: yields steps, receives each one's result, returns its own."""


def fetch(sql: str, *params: Any) -> Steps[list[Row]]:
    rows: list[Row] = yield Fetch(sql, clean(params))
    return rows


def fetch_one(sql: str, *params: Any) -> Steps[Row | None]:
    rows: list[Row] = yield Fetch(sql, clean(params))
    return rows[0] if rows else None


def execute(sql: str, *params: Any) -> Steps[int]:
    changed: int = yield Execute(sql, clean(params))
    return changed


def execute_many(sql: str, rows: Sequence[Row]) -> Steps[None]:
    if rows:
        yield ExecuteMany(sql, [clean(row) for row in rows])


def lock(name: str) -> Steps[None]:
    yield Lock(name)


def insert_items(rows: Sequence[Row]) -> Steps[None]:
    if rows:
        yield InsertItems([clean(row) for row in rows])


def publish(messages: Sequence[OutgoingMessage]) -> Steps[None]:
    if messages:
        yield Publish([_cleaned(m) for m in messages])


def _cleaned(message: OutgoingMessage) -> OutgoingMessage:
    fields = (message.group, message.kind, message.job_id, message.item_key, message.body)
    if all(text(f) is f for f in fields):
        return message
    group, kind, job_id, item_key, body = (text(f) for f in fields)
    return replace(message, group=group, kind=kind, job_id=job_id, item_key=item_key, body=body)
