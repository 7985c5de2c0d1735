"""The PostgreSQL store: the queue, the durable bus and the results on a database server, so
agent workers on many machines share one job.

* Driver: asyncpg (the ``postgres`` extra), through a connection pool sized by the caller
  (from ``--concurrency``).
* Claims take rows with ``FOR UPDATE SKIP LOCKED``: concurrent workers never get the same
  message or item, and never wait on each other's locks.
* Operations that read then write one item's state (finish, fail, acknowledge with replies,
  join) are serialised per item by a transaction-scoped advisory lock; the deduplicator's
  step per job likewise.
* Leases and "now" are on the server's clock.
* Publishing notifies ``LISTEN``-ing processes (:meth:`PostgresStore.watch`), so idle
  workers wake without polling fast.
* A lost connection (the server restarted, the network dropped) is retried with backoff;
  the transaction that was cut off rolled back, so it runs again whole.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import structlog

from ragjury.errors import ConfigurationError, StoreUnavailableError
from ragjury.llm.ratelimit import wait_for
from ragjury.llm.usage import CallStats
from ragjury.store import _pg_schema
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
from ragjury.urls import redacted

T = TypeVar("T")
Conn = Any
"""An ``asyncpg.Connection`` (asyncpg ships no type hints)."""
Row = tuple[Any, ...]

log = structlog.get_logger("ragjury.store")

CHANNEL = "ragjury_messages"
_NOW = "(EXTRACT(EPOCH FROM clock_timestamp())::float8)"
_UNFINISHED = list(UNFINISHED_STATES)
_INSERT_MESSAGES = (
    "WITH new AS (INSERT INTO messages "
    "(grp, kind, job_id, item_key, body, available_at, created_at) "
    f"SELECT g, k, j, i, b, {_NOW}, {_NOW} "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS t(g, k, j, i, b) "
    "RETURNING grp) "
    f"SELECT pg_notify('{CHANNEL}', grp) FROM (SELECT DISTINCT grp FROM new) AS groups"
)
_INSERT_CALL = (
    "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, completion_tokens, "
    "latency_ms, statuses, error, created_at, model, cost_usd) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
)
_RETRY_FIRST, _RETRY_MAX = 0.2, 5.0


def pool_size_for(concurrency: int) -> int:
    """Connections for a process sending ``concurrency`` LLM requests at once: a database
    operation takes a millisecond or so against a request's hundreds, so a quarter of them
    (plus two for the intake and the bus) keeps every worker fed; at most 32."""
    return max(4, min(32, concurrency // 4 + 2))


def _driver() -> Any:
    try:
        import asyncpg
    except ImportError as exc:  # the postgres extra is not installed
        raise ConfigurationError(
            "a postgresql:// --db needs the asyncpg driver, in ragjury's postgres extra: "
            "pip install 'ragjury[postgres]'"
        ) from exc
    return asyncpg


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection or the server went away, or the server cannot
    take the work just now (try again), as opposed to a mistake in what was asked (raise)."""
    asyncpg = _driver()
    if isinstance(exc, OSError | TimeoutError | ConnectionError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        # 08: connection exceptions; 57P: shutdown, crash, cannot connect now; 53: too many
        # connections, out of memory or disk; 40001/40P01: a serialization failure or a
        # deadlock, whose transaction was rolled back whole
        return state.startswith(("08", "57P", "53")) or state in ("40001", "40P01")
    if isinstance(exc, asyncpg.InterfaceError | asyncpg.InternalClientError):
        return "closed" in str(exc) or "connection" in str(exc).lower()
    return False


def _numbered(sql: str) -> str:
    """``?`` placeholders (the SQL the status report shares with SQLite) as ``$1, $2...``."""
    count = iter(range(1, 10_000))
    return re.sub(r"\?", lambda _: f"${next(count)}", sql)


class PostgresStore:
    """``async with PostgresStore(url) as store:`` connects, and creates or upgrades the
    schema. ``url`` is a ``postgresql://user@host:port/database`` URL; its password may also
    come from ``PGPASSWORD`` or a ``.pgpass`` file (as for psql). No password is kept
    anywhere but in the driver's connection settings."""

    job_order = "seq"

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        reconnect_seconds: float = 600.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.location = redacted(url)
        self.pool_size = pool_size
        self.reconnect_seconds = reconnect_seconds
        self.connect_timeout = connect_timeout
        self._pool: Any = None
        self._listener: Any = None
        self._watchers: list[Callable[[str], None]] = []
        self._unreachable_since: float | None = None

    # opening ------------------------------------------------------------------------
    def _connect_options(self) -> dict[str, Any]:
        return {
            "dsn": self.url,
            "timeout": self.connect_timeout,
            "server_settings": {
                "search_path": _pg_schema.SCHEMA,
                "application_name": f"ragjury@{socket.gethostname()}",
            },
        }

    async def __aenter__(self) -> PostgresStore:
        asyncpg = _driver()
        try:
            self._pool = await asyncpg.create_pool(
                min_size=1,
                max_size=self.pool_size,
                command_timeout=300,
                max_inactive_connection_lifetime=120,
                **self._connect_options(),
            )
            async with self._pool.acquire() as conn:
                await self._migrate(conn)
        except ConfigurationError:
            await self._close()
            raise
        except Exception as exc:
            await self._close()
            raise ConfigurationError(self._cannot_open(exc)) from exc
        except BaseException:
            await self._close()
            raise
        return self

    def _cannot_open(self, exc: Exception) -> str:
        asyncpg = _driver()
        where = f"the PostgreSQL database {self.location}"
        if isinstance(
            exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
        ):
            return (
                f"cannot log in to {where}: {exc}; give the password in the URL, in "
                "PGPASSWORD, or in a ~/.pgpass file"
            )
        if isinstance(exc, asyncpg.InvalidCatalogNameError):
            return f"{where} does not exist: {exc}; create it (createdb) or fix the URL"
        if isinstance(exc, asyncpg.InsufficientPrivilegeError):
            return (
                f"cannot set up ragjury's tables in {where}: {exc}; ragjury keeps them in a "
                "schema named 'ragjury': grant CREATE on the database, or create that schema "
                "for this user"
            )
        if _lost(exc):
            reason = str(exc) or type(exc).__name__
            return (
                f"cannot connect to {where}: {reason}; check that the server is running and "
                "that host and port in --db are right"
            )
        return f"cannot use {where}: {type(exc).__name__}: {exc}"

    async def _migrate(self, conn: Conn) -> None:
        await conn.execute(f"SELECT pg_advisory_lock({_pg_schema.MIGRATION_LOCK})")
        try:
            await conn.execute(_pg_schema.META)
            value = await conn.fetchval("SELECT value FROM meta WHERE key = 'schema_version'")
            version = int(value or 0)
            if version > _pg_schema.VERSION:
                raise ConfigurationError(
                    f"{self.location} was made by a newer ragjury (database schema {version}; "
                    f"this ragjury knows up to {_pg_schema.VERSION}). Upgrade ragjury "
                    "(pip install -U 'ragjury[postgres]') to use it"
                )
            await migrate(conn, version, _pg_schema.VERSION)
        finally:
            await conn.execute(f"SELECT pg_advisory_unlock({_pg_schema.MIGRATION_LOCK})")

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._listener is not None:
                listener, self._listener = self._listener, None
                with anyio.move_on_after(5):
                    await listener.close()
            if self._pool is not None:
                pool, self._pool = self._pool, None
                with anyio.move_on_after(10):
                    await pool.close()
                pool.terminate()

    # plumbing -----------------------------------------------------------------------
    async def _run(self, fn: Callable[[Conn], Awaitable[T]], *, transaction: bool = True) -> T:
        """``fn`` with a pooled connection (in a transaction), again with backoff while the
        server cannot be reached. An attempt that began is shielded from cancellation, so it
        ends committed or rolled back; the waits between attempts are not."""
        if self._pool is None:
            raise RuntimeError("the store is not open; use 'async with PostgresStore(url)'")
        delay = _RETRY_FIRST
        while True:
            try:
                with anyio.CancelScope(shield=True):
                    async with self._pool.acquire(timeout=self.connect_timeout) as conn:
                        if not transaction:
                            result = await fn(conn)
                        else:
                            async with conn.transaction():
                                result = await fn(conn)
            except Exception as exc:
                if not _lost(exc):
                    raise
                await self._unreachable(exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            if self._unreachable_since is not None:
                log.warning(
                    "database_reachable_again",
                    db=self.location,
                    after_seconds=round(time.monotonic() - self._unreachable_since, 1),
                )
                self._unreachable_since = None
            return result

    async def _unreachable(self, exc: Exception) -> None:
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            log.warning(
                "database_unreachable",
                db=self.location,
                error=str(exc) or type(exc).__name__,
                retrying_for_seconds=self.reconnect_seconds,
            )
        elif now - self._unreachable_since > self.reconnect_seconds:
            raise StoreUnavailableError(
                f"the database {self.location} could not be reached for "
                f"{self.reconnect_seconds:.0f} s (last: {exc or type(exc).__name__}); what is "
                "finished is stored, the rest stays queued: start again when it is back"
            ) from exc

    async def _fetch(self, sql: str, *params: Any) -> list[Row]:
        rows = await self._run(lambda c: c.fetch(sql, *params), transaction=False)
        return [tuple(row) for row in rows]

    async def _execute(self, sql: str, *params: Any) -> str:
        result: str = await self._run(lambda c: c.execute(sql, *params), transaction=False)
        return result

    async def now(self) -> float:
        return float((await self._fetch(f"SELECT {_NOW}"))[0][0])

    async def take_rate(
        self,
        key: str,
        amount: float,
        *,
        per_second: float,
        capacity: float,
        at_most: float | None = None,
    ) -> float:
        # one statement: the row's lock (ON CONFLICT) makes concurrent takes queue up
        level = await self._run(
            lambda c: c.fetchval(
                f"WITH t AS (SELECT {_NOW} AS now) "
                "INSERT INTO rate_buckets AS b (key, level, stamp) "
                "SELECT $1, LEAST(LEAST($4, COALESCE($5::float8, 'Infinity')) - $2, $4), t.now "
                "FROM t ON CONFLICT (key) DO UPDATE SET "
                "level = LEAST(LEAST(LEAST(b.level + (EXCLUDED.stamp - b.stamp) * $3, $4), "
                "COALESCE($5::float8, 'Infinity')) - $2, $4), stamp = EXCLUDED.stamp "
                "RETURNING level",
                key,
                float(amount),
                float(per_second),
                float(capacity),
                None if at_most is None else float(at_most),
            ),
            transaction=False,
        )
        return wait_for(float(level), per_second)

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows of a read-only query written with ``?`` placeholders (the status report)."""
        return await self._fetch(_numbered(sql), *params)

    # waking idle workers --------------------------------------------------------------
    async def watch(self, wake: Callable[[str], None]) -> bool:
        """Call ``wake(group)`` whenever any process puts messages for ``group`` (and
        ``wake("*")`` when the watch starts again after a lost connection, as messages may
        have been missed). True while the watch is live; call again to restore it."""
        if wake not in self._watchers:
            self._watchers.append(wake)
        if self._listener is not None and not self._listener.is_closed():
            return True
        asyncpg = _driver()
        try:
            listener = await asyncpg.connect(**self._connect_options())
            await listener.add_listener(CHANNEL, self._notified)
        except Exception as exc:
            if _lost(exc):
                return False
            raise
        restored = self._listener is not None
        self._listener = listener
        if restored:
            for watcher in list(self._watchers):
                watcher("*")
        return True

    def unwatch(self, wake: Callable[[str], None]) -> None:
        if wake in self._watchers:
            self._watchers.remove(wake)

    def _notified(self, _conn: object, _pid: int, _channel: str, group: str) -> None:
        for watcher in list(self._watchers):
            watcher(group)

    # runs and calls -----------------------------------------------------------------
    async def start_run(self, command: str, settings: Mapping[str, Any]) -> str:
        run_id = uuid.uuid4().hex
        text = json.dumps(settings, default=str)
        host, pid = socket.gethostname(), os.getpid()

        async def start(conn: Conn) -> None:
            for other, other_pid in await conn.fetch(
                "SELECT id, pid FROM runs WHERE host = $1 AND finished_at IS NULL", host
            ):
                if other_pid is None or alive(int(other_pid)):
                    continue
                await conn.execute(
                    "UPDATE runs SET finished_at = $1, summary = $2 WHERE id = $3",
                    iso(),
                    json.dumps({"killed": True, "pid": other_pid}),
                    other,
                )
                await conn.execute(
                    "UPDATE llm_calls SET error = $1 WHERE run_id = $2 AND error = $3",
                    KILLED,
                    other,
                    IN_FLIGHT,
                )
            await conn.execute(
                "INSERT INTO runs (id, command, started_at, settings, host, pid) "
                "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
                run_id,
                command,
                iso(),
                text,
                host,
                pid,
            )

        await self._run(start)
        return run_id

    async def finish_run(self, run_id: str, summary: Mapping[str, Any]) -> None:
        text = json.dumps(summary, default=str)
        await self._execute(
            "UPDATE runs SET finished_at = $1, summary = $2 WHERE id = $3", iso(), text, run_id
        )

    async def open_call(self, run_id: str, stats: CallStats) -> int:
        row = (run_id, stats.stage, 0, 0, 0, 0.0, "[]", IN_FLIGHT, iso(), stats.model, None)
        record = await self._run(
            lambda c: c.fetchval(_INSERT_CALL + " RETURNING id", *row), transaction=False
        )
        return int(record)

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
            await self._execute(_INSERT_CALL, *row)
            return
        await self._execute(
            "UPDATE llm_calls SET run_id = $1, stage = $2, requests = $3, prompt_tokens = $4, "
            "completion_tokens = $5, latency_ms = $6, statuses = $7, error = $8, "
            "created_at = $9, model = $10, cost_usd = $11 WHERE id = $12",
            *row,
            stats.record,
        )

    async def latest_run(self, job_id: str) -> RunRecord | None:
        rows = await self._fetch(
            "SELECT id, command, started_at, finished_at, settings, summary FROM runs "
            "WHERE summary LIKE $1 ORDER BY finished_at DESC, started_at DESC",
            job_summary_pattern(job_id),
        )
        return latest_run_of(rows, job_id)

    async def call_totals(
        self, *, run_id: str | None = None, since: float | None = None
    ) -> dict[str, Any]:
        where, params = ["TRUE"], list[Any]()
        if run_id is not None:
            params.append(run_id)
            where.append(f"run_id = ${len(params)}")
        if since is not None:
            params.append(iso(since))
            where.append(f"created_at >= ${len(params)}")
        [row] = await self._fetch(
            "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
            "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0), "
            f"COUNT(*) - COUNT(cost_usd) FROM llm_calls WHERE {' AND '.join(where)}",
            *params,
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
        text = json.dumps(options, default=str)

        async def submit(conn: Conn) -> Job:
            now = time.time()
            job_id = uuid.uuid4().hex[:12]
            inserted = await conn.fetchval(
                "INSERT INTO jobs (id, kind, key, options, created_at) "
                "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO NOTHING RETURNING id",
                job_id,
                kind,
                key_of_job,
                text,
                iso(now)[:19],
            )
            if inserted is None:  # the same job exists (maybe submitted a moment ago)
                found = str(await conn.fetchval("SELECT id FROM jobs WHERE key = $1", key_of_job))
                retried = await _requeue_transient(conn, found)
                return Job(found, kind, dict(options), size=size, retried=retried)
            rows: list[Row] = []
            held = 0
            for position, (key, payload) in enumerate(items()):
                encoded = encode(payload)
                rows.append((job_id, key, position, encoded, now))
                held += len(encoded)
                if len(rows) >= batch or held >= batch_bytes:
                    await _copy_items(conn, rows)
                    rows.clear()
                    held = 0
            await _copy_items(conn, rows)
            return Job(id=job_id, kind=kind, options=dict(options), created=True, size=size)

        return await self._run(submit)

    async def job(self, job_id: str) -> Job:
        rows = await self._fetch("SELECT kind, options FROM jobs WHERE id = $1", job_id)
        if not rows:
            raise KeyError(job_id)
        return Job(id=job_id, kind=rows[0][0], options=json.loads(rows[0][1]))

    async def jobs(self, *, limit: int | None = None) -> list[Job]:
        rows = await self._fetch(
            "SELECT id, kind, options, (SELECT COUNT(*) FROM items WHERE items.job_id = jobs.id) "
            "FROM jobs ORDER BY seq DESC LIMIT $1",
            limit,
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
        jobs = "" if job_ids is None else " AND job_id = ANY($3::text[])"
        columns = "id, job_id, key, position, payload, attempts"
        expired = (
            f"SELECT {columns} FROM items WHERE state = 'processing' AND lease_expires <= {_NOW} "
            f"AND lease_owner <> $1{jobs} ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED"
        )
        queued = (
            f"SELECT {columns} FROM items WHERE state = 'queued' AND $1::text IS NOT NULL{jobs} "
            "ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED"
        )
        extra = () if job_ids is None else (list(job_ids),)

        async def claim(conn: Conn) -> list[Item]:
            rows = list(await conn.fetch(expired, owner, limit, *extra))
            if len(rows) < limit:
                rows += await conn.fetch(queued, owner, limit - len(rows), *extra)
            claimed: list[Item] = []
            for row in rows:
                item_id, job_id, key, position, payload, attempts = tuple(row)
                if attempts >= max_attempts:
                    await _fail(conn, job_id, key, abandoned(attempts))
                    continue
                claimed.append(
                    Item(int(item_id), job_id, key, position, json.loads(payload), attempts + 1)
                )
            if claimed:
                await conn.execute(
                    "UPDATE items SET state = 'processing', lease_owner = $1, "
                    f"lease_expires = {_NOW} + $2, attempts = attempts + 1, started_by = $1 "
                    "WHERE id = ANY($3::bigint[])",
                    owner,
                    lease_seconds,
                    [item.id for item in claimed],
                )
            return claimed

        return await self._run(claim)

    async def items_started(self, item_ids: Sequence[int]) -> None:
        if item_ids:
            await self._execute(
                "UPDATE items SET state = 'running', lease_owner = NULL, lease_expires = NULL "
                "WHERE state = 'processing' AND id = ANY($1::bigint[])",
                list(item_ids),
            )

    async def release_items(self, owner: str, item_ids: Sequence[int]) -> int:
        if not item_ids:
            return 0
        status = await self._execute(
            "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL, "
            "attempts = GREATEST(attempts - 1, 0), started_by = NULL "
            "WHERE lease_owner = $1 AND state = 'processing' AND id = ANY($2::bigint[])",
            owner,
            list(item_ids),
        )
        return _affected(status)

    async def unfinished_items(self, owner: str) -> int:
        rows = await self._fetch(
            "SELECT COUNT(*) FROM items "
            "WHERE started_by = $1 AND state IN ('processing', 'running')",
            owner,
        )
        return int(rows[0][0])

    async def finish_item(self, job_id: str, key: str, results: ItemResults) -> bool:
        async def finish(conn: Conn) -> bool:
            row = await _locked_item(conn, job_id, key)
            if row is None:
                return False
            item_id, position = row
            await _store_results(conn, job_id, item_id, position, results)
            await conn.execute(
                "UPDATE items SET state = 'done', lease_owner = NULL, lease_expires = NULL, "
                "report = $1, finished_at = $2, transient_failures = $3 WHERE id = $4",
                json.dumps(results.report or {}),
                time.time(),
                results.transient_failures,
                item_id,
            )
            await _forget(conn, job_id, key)
            return True

        return await self._run(finish)

    async def fail_item(
        self, job_id: str, key: str, error: str, results: ItemResults | None = None
    ) -> bool:
        return await self._run(lambda c: _fail(c, job_id, key, error, results))

    async def item_payload(self, job_id: str, key: str) -> dict[str, Any] | None:
        rows = await self._fetch(
            "SELECT payload FROM items WHERE job_id = $1 AND key = $2", job_id, key
        )
        return json.loads(rows[0][0]) if rows else None

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]:
        if job_ids is None:
            rows = await self._fetch("SELECT state, COUNT(*) FROM items GROUP BY state")
        else:
            rows = await self._fetch(
                "SELECT state, COUNT(*) FROM items WHERE job_id = ANY($1::text[]) GROUP BY state",
                list(job_ids),
            )
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for state, n in rows:
            counts["processing" if state == "running" else str(state)] += int(n)
        return counts

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int:
        sql = "SELECT COUNT(*) FROM items WHERE state = ANY($1::text[])"
        if job_ids is None:
            return int((await self._fetch(sql, _UNFINISHED))[0][0])
        sql += " AND job_id = ANY($2::text[])"
        return int((await self._fetch(sql, _UNFINISHED, list(job_ids)))[0][0])

    async def reports(self, job_id: str) -> AsyncIterator[dict[str, Any]]:
        page = (
            "SELECT report, id FROM items WHERE job_id = $1 AND id > $2 "
            f"ORDER BY id LIMIT {PAGE}"  # through items_order: each page costs the same
        )
        after = -1
        while True:
            rows = await self._fetch(page, job_id, after)
            for report, _ in rows:
                if report is not None:
                    yield json.loads(report)
            if len(rows) < PAGE:
                return
            after = int(rows[-1][1])

    async def failed_items(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self._fetch(
            "SELECT key, error FROM items WHERE job_id = $1 AND state = 'failed' ORDER BY position",
            job_id,
        )
        return [{"item": key, "error": error} for key, error in rows]

    async def pair_outcomes(self, job_id: str) -> dict[str, int]:
        rows = await self._fetch(
            "SELECT outcome, COUNT(*) FROM pairs WHERE job_id = $1 GROUP BY outcome", job_id
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
        if job_ids is None:
            jobs = await self._fetch("SELECT id FROM jobs ORDER BY seq")
        else:
            jobs = await self._fetch(
                "SELECT id FROM jobs WHERE id = ANY($1::text[]) ORDER BY seq", list(job_ids)
            )
        for (job_id,) in jobs:
            async for value in self._pages(table, "record", job_id):
                yield json.loads(value)

    async def _pages(self, table: str, column: str, job_id: str) -> AsyncIterator[Any]:
        """``column`` of a job's rows of ``table`` in item order, a page at a time, each page
        starting where the last ended through the ``{table}_order`` index (so every page costs
        the same however many came before). A job's items are copied in position order in
        one transaction, so their ids follow their positions."""
        page = (
            f"SELECT {column}, item_id, position, seq FROM {table} "
            "WHERE job_id = $1 AND (item_id, position, seq) > ($2::bigint, $3::int, $4::bigint) "
            f"ORDER BY item_id, position, seq LIMIT {PAGE}"
        )
        after: tuple[Any, ...] = (-1, -1, -1)
        while True:
            rows = await self._fetch(page, job_id, *after)
            for row in rows:
                yield row[0]
            if len(rows) < PAGE:
                return
            after = tuple(rows[-1][1:])

    # the durable bus ----------------------------------------------------------------
    async def put_messages(self, messages: Sequence[OutgoingMessage]) -> None:
        if messages:
            await self._run(lambda c: c.fetch(_INSERT_MESSAGES, *_columns(messages)))

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
        jobs = "" if job_ids is None else " AND job_id = ANY($3::text[])"
        select = (
            "SELECT id, grp, body, attempts, job_id, item_key, last_error FROM messages "
            f"WHERE grp = ANY($1::text[]) AND available_at <= {_NOW}{jobs} "
            "ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED"
        )
        extra = () if job_ids is None else (list(job_ids),)

        async def claim(conn: Conn) -> Claim:
            found = Claim()
            for row in await conn.fetch(select, list(groups), limit, *extra):
                message_id, group, body, attempts, job_id, key, last_error = tuple(row)
                if attempts >= max_attempts:
                    found.dead += 1
                    await conn.execute("DELETE FROM messages WHERE id = $1", message_id)
                    await _fail(conn, job_id, key, poison(group, attempts, last_error))
                    continue
                found.messages.append(
                    StoredMessage(int(message_id), group, body, attempts + 1, job_id, key)
                )
            if found.messages:
                await conn.execute(
                    f"UPDATE messages SET lease_owner = $1, available_at = {_NOW} + $2, "
                    "attempts = attempts + 1 WHERE id = ANY($3::bigint[])",
                    owner,
                    lease_seconds,
                    [m.id for m in found.messages],
                )
            return found

        return await self._run(claim)

    async def ack_message(self, message_id: int, replies: Sequence[OutgoingMessage]) -> None:
        if not replies:
            await self._execute("DELETE FROM messages WHERE id = $1", message_id)
            return
        job_id, key = replies[0].job_id, replies[0].item_key

        async def ack(conn: Conn) -> None:
            await conn.execute(*_lock_args(job_id, key))
            # Only the delivery that removes the message publishes its replies: an ack
            # repeated after a lost connection, or by a second worker whose lease ran out,
            # adds nothing.
            if await conn.fetchval("DELETE FROM messages WHERE id = $1 RETURNING id", message_id):
                state = await conn.fetchval(
                    "SELECT state FROM items WHERE job_id = $1 AND key = $2", job_id, key
                )
                if state not in ("done", "failed"):
                    await conn.fetch(_INSERT_MESSAGES, *_columns(replies))

        await self._run(ack)

    async def nack_message(
        self, message_id: int, error: str, *, max_attempts: int, retry_after: float
    ) -> bool:
        async def nack(conn: Conn) -> bool:
            attempts = await conn.fetchval(
                "SELECT attempts FROM messages WHERE id = $1 FOR UPDATE", message_id
            )
            if attempts is None:
                return False
            if attempts >= max_attempts:
                await conn.execute("DELETE FROM messages WHERE id = $1", message_id)
                return True
            await conn.execute(
                f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW} + $1, "
                "last_error = $2 WHERE id = $3",
                retry_after,
                error,
                message_id,
            )
            return False

        return await self._run(nack)

    async def renew_messages(
        self, owner: str, message_ids: Sequence[int], lease_seconds: float
    ) -> None:
        if message_ids:
            await self._execute(
                f"UPDATE messages SET available_at = {_NOW} + $1 WHERE lease_owner = $2 "
                "AND id = ANY($3::bigint[])",
                lease_seconds,
                owner,
                list(message_ids),
            )

    async def release_messages(
        self, owner: str, message_ids: Sequence[int], *, started: bool = False
    ) -> None:
        refund = "" if started else ", attempts = GREATEST(attempts - 1, 0)"
        if message_ids:
            await self._execute(
                f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW}{refund} "
                "WHERE lease_owner = $1 AND id = ANY($2::bigint[])",
                owner,
                list(message_ids),
            )

    async def waiting_messages(self) -> dict[str, int]:
        rows = await self._fetch("SELECT grp, COUNT(*) FROM messages GROUP BY grp ORDER BY grp")
        return {str(group): int(n) for group, n in rows}

    # join state ---------------------------------------------------------------------
    async def join(
        self, job_id: str, item_key: str, parts: Mapping[str, str], prefix: str
    ) -> dict[str, str]:
        rows = [(job_id, item_key, name, value) for name, value in parts.items()]

        async def join(conn: Conn) -> list[Row]:
            # serialised per item: two joins that each add a part both see both parts
            await conn.execute(*_lock_args(job_id, item_key))
            if rows:
                await conn.executemany(
                    "INSERT INTO joins (job_id, item_key, name, value) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT DO NOTHING",
                    rows,
                )
            found = await conn.fetch(
                "SELECT name, value FROM joins WHERE job_id = $1 AND item_key = $2 "
                "AND starts_with(name, $3)",
                job_id,
                item_key,
                prefix,
            )
            return [tuple(row) for row in found]

        return {str(name): str(value) for name, value in await self._run(join)}

    async def decide_questions(
        self, job_id: str, pairs: Sequence[tuple[str, str]], matcher: QuestionMatcher
    ) -> list[QuestionDecision]:
        ids = [pair_id for pair_id, _ in pairs]

        async def step(conn: Conn) -> list[QuestionDecision]:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"dedup/{job_id}"
            )
            stored = {
                str(row[0]): QuestionDecision(str(row[0]), row[1], row[2])
                for row in await conn.fetch(
                    "SELECT pair_id, duplicate_of, similarity FROM questions "
                    "WHERE job_id = $1 AND pair_id = ANY($2::text[])",
                    job_id,
                    ids,
                )
            }
            new = [(pid, q) for pid, q in pairs if pid not in stored]
            if not new:
                return [stored[pid] for pid in ids]
            await _index_questions(conn, job_id, matcher)
            keys = sorted({key for _, question in new for key in matcher.keys(question)})
            candidates = [
                (int(row[0]), str(row[1]), str(row[2]))
                for row in await conn.fetch(
                    "SELECT DISTINCT q.id, q.pair_id, q.question FROM question_keys k "
                    "JOIN questions q ON q.id = k.question_id "
                    "WHERE k.job_id = $1 AND k.key = ANY($2::text[])",
                    job_id,
                    keys,
                )
            ]
            decisions = matcher.decide(candidates, new)
            questions = dict(new)
            for d in decisions:
                row = await conn.fetchval(
                    "INSERT INTO questions (job_id, pair_id, question, duplicate_of, similarity) "
                    "VALUES ($1, $2, $3, $4, $5) RETURNING id",
                    job_id,
                    d.pair_id,
                    questions[d.pair_id],
                    d.duplicate_of,
                    d.similarity,
                )
                if d.duplicate_of is None:
                    await _add_keys(conn, job_id, [(int(row), questions[d.pair_id])], matcher)
            by_id = {**stored, **{d.pair_id: d for d in decisions}}
            return [by_id[pid] for pid in ids]

        return await self._run(step)

    # the step cache -----------------------------------------------------------------
    async def get_step(self, key: str) -> str | None:
        rows = await self._fetch("SELECT output FROM steps WHERE key = $1", key)
        return str(rows[0][0]) if rows else None

    async def put_step(self, key: str, agent: str, output: str) -> None:
        await self._execute(
            "INSERT INTO steps (key, agent, output, created_at) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (key) DO UPDATE SET agent = EXCLUDED.agent, output = EXCLUDED.output, "
            "created_at = EXCLUDED.created_at",
            key,
            agent,
            output,
            time.time(),
        )

    # workers ------------------------------------------------------------------------
    async def register_worker(self, owner: str, agents: Sequence[str]) -> int:
        host, pid = socket.gethostname(), os.getpid()

        async def register(conn: Conn) -> int:
            released = 0
            for other, other_pid in await conn.fetch(
                "SELECT owner, pid FROM workers WHERE host = $1 AND owner <> $2", host, owner
            ):
                if alive(int(other_pid)) and int(other_pid) != pid:
                    continue
                # a process of this host that is gone: what it held is free now
                released += _affected(
                    await conn.execute(
                        f"UPDATE messages SET lease_owner = NULL, available_at = {_NOW} "
                        "WHERE lease_owner = $1",
                        other,
                    )
                )
                released += _affected(
                    await conn.execute(
                        "UPDATE items SET state = 'queued', lease_owner = NULL, "
                        "lease_expires = NULL WHERE lease_owner = $1 AND state = 'processing'",
                        other,
                    )
                )
                await conn.execute("DELETE FROM workers WHERE owner = $1", other)
            await conn.execute(
                "INSERT INTO workers (owner, host, pid, agents, started_at, heartbeat) "
                f"VALUES ($1, $2, $3, $4, {_NOW}, {_NOW}) ON CONFLICT (owner) DO UPDATE SET "
                "host = EXCLUDED.host, pid = EXCLUDED.pid, agents = EXCLUDED.agents, "
                "started_at = EXCLUDED.started_at, heartbeat = EXCLUDED.heartbeat",
                owner,
                host,
                pid,
                ",".join(agents),
            )
            return released

        return await self._run(register)

    async def heartbeat(self, owner: str) -> None:
        await self._execute(f"UPDATE workers SET heartbeat = {_NOW} WHERE owner = $1", owner)

    async def unregister_worker(self, owner: str) -> None:
        await self._execute("DELETE FROM workers WHERE owner = $1", owner)

    async def status(self) -> dict[str, Any]:
        from ragjury.store._status import status

        return await status(self)

    async def prune(self, before: float) -> dict[str, int]:
        cutoff = iso(before)

        async def prune(conn: Conn) -> dict[str, int]:
            jobs = [
                str(row[0])
                for row in await conn.fetch(
                    "SELECT id FROM jobs WHERE NOT EXISTS (SELECT 1 FROM items i "
                    "WHERE i.job_id = jobs.id AND (i.state = ANY($1::text[]) "
                    "OR i.finished_at >= $2))",
                    _UNFINISHED,
                    before,
                )
            ]
            deleted: dict[str, int] = {}
            for table in ("pairs", "samples", "questions", "joins", "messages", "items"):
                deleted[table] = _affected(
                    await conn.execute(f"DELETE FROM {table} WHERE job_id = ANY($1::text[])", jobs)
                )
            for index in ("question_keys", "question_indexes"):  # the deduplicator's, unreported
                await conn.execute(f"DELETE FROM {index} WHERE job_id = ANY($1::text[])", jobs)
            deleted["jobs"] = _affected(
                await conn.execute("DELETE FROM jobs WHERE id = ANY($1::text[])", jobs)
            )
            deleted["steps"] = _affected(
                await conn.execute("DELETE FROM steps WHERE created_at < $1", before)
            )
            deleted["llm_calls"] = _affected(
                await conn.execute("DELETE FROM llm_calls WHERE created_at < $1", cutoff)
            )
            deleted["runs"] = _affected(
                await conn.execute(
                    "DELETE FROM runs WHERE started_at < $1 AND finished_at IS NOT NULL", cutoff
                )
            )
            return deleted

        return await self._run(prune)

    async def compact(self) -> None:
        """Mark deleted rows' space for reuse and refresh the planner's statistics. (The
        server keeps the space for new rows rather than giving it back to the file system;
        ``VACUUM FULL`` would, but it locks every table while it runs.)"""
        tables = (
            "runs, jobs, items, pairs, samples, steps, llm_calls, messages, joins, questions, "
            "question_keys, question_indexes"
        )
        await self._execute(f"VACUUM (ANALYZE) {tables}")


async def _index_questions(conn: Conn, job_id: str, matcher: QuestionMatcher) -> None:
    """Make sure the job's kept questions are indexed under ``matcher``'s keys: once per job,
    or again if they were indexed under another signature."""
    found = await conn.fetchval("SELECT signature FROM question_indexes WHERE job_id = $1", job_id)
    if found == matcher.signature:
        return
    await conn.execute("DELETE FROM question_keys WHERE job_id = $1", job_id)
    kept: list[tuple[int, str]] = []
    async for row in conn.cursor(
        "SELECT id, question FROM questions WHERE job_id = $1 AND duplicate_of IS NULL",
        job_id,
        prefetch=1000,
    ):
        kept.append((int(row[0]), str(row[1])))
        if len(kept) == 1000:
            await _add_keys(conn, job_id, kept, matcher)
            kept = []
    await _add_keys(conn, job_id, kept, matcher)
    await conn.execute(
        "INSERT INTO question_indexes (job_id, signature) VALUES ($1, $2) "
        "ON CONFLICT (job_id) DO UPDATE SET signature = EXCLUDED.signature",
        job_id,
        matcher.signature,
    )


async def _add_keys(
    conn: Conn, job_id: str, kept: Sequence[tuple[int, str]], matcher: QuestionMatcher
) -> None:
    rows = [(job_id, key, row) for row, question in kept for key in matcher.keys(question)]
    if rows:
        await conn.executemany(
            "INSERT INTO question_keys (job_id, key, question_id) VALUES ($1, $2, $3) "
            "ON CONFLICT DO NOTHING",
            rows,
        )


async def migrate(conn: Conn, version: int, target: int) -> None:
    """Apply the migrations after ``version`` up to ``target``, each in a transaction."""
    for number, statements in _pg_schema.MIGRATIONS:
        if version < number <= target:
            async with conn.transaction():
                await conn.execute(statements)
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', $1) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    str(number),
                )


def _affected(status: str) -> int:
    """The row count of a command status such as ``UPDATE 3``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _lock_args(job_id: str, key: str) -> tuple[str, str]:
    """A transaction-scoped lock on one item (a hash of its name; a collision only makes
    two items wait for each other)."""
    return "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"item/{job_id}/{key}"


def _columns(messages: Sequence[OutgoingMessage]) -> tuple[list[str], ...]:
    return (
        [m.group for m in messages],
        [m.kind for m in messages],
        [m.job_id for m in messages],
        [m.item_key for m in messages],
        [m.body for m in messages],
    )


async def _copy_items(conn: Conn, rows: Sequence[Row]) -> None:
    if rows:
        await conn.copy_records_to_table(
            "items",
            records=rows,
            columns=["job_id", "key", "position", "payload", "created_at"],
            schema_name=_pg_schema.SCHEMA,
        )


async def _locked_item(conn: Conn, job_id: str, key: str) -> tuple[int, int] | None:
    """Lock the item for this transaction; its (id, position) unless it has finished."""
    await conn.execute(*_lock_args(job_id, key))
    row = await conn.fetchrow(
        "SELECT id, position, state FROM items WHERE job_id = $1 AND key = $2", job_id, key
    )
    if row is None or row["state"] in ("done", "failed"):
        return None
    return int(row["id"]), int(row["position"])


async def _requeue_transient(conn: Conn, job_id: str) -> int:
    where = "job_id = $1 AND state = 'done' AND transient_failures > 0"
    for table in ("pairs", "samples"):
        await conn.execute(
            f"DELETE FROM {table} WHERE item_id IN (SELECT id FROM items WHERE {where})", job_id
        )
    return _affected(
        await conn.execute(
            "UPDATE items SET state = 'queued', attempts = 0, report = NULL, "
            f"finished_at = NULL, transient_failures = 0, started_by = NULL WHERE {where}",
            job_id,
        )
    )


async def _fail(
    conn: Conn, job_id: str, key: str, error: str, results: ItemResults | None = None
) -> bool:
    row = await _locked_item(conn, job_id, key)
    if row is None:
        return False
    item_id, position = row
    if results is not None:
        await _store_results(conn, job_id, item_id, position, results)
    await conn.execute(
        "UPDATE items SET state = 'failed', lease_owner = NULL, lease_expires = NULL, "
        "error = $1, finished_at = $2, report = $3 WHERE id = $4",
        error,
        time.time(),
        json.dumps(results.report) if results and results.report else None,
        item_id,
    )
    await _forget(conn, job_id, key)
    return True


async def _store_results(
    conn: Conn, job_id: str, item_id: int, position: int, results: ItemResults
) -> None:
    if results.pairs:
        await conn.executemany(
            "INSERT INTO pairs (job_id, id, item_id, position, outcome, question, source, record) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (job_id, id) DO UPDATE SET "
            "item_id = EXCLUDED.item_id, position = EXCLUDED.position, "
            "outcome = EXCLUDED.outcome, question = EXCLUDED.question, "
            "source = EXCLUDED.source, record = EXCLUDED.record",
            [pair_row(job_id, item_id, n, record) for n, record in enumerate(results.pairs)],
        )
    if results.samples:
        await conn.executemany(
            "INSERT INTO samples (job_id, id, item_id, position, record, scored) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (job_id, id) DO UPDATE SET "
            "item_id = EXCLUDED.item_id, position = EXCLUDED.position, "
            "record = EXCLUDED.record, scored = EXCLUDED.scored",
            [sample_row(job_id, item_id, position, r, s) for r, s in results.samples],
        )


async def _forget(conn: Conn, job_id: str, key: str) -> None:
    await conn.execute("DELETE FROM joins WHERE job_id = $1 AND item_key = $2", job_id, key)
    await conn.execute("DELETE FROM messages WHERE job_id = $1 AND item_key = $2", job_id, key)
