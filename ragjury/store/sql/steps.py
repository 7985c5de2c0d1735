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

from ragjury.store._values import Param, Params, Row
from ragjury.store.base import Acked, OutgoingMessage, StoredMessage

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fetch:
    """Rows of a query (a list of tuples)."""

    sql: str
    params: Params = ()


@dataclass(frozen=True, slots=True)
class Execute:
    """A statement; the number of rows it changed."""

    sql: str
    params: Params = ()


@dataclass(frozen=True, slots=True)
class ExecuteMany:
    """One statement per row of parameters."""

    sql: str
    rows: Sequence[Params]


@dataclass(frozen=True, slots=True)
class Lock:
    """Hold ``name`` until the transaction ends: other transactions naming it wait. (On
    PostgreSQL an advisory lock; a SQLite write holds the database's one writer lock already.)"""

    name: str


@dataclass(frozen=True, slots=True)
class InsertItems:
    """Append a job's items: rows of (job_id, key, position, payload, created_at, state,
    report, finished_at, transient_failures). An item is ``queued`` (report and finished_at
    None), or ``done`` already, ended as it was taken in (see
    :data:`~ragjury.store.base.ItemEnds`)."""

    rows: Sequence[Params]


@dataclass(frozen=True, slots=True)
class Publish:
    """Put messages on the durable bus (and wake the processes waiting for the groups of
    those not leased); mark ``started`` items running. The messages marked ``leased`` are
    put leased to ``owner`` for ``lease_seconds`` (their first delivery) and come back as
    :class:`~ragjury.store.base.StoredMessage`, each with its step's cached output (looked up
    by its ``step_key``, if any). PostgreSQL runs it as one statement; other drivers run
    :func:`~ragjury.store.sql.mailbox.publish_plainly`."""

    messages: Sequence[OutgoingMessage]
    owner: str = ""
    lease_seconds: float = 0.0
    started: Sequence[int] = ()
    joins: Sequence[Params] = ()
    """(job, item, parts as a JSON object) added to the items' join state first."""
    opens: Params | None = None
    """(run, created_at): a driver may open under this run the first call's in-flight record
    of each leased message whose step is not cached (:attr:`StoredMessage.call`); None: no
    run."""


@dataclass(frozen=True, slots=True)
class ClaimedSteps:
    """Claimed messages' steps, one (group, step key) each: each one's cached output (None:
    not cached) and, under a run (``opens``), the first call's in-flight record of each
    whose step is not cached, opened as :class:`Publish` opens a leased message's (None: no
    record), as rows of (output, call id) in their order. PostgreSQL runs it as one
    statement; other drivers run :func:`~ragjury.store.sql.mailbox.claimed_steps_plainly`."""

    messages: Sequence[Params]
    opens: Params | None = None
    """(run, created_at), as :attr:`Publish.opens`; None: no run, nothing opened."""


@dataclass(frozen=True, slots=True)
class ClaimItems:
    """Lease up to ``limit`` items to ``owner`` for ``lease_seconds``: first those whose
    lease ran out under another owner, then queued ones, oldest first, skipping rows other
    claims hold. Each comes back as (id, job_id, key, position, payload, attempts before
    this claim, taken): one already started ``max_attempts`` times is not taken (its caller
    fails it); the others are marked processing, started by ``owner``, an attempt counted.
    PostgreSQL runs it as one statement; other drivers run
    :func:`~ragjury.store.sql.queue.claim_items_plainly`."""

    owner: str
    limit: int
    lease_seconds: float
    job_ids: Sequence[str] | None
    max_attempts: int


@dataclass(frozen=True, slots=True)
class EndItem:
    """End an item that has not ended yet, in one step: set its ``state`` (``done`` or
    ``failed``) with its report, error and count of endpoint failures (None: kept), store
    its results, and drop its join state and its messages still on the bus; True if this
    step ended it. ``pairs`` are (id, outcome, question, source, record) and ``samples``
    (id, record, scored); the item's row id and position complete them.

    The check and the change are one update of the item's row, so of two processes ending
    one item exactly one stores its results. PostgreSQL runs it as one statement; other
    drivers run :func:`~ragjury.store.sql.items.end_item_plainly`."""

    job_id: str
    key: str
    state: str
    report: str | None
    error: str | None
    finished_at: float
    transient_failures: int | None
    pairs: Sequence[Params]
    samples: Sequence[Params]


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """Remove a delivered message and, if this removed it and its item has not ended, put
    ``replies`` on the bus (waking the processes waiting for their groups), atomically. A
    repeated acknowledgement, or one for an ended item, adds nothing. PostgreSQL runs it as
    one statement; other drivers run :func:`~ragjury.store.sql.mailbox.acknowledge_plainly`."""

    message_id: int
    job_id: str
    key: str
    replies: Sequence[OutgoingMessage]
    owner: str = ""
    lease_seconds: float = 0.0
    """The leased replies' owner and lease (see :class:`Publish`); they come back as
    :class:`~ragjury.store.base.StoredMessage`."""
    step: Params | None = None
    """The handled step's row of the step cache (key, agent, output, created_at), stored
    whether or not this acknowledgement removed the message."""
    calls: Sequence[Params] = ()
    """Closing rows of its LLM calls (see :data:`~ragjury.store.sql.calls.CLOSE_CALL`)."""
    end: EndItem | None = None
    """The message's item ended with its results, first (its handling made the item's
    terminal event): then the message goes with the item's other messages, and no reply is
    put."""
    unused_calls: Sequence[int] = ()
    """In-flight records opened ahead of calls never made, dropped."""
    opens: Params | None = None
    """(run, created_at): as :attr:`Publish.calls`, for the leased replies."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def text(value: str) -> str:
    """``value`` as both databases store it alike: NUL (which PostgreSQL's text refuses) and
    lone surrogates (which UTF-8 cannot hold) become U+FFFD, the replacement character."""
    if value.isascii():  # most text, checked without encoding it
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = _SURROGATE.sub("\ufffd", value)
    return value


def clean(values: Sequence[Param]) -> Params:
    """Parameters with every string (and every string in a list) made :func:`text`."""
    return tuple([_clean(v) for v in values])


def _clean(value: Param) -> Param:
    if isinstance(value, str):
        return text(value)
    if isinstance(value, list) and any(isinstance(x, str) for x in value):
        return [text(str(x)) for x in value]
    return value


Step = (
    Fetch
    | Execute
    | ExecuteMany
    | Lock
    | InsertItems
    | Publish
    | EndItem
    | Acknowledge
    | ClaimItems
    | ClaimedSteps
)
StepResult = list[Row] | int | bool | list[StoredMessage] | Acked | None
"""What a driver sends back for a step: rows (:class:`Fetch`, :class:`ClaimItems`,
:class:`ClaimedSteps`), a
count (:class:`Execute`), a flag (:class:`EndItem`), the leased messages (:class:`Publish`),
an :class:`Acked` (:class:`Acknowledge`) or nothing."""
# the result sent back depends on the step: each operation names the one it expects
Steps = Generator[Step, Any, T]
"""An operation: yields steps, receives each one's result, returns its own."""


def fetch(sql: str, *params: Param) -> Steps[list[Row]]:
    rows: list[Row] = yield Fetch(sql, clean(params))
    return rows


def fetch_one(sql: str, *params: Param) -> Steps[Row | None]:
    rows: list[Row] = yield Fetch(sql, clean(params))
    return rows[0] if rows else None


def execute(sql: str, *params: Param) -> Steps[int]:
    changed: int = yield Execute(sql, clean(params))
    return changed


def execute_many(sql: str, rows: Sequence[Params]) -> Steps[None]:
    if rows:
        yield ExecuteMany(sql, [clean(row) for row in rows])


def lock(name: str) -> Steps[None]:
    yield Lock(name)


def insert_items(rows: Sequence[Params]) -> Steps[None]:
    if rows:
        yield InsertItems([clean(row) for row in rows])


def publish(
    messages: Sequence[OutgoingMessage],
    owner: str = "",
    lease_seconds: float = 0.0,
    started: Sequence[int] = (),
    joins: Sequence[Params] = (),
    opens: Params | None = None,
) -> Steps[list[StoredMessage]]:
    if not messages:
        return []
    cleaned = [_cleaned(m) for m in messages]
    leased: list[StoredMessage] = yield Publish(
        cleaned,
        text(owner),
        lease_seconds,
        started,
        [clean(row) for row in joins],
        None if opens is None else clean(opens),
    )
    return leased


def end_item(step: EndItem) -> Steps[bool]:
    ended: bool = yield _cleaned_end(step)
    return ended


def _cleaned_end(step: EndItem) -> EndItem:
    report = None if step.report is None else text(step.report)
    error = None if step.error is None else text(step.error)
    return replace(
        step,
        job_id=text(step.job_id),
        key=text(step.key),
        report=report,
        error=error,
        pairs=[clean(row) for row in step.pairs],
        samples=[clean(row) for row in step.samples],
    )


def acknowledge(
    message_id: int,
    replies: Sequence[OutgoingMessage],
    *,
    owner: str = "",
    lease_seconds: float = 0.0,
    step: Params | None = None,
    calls: Sequence[Params] = (),
    end: EndItem | None = None,
    unused_calls: Sequence[int] = (),
    opens: Params | None = None,
) -> Steps[Acked]:
    cleaned = [_cleaned(m) for m in replies]
    job_id, key = (cleaned[0].job_id, cleaned[0].item_key) if cleaned else ("", "")
    acked: Acked = yield Acknowledge(
        message_id,
        job_id,
        key,
        cleaned,
        text(owner),
        lease_seconds,
        None if step is None else clean(step),
        [clean(row) for row in calls],
        None if end is None else _cleaned_end(end),
        list(unused_calls),
        None if opens is None else clean(opens),
    )
    return acked


def _cleaned(message: OutgoingMessage) -> OutgoingMessage:
    fields = (message.group, message.kind, message.job_id, message.item_key, message.body)
    if all(text(f) is f for f in fields):
        return message
    group, kind, job_id, item_key, body = (text(f) for f in fields)
    return replace(message, group=group, kind=kind, job_id=job_id, item_key=item_key, body=body)
