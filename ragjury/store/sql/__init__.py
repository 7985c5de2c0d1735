"""The one SQL core: every store operation written once, for SQLite and PostgreSQL alike.

An operation is a generator of :mod:`~ragjury.store.sql.steps`: it yields the statements it
needs and receives their results, doing no I/O itself. A driver runs it inside one
transaction: :class:`~ragjury.store.sqlite.SQLiteStore` synchronously in its database thread,
:class:`~ragjury.store.postgres.PostgresStore` with asyncpg's awaits (and again, whole, after
a lost connection). The drivers differ only in how they connect, run a step and render the
core's SQL for their database.

One module per role a caller depends on (the protocols of :mod:`ragjury.store.base`):
``queue`` (jobs and items), ``mailbox`` (the durable bus), ``joins`` (aggregators' join
state, the deduplicator), ``results``, ``calls`` (runs, LLM calls, the step cache, rate
buckets), ``workers`` (processes, status, pruning), ``labels`` (people's verdicts from a
review) and ``batches`` (batch mode's requests, batches and parked messages); ``items``
holds the steps several of them take on one item. Claims take rows with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite's writer lock serialises them), and what
reads then writes one item's state takes the item's lock first. Leases and "now" are on the
database's clock.
"""

from __future__ import annotations

from ragjury.store.sql.batches import BatchesSQL
from ragjury.store.sql.calls import CallLogSQL
from ragjury.store.sql.driven import Operation
from ragjury.store.sql.joins import JoinsSQL
from ragjury.store.sql.labels import LabelsSQL
from ragjury.store.sql.mailbox import MailboxSQL
from ragjury.store.sql.queue import QueueSQL
from ragjury.store.sql.results import ResultsSQL
from ragjury.store.sql.workers import WorkersSQL
from ragjury.store.status_report import StatusReport


class SQLStore(
    CallLogSQL, QueueSQL, ResultsSQL, MailboxSQL, JoinsSQL, WorkersSQL, LabelsSQL, BatchesSQL
):
    """Every role of a store on one database, for a driver to connect."""

    async def status(self) -> StatusReport:
        """The ``ragjury status --json`` document."""
        from ragjury.store._status import status  # the read-only report lives on its own

        return await status(self)


__all__ = ["Operation", "SQLStore"]
