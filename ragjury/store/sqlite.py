"""The SQLite store: one file, WAL journal, one connection per process.

A driver of the SQL core (:class:`~ragjury.store._sql.SQLStore`). Every operation runs in a
database thread (one at a time per process), so a transaction costs one hop from the event
loop, not one per statement. Writes are immediate transactions, atomic across processes too:
several processes may share the file (``ragjury serve`` several times on one machine), and
the writer lock serialises claims. Leases are measured on the database's clock (SQLite's
``julianday('now')``), so processes agree on them.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

from ragjury.errors import ConfigurationError
from ragjury.store import _schema
from ragjury.store._values import Param, Params, Row
from ragjury.store.sql import Operation, SQLStore
from ragjury.store.sql.items import end_item_plainly
from ragjury.store.sql.mailbox import acknowledge_plainly, claimed_steps_plainly, publish_plainly
from ragjury.store.sql.queue import claim_items_plainly
from ragjury.store.sql.steps import (
    Acknowledge,
    ClaimedSteps,
    ClaimItems,
    EndItem,
    Execute,
    ExecuteMany,
    Fetch,
    InsertItems,
    Publish,
    Step,
    StepResult,
    Steps,
)

T = TypeVar("T")
Conn = sqlite3.Connection

OLDEST_SQLITE = (3, 35)
"""``RETURNING`` and upserts need SQLite 3.35 (2021) or newer."""

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_INSERT_ITEM = (
    "INSERT INTO items (job_id, key, position, payload, created_at, state, report, finished_at, "
    "transient_failures) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_WORDS = (
    ("now_epoch()", _NOW),
    ("LEAST(", "MIN("),
    ("GREATEST(", "MAX("),
    ("json_merge(", "json_patch("),
    (" FOR UPDATE SKIP LOCKED", ""),  # the writer lock does it
    (" FOR UPDATE", ""),
)
_SEQ = re.compile(r"\bseq\b")
_ANY = "= ANY("


@functools.lru_cache(maxsize=512)
def render(sql: str, lists: tuple[int, ...] = ()) -> str:
    """The core's SQL as SQLite runs it. ``lists`` has, per placeholder, the length of its
    list (``x = ANY(?)`` becomes ``x IN (?, ?, ...)``), or -1 for a single value."""
    for word, ours in _WORDS:
        sql = sql.replace(word, ours)
    sql = _SEQ.sub("rowid", sql)
    if not lists:
        return sql
    parts = sql.split("?")
    out = [parts[0]]
    for n, part in zip(lists, parts[1:], strict=True):
        if n < 0:
            out.append("?" + part)
            continue
        if not out[-1].endswith(_ANY):
            raise ValueError(f"a list can only be bound as '= ANY(?)': {sql!r}")
        out[-1] = out[-1][: -len(_ANY)] + "IN ("
        out.append(", ".join("?" * n) + part)
    return "".join(out)


def _bound(sql: str, params: Params) -> tuple[str, Params]:
    for p in params:
        if isinstance(p, list):
            break
    else:
        return render(sql), params
    lists = tuple(len(p) if isinstance(p, list) else -1 for p in params)
    flat = tuple(v for p in params for v in (p if isinstance(p, list) else (p,)))
    return render(sql, lists), flat


_CHECKPOINT_PAGES = 16384
"""The write-ahead log's pages (4 KiB each) past which a commit checkpoints it."""


def _apply(conn: Conn, step: Step) -> StepResult:
    """Run one step of an operation; its result."""
    if isinstance(step, Fetch):
        return conn.execute(*_bound(step.sql, step.params)).fetchall()
    if isinstance(step, Execute):
        return conn.execute(*_bound(step.sql, step.params)).rowcount
    if isinstance(step, ExecuteMany):
        conn.executemany(render(step.sql), step.rows)
    elif isinstance(step, EndItem):
        return drive(conn, end_item_plainly(step))
    elif isinstance(step, Acknowledge):
        return drive(conn, acknowledge_plainly(step))
    elif isinstance(step, Publish):
        return drive(conn, publish_plainly(step))
    elif isinstance(step, ClaimItems):
        return drive(conn, claim_items_plainly(step))
    elif isinstance(step, ClaimedSteps):
        return drive(conn, claimed_steps_plainly(step))
    elif isinstance(step, InsertItems):
        conn.executemany(_INSERT_ITEM, step.rows)
    # a Lock: a write holds the writer lock already
    return None


def drive(conn: Conn, steps: Steps[T]) -> T:
    """Run an operation of the core to its end on ``conn``, synchronously."""
    try:
        step = next(steps)
        while True:
            step = steps.send(_apply(conn, step))
    except StopIteration as done:
        result: T = done.value
        return result


def _all(conn: Conn, sql: str, params: Sequence[Param] = ()) -> list[Row]:
    return [tuple(row) for row in conn.execute(sql, tuple(params)).fetchall()]


def _one(conn: Conn, sql: str, params: Sequence[Param] = ()) -> Row:
    row = conn.execute(sql, tuple(params)).fetchone()
    assert row is not None, sql
    return tuple(row)


class SQLiteStore(SQLStore):
    """``async with SQLiteStore(path) as store:`` opens (and creates or upgrades) the file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._conn: Conn | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._pending: list[_Pending[Any]] = []
        self._committing = anyio.Lock()

    # opening ------------------------------------------------------------------------
    async def __aenter__(self) -> SQLiteStore:
        await self._opened()
        return self

    async def _connect(self) -> None:
        memory = str(self.path) == ":memory:"
        if not memory and self.path.parent and not self.path.parent.exists():
            raise ConfigurationError(
                f"cannot create the database {str(self.path)!r}: the folder "
                f"{str(self.path.parent)!r} does not exist; create it or choose another --db"
            )
        try:
            self._conn = await self._call(lambda _: self._open(memory), opening=True)
        except sqlite3.DatabaseError as exc:
            raise ConfigurationError(
                f"cannot use {str(self.path)!r} as a ragjury database: {exc}; "
                "point --db at a new file or an existing ragjury database"
            ) from exc

    def _open(self, memory: bool) -> Conn:
        if sqlite3.sqlite_version_info < OLDEST_SQLITE:
            raise ConfigurationError(
                f"ragjury needs SQLite {'.'.join(map(str, OLDEST_SQLITE))} or newer; this "
                f"Python has {sqlite3.sqlite_version}: use a newer Python build, or a "
                "postgresql:// --db"
            )
        # Autocommit: every transaction is explicit (see _transaction()). Used from the
        # database threads one call at a time (the limiter), never at once.
        created = not memory and not self.path.exists()
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn = conn
        if created:  # prompts, answers and results are the user's data: theirs alone to read
            os.chmod(self.path, 0o600)
        conn.execute("PRAGMA busy_timeout=30000")
        if not memory:
            conn.execute("PRAGMA journal_mode=WAL")
            # a checkpoint (two fsyncs) when the log passes 64 MiB, not SQLite's 4 MiB: a job
            # stored a chunk at a time (a commit every few MiB) otherwise waited on 128
            # fsyncs at 20,000 samples instead of 11, 1.2x the wall time on a busy disk
            conn.execute(f"PRAGMA wal_autocheckpoint={_CHECKPOINT_PAGES}")
        conn.execute("PRAGMA synchronous=NORMAL")
        self._migrate(conn)
        return conn

    async def _close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)

    def _migrate(self, conn: Conn) -> None:
        version = int(_one(conn, "PRAGMA user_version")[0])
        if version > _schema.VERSION:
            raise ConfigurationError(
                f"{str(self.path)!r} was made by a newer ragjury (database schema {version}; "
                f"this ragjury knows up to {_schema.VERSION}). Upgrade ragjury "
                "(pip install -U ragjury) to use it"
            )
        if version == _schema.VERSION:
            self._add_order_indexes(conn)
            return

        def migrate(conn: Conn) -> None:
            pairs = _all(conn, "PRAGMA table_info(pairs)")
            if pairs and "job_id" not in {row[1] for row in pairs}:
                raise sqlite3.DatabaseError(
                    "it was made by an older ragjury (before queued jobs); its results can "
                    "still be read with sqlite3"
                )
            for statement in _schema.TABLES.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for table, columns in _schema.ADDED_COLUMNS.items():
                present = {row[1] for row in _all(conn, f"PRAGMA table_info({table})")}
                for name, kind in columns:
                    if name not in present:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            for statement in _schema.AFTER_COLUMNS:
                conn.execute(statement)
            if pairs and version < 2:
                for statement in _schema.FROM_VERSION_1:
                    conn.execute(statement)
            if _all(conn, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'joins'"):
                for statement in _schema.FROM_PART_JOINS:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {_schema.VERSION}")

        _transaction(conn, migrate)
        self._add_order_indexes(conn)

    def _add_order_indexes(self, conn: Conn) -> None:
        present = {row[0] for row in _all(conn, "SELECT name FROM sqlite_master")}
        missing = [sql for name, sql in _schema.ORDER_INDEXES.items() if name not in present]
        if missing:
            _transaction(conn, lambda c: [c.execute(sql) for sql in missing])

    # plumbing -----------------------------------------------------------------------
    async def _call(self, fn: Callable[[Conn], T], *, opening: bool = False) -> T:
        """Run ``fn`` with the connection in a database thread; shielded, so an operation
        that began ends (committed or rolled back) even if the caller is cancelled."""
        with anyio.CancelScope(shield=True):
            result = await self._in_thread(fn, opening=opening)
        return result

    async def _in_thread(self, fn: Callable[[Conn], T], *, opening: bool = False) -> T:
        """Run ``fn`` with the connection in a database thread (the caller shields it)."""
        if self._conn is None and not opening:
            raise RuntimeError("the store is not open; use 'async with SQLiteStore(path)'")

        def run() -> T:
            return fn(self._conn)  # type: ignore[arg-type]  # set by _open before use

        return await anyio.to_thread.run_sync(run, limiter=self._limiter)

    async def _read(self, operation: Operation[T]) -> T:
        return await self._call(lambda conn: drive(conn, operation()))

    async def _write(self, operation: Operation[T], *, single: bool = False) -> T:
        """``operation`` in an immediate transaction, committed before this returns.

        Group commit: writes that arrive while one is being committed wait and go in the
        next transaction together, each in its own savepoint (one that raises is rolled back
        alone and raises to its caller). Under load, many acknowledgements, joins and claims
        cost one commit and one trip to the database thread instead of one each. Shielded:
        a write that was asked for is done, even if its caller is cancelled meanwhile."""
        entry: _Pending[T] = _Pending(lambda conn: drive(conn, operation()))
        with anyio.CancelScope(shield=True):
            self._pending.append(entry)
            async with self._committing:
                if not entry.finished:
                    batch, self._pending = self._pending, []
                    await self._in_thread(lambda conn: _commit_batch(conn, batch))
        return entry.outcome()

    async def compact(self) -> None:
        """Give the space of deleted rows back to the file system."""
        await self._call(lambda c: c.execute("VACUUM"))


class _Pending(Generic[T]):
    """A write waiting for the next group commit, then its result or its error."""

    def __init__(self, fn: Callable[[Conn], T]) -> None:
        self.fn = fn
        self.finished = False
        self.result: T | None = None
        self.error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # set when finished without error


def _commit_batch(conn: Conn, batch: Sequence[_Pending[Any]]) -> None:
    """Every write of ``batch`` in one transaction. They are run one after the other with no
    savepoint between them (two statements a write, about a third of a keywords-only
    sample's statements); if one raises, the whole transaction is rolled back and the batch
    runs again with each write after the first in its own savepoint, so that the failing
    one is undone alone and raises to its caller while the others are committed. A write
    is an operation of the SQL core, which holds no state outside the database between its
    steps, so running it again is what the PostgreSQL store does after a lost connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        try:
            results = [entry.fn(conn) for entry in batch]
        except Exception:  # a write's own failure: find which with savepoints
            conn.execute("ROLLBACK")
            conn.execute("BEGIN IMMEDIATE")
            _each_in_a_savepoint(conn, batch)
        else:
            for entry, result in zip(batch, results, strict=True):
                entry.result = result
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        for entry in batch:
            entry.error = entry.error or exc
            entry.result = None
        raise
    finally:
        for entry in batch:
            entry.finished = True


def _each_in_a_savepoint(conn: Conn, batch: Sequence[_Pending[T]]) -> None:
    """The writes of ``batch`` in the open transaction, each after the first in its own
    savepoint: one that raises is rolled back alone and keeps its error. The first needs
    none: if it raises, nothing else is in the transaction yet, so the transaction is
    rolled back and begun again."""
    for n, entry in enumerate(batch):
        if n:
            conn.execute("SAVEPOINT one")
        try:
            entry.result = entry.fn(conn)
        except Exception as exc:  # this write's own failure, raised to its caller
            conn.execute("ROLLBACK TO one" if n else "ROLLBACK")
            entry.error = exc
            if not n:
                conn.execute("BEGIN IMMEDIATE")
        if n:
            conn.execute("RELEASE one")


def _transaction(conn: Conn, fn: Callable[[Conn], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result
