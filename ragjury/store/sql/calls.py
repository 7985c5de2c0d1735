"""The runs, the LLM calls they made, the step cache and the shared rate buckets: what the
LLM layer and the commands record (:class:`~ragjury.store.base.CallLog`)."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence

from ragjury._json import JSONData
from ragjury.llm.ratelimit import wait_for
from ragjury.llm.usage import IN_FLIGHT, CallStats
from ragjury.store._common import (
    KILLED,
    alive,
    epoch,
    iso,
    job_summary_pattern,
    latest_run_of,
    machine,
    run_record,
    totals,
)
from ragjury.store._values import Param, Params, Row
from ragjury.store.base import CallTotals, RunRecord
from ragjury.store.sql.driven import Driven
from ragjury.store.sql.steps import (
    Steps,
    execute,
    execute_many,
    fetch,
)

_ANSWERED_TOTALS = (
    "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0), "
    "COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cost_usd), 0), "
    "COALESCE(SUM(CASE WHEN requests > 0 AND cost_usd IS NULL THEN 1 ELSE 0 END), 0) "
    "FROM llm_calls WHERE run_id = ?"
)
"""A killed run's calls as the provider answered them: a call killed in flight counts the
requests answered before its last (none if that was its first)."""

_INSERT_CALL = (
    "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, completion_tokens, "
    "latency_ms, statuses, error, created_at, model, cost_usd) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

PUT_STEP = (
    "INSERT INTO steps (key, agent, output, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET agent = excluded.agent, output = excluded.output, "
    "created_at = excluded.created_at"
)

CLOSE_CALL = (
    "UPDATE llm_calls SET stage = ?, requests = ?, prompt_tokens = ?, completion_tokens = ?, "
    "latency_ms = ?, statuses = ?, error = ?, model = ?, cost_usd = ? WHERE id = ?"
)
"""A finished call's figures on its in-flight record (a row of :func:`closing_row`). The
record keeps the time it was opened (``created_at``, as the call started): on PostgreSQL an
update that changes no indexed column can stay on its page with no new index entries."""
DROP_CALLS = "DELETE FROM llm_calls WHERE id = ANY(?)"
"""In-flight records opened ahead of calls that were never made."""


def _figures(stats: CallStats, error: str | None) -> Params:
    """A finished call's figures, in the column order of both writes of them."""
    return (
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


def closing_row(stats: CallStats, error: str | None) -> Params:
    """A finished call's row for :data:`CLOSE_CALL`: its figures but the time,
    then its in-flight record's id."""
    if stats.record is None:
        raise ValueError(f"the {stats.stage} call has no in-flight record to close")
    figures = _figures(stats, error)
    return (*figures[:7], *figures[8:], stats.record)


class CallLogSQL(Driven):
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

    async def start_run(self, command: str, settings: Mapping[str, JSONData]) -> str:
        run_id = uuid.uuid4().hex
        text = json.dumps(settings, default=str)
        host, pid = machine(), os.getpid()

        def start() -> Steps[None]:
            # runs of this machine whose process is gone (or whose pid a later process took)
            # were killed: say so, with what their answered calls took, and that their calls
            # still in flight will never be answered
            for other, other_pid, started, partial in (
                yield from fetch(
                    "SELECT id, pid, started_at, summary FROM runs "
                    "WHERE host IN (?, ?) AND finished_at IS NULL",
                    host,
                    socket.gethostname(),  # a run recorded before hosts named their boot
                )
            ):
                if other_pid is None or alive(int(other_pid), epoch(str(started))):
                    continue
                yield from execute(
                    "UPDATE llm_calls SET error = ? WHERE run_id = ? AND error = ?",
                    KILLED,
                    other,
                    IN_FLIGHT,
                )
                [row] = yield from fetch(_ANSWERED_TOTALS, other)
                figures = {k: v for k, v in totals(row).items() if k != "cost_known_usd"}
                killed = {**json.loads(partial or "{}"), **figures}
                killed.update(killed=True, pid=other_pid)
                yield from execute(
                    "UPDATE runs SET finished_at = ?, summary = ? WHERE id = ?",
                    iso(),
                    json.dumps(killed),
                    other,
                )
            yield from execute(
                "INSERT INTO runs (id, command, started_at, settings, host, pid) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                *(run_id, command, iso(), text, host, pid),
            )

        await self._write(start)
        return run_id

    async def note_run_job(self, run_id: str, job_id: str) -> None:
        sql = "UPDATE runs SET summary = ? WHERE id = ? AND finished_at IS NULL"
        params = (json.dumps({"job": job_id}), run_id)
        await self._write(lambda: execute(sql, *params), single=True)

    async def finish_run(self, run_id: str, summary: Mapping[str, JSONData]) -> None:
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
        if stats.record is None:
            row = (run_id, *_figures(stats, error))
            await self._write(lambda: execute(_INSERT_CALL, *row), single=True)
            return
        sql = f"UPDATE llm_calls SET run_id = ?, {CLOSE_CALL.removeprefix('UPDATE llm_calls SET ')}"
        params = (run_id, *closing_row(stats, error))
        await self._write(lambda: execute(sql, *params), single=True)

    async def close_calls(
        self, calls: Sequence[tuple[CallStats, str | None]], *, unused: Sequence[int] = ()
    ) -> None:
        rows = [closing_row(stats, error) for stats, error in calls]

        def close() -> Steps[None]:
            yield from execute_many(CLOSE_CALL, rows)
            if unused:
                yield from execute(DROP_CALLS, list(unused))

        if rows or unused:
            await self._write(close)

    async def latest_run(self, job_id: str) -> RunRecord | None:
        return latest_run_of(await self._runs_naming(job_id), job_id)

    async def job_runs(self, job_id: str) -> list[RunRecord]:
        runs = (run_record(row) for row in reversed(await self._runs_naming(job_id)))
        return [r for r in runs if r.summary and r.summary.get("job") == job_id]

    async def _runs_naming(self, job_id: str) -> list[Row]:
        """The finished runs whose summary may name ``job_id``, newest first."""
        return await self.read(
            "SELECT id, command, started_at, finished_at, settings, summary FROM runs "
            "WHERE summary LIKE ? AND finished_at IS NOT NULL "
            "ORDER BY finished_at DESC, started_at DESC",
            (job_summary_pattern(job_id),),
        )

    async def call_totals(
        self, *, run_id: str | None = None, since: float | None = None
    ) -> CallTotals:
        where, params = "1 = 1", list[Param]()
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

    async def get_step(self, key: str) -> str | None:
        rows = await self.read("SELECT output FROM steps WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    async def put_step(self, key: str, agent: str, output: str) -> None:
        params = (key, agent, output, time.time())
        await self._write(lambda: execute(PUT_STEP, *params), single=True)
