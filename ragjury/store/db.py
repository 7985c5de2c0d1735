"""The SQLite store. One file, WAL journal, one connection per process.

Tables:
  runs       one row per command run: its settings, when it started and ended, its summary
  pairs      every judged pair of a generation run, with its outcome and full record
  samples    every judged sample of an evaluation run, with its position in the input
  llm_calls  one row per structured LLM call: stage, model, requests sent (every attempt),
             tokens and cost over every attempt, latency, error
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import aiosqlite

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
CREATE TABLE IF NOT EXISTS pairs (
    run_id TEXT NOT NULL REFERENCES runs(id),
    id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    question TEXT NOT NULL,
    source TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
);
CREATE TABLE IF NOT EXISTS samples (
    run_id TEXT NOT NULL REFERENCES runs(id),
    id TEXT NOT NULL,
    position INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
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
_ADDED_COLUMNS = {"llm_calls": (("model", "TEXT"), ("cost_usd", "REAL"))}


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Store:
    """``async with Store(path) as store:`` opens (and creates) the database."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db: aiosqlite.Connection | None = None

    async def __aenter__(self) -> Store:
        if self.path.parent and not self.path.parent.exists():
            raise ConfigurationError(
                f"cannot create the database {str(self.path)!r}: the folder "
                f"{str(self.path.parent)!r} does not exist; create it or choose another --db"
            )
        try:
            self._db = await aiosqlite.connect(self.path)
            await self._db.execute("PRAGMA journal_mode=WAL")
            await self._db.execute("PRAGMA synchronous=NORMAL")
            await self._db.execute("PRAGMA busy_timeout=10000")
            await self._db.executescript(_SCHEMA)
            await self._add_missing_columns()
            await self._db.commit()
        except aiosqlite.DatabaseError as exc:
            if self._db is not None:
                await self._db.close()
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
            await self._db.commit()
            await self._db.close()
            self._db = None

    async def _add_missing_columns(self) -> None:
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

    async def start_run(self, command: str, settings: dict[str, Any]) -> str:
        run_id = uuid.uuid4().hex
        await self.db.execute(
            "INSERT INTO runs (id, command, started_at, settings) VALUES (?, ?, ?, ?)",
            (run_id, command, _now(), json.dumps(settings, default=str)),
        )
        await self.db.commit()
        return run_id

    async def finish_run(self, run_id: str, summary: dict[str, Any]) -> None:
        await self.db.execute(
            "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
            (_now(), json.dumps(summary, default=str), run_id),
        )
        await self.db.commit()

    async def save_pair(self, run_id: str, record: dict[str, Any]) -> None:
        await self.db.execute(
            "INSERT OR REPLACE INTO pairs (run_id, id, outcome, question, source, record) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                run_id,
                record["id"],
                record["outcome"],
                record["question"],
                record["source"],
                json.dumps(record),
            ),
        )
        await self.db.commit()

    async def save_sample(self, run_id: str, position: int, record: dict[str, Any]) -> None:
        await self.db.execute(
            "INSERT OR REPLACE INTO samples (run_id, id, position, record) VALUES (?, ?, ?, ?)",
            (run_id, record["id"], position, json.dumps(record)),
        )
        await self.db.commit()

    async def samples(self, run_id: str) -> list[dict[str, Any]]:
        async with self.db.execute(
            "SELECT record FROM samples WHERE run_id = ? ORDER BY position", (run_id,)
        ) as cursor:
            return [json.loads(row[0]) async for row in cursor]

    async def record_call(self, run_id: str, stats: CallStats, error: str | None) -> None:
        await self.db.execute(
            "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, completion_tokens, "
            "latency_ms, statuses, error, created_at, model, cost_usd) "
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
        await self.db.commit()

    async def pairs(self, run_id: str) -> list[dict[str, Any]]:
        async with self.db.execute(
            "SELECT record FROM pairs WHERE run_id = ? ORDER BY rowid", (run_id,)
        ) as cursor:
            return [json.loads(row[0]) async for row in cursor]

    async def call_totals(self, run_id: str) -> dict[str, int | float | None]:
        """Requests, tokens and cost of a run's calls; the cost is None if any call's is."""
        async with self.db.execute(
            "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
            "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0), "
            "COUNT(*) - COUNT(cost_usd) FROM llm_calls WHERE run_id = ?",
            (run_id,),
        ) as cursor:
            row = await cursor.fetchone()
        assert row is not None
        return {
            "llm_calls": row[0],
            "prompt_tokens": row[1],
            "completion_tokens": row[2],
            "cost_usd": None if row[4] else row[3],
        }
