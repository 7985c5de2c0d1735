"""What a store holds, for ``ragjury status``: items per state and job, LLM use per stage,
throughput, messages waiting per agent, and the workers (host, agents, leases held) serving
them, and batch mode's batches in flight. The queries are in the SQL core's dialect (``?``
placeholders, ``seq``), which both drivers render."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from ragjury.store._common import STORING
from ragjury.store._values import Param, Row
from ragjury.store.base import STATES
from ragjury.store.status_report import (
    BatchStatus,
    JobStatus,
    StageUse,
    StatusReport,
    Throughput,
    TokenTotals,
    WorkerStatus,
)

_LIVE_SECONDS = 120.0
"""A worker that has not beaten its heart for this long is taken for dead."""


class _Readable(Protocol):
    location: str

    async def read(self, sql: str, params: Sequence[Param] = ()) -> list[Row]: ...

    async def now(self) -> float: ...

    async def waiting_messages(self) -> dict[str, int]: ...


async def status(store: _Readable) -> StatusReport:
    now = time.time()
    # every job's items per state in one pass over the items_job index, the totals summed
    # from it: not a count of the whole table and then one more query per job
    totals = _states()
    per_job: dict[str, _States] = {}
    for job_id, state, n in await store.read(
        "SELECT job_id, state, COUNT(*) FROM items GROUP BY job_id, state"
    ):
        shown = "processing" if state == "running" else str(state)
        per_job.setdefault(str(job_id), _states())[shown] += int(n)
        totals[shown] += int(n)
    jobs: list[JobStatus] = []
    for job_id, kind, created_at, key in await store.read(
        "SELECT id, kind, created_at, key FROM jobs ORDER BY seq"
    ):
        states = per_job.get(str(job_id), _states())
        jobs.append(
            {
                "id": job_id,
                "kind": kind,
                "created_at": created_at,
                "queued": states["queued"],
                "processing": states["processing"],
                "done": states["done"],
                "failed": states["failed"],
                "stored_in_full": not str(key).startswith(STORING),
            }
        )

    cached = {
        str(agent): int(n)
        for agent, n in await store.read("SELECT agent, COUNT(*) FROM steps GROUP BY agent")
    }
    stages: dict[str, StageUse] = {}
    for stage, calls, requests, prompt, completion, failed in await store.read(
        "SELECT stage, COUNT(*), SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), "
        "SUM(CASE WHEN error IS NOT NULL AND error NOT LIKE 'in flight%' THEN 1 ELSE 0 END) "
        "FROM llm_calls "
        "GROUP BY stage ORDER BY stage"
    ):
        stages[str(stage)] = {
            "structured_calls": int(calls),
            "llm_calls": int(requests or 0),
            "prompt_tokens": int(prompt or 0),
            "completion_tokens": int(completion or 0),
            "failed_calls": int(failed or 0),
            "cached_steps": cached.get(str(stage), 0),
        }
    for agent, n in cached.items():
        stages.setdefault(agent, {"llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
        stages[agent]["cached_steps"] = n
    tokens: TokenTotals = {
        "prompt": sum(s["prompt_tokens"] for s in stages.values()),
        "completion": sum(s["completion_tokens"] for s in stages.values()),
    }

    [(done, first, last, recent)] = await store.read(  # one pass over the done items
        "SELECT COUNT(*), MIN(finished_at), MAX(finished_at), "
        "SUM(CASE WHEN finished_at >= ? THEN 1 ELSE 0 END) FROM items "
        "WHERE state = 'done' AND finished_at IS NOT NULL",
        (now - 60,),
    )
    span = (last - first) if done and done > 1 and first is not None else None
    throughput: Throughput = {
        "items_done_last_minute": int(recent or 0),  # SUM of no rows is NULL
        "items_per_minute": round(60 * (done - 1) / span, 2) if span else None,
    }

    db_now = await store.now()
    workers: list[WorkerStatus] = []
    serving: set[str] = set()
    for owner, host, pid, agents, heartbeat in await store.read(
        "SELECT owner, host, pid, agents, heartbeat FROM workers ORDER BY started_at"
    ):
        live = db_now - heartbeat < _LIVE_SECONDS
        [(held,)] = await store.read(
            "SELECT COUNT(*) FROM messages WHERE lease_owner = ? AND available_at > ?",
            (owner, db_now),
        )
        [(items,)] = await store.read(
            "SELECT COUNT(*) FROM items WHERE lease_owner = ? AND state = 'processing' "
            "AND lease_expires > ?",
            (owner, db_now),
        )
        if live:
            serving.update(str(agents).split(","))
        workers.append(
            {
                "owner": owner,
                "host": host,
                "pid": int(pid),
                "agents": str(agents).split(","),
                "messages_held": int(held),
                "items_held": int(items),
                "seconds_since_heartbeat": round(db_now - heartbeat, 1),
                "live": live,
            }
        )
    waiting = await store.waiting_messages()
    batches: list[BatchStatus] = [
        {"job": str(job), "batch": batch, "status": state or "submitting",
         "requests": int(n), "age_seconds": round(float(age), 1)}
        for job, batch, state, n, age in await store.read(
            "SELECT job_id, provider_id, status, requests, now_epoch() - created_at "
            "FROM batches WHERE state <> 'ended' ORDER BY created_at"
        )
    ]  # fmt: skip
    return {
        "db": store.location,
        "queued": totals["queued"],
        "processing": totals["processing"],
        "done": totals["done"],
        "failed": totals["failed"],
        "jobs": jobs,
        "stages": stages,
        "tokens": tokens,
        "throughput": throughput,
        "daemons": workers,
        "agents": {
            group: {"messages_waiting": n, "served": group in serving}
            for group, n in waiting.items()
        },
        "waiting_for_workers": sorted(g for g in waiting if g not in serving),
        "batches": batches,
    }


_States = dict[str, int]


def _states() -> _States:
    return dict.fromkeys(STATES, 0)
