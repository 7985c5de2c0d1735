"""The SQLite store: one file, WAL journal, one connection per process.

Several processes may share the file (``ragjury serve`` several times on one machine). Every
change goes through :meth:`SQLiteStore._write`, which holds this process's lock and an
immediate SQLite transaction, so a multi-statement change (claim messages; store an item's
results and mark it done) is atomic across processes too. Leases are measured on the
database's clock (SQLite's ``julianday('now')``), so processes agree on them.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite
import anyio
from pydantic import BaseModel

from ragjury.errors import ConfigurationError, InputError
from ragjury.llm.usage import CallStats
from ragjury.store import _schema
from ragjury.store.base import (
    STATES,
    Claim,
    DedupDecide,
    Item,
    ItemResults,
    ItemsFactory,
    Job,
    JobKind,
    OutgoingMessage,
    QuestionDecision,
    StoredMessage,
)

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_INSERT_ITEM = (
    "INSERT INTO items (job_id, key, position, payload, created_at) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_MESSAGE = (
    "INSERT INTO messages (grp, kind, job_id, item_key, body, available_at, created_at) "
    f"VALUES (?, ?, ?, ?, ?, {_NOW}, {_NOW})"
)
_UNFINISHED = "('queued', 'processing', 'running')"
_PAGE = 200
_writing: ContextVar[bool] = ContextVar("ragjury_sqlite_writing", default=False)
"""True inside this task's write transaction (its reads must not take the lock again)."""


def _iso(timestamp: float | None = None) -> str:
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat()


def _encode(payload: Any) -> str:
    if isinstance(payload, BaseModel):
        return payload.model_dump_json()
    return json.dumps(payload, sort_keys=True)


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" for _ in values)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SQLiteStore:
    """``async with SQLiteStore(path) as store:`` opens (and creates or upgrades) the file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._db: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()

    # opening ------------------------------------------------------------------------
    async def __aenter__(self) -> SQLiteStore:
        memory = str(self.path) == ":memory:"
        if not memory and self.path.parent and not self.path.parent.exists():
            raise ConfigurationError(
                f"cannot create the database {str(self.path)!r}: the folder "
                f"{str(self.path.parent)!r} does not exist; create it or choose another --db"
            )
        try:
            # Autocommit: every transaction is explicit (see _write()).
            self._db = await aiosqlite.connect(self.path, isolation_level=None)
            await self._db.execute("PRAGMA busy_timeout=30000")
            if not memory:
                await self._db.execute("PRAGMA journal_mode=WAL")
            await self._db.execute("PRAGMA synchronous=NORMAL")
            await self._migrate()
        except aiosqlite.DatabaseError as exc:
            await self._close()
            raise ConfigurationError(
                f"cannot use {str(self.path)!r} as a ragjury database: {exc}; "
                "point --db at a new file or an existing ragjury database"
            ) from exc
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._db is not None:
            with anyio.CancelScope(shield=True):
                await self._db.close()
            self._db = None

    async def _migrate(self) -> None:
        db = self.db
        version = int((await self._one("PRAGMA user_version"))[0])
        if version > _schema.VERSION:
            raise ConfigurationError(
                f"{str(self.path)!r} was made by a newer ragjury (database schema {version}; "
                f"this ragjury knows up to {_schema.VERSION}). Upgrade ragjury "
                "(pip install -U ragjury) to use it"
            )
        if version == _schema.VERSION:
            return
        async with self._write():
            pairs = await self._all("PRAGMA table_info(pairs)")
            if pairs and "job_id" not in {row[1] for row in pairs}:
                raise aiosqlite.DatabaseError(
                    "it was made by an older ragjury (before queued jobs); its results can "
                    "still be read with sqlite3"
                )
            existed = bool(pairs)
            for statement in _schema.TABLES.split(";"):
                if statement.strip():
                    await db.execute(statement)
            for table, columns in _schema.ADDED_COLUMNS.items():
                present = {row[1] for row in await self._all(f"PRAGMA table_info({table})")}
                for name, kind in columns:
                    if name not in present:
                        await db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            if existed:
                for statement in _schema.FROM_VERSION_1:
                    await db.execute(statement)
            await db.execute(f"PRAGMA user_version = {_schema.VERSION}")

    # plumbing -----------------------------------------------------------------------
    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("the store is not open; use 'async with SQLiteStore(path)'")
        return self._db

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One atomic write transaction, exclusive within this process and across processes;
        shielded, so a write that began is committed or rolled back, never left half-done."""
        async with self._lock:
            with anyio.CancelScope(shield=True):
                db = self.db
                token = _writing.set(True)
                await db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    await db.execute("ROLLBACK")
                    raise
                finally:
                    _writing.reset(token)
                await db.execute("COMMIT")

    async def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Every row of a query. Outside a write it holds this process's lock: a statement
        left open on the shared connection while another task begins a write would make
        SQLite refuse that write at once (a stale read snapshot), whatever the timeout."""
        if _writing.get():
            return await self._fetch(sql, params)
        async with self._lock:
            return await self._fetch(sql, params)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async with self.db.execute(sql, tuple(params)) as cursor:
            return [tuple(row) for row in await cursor.fetchall()]

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...]:
        rows = await self._all(sql, params)
        assert rows, sql
        return rows[0]

    async def now(self) -> float:
        return float((await self._one(f"SELECT {_NOW}"))[0])

    # runs and calls -----------------------------------------------------------------
    async def start_run(self, command: str, settings: Mapping[str, Any]) -> str:
        run_id = uuid.uuid4().hex
        async with self._write() as db:
            await db.execute(
                "INSERT INTO runs (id, command, started_at, settings) VALUES (?, ?, ?, ?)",
                (run_id, command, _iso(), json.dumps(settings, default=str)),
            )
        return run_id

    async def finish_run(self, run_id: str, summary: Mapping[str, Any]) -> None:
        async with self._write() as db:
            await db.execute(
                "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                (_iso(), json.dumps(summary, default=str), run_id),
            )

    async def record_call(self, run_id: str, stats: CallStats, error: str | None) -> None:
        async with self._lock:  # one statement: atomic on its own
            with anyio.CancelScope(shield=True):
                await self.db.execute(
                    "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, "
                    "completion_tokens, latency_ms, statuses, error, created_at, model, cost_usd) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        stats.stage,
                        stats.requests,
                        stats.prompt_tokens,
                        stats.completion_tokens,
                        round(stats.latency_seconds * 1000, 1),
                        json.dumps(stats.statuses),
                        error,
                        _iso(),
                        stats.model,
                        stats.cost_usd,
                    ),
                )

    async def call_totals(
        self, *, run_id: str | None = None, since: float | None = None
    ) -> dict[str, Any]:
        where, params = "1 = 1", []
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        if since is not None:
            where += " AND created_at >= ?"
            params.append(_iso(since))
        row = await self._one(
            "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
            "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0), "
            f"COUNT(*) - COUNT(cost_usd) FROM llm_calls WHERE {where}",
            params,
        )
        return {
            "llm_calls": row[0],
            "prompt_tokens": row[1],
            "completion_tokens": row[2],
            "cost_usd": None if row[4] else row[3],
            "cost_known_usd": row[3],
        }

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
        digest = hashlib.sha256(json.dumps([kind, options], sort_keys=True, default=str).encode())
        seen: Counter[str] = Counter()
        for key, payload in items():
            seen[key] += 1
            digest.update(b"\0" + key.encode() + b"\0" + _encode(payload).encode())
        repeated = sorted(k for k, n in seen.items() if n > 1)
        if repeated:
            raise InputError(
                f"every {'document' if kind == 'generate' else 'sample'} needs its own id; "
                f"repeated: {', '.join(repeated[:5])}; give each record a unique id"
            )
        if not seen:
            return Job(id="", kind=kind, options=dict(options), created=False, size=0)
        job_key = digest.hexdigest()
        now = time.time()
        async with self._write() as db:
            async with db.execute("SELECT id FROM jobs WHERE key = ?", (job_key,)) as cursor:
                row = await cursor.fetchone()
            if row is not None:
                retried = await self._requeue_transient(db, str(row[0]))
                return Job(str(row[0]), kind, dict(options), size=len(seen), retried=retried)
            job_id = uuid.uuid4().hex[:12]
            await db.execute(
                "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?)",
                (job_id, kind, job_key, json.dumps(options, default=str), _iso(now)[:19]),
            )
            rows: list[tuple[Any, ...]] = []
            held = 0
            for position, (key, payload) in enumerate(items()):
                encoded = _encode(payload)
                rows.append((job_id, key, position, encoded, now))
                held += len(encoded)
                if len(rows) >= batch or held >= batch_bytes:
                    await db.executemany(_INSERT_ITEM, rows)
                    rows.clear()
                    held = 0
            await db.executemany(_INSERT_ITEM, rows)
        return Job(id=job_id, kind=kind, options=dict(options), created=True, size=len(seen))

    @staticmethod
    async def _requeue_transient(db: aiosqlite.Connection, job_id: str) -> int:
        """Put the job's items that finished with endpoint failures back in the queue,
        dropping their stored results; the number put back."""
        where = "job_id = ? AND state = 'done' AND transient_failures > 0"
        for table in ("pairs", "samples"):
            await db.execute(
                f"DELETE FROM {table} WHERE item_id IN (SELECT id FROM items WHERE {where})",
                (job_id,),
            )
        cursor = await db.execute(
            "UPDATE items SET state = 'queued', attempts = 0, report = NULL, finished_at = NULL, "
            f"transient_failures = 0, started_by = NULL WHERE {where}",
            (job_id,),
        )
        return cursor.rowcount

    async def job(self, job_id: str) -> Job:
        rows = await self._all("SELECT kind, options FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise KeyError(job_id)
        return Job(id=job_id, kind=rows[0][0], options=json.loads(rows[0][1]))

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
        where = (
            f"(state = 'queued' OR (state = 'processing' AND lease_expires <= {_NOW} "
            "AND lease_owner != ?))"
        )
        params: list[Any] = [owner]
        if job_ids is not None:
            where += f" AND job_id IN ({_marks(job_ids)})"
            params.extend(job_ids)
        claimed: list[Item] = []
        async with self._write() as db:
            async with db.execute(
                f"SELECT id, job_id, key, position, payload, attempts FROM items WHERE {where} "
                "ORDER BY id LIMIT ?",
                (*params, limit),
            ) as cursor:
                rows = list(await cursor.fetchall())
            for row in rows:
                item_id, attempts = int(row[0]), int(row[5])
                if attempts >= max_attempts:
                    await self._fail(
                        db,
                        str(row[1]),
                        str(row[2]),
                        f"abandoned: {attempts} process(es) took this item and never started "
                        "it (killed or crashed while preparing it); see their logs",
                    )
                    continue
                await db.execute(
                    "UPDATE items SET state = 'processing', lease_owner = ?, "
                    f"lease_expires = {_NOW} + ?, attempts = attempts + 1, started_by = ? "
                    "WHERE id = ?",
                    (owner, lease_seconds, owner, item_id),
                )
                claimed.append(
                    Item(
                        id=item_id,
                        job_id=str(row[1]),
                        key=str(row[2]),
                        position=int(row[3]),
                        payload=json.loads(row[4]),
                        attempts=attempts + 1,
                    )
                )
        return claimed

    async def items_started(self, item_ids: Sequence[int]) -> None:
        if not item_ids:
            return
        async with self._write() as db:
            await db.execute(
                "UPDATE items SET state = 'running', lease_owner = NULL, lease_expires = NULL "
                f"WHERE state = 'processing' AND id IN ({_marks(item_ids)})",
                tuple(item_ids),
            )

    async def release_items(self, owner: str, item_ids: Sequence[int]) -> int:
        if not item_ids:
            return 0
        async with self._write() as db:
            cursor = await db.execute(
                "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL, "
                "attempts = MAX(attempts - 1, 0), started_by = NULL "
                f"WHERE lease_owner = ? AND state = 'processing' AND id IN ({_marks(item_ids)})",
                (owner, *item_ids),
            )
            return cursor.rowcount

    async def unfinished_items(self, owner: str) -> int:
        row = await self._one(
            "SELECT COUNT(*) FROM items "
            "WHERE started_by = ? AND state IN ('processing', 'running')",
            (owner,),
        )
        return int(row[0])

    async def finish_item(self, job_id: str, key: str, results: ItemResults) -> bool:
        async with self._write() as db:
            rows = await self._all(
                "SELECT id, position, state FROM items WHERE job_id = ? AND key = ?",
                (job_id, key),
            )
            if not rows or rows[0][2] in ("done", "failed"):
                return False
            item_id, position = int(rows[0][0]), int(rows[0][1])
            await self._store_results(db, job_id, item_id, position, results)
            await db.execute(
                "UPDATE items SET state = 'done', lease_owner = NULL, lease_expires = NULL, "
                "report = ?, finished_at = ?, transient_failures = ? WHERE id = ?",
                (
                    json.dumps(results.report or {}),
                    time.time(),
                    results.transient_failures,
                    item_id,
                ),
            )
            await self._forget(db, job_id, key)
        return True

    async def fail_item(
        self, job_id: str, key: str, error: str, results: ItemResults | None = None
    ) -> bool:
        async with self._write() as db:
            return await self._fail(db, job_id, key, error, results)

    async def _fail(
        self,
        db: aiosqlite.Connection,
        job_id: str,
        key: str,
        error: str,
        results: ItemResults | None = None,
    ) -> bool:
        rows = await self._all(
            "SELECT id, position, state FROM items WHERE job_id = ? AND key = ?", (job_id, key)
        )
        if not rows or rows[0][2] in ("done", "failed"):
            return False
        item_id, position = int(rows[0][0]), int(rows[0][1])
        if results is not None:
            await self._store_results(db, job_id, item_id, position, results)
        await db.execute(
            "UPDATE items SET state = 'failed', lease_owner = NULL, lease_expires = NULL, "
            "error = ?, finished_at = ?, report = ? WHERE id = ?",
            (
                error,
                time.time(),
                json.dumps(results.report) if results and results.report else None,
                item_id,
            ),
        )
        await self._forget(db, job_id, key)
        return True

    @staticmethod
    async def _store_results(
        db: aiosqlite.Connection, job_id: str, item_id: int, position: int, results: ItemResults
    ) -> None:
        await db.executemany(
            "INSERT OR REPLACE INTO pairs "
            "(job_id, id, item_id, position, outcome, question, source, record) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    job_id,
                    record["id"],
                    item_id,
                    index,
                    record["outcome"],
                    record["question"],
                    record["source"],
                    json.dumps(record, ensure_ascii=False),
                )
                for index, record in enumerate(results.pairs)
            ],
        )
        await db.executemany(
            "INSERT OR REPLACE INTO samples (job_id, id, item_id, position, record, scored) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                (job_id, record["id"], item_id, position, json.dumps(record, ensure_ascii=False), s)
                for record, s in results.samples
            ],
        )

    @staticmethod
    async def _forget(db: aiosqlite.Connection, job_id: str, key: str) -> None:
        """A finished item needs no join state, and its leftover messages no handling."""
        await db.execute("DELETE FROM joins WHERE job_id = ? AND item_key = ?", (job_id, key))
        await db.execute("DELETE FROM messages WHERE job_id = ? AND item_key = ?", (job_id, key))

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]:
        sql, params = "SELECT state, COUNT(*) FROM items", tuple(job_ids or ())
        if job_ids is not None:
            sql += f" WHERE job_id IN ({_marks(job_ids)})"
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for state, n in await self._all(sql + " GROUP BY state", params):
            name = "processing" if state == "running" else str(state)
            counts[name] += int(n)
        return counts

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int:
        sql = f"SELECT COUNT(*) FROM items WHERE state IN {_UNFINISHED}"
        params = tuple(job_ids or ())
        if job_ids is not None:
            sql += f" AND job_id IN ({_marks(job_ids)})"
        return int((await self._one(sql, params))[0])

    async def reports(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self._all(
            "SELECT report FROM items WHERE job_id = ? AND report IS NOT NULL ORDER BY position",
            (job_id,),
        )
        return [json.loads(row[0]) for row in rows]

    async def failed_items(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self._all(
            "SELECT key, error FROM items WHERE job_id = ? AND state = 'failed' ORDER BY position",
            (job_id,),
        )
        return [{"item": key, "error": error} for key, error in rows]

    async def pair_outcomes(self, job_id: str) -> dict[str, int]:
        rows = await self._all(
            "SELECT outcome, COUNT(*) FROM pairs WHERE job_id = ? GROUP BY outcome", (job_id,)
        )
        return {str(outcome): int(n) for outcome, n in rows}

    def pairs(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        return self._records("pairs", job_ids)

    def samples(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        return self._records("samples", job_ids)

    async def scored(self, job_id: str) -> AsyncIterator[str]:
        sql = (
            "SELECT scored AS value, 0 AS k1, position AS k2, rowid AS k3 FROM samples "
            "WHERE job_id = ?"
        )
        async for value in self._pages(sql, (job_id,)):
            yield str(value)

    async def _records(
        self, table: str, job_ids: Sequence[str] | None
    ) -> AsyncIterator[dict[str, Any]]:
        sql = (
            f"SELECT r.record AS value, j.rowid AS k1, i.position AS k2, r.position AS k3 "
            f"FROM {table} r JOIN items i ON i.id = r.item_id JOIN jobs j ON j.id = r.job_id"
        )
        params: tuple[Any, ...] = ()
        if job_ids is not None:
            sql += f" WHERE r.job_id IN ({_marks(job_ids)})"
            params = tuple(job_ids)
        async for value in self._pages(sql, params):
            yield json.loads(value)

    async def _pages(self, sql: str, params: tuple[Any, ...]) -> AsyncIterator[Any]:
        """``value`` of ``sql`` (which selects ``value, k1, k2, k3``) in (k1, k2, k3) order,
        a page at a time: no statement stays open between pages, and each page starts where
        the last ended (no OFFSET to scan again)."""
        page = f"SELECT value, k1, k2, k3 FROM ({sql}) WHERE (k1, k2, k3) > (?, ?, ?) "
        page += f"ORDER BY k1, k2, k3 LIMIT {_PAGE}"
        after: tuple[Any, ...] = (-1, -1, -1)
        while True:
            rows = await self._all(page, (*params, *after))
            for row in rows:
                yield row[0]
            if len(rows) < _PAGE:
                return
            after = tuple(rows[-1][1:])

    # the durable bus ----------------------------------------------------------------
    async def put_messages(self, messages: Sequence[OutgoingMessage]) -> None:
        if not messages:
            return
        async with self._write() as db:
            await db.executemany(_INSERT_MESSAGE, [_row(m) for m in messages])

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
        claim = Claim()
        if limit <= 0 or not groups:
            return claim
        where = f"grp IN ({_marks(groups)}) AND available_at <= {_NOW}"
        params: list[Any] = list(groups)
        if job_ids is not None:
            where += f" AND job_id IN ({_marks(job_ids)})"
            params.extend(job_ids)
        async with self._write() as db:
            rows = await self._all(
                "SELECT id, grp, body, attempts, job_id, item_key, last_error FROM messages "
                f"WHERE {where} ORDER BY id LIMIT ?",
                (*params, limit),
            )
            taken: list[int] = []
            for message_id, group, body, attempts, job_id, key, last_error in rows:
                if attempts >= max_attempts:
                    claim.dead += 1
                    await self._dead(db, message_id, group, job_id, key, attempts, last_error)
                    continue
                taken.append(int(message_id))
                claim.messages.append(
                    StoredMessage(
                        int(message_id), str(group), str(body), int(attempts) + 1, job_id, key
                    )
                )
            if taken:
                await db.execute(
                    f"UPDATE messages SET lease_owner = ?, available_at = {_NOW} + ?, "
                    f"attempts = attempts + 1 WHERE id IN ({_marks(taken)})",
                    (owner, lease_seconds, *taken),
                )
        return claim

    async def _dead(
        self,
        db: aiosqlite.Connection,
        message_id: int,
        group: str,
        job_id: str,
        key: str,
        attempts: int,
        last_error: str | None,
    ) -> None:
        why = last_error or "its worker died each time (killed, or crashed the process)"
        await db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        await self._fail(
            db,
            job_id,
            key,
            f"poison message: the {group} agent was given this item's message {attempts} "
            f"time(s) and never finished it; last error: {why}",
        )

    async def ack_message(self, message_id: int, replies: Sequence[OutgoingMessage]) -> None:
        async with self._write() as db:
            if replies:
                first = replies[0]
                rows = await self._all(
                    "SELECT state FROM items WHERE job_id = ? AND key = ?",
                    (first.job_id, first.item_key),
                )
                if not rows or rows[0][0] not in ("done", "failed"):
                    await db.executemany(_INSERT_MESSAGE, [_row(m) for m in replies])
            await db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    async def nack_message(
        self, message_id: int, error: str, *, max_attempts: int, retry_after: float
    ) -> bool:
        async with self._write() as db:
            rows = await self._all(
                "SELECT grp, job_id, item_key, attempts FROM messages WHERE id = ?", (message_id,)
            )
            if not rows:
                return False
            if int(rows[0][3]) >= max_attempts:
                await db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
                return True
            await db.execute(
                f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW} + ?, "
                "last_error = ? WHERE id = ?",
                (retry_after, error, message_id),
            )
            return False

    async def renew_messages(
        self, owner: str, message_ids: Sequence[int], lease_seconds: float
    ) -> None:
        if not message_ids:
            return
        async with self._write() as db:
            await db.execute(
                f"UPDATE messages SET available_at = {_NOW} + ? WHERE lease_owner = ? "
                f"AND id IN ({_marks(message_ids)})",
                (lease_seconds, owner, *message_ids),
            )

    async def release_messages(self, owner: str, message_ids: Sequence[int]) -> None:
        if not message_ids:
            return
        async with self._write() as db:
            await db.execute(
                f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW}, "
                "attempts = MAX(attempts - 1, 0) "
                f"WHERE lease_owner = ? AND id IN ({_marks(message_ids)})",
                (owner, *message_ids),
            )

    async def waiting_messages(self) -> dict[str, int]:
        rows = await self._all("SELECT grp, COUNT(*) FROM messages GROUP BY grp ORDER BY grp")
        return {str(group): int(n) for group, n in rows}

    # join state ---------------------------------------------------------------------
    async def join(
        self, job_id: str, item_key: str, parts: Mapping[str, str], prefix: str
    ) -> dict[str, str]:
        # [prefix, prefix with its last character raised): an index range, unlike LIKE
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        async with self._write() as db:
            await db.executemany(
                "INSERT OR IGNORE INTO joins (job_id, item_key, name, value) VALUES (?, ?, ?, ?)",
                [(job_id, item_key, name, value) for name, value in parts.items()],
            )
            rows = await self._all(
                "SELECT name, value FROM joins WHERE job_id = ? AND item_key = ? "
                "AND name >= ? AND name < ?",
                (job_id, item_key, prefix, upper),
            )
        return {str(name): str(value) for name, value in rows}

    async def decide_questions(
        self,
        job_id: str,
        pairs: Sequence[tuple[str, str]],
        since: int,
        decide: DedupDecide,
    ) -> tuple[list[QuestionDecision], int]:
        ids = [pair_id for pair_id, _ in pairs]
        async with self._write() as db:
            stored = {
                str(row[0]): QuestionDecision(str(row[0]), row[1], row[2])
                for row in await self._all(
                    "SELECT pair_id, duplicate_of, similarity FROM questions "
                    f"WHERE job_id = ? AND pair_id IN ({_marks(ids)})",
                    (job_id, *ids),
                )
            }
            new = [(pid, q) for pid, q in pairs if pid not in stored]
            if not new:
                return [stored[pid] for pid in ids], since
            seen = [
                (int(row[0]), str(row[1]), str(row[2]))
                for row in await self._all(
                    "SELECT id, pair_id, question FROM questions WHERE job_id = ? "
                    "AND duplicate_of IS NULL AND id > ? ORDER BY id",
                    (job_id, since),
                )
            ]
            decisions = decide(seen, new)
            questions = dict(new)
            await db.executemany(
                "INSERT INTO questions (job_id, pair_id, question, duplicate_of, similarity) "
                "VALUES (?, ?, ?, ?, ?)",
                [
                    (job_id, d.pair_id, questions[d.pair_id], d.duplicate_of, d.similarity)
                    for d in decisions
                ],
            )
            cursor = int((await self._one("SELECT COALESCE(MAX(id), 0) FROM questions"))[0])
        by_id = {**stored, **{d.pair_id: d for d in decisions}}
        return [by_id[pid] for pid in ids], cursor

    # the step cache -----------------------------------------------------------------
    async def item_payload(self, job_id: str, key: str) -> dict[str, Any] | None:
        rows = await self._all(
            "SELECT payload FROM items WHERE job_id = ? AND key = ?", (job_id, key)
        )
        return json.loads(rows[0][0]) if rows else None

    async def get_step(self, key: str) -> str | None:
        rows = await self._all("SELECT output FROM steps WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    async def put_step(self, key: str, agent: str, output: str) -> None:
        async with self._lock:  # one statement: atomic on its own
            with anyio.CancelScope(shield=True):
                await self.db.execute(
                    "INSERT OR REPLACE INTO steps (key, agent, output, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (key, agent, output, time.time()),
                )

    # workers ------------------------------------------------------------------------
    async def register_worker(self, owner: str, agents: Sequence[str]) -> int:
        host, released = socket.gethostname(), 0
        async with self._write() as db:
            for other, pid in await self._all(
                "SELECT owner, pid FROM workers WHERE host = ? AND owner != ?", (host, owner)
            ):
                if _alive(int(pid)) and int(pid) != os.getpid():
                    continue
                # A process of this host that is gone: what it held is free now, not when
                # its leases run out. Its deliveries still count as attempts.
                cursor = await db.execute(
                    f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW} "
                    "WHERE lease_owner = ?",
                    (other,),
                )
                released += cursor.rowcount
                cursor = await db.execute(
                    "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL "
                    "WHERE lease_owner = ? AND state = 'processing'",
                    (other,),
                )
                released += cursor.rowcount
                await db.execute("DELETE FROM workers WHERE owner = ?", (other,))
            await db.execute(
                "INSERT OR REPLACE INTO workers (owner, host, pid, agents, started_at, heartbeat) "
                f"VALUES (?, ?, ?, ?, {_NOW}, {_NOW})",
                (owner, host, os.getpid(), ",".join(agents)),
            )
        return released

    async def heartbeat(self, owner: str) -> None:
        async with self._write() as db:
            await db.execute(f"UPDATE workers SET heartbeat = {_NOW} WHERE owner = ?", (owner,))

    async def unregister_worker(self, owner: str) -> None:
        async with self._write() as db:
            await db.execute("DELETE FROM workers WHERE owner = ?", (owner,))

    async def status(self) -> dict[str, Any]:
        from ragjury.store._status import status  # the read-only report lives on its own

        return await status(self)

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read-only query (for :mod:`ragjury.store._status` and tests)."""
        return await self._all(sql, params)


def _row(message: OutgoingMessage) -> tuple[str, str, str, str, str]:
    return (message.group, message.kind, message.job_id, message.item_key, message.body)
