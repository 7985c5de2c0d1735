"""The one SQL core: every store operation written once, for SQLite and PostgreSQL alike.

:class:`SQLStore` holds the queue, the durable bus, join state, results, the step cache, the
run and call records, the rate buckets and the workers. Each method builds an operation (a
generator of :mod:`~ragjury.store._steps`) and hands it to its driver:
:class:`~ragjury.store.sqlite.SQLiteStore` or :class:`~ragjury.store.postgres.PostgresStore`,
which differ only in how they connect, run a step, and render the SQL for their database.

Every write is one transaction: claims take rows with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL (SQLite's writer lock serialises them), and what reads then writes one item's
state takes the item's :class:`~ragjury.store._steps.Lock`. Leases and "now" are on the
database's clock.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ragjury.llm.ratelimit import wait_for
from ragjury.llm.usage import CallStats
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
from ragjury.store._steps import (
    Row,
    Steps,
    execute,
    execute_many,
    fetch,
    fetch_one,
    insert_items,
    lock,
    publish,
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
Operation = Callable[[], Steps[T]]
"""A fresh operation each call: a driver may run it again after a lost connection."""

_UNFINISHED = list(UNFINISHED_STATES)
_INSERT_CALL = (
    "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, completion_tokens, "
    "latency_ms, statuses, error, created_at, model, cost_usd) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_FINISHED = ("done", "failed")


def _of_jobs(job_ids: Sequence[str] | None, column: str = "job_id") -> tuple[str, tuple[Any, ...]]:
    """A condition limiting a query to ``job_ids`` (none when None), and its parameter."""
    if job_ids is None:
        return "", ()
    return f" AND {column} = ANY(?)", (list(job_ids),)


class SQLStore:
    """Everything a store does, on a driver's ``_read`` and ``_write``."""

    location: str

    async def _read(self, operation: Operation[T]) -> T:
        """Run a read-only operation."""
        raise NotImplementedError

    async def _write(self, operation: Operation[T], *, single: bool = False) -> T:
        """Run an operation in a transaction (``single``: it is one statement, atomic alone)."""
        raise NotImplementedError

    async def read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Rows of a read-only query in the core's SQL (the status report, tests)."""
        return await self._read(lambda: fetch(sql, *params))

    async def now(self) -> float:
        return float((await self.read("SELECT now_epoch()"))[0][0])

    async def take_rate(
        self,
        key: str,
        amount: float,
        *,
        per_second: float,
        capacity: float,
        at_most: float | None = None,
    ) -> float:
        # One statement, the row's lock making concurrent takes queue up. A bucket met for
        # the first time starts full; the others refill since their stamp; both are lowered
        # to at_most, lose the amount, and never hold more than capacity.
        top = capacity if at_most is None else min(capacity, at_most)
        first = min(top - amount, capacity)
        sql = (
            "INSERT INTO rate_buckets AS b (key, level, stamp) VALUES (?, ?, now_epoch()) "
            "ON CONFLICT (key) DO UPDATE SET level = LEAST(LEAST(b.level + "
            "(excluded.stamp - b.stamp) * ?, ?) - ?, ?), stamp = excluded.stamp RETURNING level"
        )
        params = (key, float(first), float(per_second), float(top), float(amount), capacity)
        [(level,)] = await self._write(lambda: fetch(sql, *params), single=True)
        return wait_for(float(level), per_second)

    # runs and calls -----------------------------------------------------------------
    async def start_run(self, command: str, settings: Mapping[str, Any]) -> str:
        run_id = uuid.uuid4().hex
        text = json.dumps(settings, default=str)
        host, pid = socket.gethostname(), os.getpid()

        def start() -> Steps[None]:
            # runs of this host whose process is gone were killed: say so, and that their
            # calls still in flight will never be answered
            for other, other_pid in (
                yield from fetch(
                    "SELECT id, pid FROM runs WHERE host = ? AND finished_at IS NULL", host
                )
            ):
                if other_pid is None or alive(int(other_pid)):
                    continue
                killed = json.dumps({"killed": True, "pid": other_pid})
                yield from execute(
                    "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                    iso(),
                    killed,
                    other,
                )
                yield from execute(
                    "UPDATE llm_calls SET error = ? WHERE run_id = ? AND error = ?",
                    KILLED,
                    other,
                    IN_FLIGHT,
                )
            yield from execute(
                "INSERT INTO runs (id, command, started_at, settings, host, pid) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                *(run_id, command, iso(), text, host, pid),
            )

        await self._write(start)
        return run_id

    async def finish_run(self, run_id: str, summary: Mapping[str, Any]) -> None:
        sql = "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?"
        params = (iso(), json.dumps(summary, default=str), run_id)
        await self._write(lambda: execute(sql, *params), single=True)

    async def open_call(self, run_id: str, stats: CallStats) -> int:
        row = (run_id, stats.stage, 0, 0, 0, 0.0, "[]", IN_FLIGHT, iso(), stats.model, None)
        [(record,)] = await self._write(
            lambda: fetch(_INSERT_CALL + " RETURNING id", *row), single=True
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
            await self._write(lambda: execute(_INSERT_CALL, *row), single=True)
            return
        sql = (
            "UPDATE llm_calls SET run_id = ?, stage = ?, requests = ?, prompt_tokens = ?, "
            "completion_tokens = ?, latency_ms = ?, statuses = ?, error = ?, "
            "created_at = ?, model = ?, cost_usd = ? WHERE id = ?"
        )
        await self._write(lambda: execute(sql, *row, stats.record), single=True)

    async def latest_run(self, job_id: str) -> RunRecord | None:
        rows = await self.read(
            "SELECT id, command, started_at, finished_at, settings, summary FROM runs "
            "WHERE summary LIKE ? ORDER BY finished_at DESC, started_at DESC",
            (job_summary_pattern(job_id),),
        )
        return latest_run_of(rows, job_id)

    async def call_totals(
        self, *, run_id: str | None = None, since: float | None = None
    ) -> dict[str, Any]:
        where, params = "1 = 1", list[Any]()
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        if since is not None:
            where += " AND created_at >= ?"
            params.append(iso(since))
        [row] = await self.read(
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
        text = json.dumps(options, default=str)

        def submit() -> Steps[Job]:
            now = time.time()
            job_id = uuid.uuid4().hex[:12]
            inserted = yield from fetch(
                "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (key) DO NOTHING RETURNING id",
                *(job_id, kind, key_of_job, text, iso(now)[:19]),
            )
            if not inserted:  # the same job exists (maybe submitted a moment ago)
                [(found,)] = yield from fetch("SELECT id FROM jobs WHERE key = ?", key_of_job)
                retried = yield from _requeue_transient(str(found))
                return Job(str(found), kind, dict(options), size=size, retried=retried)
            rows: list[Row] = []
            held = 0
            for position, (key, payload) in enumerate(items()):
                encoded = encode(payload)
                rows.append((job_id, key, position, encoded, now))
                held += len(encoded)
                if len(rows) >= batch or held >= batch_bytes:
                    yield from insert_items(rows)
                    rows = []
                    held = 0
            yield from insert_items(rows)
            return Job(id=job_id, kind=kind, options=dict(options), created=True, size=size)

        return await self._write(submit)

    async def job(self, job_id: str) -> Job:
        rows = await self.read("SELECT kind, options FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            raise KeyError(job_id)
        return Job(id=job_id, kind=rows[0][0], options=json.loads(rows[0][1]))

    async def jobs(self, *, limit: int | None = None) -> list[Job]:
        sql = (
            "SELECT id, kind, options, (SELECT COUNT(*) FROM items WHERE items.job_id = jobs.id) "
            "FROM jobs ORDER BY seq DESC"
        )
        if limit is not None:
            return [job_record(row) for row in await self.read(sql + " LIMIT ?", (limit,))]
        return [job_record(row) for row in await self.read(sql)]

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
        jobs, of_jobs = _of_jobs(job_ids)
        columns = "id, job_id, key, position, payload, attempts"
        # two indexed queries, not one with OR (which would scan the items)
        expired = (
            f"SELECT {columns} FROM items WHERE state = 'processing' "
            f"AND lease_expires <= now_epoch() AND lease_owner <> ?{jobs} "
            "ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"
        )
        queued = (
            f"SELECT {columns} FROM items WHERE state = 'queued'{jobs} "
            "ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"
        )

        def claim() -> Steps[list[Item]]:
            rows = yield from fetch(expired, owner, *of_jobs, limit)
            if len(rows) < limit:
                rows += yield from fetch(queued, *of_jobs, limit - len(rows))
            claimed: list[Item] = []
            for item_id, job_id, key, position, payload, attempts in rows:
                if attempts >= max_attempts:
                    yield from _fail(str(job_id), str(key), abandoned(int(attempts)))
                    continue
                claimed.append(
                    Item(int(item_id), str(job_id), str(key), int(position), json.loads(payload),
                         int(attempts) + 1)
                )  # fmt: skip
            if claimed:
                yield from execute(
                    "UPDATE items SET state = 'processing', lease_owner = ?, "
                    "lease_expires = now_epoch() + ?, attempts = attempts + 1, started_by = ? "
                    "WHERE id = ANY(?)",
                    *(owner, lease_seconds, owner, [item.id for item in claimed]),
                )
            return claimed

        return await self._write(claim)

    async def items_started(self, item_ids: Sequence[int]) -> None:
        if item_ids:
            sql = (
                "UPDATE items SET state = 'running', lease_owner = NULL, lease_expires = NULL "
                "WHERE state = 'processing' AND id = ANY(?)"
            )
            await self._write(lambda: execute(sql, list(item_ids)), single=True)

    async def release_items(self, owner: str, item_ids: Sequence[int]) -> int:
        if not item_ids:
            return 0
        sql = (
            "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL, "
            "attempts = GREATEST(attempts - 1, 0), started_by = NULL "
            "WHERE lease_owner = ? AND state = 'processing' AND id = ANY(?)"
        )
        return await self._write(lambda: execute(sql, owner, list(item_ids)), single=True)

    async def unfinished_items(self, owner: str) -> int:
        rows = await self.read(
            "SELECT COUNT(*) FROM items "
            "WHERE started_by = ? AND state IN ('processing', 'running')",
            (owner,),
        )
        return int(rows[0][0])

    async def finish_item(self, job_id: str, key: str, results: ItemResults) -> bool:
        def finish() -> Steps[bool]:
            found = yield from _locked_item(job_id, key)
            if found is None:
                return False
            item_id, position = found
            yield from _store_results(job_id, item_id, position, results)
            yield from execute(
                "UPDATE items SET state = 'done', lease_owner = NULL, lease_expires = NULL, "
                "report = ?, finished_at = ?, transient_failures = ? WHERE id = ?",
                json.dumps(results.report or {}),
                time.time(),
                results.transient_failures,
                item_id,
            )
            yield from _forget(job_id, key)
            return True

        return await self._write(finish)

    async def fail_item(
        self, job_id: str, key: str, error: str, results: ItemResults | None = None
    ) -> bool:
        return await self._write(lambda: _fail(job_id, key, error, results))

    async def item_payload(self, job_id: str, key: str) -> dict[str, Any] | None:
        rows = await self.read(
            "SELECT payload FROM items WHERE job_id = ? AND key = ?", (job_id, key)
        )
        return json.loads(rows[0][0]) if rows else None

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]:
        jobs, params = _of_jobs(job_ids)
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for state, n in await self.read(
            f"SELECT state, COUNT(*) FROM items WHERE 1 = 1{jobs} GROUP BY state", params
        ):
            counts["processing" if state == "running" else str(state)] += int(n)
        return counts

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int:
        jobs, params = _of_jobs(job_ids)
        sql = f"SELECT COUNT(*) FROM items WHERE state = ANY(?){jobs}"
        return int((await self.read(sql, (_UNFINISHED, *params)))[0][0])

    async def reports(self, job_id: str) -> AsyncIterator[dict[str, Any]]:
        page = (
            "SELECT report, id FROM items WHERE job_id = ? AND id > ? "
            f"ORDER BY id LIMIT {PAGE}"  # through items_order: each page costs the same
        )
        after = -1
        while True:
            rows = await self.read(page, (job_id, after))
            for report, _ in rows:
                if report is not None:
                    yield json.loads(report)
            if len(rows) < PAGE:
                return
            after = int(rows[-1][1])

    async def failed_items(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self.read(
            "SELECT key, error FROM items WHERE job_id = ? AND state = 'failed' ORDER BY position",
            (job_id,),
        )
        return [{"item": key, "error": error} for key, error in rows]

    async def pair_outcomes(self, job_id: str) -> dict[str, int]:
        rows = await self.read(
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
        jobs, params = _of_jobs(job_ids, "id")
        for (job_id,) in await self.read(
            f"SELECT id FROM jobs WHERE 1 = 1{jobs} ORDER BY seq", params
        ):
            async for value in self._pages(table, "record", job_id):
                yield json.loads(value)

    async def _pages(self, table: str, column: str, job_id: str) -> AsyncIterator[Any]:
        """``column`` of a job's rows of ``table`` in item order, a page at a time: no
        statement stays open between pages, and each page starts where the last ended, found
        through the ``{table}_order`` index, so every page costs the same however many rows
        came before (no OFFSET, no sort of the whole job per page). A job's items are
        inserted in position order in one transaction, so their ids follow their positions."""
        page = (
            f"SELECT {column}, item_id, position, seq FROM {table} "
            "WHERE job_id = ? AND (item_id, position, seq) > (?, ?, ?) "
            f"ORDER BY item_id, position, seq LIMIT {PAGE}"
        )
        after: tuple[Any, ...] = (-1, -1, -1)
        while True:
            rows = await self.read(page, (job_id, *after))
            for row in rows:
                yield row[0]
            if len(rows) < PAGE:
                return
            after = tuple(rows[-1][1:])

    # the durable bus ----------------------------------------------------------------
    async def put_messages(self, messages: Sequence[OutgoingMessage]) -> None:
        if messages:
            await self._write(lambda: publish(messages), single=True)

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
        jobs, of_jobs = _of_jobs(job_ids)
        select = (
            "SELECT id, grp, body, attempts, job_id, item_key, last_error FROM messages "
            f"WHERE grp = ANY(?) AND available_at <= now_epoch(){jobs} "
            "ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED"
        )

        def claim() -> Steps[Claim]:
            found = Claim()
            for message_id, group, body, attempts, job_id, key, last_error in (
                yield from fetch(select, list(groups), *of_jobs, limit)
            ):
                if attempts >= max_attempts:
                    found.dead += 1
                    yield from execute("DELETE FROM messages WHERE id = ?", message_id)
                    yield from _fail(job_id, key, poison(group, attempts, last_error))
                    continue
                found.messages.append(
                    StoredMessage(int(message_id), str(group), str(body), int(attempts) + 1,
                                  str(job_id), str(key))
                )  # fmt: skip
            if found.messages:
                yield from execute(
                    "UPDATE messages SET lease_owner = ?, available_at = now_epoch() + ?, "
                    "attempts = attempts + 1 WHERE id = ANY(?)",
                    *(owner, lease_seconds, [m.id for m in found.messages]),
                )
            return found

        return await self._write(claim)

    async def ack_message(self, message_id: int, replies: Sequence[OutgoingMessage]) -> None:
        remove = "DELETE FROM messages WHERE id = ?"
        if not replies:
            await self._write(lambda: execute(remove, message_id), single=True)
            return
        job_id, key = replies[0].job_id, replies[0].item_key

        def ack() -> Steps[None]:
            yield from lock(f"item/{job_id}/{key}")
            # Only the delivery that removes the message publishes its replies: an ack
            # repeated after a lost connection, or by a second worker whose lease ran out,
            # adds nothing; nor does one for an item that has ended.
            if (yield from execute(remove, message_id)):
                state = yield from fetch_one(
                    "SELECT state FROM items WHERE job_id = ? AND key = ?", job_id, key
                )
                if state is None or state[0] not in _FINISHED:
                    yield from publish(replies)

        await self._write(ack)

    async def nack_message(
        self, message_id: int, error: str, *, max_attempts: int, retry_after: float
    ) -> bool:
        def nack() -> Steps[bool]:
            found = yield from fetch_one(
                "SELECT attempts FROM messages WHERE id = ? FOR UPDATE", message_id
            )
            if found is None:
                return False
            if found[0] >= max_attempts:
                yield from execute("DELETE FROM messages WHERE id = ?", message_id)
                return True
            yield from execute(
                "UPDATE messages SET lease_owner = NULL, available_at = now_epoch() + ?, "
                "last_error = ? WHERE id = ?",
                *(retry_after, error, message_id),
            )
            return False

        return await self._write(nack)

    async def renew_messages(
        self, owner: str, message_ids: Sequence[int], lease_seconds: float
    ) -> None:
        if message_ids:
            sql = (
                "UPDATE messages SET available_at = now_epoch() + ? "
                "WHERE lease_owner = ? AND id = ANY(?)"
            )
            params = (lease_seconds, owner, list(message_ids))
            await self._write(lambda: execute(sql, *params), single=True)

    async def release_messages(
        self, owner: str, message_ids: Sequence[int], *, started: bool = False
    ) -> None:
        if message_ids:
            refund = "" if started else ", attempts = GREATEST(attempts - 1, 0)"
            sql = (
                f"UPDATE messages SET lease_owner = NULL, available_at = now_epoch(){refund} "
                "WHERE lease_owner = ? AND id = ANY(?)"
            )
            await self._write(lambda: execute(sql, owner, list(message_ids)), single=True)

    async def waiting_messages(self) -> dict[str, int]:
        rows = await self.read("SELECT grp, COUNT(*) FROM messages GROUP BY grp ORDER BY grp")
        return {str(group): int(n) for group, n in rows}

    # join state ---------------------------------------------------------------------
    async def join(
        self, job_id: str, item_key: str, parts: Mapping[str, str], prefix: str
    ) -> dict[str, str]:
        rows = [(job_id, item_key, name, value) for name, value in parts.items()]

        def join() -> Steps[list[Row]]:
            # serialised per item: two joins that each add a part both see both parts
            yield from lock(f"item/{job_id}/{item_key}")
            yield from execute_many(
                "INSERT INTO joins (job_id, item_key, name, value) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                rows,
            )
            return (
                yield from fetch(
                    "SELECT name, value FROM joins WHERE job_id = ? AND item_key = ? "
                    "AND substr(name, 1, ?) = ?",
                    *(job_id, item_key, len(prefix), prefix),
                )
            )

        return {str(name): str(value) for name, value in await self._write(join)}

    async def decide_questions(
        self, job_id: str, pairs: Sequence[tuple[str, str]], matcher: QuestionMatcher
    ) -> list[QuestionDecision]:
        ids = [pair_id for pair_id, _ in pairs]

        def step() -> Steps[list[QuestionDecision]]:
            yield from lock(f"dedup/{job_id}")
            stored = {
                str(row[0]): QuestionDecision(str(row[0]), row[1], row[2])
                for row in (
                    yield from fetch(
                        "SELECT pair_id, duplicate_of, similarity FROM questions "
                        "WHERE job_id = ? AND pair_id = ANY(?)",
                        *(job_id, ids),
                    )
                )
            }
            new = [(pid, q) for pid, q in pairs if pid not in stored]
            if not new:
                return [stored[pid] for pid in ids]
            yield from _index_questions(job_id, matcher)
            keys = sorted({key for _, question in new for key in matcher.keys(question)})
            candidates = [
                (int(row[0]), str(row[1]), str(row[2]))
                for row in (
                    yield from fetch(
                        "SELECT DISTINCT q.id, q.pair_id, q.question FROM question_keys k "
                        "JOIN questions q ON q.id = k.question_id "
                        "WHERE k.job_id = ? AND k.key = ANY(?)",
                        *(job_id, keys),
                    )
                )
            ]
            decisions = matcher.decide(candidates, new)
            questions = dict(new)
            for d in decisions:
                [(row,)] = yield from fetch(
                    "INSERT INTO questions (job_id, pair_id, question, duplicate_of, similarity) "
                    "VALUES (?, ?, ?, ?, ?) RETURNING id",
                    *(job_id, d.pair_id, questions[d.pair_id], d.duplicate_of, d.similarity),
                )
                if d.duplicate_of is None:
                    yield from _add_keys(job_id, [(int(row), questions[d.pair_id])], matcher)
            by_id = {**stored, **{d.pair_id: d for d in decisions}}
            return [by_id[pid] for pid in ids]

        return await self._write(step)

    # the step cache -----------------------------------------------------------------
    async def get_step(self, key: str) -> str | None:
        rows = await self.read("SELECT output FROM steps WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    async def put_step(self, key: str, agent: str, output: str) -> None:
        sql = (
            "INSERT INTO steps (key, agent, output, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET agent = excluded.agent, output = excluded.output, "
            "created_at = excluded.created_at"
        )
        params = (key, agent, output, time.time())
        await self._write(lambda: execute(sql, *params), single=True)

    # workers ------------------------------------------------------------------------
    async def register_worker(self, owner: str, agents: Sequence[str]) -> int:
        host, pid = socket.gethostname(), os.getpid()

        def register() -> Steps[int]:
            released = 0
            for other, other_pid in (
                yield from fetch(
                    "SELECT owner, pid FROM workers WHERE host = ? AND owner <> ?", host, owner
                )
            ):
                if alive(int(other_pid)) and int(other_pid) != pid:
                    continue
                # A process of this host that is gone: what it held is free now, not when
                # its leases run out. Its deliveries still count as attempts.
                released += yield from execute(
                    "UPDATE messages SET lease_owner = NULL, available_at = now_epoch() "
                    "WHERE lease_owner = ?",
                    other,
                )
                released += yield from execute(
                    "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL "
                    "WHERE lease_owner = ? AND state = 'processing'",
                    other,
                )
                yield from execute("DELETE FROM workers WHERE owner = ?", other)
            yield from execute(
                "INSERT INTO workers (owner, host, pid, agents, started_at, heartbeat) "
                "VALUES (?, ?, ?, ?, now_epoch(), now_epoch()) ON CONFLICT (owner) DO UPDATE "
                "SET host = excluded.host, pid = excluded.pid, agents = excluded.agents, "
                "started_at = excluded.started_at, heartbeat = excluded.heartbeat",
                *(owner, host, pid, ",".join(agents)),
            )
            return released

        return await self._write(register)

    async def heartbeat(self, owner: str) -> None:
        sql = "UPDATE workers SET heartbeat = now_epoch() WHERE owner = ?"
        await self._write(lambda: execute(sql, owner), single=True)

    async def unregister_worker(self, owner: str) -> None:
        await self._write(
            lambda: execute("DELETE FROM workers WHERE owner = ?", owner), single=True
        )

    async def status(self) -> dict[str, Any]:
        from ragjury.store._status import status  # the read-only report lives on its own

        return await status(self)

    async def prune(self, before: float) -> dict[str, int]:
        cutoff = iso(before)

        def prune() -> Steps[dict[str, int]]:
            jobs = [
                str(row[0])
                for row in (
                    yield from fetch(
                        "SELECT id FROM jobs WHERE NOT EXISTS (SELECT 1 FROM items i "
                        "WHERE i.job_id = jobs.id AND (i.state = ANY(?) OR i.finished_at >= ?))",
                        *(_UNFINISHED, before),
                    )
                )
            ]
            deleted: dict[str, int] = {}
            for table in ("pairs", "samples", "questions", "joins", "messages", "items"):
                deleted[table] = yield from execute(
                    f"DELETE FROM {table} WHERE job_id = ANY(?)", jobs
                )
            for index in ("question_keys", "question_indexes"):  # the deduplicator's, unreported
                yield from execute(f"DELETE FROM {index} WHERE job_id = ANY(?)", jobs)
            deleted["jobs"] = yield from execute("DELETE FROM jobs WHERE id = ANY(?)", jobs)
            deleted["steps"] = yield from execute("DELETE FROM steps WHERE created_at < ?", before)
            deleted["llm_calls"] = yield from execute(
                "DELETE FROM llm_calls WHERE created_at < ?", cutoff
            )
            deleted["runs"] = yield from execute(
                "DELETE FROM runs WHERE started_at < ? AND finished_at IS NOT NULL", cutoff
            )
            return deleted

        return await self._write(prune)


# what several operations share --------------------------------------------------------
def _locked_item(job_id: str, key: str) -> Steps[tuple[int, int] | None]:
    """Lock the item for this transaction; its (id, position) unless it has finished."""
    yield from lock(f"item/{job_id}/{key}")
    found = yield from fetch_one(
        "SELECT id, position, state FROM items WHERE job_id = ? AND key = ?", job_id, key
    )
    if found is None or found[2] in _FINISHED:
        return None
    return int(found[0]), int(found[1])


def _fail(job_id: str, key: str, error: str, results: ItemResults | None = None) -> Steps[bool]:
    found = yield from _locked_item(job_id, key)
    if found is None:
        return False
    item_id, position = found
    if results is not None:
        yield from _store_results(job_id, item_id, position, results)
    yield from execute(
        "UPDATE items SET state = 'failed', lease_owner = NULL, lease_expires = NULL, "
        "error = ?, finished_at = ?, report = ? WHERE id = ?",
        error,
        time.time(),
        json.dumps(results.report) if results and results.report else None,
        item_id,
    )
    yield from _forget(job_id, key)
    return True


def _store_results(job_id: str, item_id: int, position: int, results: ItemResults) -> Steps[None]:
    yield from execute_many(
        "INSERT INTO pairs (job_id, id, item_id, position, outcome, question, source, record) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, id) DO UPDATE SET "
        "item_id = excluded.item_id, position = excluded.position, "
        "outcome = excluded.outcome, question = excluded.question, "
        "source = excluded.source, record = excluded.record",
        [pair_row(job_id, item_id, n, record) for n, record in enumerate(results.pairs)],
    )
    yield from execute_many(
        "INSERT INTO samples (job_id, id, item_id, position, record, scored) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, id) DO UPDATE SET "
        "item_id = excluded.item_id, position = excluded.position, "
        "record = excluded.record, scored = excluded.scored",
        [sample_row(job_id, item_id, position, r, s) for r, s in results.samples],
    )


def _forget(job_id: str, key: str) -> Steps[None]:
    """A finished item needs no join state, and its leftover messages no handling."""
    yield from execute("DELETE FROM joins WHERE job_id = ? AND item_key = ?", job_id, key)
    yield from execute("DELETE FROM messages WHERE job_id = ? AND item_key = ?", job_id, key)


def _requeue_transient(job_id: str) -> Steps[int]:
    """Put the job's items that finished with endpoint failures back in the queue, dropping
    their stored results; the number put back."""
    where = "job_id = ? AND state = 'done' AND transient_failures > 0"
    for table in ("pairs", "samples"):
        yield from execute(
            f"DELETE FROM {table} WHERE item_id IN (SELECT id FROM items WHERE {where})", job_id
        )
    return (
        yield from execute(
            "UPDATE items SET state = 'queued', attempts = 0, report = NULL, finished_at = NULL, "
            f"transient_failures = 0, started_by = NULL WHERE {where}",
            job_id,
        )
    )


def _index_questions(job_id: str, matcher: QuestionMatcher) -> Steps[None]:
    """Make sure the job's kept questions are indexed under ``matcher``'s keys: once per job,
    or again if they were indexed under another signature."""
    found = yield from fetch_one("SELECT signature FROM question_indexes WHERE job_id = ?", job_id)
    if found is not None and found[0] == matcher.signature:
        return
    yield from execute("DELETE FROM question_keys WHERE job_id = ?", job_id)
    after = -1
    while kept := (
        yield from fetch(
            "SELECT id, question FROM questions WHERE job_id = ? AND duplicate_of IS NULL "
            "AND id > ? ORDER BY id LIMIT 1000",
            *(job_id, after),
        )
    ):
        yield from _add_keys(job_id, [(int(r[0]), str(r[1])) for r in kept], matcher)
        after = int(kept[-1][0])
    yield from execute(
        "INSERT INTO question_indexes (job_id, signature) VALUES (?, ?) "
        "ON CONFLICT (job_id) DO UPDATE SET signature = excluded.signature",
        *(job_id, matcher.signature),
    )


def _add_keys(
    job_id: str, kept: Sequence[tuple[int, str]], matcher: QuestionMatcher
) -> Steps[None]:
    yield from execute_many(
        "INSERT INTO question_keys (job_id, key, question_id) VALUES (?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        [(job_id, key, row) for row, question in kept for key in matcher.keys(question)],
    )
