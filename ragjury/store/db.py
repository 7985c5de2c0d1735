"""The SQLite store. One file, WAL journal, one connection per process.

Tables:
  runs       one row per command run: its settings, when it started and ended, its summary
  jobs       one row per submitted batch (a `generate`, `evaluate` or `submit`): its options
  items      the intake queue: one document or sample per row, with its state and lease
  pairs      every judged pair of a finished generation item, in export form
  samples    every judged sample of a finished evaluation item, in export form
  steps      the step cache: an agent step's output, keyed by a hash of what shapes it
  llm_calls  one row per structured LLM call: stage, model, requests sent (every attempt),
             tokens and cost over every attempt, latency, error

Several processes may share the file (``ragjury serve`` twice). Writes go through
:meth:`Store.write`, which holds this process's lock and an immediate SQLite transaction, so
a multi-statement change (claim a batch of items; store an item's results and mark it done)
is atomic across processes too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import aiosqlite
import anyio

from ragjury.errors import ConfigurationError
from ragjury.llm.usage import CallStats

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    command TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    settings TEXT NOT NULL,
    summary TEXT
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL UNIQUE,
    options TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',
    lease_owner TEXT,
    lease_expires REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    transient_failures INTEGER NOT NULL DEFAULT 0,
    report TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    finished_at REAL,
    UNIQUE (job_id, key)
);
CREATE INDEX IF NOT EXISTS items_state ON items(state, id);
CREATE TABLE IF NOT EXISTS pairs (
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    item_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    question TEXT NOT NULL,
    source TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (job_id, id)
);
CREATE TABLE IF NOT EXISTS samples (
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    item_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    record TEXT NOT NULL,
    scored TEXT NOT NULL,
    PRIMARY KEY (job_id, id)
);
CREATE TABLE IF NOT EXISTS steps (
    key TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    output TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    requests INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms REAL NOT NULL,
    statuses TEXT NOT NULL,
    error TEXT,
    created_at TEXT NOT NULL,
    model TEXT,
    cost_usd REAL
);
CREATE INDEX IF NOT EXISTS llm_calls_run ON llm_calls(run_id, stage);
"""
# Columns added after the first release: a database made before them gets them on open.
_ADDED_COLUMNS = {
    "llm_calls": (("model", "TEXT"), ("cost_usd", "REAL")),
    "items": (("transient_failures", "INTEGER NOT NULL DEFAULT 0"),),
}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Store:
    """``async with Store(path) as store:`` opens (and creates) the database."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None
        self._lock = anyio.Lock()

    async def __aenter__(self) -> Store:
        if self.path.parent and not self.path.parent.exists():
            raise ConfigurationError(
                f"cannot create the database {str(self.path)!r}: the folder "
                f"{str(self.path.parent)!r} does not exist; create it or choose another --db"
            )
        try:
            # Autocommit: every transaction is explicit (see write()).
            self._db = await aiosqlite.connect(self.path, isolation_level=None)
            await self._db.execute("PRAGMA busy_timeout=30000")
            await self._db.execute("PRAGMA journal_mode=WAL")
            await self._db.execute("PRAGMA synchronous=NORMAL")
            await self._db.executescript(_SCHEMA)
            await self._add_missing_columns()
        except aiosqlite.DatabaseError as exc:
            if self._db is not None:
                await self._db.close()
                self._db = None
            raise ConfigurationError(
                f"cannot use {str(self.path)!r} as a ragjury database: {exc}; "
                "point --db at a new file or an existing ragjury database"
            ) from exc
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._db is not None:
            with anyio.CancelScope(shield=True):
                await self._db.close()
            self._db = None

    async def _add_missing_columns(self) -> None:
        async with self.db.execute("PRAGMA table_info(pairs)") as cursor:
            if "job_id" not in {row[1] async for row in cursor}:
                raise aiosqlite.DatabaseError(
                    "it was made by an older ragjury (before queued jobs); its results can still "
                    "be read with sqlite3"
                )
        for table, columns in _ADDED_COLUMNS.items():
            async with self.db.execute(f"PRAGMA table_info({table})") as cursor:
                present = {row[1] async for row in cursor}
            for name, kind in columns:
                if name not in present:
                    await self.db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("the store is not open; use 'async with Store(path)'")
        return self._db

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One atomic write transaction, exclusive within this process and across processes.

        Shielded from cancellation, so a write that began is committed or rolled back, never
        left half-done on the shared connection."""
        async with self._lock:
            with anyio.CancelScope(shield=True):
                db = self.db
                await db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    await db.execute("ROLLBACK")
                    raise
                await db.execute("COMMIT")

    async def write_one(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """One statement, atomic on its own (autocommit): a single step of the cache or one
        call record. Cheaper than :meth:`write`, which costs two more round trips to the
        database thread; it still waits for this process's open transaction to end."""
        async with self._lock:
            with anyio.CancelScope(shield=True):
                await self.db.execute(sql, params)

    async def fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self.db.execute(sql, params) as cursor:
            return [tuple(row) for row in await cursor.fetchall()]

    async def fetchone(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        async with self.db.execute(sql, params) as cursor:
            row = await cursor.fetchone()
        return None if row is None else tuple(row)

    async def start_run(self, command: str, settings: dict[str, Any]) -> str:
        run_id = uuid.uuid4().hex
        async with self.write() as db:
            await db.execute(
                "INSERT INTO runs (id, command, started_at, settings) VALUES (?, ?, ?, ?)",
                (run_id, command, _now(), json.dumps(settings, default=str)),
            )
        return run_id

    async def finish_run(self, run_id: str, summary: dict[str, Any]) -> None:
        async with self.write() as db:
            await db.execute(
                "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                (_now(), json.dumps(summary, default=str), run_id),
            )

    async def record_call(self, run_id: str, stats: CallStats, error: str | None) -> None:
        await self.write_one(
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
                _now(),
                stats.model,
                stats.cost_usd,
            ),
        )

    async def call_totals(self, run_id: str) -> dict[str, int | float | None]:
        """Requests, tokens and cost of a run's calls; the cost is None if any call's is."""
        row = await self.fetchone(
            "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
            "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0), "
            "COUNT(*) - COUNT(cost_usd) FROM llm_calls WHERE run_id = ?",
            (run_id,),
        )
        assert row is not None
        return {
            "llm_calls": row[0],
            "prompt_tokens": row[1],
            "completion_tokens": row[2],
            "cost_usd": None if row[4] else row[3],
        }
