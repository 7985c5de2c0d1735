"""The SQLite store: one file, WAL journal, one connection per process.

Every operation is one function run in a database thread (one at a time per process), so a
transaction costs one hop from the event loop, not one per statement. Writes are immediate
transactions, atomic across processes too: several processes may share the file (``ragjury
serve`` several times on one machine). Leases are measured on the database's clock (SQLite's
``julianday('now')``), so processes agree on them.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import anyio.to_thread

from ragjury.errors import ConfigurationError
from ragjury.llm.ratelimit import bucket_after, wait_for
from ragjury.llm.usage import CallStats
from ragjury.store import _schema
from ragjury.store._common import (
    IN_FLIGHT,
    KILLED,
    PAGE,
    UNFINISHED_STATES,
    abandoned,
    alive,
    encode,
    iso,
    job_key,
    job_record,
    job_summary_pattern,
    latest_run_of,
    pair_row,
    poison,
    sample_row,
    totals,
)
from ragjury.store.base import (
    STATES,
    Claim,
    Item,
    ItemResults,
    ItemsFactory,
    Job,
    JobKind,
    OutgoingMessage,
    QuestionDecision,
    QuestionMatcher,
    RunRecord,
    StoredMessage,
)

T = TypeVar("T")
Conn = sqlite3.Connection
Row = tuple[Any, ...]

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_INSERT_ITEM = (
    "INSERT INTO items (job_id, key, position, payload, created_at) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_MESSAGE = (
    "INSERT INTO messages (grp, kind, job_id, item_key, body, available_at, created_at) "
    f"VALUES (?, ?, ?, ?, ?, {_NOW}, {_NOW})"
)
_UNFINISHED = str(UNFINISHED_STATES)
_INSERT_CALL = (
    "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, completion_tokens, "
    "latency_ms, statuses, error, created_at, model, cost_usd) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _index_questions(conn: Conn, job_id: str, matcher: QuestionMatcher) -> None:
    """Make sure the job's kept questions are indexed under ``matcher``'s keys: once per job,
    or again if they were indexed under another signature."""
    found = conn.execute(
        "SELECT signature FROM question_indexes WHERE job_id = ?", (job_id,)
    ).fetchone()
    if found is not None and found[0] == matcher.signature:
        return
    conn.execute("DELETE FROM question_keys WHERE job_id = ?", (job_id,))
    kept = conn.execute(
        "SELECT id, question FROM questions WHERE job_id = ? AND duplicate_of IS NULL ORDER BY id",
        (job_id,),
    )
    while batch := kept.fetchmany(1000):
        _add_keys(conn, job_id, [(int(r[0]), str(r[1])) for r in batch], matcher)
    conn.execute(
        "INSERT OR REPLACE INTO question_indexes (job_id, signature) VALUES (?, ?)",
        (job_id, matcher.signature),
    )


def _add_keys(
    conn: Conn, job_id: str, kept: Sequence[tuple[int, str]], matcher: QuestionMatcher
) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO question_keys (job_id, key, question_id) VALUES (?, ?, ?)",
        [(job_id, key, row) for row, question in kept for key in matcher.keys(question)],
    )


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


def _all(conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    return [tuple(row) for row in conn.execute(sql, tuple(params)).fetchall()]


def _one(conn: Conn, sql: str, params: Sequence[Any] = ()) -> Row:
    row = conn.execute(sql, tuple(params)).fetchone()
    assert row is not None, sql
    return tuple(row)


def _row(message: OutgoingMessage) -> tuple[str, str, str, str, str]:
    return (message.group, message.kind, message.job_id, message.item_key, message.body)


class SQLiteStore:
    """``async with SQLiteStore(path) as store:`` opens (and creates or upgrades) the file."""

    job_order = "rowid"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._conn: Conn | None = None
        self._limiter = anyio.CapacityLimiter(1)
        self._pending: list[_Pending[Any]] = []
        self._committing = anyio.Lock()

    # opening ------------------------------------------------------------------------
    async def __aenter__(self) -> SQLiteStore:
        memory = str(self.path) == ":memory:"
        if not memory and self.path.parent and not self.path.parent.exists():
            raise ConfigurationError(
                f"cannot create the database {str(self.path)!r}: the folder "
                f"{str(self.path.parent)!r} does not exist; create it or choose another --db"
            )
        try:
            self._conn = await self._call(lambda _: self._open(memory), opening=True)
        except sqlite3.DatabaseError as exc:
            await self._close()
            raise ConfigurationError(
                f"cannot use {str(self.path)!r} as a ragjury database: {exc}; "
                "point --db at a new file or an existing ragjury database"
            ) from exc
        except BaseException:
            await self._close()
            raise
        return self

    def _open(self, memory: bool) -> Conn:
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
        conn.execute("PRAGMA synchronous=NORMAL")
        self._migrate(conn)
        return conn

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

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
        if self._conn is None and not opening:
            raise RuntimeError("the store is not open; use 'async with SQLiteStore(path)'")

        def run() -> T:
            return fn(self._conn)  # type: ignore[arg-type]  # set by _open before use

        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(run, limiter=self._limiter)
        return result

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return await self._call(lambda conn: _all(conn, sql, params))

    async def _write(self, fn: Callable[[Conn], T]) -> T:
        """``fn`` in an immediate transaction, committed before this returns.

        Group commit: writes that arrive while one is being committed wait and go in the
        next transaction together, each in its own savepoint (one that raises is rolled back
        alone and raises to its caller). Under load, many acknowledgements, joins and claims
        cost one commit and one trip to the database thread instead of one each. Shielded:
        a write that was asked for is done, even if its caller is cancelled meanwhile."""
        entry: _Pending[T] = _Pending(fn)
        with anyio.CancelScope(shield=True):
            self._pending.append(entry)
            async with self._committing:
                if not entry.finished:
                    batch, self._pending = self._pending, []
                    await self._call(lambda conn: _commit_batch(conn, batch))
        return entry.outcome()

    async def now(self) -> float:
        return float((await self._read(f"SELECT {_NOW}"))[0][0])

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows of a read-only query (for :mod:`ragjury.store._status` and tests)."""
        return await self._read(sql, params)

    async def take_rate(
        self,
        key: str,
        amount: float,
        *,
        per_second: float,
        capacity: float,
        at_most: float | None = None,
    ) -> float:
        def take(conn: Conn) -> float:
            now = float(_one(conn, f"SELECT {_NOW}")[0])
            row = conn.execute(
                "SELECT level, stamp FROM rate_buckets WHERE key = ?", (key,)
            ).fetchone()
            before, elapsed = (None, 0.0) if row is None else (float(row[0]), now - float(row[1]))
            level = bucket_after(
                before, elapsed, amount, per_second=per_second, capacity=capacity, at_most=at_most
            )
            conn.execute(
                "INSERT INTO rate_buckets (key, level, stamp) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET level = excluded.level, stamp = excluded.stamp",
                (key, level, now),
            )
            return wait_for(level, per_second)

        return await self._write(take)

    # runs and calls -----------------------------------------------------------------
    async def start_run(self, command: str, settings: Mapping[str, Any]) -> str:
        run_id = uuid.uuid4().hex
        text = json.dumps(settings, default=str)
        host, pid = socket.gethostname(), os.getpid()

        def start(conn: Conn) -> None:
            # runs of this host whose process is gone were killed: say so, and that their
            # calls still in flight will never be answered
            for other, other_pid in _all(
                conn,
                "SELECT id, pid FROM runs WHERE host = ? AND finished_at IS NULL",
                (host,),
            ):
                if other_pid is None or alive(int(other_pid)):
                    continue
                conn.execute(
                    "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                    (iso(), json.dumps({"killed": True, "pid": other_pid}), other),
                )
                conn.execute(
                    "UPDATE llm_calls SET error = ? WHERE run_id = ? AND error = ?",
                    (KILLED, other, IN_FLIGHT),
                )
            conn.execute(
                "INSERT INTO runs (id, command, started_at, settings, host, pid) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, command, iso(), text, host, pid),
            )

        await self._write(start)
        return run_id

    async def finish_run(self, run_id: str, summary: Mapping[str, Any]) -> None:
        text = json.dumps(summary, default=str)
        await self._write(
            lambda c: c.execute(
                "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                (iso(), text, run_id),
            )
        )

    async def open_call(self, run_id: str, stats: CallStats) -> int:
        row = (run_id, stats.stage, 0, 0, 0, 0.0, "[]", IN_FLIGHT, iso(), stats.model, None)
        cursor = await self._write(lambda c: c.execute(_INSERT_CALL, row))
        return int(cursor.lastrowid or 0)

    async def record_call(self, run_id: str, stats: CallStats, error: str | None) -> None:
        row = (
            run_id,
            stats.stage,
            stats.requests,
            stats.prompt_tokens,
            stats.completion_tokens,
            round(stats.latency_seconds * 1000, 1),
            json.dumps(stats.statuses),
            error,
            iso(),
            stats.model,
            stats.cost_usd,
        )
        if stats.record is None:
            await self._write(lambda c: c.execute(_INSERT_CALL, row))
            return
        await self._write(
            lambda c: c.execute(
                "UPDATE llm_calls SET run_id = ?, stage = ?, requests = ?, prompt_tokens = ?, "
                "completion_tokens = ?, latency_ms = ?, statuses = ?, error = ?, "
                "created_at = ?, model = ?, cost_usd = ? WHERE id = ?",
                (*row, stats.record),
            )
        )

    async def latest_run(self, job_id: str) -> RunRecord | None:
        rows = await self._read(
            "SELECT id, command, started_at, finished_at, settings, summary FROM runs "
            "WHERE summary LIKE ? ORDER BY finished_at DESC, rowid DESC",
            (job_summary_pattern(job_id),),
        )
        return latest_run_of(rows, job_id)

    async def call_totals(
        self, *, run_id: str | None = None, since: float | None = None
    ) -> dict[str, Any]:
        where, params = "1 = 1", []
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        if since is not None:
            where += " AND created_at >= ?"
            params.append(iso(since))
        [row] = await self._read(
            "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
            "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0), "
            f"COUNT(*) - COUNT(cost_usd) FROM llm_calls WHERE {where}",
            params,
        )
        return totals(row)

    # jobs and items -----------------------------------------------------------------
    async def submit(
        self,
        kind: JobKind,
        options: Mapping[str, Any],
        items: ItemsFactory,
        *,
        batch: int = 500,
        batch_bytes: int = 4 * 1024 * 1024,
    ) -> Job:
        key_of_job, size = job_key(kind, options, items)
        if not size:
            return Job(id="", kind=kind, options=dict(options), created=False, size=0)
        now = time.time()
        found = await self._read("SELECT id FROM jobs WHERE key = ?", (key_of_job,))
        if found:
            job_id = str(found[0][0])
            retried = await self._write(lambda c: _requeue_transient(c, job_id))
            return Job(job_id, kind, dict(options), size=size, retried=retried)
        job_id = uuid.uuid4().hex[:12]
        text = json.dumps(options, default=str)

        def insert(conn: Conn) -> None:
            conn.execute(
                "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?)",
                (job_id, kind, key_of_job, text, iso(now)[:19]),
            )
            rows: list[Row] = []
            held = 0
            for position, (key, payload) in enumerate(items()):
                encoded = encode(payload)
                rows.append((job_id, key, position, encoded, now))
                held += len(encoded)
                if len(rows) >= batch or held >= batch_bytes:
                    conn.executemany(_INSERT_ITEM, rows)
                    rows.clear()
                    held = 0
            conn.executemany(_INSERT_ITEM, rows)

        await self._write(insert)
        return Job(id=job_id, kind=kind, options=dict(options), created=True, size=size)

    async def job(self, job_id: str) -> Job:
        rows = await self._read("SELECT kind, options FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise KeyError(job_id)
        return Job(id=job_id, kind=rows[0][0], options=json.loads(rows[0][1]))

    async def jobs(self, *, limit: int | None = None) -> list[Job]:
        sql = (
            "SELECT id, kind, options, (SELECT COUNT(*) FROM items WHERE items.job_id = jobs.id) "
            "FROM jobs ORDER BY rowid DESC"
        )
        rows = await self._read(
            sql + ("" if limit is None else " LIMIT ?"), (() if limit is None else (limit,))
        )
        return [job_record(row) for row in rows]

    async def claim_items(
        self,
        owner: str,
        limit: int,
        *,
        lease_seconds: float,
        job_ids: Sequence[str] | None = None,
        max_attempts: int = 5,
    ) -> list[Item]:
        if limit <= 0:
            return []
        jobs, params = "", list[Any]()
        if job_ids is not None:
            jobs, params = f" AND job_id IN ({_marks(job_ids)})", list(job_ids)
        # two indexed queries, not one with OR (which would scan the items)
        queued = (
            "SELECT id, job_id, key, position, payload, attempts FROM items "
            f"WHERE state = 'queued'{jobs} ORDER BY id LIMIT ?"
        )
        expired = (
            "SELECT id, job_id, key, position, payload, attempts FROM items "
            f"WHERE state = 'processing' AND lease_expires <= {_NOW} AND lease_owner != ?{jobs} "
            "ORDER BY id LIMIT ?"
        )

        def claim(conn: Conn) -> list[Item]:
            claimed = []
            rows = _all(conn, expired, (owner, *params, limit))
            rows += _all(conn, queued, (*params, limit - len(rows))) if len(rows) < limit else []
            for row in rows:
                item_id, attempts = int(row[0]), int(row[5])
                if attempts >= max_attempts:
                    _fail(conn, str(row[1]), str(row[2]), abandoned(attempts))
                    continue
                conn.execute(
                    "UPDATE items SET state = 'processing', lease_owner = ?, "
                    f"lease_expires = {_NOW} + ?, attempts = attempts + 1, started_by = ? "
                    "WHERE id = ?",
                    (owner, lease_seconds, owner, item_id),
                )
                claimed.append(
                    Item(
                        item_id,
                        str(row[1]),
                        str(row[2]),
                        int(row[3]),
                        json.loads(row[4]),
                        attempts + 1,
                    )
                )
            return claimed

        return await self._write(claim)

    async def items_started(self, item_ids: Sequence[int]) -> None:
        if item_ids:
            await self._write(
                lambda c: c.execute(
                    "UPDATE items SET state = 'running', lease_owner = NULL, lease_expires = NULL "
                    f"WHERE state = 'processing' AND id IN ({_marks(item_ids)})",
                    tuple(item_ids),
                )
            )

    async def release_items(self, owner: str, item_ids: Sequence[int]) -> int:
        if not item_ids:
            return 0
        cursor = await self._write(
            lambda c: c.execute(
                "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL, "
                "attempts = MAX(attempts - 1, 0), started_by = NULL "
                f"WHERE lease_owner = ? AND state = 'processing' AND id IN ({_marks(item_ids)})",
                (owner, *item_ids),
            )
        )
        return cursor.rowcount

    async def unfinished_items(self, owner: str) -> int:
        rows = await self._read(
            "SELECT COUNT(*) FROM items "
            "WHERE started_by = ? AND state IN ('processing', 'running')",
            (owner,),
        )
        return int(rows[0][0])

    async def finish_item(self, job_id: str, key: str, results: ItemResults) -> bool:
        def finish(conn: Conn) -> bool:
            rows = _all(
                conn,
                "SELECT id, position, state FROM items WHERE job_id = ? AND key = ?",
                (job_id, key),
            )
            if not rows or rows[0][2] in ("done", "failed"):
                return False
            item_id, position = int(rows[0][0]), int(rows[0][1])
            _store_results(conn, job_id, item_id, position, results)
            conn.execute(
                "UPDATE items SET state = 'done', lease_owner = NULL, lease_expires = NULL, "
                "report = ?, finished_at = ?, transient_failures = ? WHERE id = ?",
                (
                    json.dumps(results.report or {}),
                    time.time(),
                    results.transient_failures,
                    item_id,
                ),
            )
            _forget(conn, job_id, key)
            return True

        return await self._write(finish)

    async def fail_item(
        self, job_id: str, key: str, error: str, results: ItemResults | None = None
    ) -> bool:
        return await self._write(lambda c: _fail(c, job_id, key, error, results))

    async def item_payload(self, job_id: str, key: str) -> dict[str, Any] | None:
        rows = await self._read(
            "SELECT payload FROM items WHERE job_id = ? AND key = ?", (job_id, key)
        )
        return json.loads(rows[0][0]) if rows else None

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]:
        sql, params = "SELECT state, COUNT(*) FROM items", tuple(job_ids or ())
        if job_ids is not None:
            sql += f" WHERE job_id IN ({_marks(job_ids)})"
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for state, n in await self._read(sql + " GROUP BY state", params):
            counts["processing" if state == "running" else str(state)] += int(n)
        return counts

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int:
        sql = f"SELECT COUNT(*) FROM items WHERE state IN {_UNFINISHED}"
        params = tuple(job_ids or ())
        if job_ids is not None:
            sql += f" AND job_id IN ({_marks(job_ids)})"
        return int((await self._read(sql, params))[0][0])

    async def reports(self, job_id: str) -> AsyncIterator[dict[str, Any]]:
        page = (
            "SELECT report, id FROM items WHERE job_id = ? AND id > ? "
            f"ORDER BY id LIMIT {PAGE}"  # through items_order: each page costs the same
        )
        after = -1
        while True:
            rows = await self._read(page, (job_id, after))
            for report, _ in rows:
                if report is not None:
                    yield json.loads(report)
            if len(rows) < PAGE:
                return
            after = int(rows[-1][1])

    async def failed_items(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self._read(
            "SELECT key, error FROM items WHERE job_id = ? AND state = 'failed' ORDER BY position",
            (job_id,),
        )
        return [{"item": key, "error": error} for key, error in rows]

    async def pair_outcomes(self, job_id: str) -> dict[str, int]:
        rows = await self._read(
            "SELECT outcome, COUNT(*) FROM pairs WHERE job_id = ? GROUP BY outcome", (job_id,)
        )
        return {str(outcome): int(n) for outcome, n in rows}

    def pairs(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        return self._records("pairs", job_ids)

    def samples(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        return self._records("samples", job_ids)

    async def scored(self, job_id: str) -> AsyncIterator[str]:
        async for value in self._pages("samples", "scored", job_id):
            yield str(value)

    async def _records(
        self, table: str, job_ids: Sequence[str] | None
    ) -> AsyncIterator[dict[str, Any]]:
        sql, params = "SELECT id FROM jobs", tuple(job_ids or ())
        if job_ids is not None:
            sql += f" WHERE id IN ({_marks(job_ids)})"
        for (job_id,) in await self._read(sql + " ORDER BY rowid", params):
            async for value in self._pages(table, "record", job_id):
                yield json.loads(value)

    async def _pages(self, table: str, column: str, job_id: str) -> AsyncIterator[Any]:
        """``column`` of a job's rows of ``table`` in item order, a page at a time: no
        statement stays open between pages, and each page starts where the last ended, found
        through the ``{table}_order`` index, so every page costs the same however many rows
        came before (no OFFSET, no sort of the whole job per page). A job's items are
        inserted in position order in one transaction, so their ids follow their positions."""
        page = (
            f"SELECT {column}, item_id, position, rowid FROM {table} "
            "WHERE job_id = ? AND (item_id, position, rowid) > (?, ?, ?) "
            f"ORDER BY item_id, position, rowid LIMIT {PAGE}"
        )
        after: tuple[Any, ...] = (-1, -1, -1)
        while True:
            rows = await self._read(page, (job_id, *after))
            for row in rows:
                yield row[0]
            if len(rows) < PAGE:
                return
            after = tuple(rows[-1][1:])

    # the durable bus ----------------------------------------------------------------
    async def put_messages(self, messages: Sequence[OutgoingMessage]) -> None:
        if messages:
            rows = [_row(m) for m in messages]
            await self._write(lambda c: c.executemany(_INSERT_MESSAGE, rows))

    async def claim_messages(
        self,
        owner: str,
        groups: Sequence[str],
        limit: int,
        *,
        lease_seconds: float,
        max_attempts: int,
        job_ids: Sequence[str] | None = None,
    ) -> Claim:
        if limit <= 0 or not groups:
            return Claim()
        where = f"grp IN ({_marks(groups)}) AND available_at <= {_NOW}"
        params: list[Any] = list(groups)
        if job_ids is not None:
            where += f" AND job_id IN ({_marks(job_ids)})"
            params.extend(job_ids)
        select = (
            "SELECT id, grp, body, attempts, job_id, item_key, last_error FROM messages "
            f"WHERE {where} ORDER BY id LIMIT ?"
        )

        def claim(conn: Conn) -> Claim:
            found = Claim()
            taken: list[int] = []
            for message_id, group, body, attempts, job_id, key, last_error in _all(
                conn, select, (*params, limit)
            ):
                if attempts >= max_attempts:
                    found.dead += 1
                    conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
                    _fail(conn, job_id, key, poison(group, attempts, last_error))
                    continue
                taken.append(int(message_id))
                found.messages.append(
                    StoredMessage(
                        int(message_id),
                        str(group),
                        str(body),
                        int(attempts) + 1,
                        str(job_id),
                        str(key),
                    )
                )
            if taken:
                conn.execute(
                    f"UPDATE messages SET lease_owner = ?, available_at = {_NOW} + ?, "
                    f"attempts = attempts + 1 WHERE id IN ({_marks(taken)})",
                    (owner, lease_seconds, *taken),
                )
            return found

        return await self._write(claim)

    async def ack_message(self, message_id: int, replies: Sequence[OutgoingMessage]) -> None:
        rows = [_row(m) for m in replies]

        def ack(conn: Conn) -> None:
            if rows:
                state = _all(
                    conn,
                    "SELECT state FROM items WHERE job_id = ? AND key = ?",
                    (rows[0][2], rows[0][3]),
                )
                if not state or state[0][0] not in ("done", "failed"):
                    conn.executemany(_INSERT_MESSAGE, rows)
            conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))

        await self._write(ack)

    async def nack_message(
        self, message_id: int, error: str, *, max_attempts: int, retry_after: float
    ) -> bool:
        def nack(conn: Conn) -> bool:
            rows = _all(conn, "SELECT attempts FROM messages WHERE id = ?", (message_id,))
            if not rows:
                return False
            if int(rows[0][0]) >= max_attempts:
                conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
                return True
            conn.execute(
                f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW} + ?, "
                "last_error = ? WHERE id = ?",
                (retry_after, error, message_id),
            )
            return False

        return await self._write(nack)

    async def renew_messages(
        self, owner: str, message_ids: Sequence[int], lease_seconds: float
    ) -> None:
        if message_ids:
            await self._write(
                lambda c: c.execute(
                    f"UPDATE messages SET available_at = {_NOW} + ? WHERE lease_owner = ? "
                    f"AND id IN ({_marks(message_ids)})",
                    (lease_seconds, owner, *message_ids),
                )
            )

    async def release_messages(
        self, owner: str, message_ids: Sequence[int], *, started: bool = False
    ) -> None:
        refund = "" if started else ", attempts = MAX(attempts - 1, 0)"
        if message_ids:
            await self._write(
                lambda c: c.execute(
                    f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW}{refund} "
                    f"WHERE lease_owner = ? AND id IN ({_marks(message_ids)})",
                    (owner, *message_ids),
                )
            )

    async def waiting_messages(self) -> dict[str, int]:
        rows = await self._read("SELECT grp, COUNT(*) FROM messages GROUP BY grp ORDER BY grp")
        return {str(group): int(n) for group, n in rows}

    # join state ---------------------------------------------------------------------
    async def join(
        self, job_id: str, item_key: str, parts: Mapping[str, str], prefix: str
    ) -> dict[str, str]:
        # [prefix, prefix with its last character raised): an index range, unlike LIKE
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        rows = [(job_id, item_key, name, value) for name, value in parts.items()]

        def join(conn: Conn) -> list[Row]:
            conn.executemany(
                "INSERT OR IGNORE INTO joins (job_id, item_key, name, value) VALUES (?, ?, ?, ?)",
                rows,
            )
            return _all(
                conn,
                "SELECT name, value FROM joins WHERE job_id = ? AND item_key = ? "
                "AND name >= ? AND name < ?",
                (job_id, item_key, prefix, upper),
            )

        return {str(name): str(value) for name, value in await self._write(join)}

    async def decide_questions(
        self, job_id: str, pairs: Sequence[tuple[str, str]], matcher: QuestionMatcher
    ) -> list[QuestionDecision]:
        ids = [pair_id for pair_id, _ in pairs]

        def step(conn: Conn) -> list[QuestionDecision]:
            stored = {
                str(row[0]): QuestionDecision(str(row[0]), row[1], row[2])
                for row in _all(
                    conn,
                    "SELECT pair_id, duplicate_of, similarity FROM questions "
                    f"WHERE job_id = ? AND pair_id IN ({_marks(ids)})",
                    (job_id, *ids),
                )
            }
            new = [(pid, q) for pid, q in pairs if pid not in stored]
            if not new:
                return [stored[pid] for pid in ids]
            _index_questions(conn, job_id, matcher)
            keys = sorted({key for _, question in new for key in matcher.keys(question)})
            candidates = [
                (int(row[0]), str(row[1]), str(row[2]))
                for row in _all(
                    conn,
                    "SELECT DISTINCT q.id, q.pair_id, q.question FROM question_keys k "
                    "JOIN questions q ON q.id = k.question_id "
                    f"WHERE k.job_id = ? AND k.key IN ({_marks(keys)})",
                    (job_id, *keys),
                )
            ]
            decisions = matcher.decide(candidates, new)
            questions = dict(new)
            for d in decisions:
                row = conn.execute(
                    "INSERT INTO questions (job_id, pair_id, question, duplicate_of, similarity) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (job_id, d.pair_id, questions[d.pair_id], d.duplicate_of, d.similarity),
                ).lastrowid
                if d.duplicate_of is None:
                    _add_keys(conn, job_id, [(int(row or 0), questions[d.pair_id])], matcher)
            by_id = {**stored, **{d.pair_id: d for d in decisions}}
            return [by_id[pid] for pid in ids]

        return await self._write(step)

    # the step cache -----------------------------------------------------------------
    async def get_step(self, key: str) -> str | None:
        rows = await self._read("SELECT output FROM steps WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    async def put_step(self, key: str, agent: str, output: str) -> None:
        await self._write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO steps (key, agent, output, created_at) VALUES (?, ?, ?, ?)",
                (key, agent, output, time.time()),
            )
        )

    # workers ------------------------------------------------------------------------
    async def register_worker(self, owner: str, agents: Sequence[str]) -> int:
        host, pid = socket.gethostname(), os.getpid()

        def register(conn: Conn) -> int:
            released = 0
            for other, other_pid in _all(
                conn, "SELECT owner, pid FROM workers WHERE host = ? AND owner != ?", (host, owner)
            ):
                if alive(int(other_pid)) and int(other_pid) != pid:
                    continue
                # A process of this host that is gone: what it held is free now, not when
                # its leases run out. Its deliveries still count as attempts.
                released += conn.execute(
                    f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW} "
                    "WHERE lease_owner = ?",
                    (other,),
                ).rowcount
                released += conn.execute(
                    "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL "
                    "WHERE lease_owner = ? AND state = 'processing'",
                    (other,),
                ).rowcount
                conn.execute("DELETE FROM workers WHERE owner = ?", (other,))
            conn.execute(
                "INSERT OR REPLACE INTO workers (owner, host, pid, agents, started_at, heartbeat) "
                f"VALUES (?, ?, ?, ?, {_NOW}, {_NOW})",
                (owner, host, pid, ",".join(agents)),
            )
            return released

        return await self._write(register)

    async def heartbeat(self, owner: str) -> None:
        await self._write(
            lambda c: c.execute(f"UPDATE workers SET heartbeat = {_NOW} WHERE owner = ?", (owner,))
        )

    async def unregister_worker(self, owner: str) -> None:
        await self._write(lambda c: c.execute("DELETE FROM workers WHERE owner = ?", (owner,)))

    async def status(self) -> dict[str, Any]:
        from ragjury.store._status import status  # the read-only report lives on its own

        return await status(self)

    async def prune(self, before: float) -> dict[str, int]:
        cutoff = iso(before)
        old_jobs = (
            "SELECT id FROM jobs WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = jobs.id "
            f"AND (i.state IN {_UNFINISHED} OR i.finished_at >= ?))"
        )

        def prune(conn: Conn) -> dict[str, int]:
            jobs = [str(row[0]) for row in _all(conn, old_jobs, (before,))]
            deleted: dict[str, int] = {}
            marks = _marks(jobs)
            for table in ("pairs", "samples", "questions", "joins", "messages", "items"):
                deleted[table] = (
                    conn.execute(f"DELETE FROM {table} WHERE job_id IN ({marks})", jobs).rowcount
                    if jobs
                    else 0
                )
            for index in ("question_keys", "question_indexes"):  # the deduplicator's, unreported
                if jobs:
                    conn.execute(f"DELETE FROM {index} WHERE job_id IN ({marks})", jobs)
            deleted["jobs"] = (
                conn.execute(f"DELETE FROM jobs WHERE id IN ({marks})", jobs).rowcount
                if jobs
                else 0
            )
            deleted["steps"] = conn.execute(
                "DELETE FROM steps WHERE created_at < ?", (before,)
            ).rowcount
            deleted["llm_calls"] = conn.execute(
                "DELETE FROM llm_calls WHERE created_at < ?", (cutoff,)
            ).rowcount
            deleted["runs"] = conn.execute(
                "DELETE FROM runs WHERE started_at < ? AND finished_at IS NOT NULL", (cutoff,)
            ).rowcount
            return deleted

        return await self._write(prune)

    async def compact(self) -> None:
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
    """Every write of ``batch`` in one transaction, each in its own savepoint."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for entry in batch:
            conn.execute("SAVEPOINT one")
            try:
                entry.result = entry.fn(conn)
            except Exception as exc:  # this write's own failure, raised to its caller
                conn.execute("ROLLBACK TO one")
                entry.error = exc
            conn.execute("RELEASE one")
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


def _transaction(conn: Conn, fn: Callable[[Conn], T]) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def _requeue_transient(conn: Conn, job_id: str) -> int:
    """Put the job's items that finished with endpoint failures back in the queue, dropping
    their stored results; the number put back."""
    where = "job_id = ? AND state = 'done' AND transient_failures > 0"
    for table in ("pairs", "samples"):
        conn.execute(
            f"DELETE FROM {table} WHERE item_id IN (SELECT id FROM items WHERE {where})",
            (job_id,),
        )
    return conn.execute(
        "UPDATE items SET state = 'queued', attempts = 0, report = NULL, finished_at = NULL, "
        f"transient_failures = 0, started_by = NULL WHERE {where}",
        (job_id,),
    ).rowcount


def _fail(
    conn: Conn, job_id: str, key: str, error: str, results: ItemResults | None = None
) -> bool:
    rows = _all(
        conn, "SELECT id, position, state FROM items WHERE job_id = ? AND key = ?", (job_id, key)
    )
    if not rows or rows[0][2] in ("done", "failed"):
        return False
    item_id, position = int(rows[0][0]), int(rows[0][1])
    if results is not None:
        _store_results(conn, job_id, item_id, position, results)
    conn.execute(
        "UPDATE items SET state = 'failed', lease_owner = NULL, lease_expires = NULL, "
        "error = ?, finished_at = ?, report = ? WHERE id = ?",
        (
            error,
            time.time(),
            json.dumps(results.report) if results and results.report else None,
            item_id,
        ),
    )
    _forget(conn, job_id, key)
    return True


def _store_results(
    conn: Conn, job_id: str, item_id: int, position: int, results: ItemResults
) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO pairs "
        "(job_id, id, item_id, position, outcome, question, source, record) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [pair_row(job_id, item_id, n, record) for n, record in enumerate(results.pairs)],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO samples (job_id, id, item_id, position, record, scored) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [sample_row(job_id, item_id, position, r, s) for r, s in results.samples],
    )


def _forget(conn: Conn, job_id: str, key: str) -> None:
    """A finished item needs no join state, and its leftover messages no handling."""
    conn.execute("DELETE FROM joins WHERE job_id = ? AND item_key = ?", (job_id, key))
    conn.execute("DELETE FROM messages WHERE job_id = ? AND item_key = ?", (job_id, key))
