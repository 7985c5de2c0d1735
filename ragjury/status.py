"""What a database holds: items per state and job, LLM use per stage, throughput, leases."""

from __future__ import annotations

import time
from typing import Any

from ragjury.store import Store
from ragjury.store.cache import StepCache
from ragjury.store.queue import STATES, Queue


async def queue_status(store: Store, *, now: float | None = None) -> dict[str, Any]:
    """The ``ragjury status --json`` document."""
    now = time.time() if now is None else now
    queue = Queue(store)
    status: dict[str, Any] = {"db": str(store.path), **await queue.counts()}
    jobs = []
    for job_id, kind, created_at in await store.fetchall(
        "SELECT id, kind, created_at FROM jobs ORDER BY rowid"
    ):
        counts = await queue.counts([job_id])
        jobs.append({"id": job_id, "kind": kind, "created_at": created_at, **counts})
    status["jobs"] = jobs

    cached = await StepCache(store).count_by_agent()
    stages: dict[str, dict[str, int]] = {}
    for stage, calls, requests, prompt, completion, failed in await store.fetchall(
        "SELECT stage, COUNT(*), SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), "
        "SUM(error IS NOT NULL) FROM llm_calls GROUP BY stage ORDER BY stage"
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
    status["stages"] = stages
    status["tokens"] = {
        "prompt": sum(s.get("prompt_tokens", 0) for s in stages.values()),
        "completion": sum(s.get("completion_tokens", 0) for s in stages.values()),
    }

    row = await store.fetchone(
        "SELECT COUNT(*), MIN(finished_at), MAX(finished_at) FROM items "
        "WHERE state = 'done' AND finished_at IS NOT NULL"
    )
    recent = await store.fetchone(
        "SELECT COUNT(*) FROM items WHERE state = 'done' AND finished_at >= ?", (now - 60,)
    )
    done, first, last = (row or (0, None, None))[:3]
    span = (last - first) if done and done > 1 and first is not None else None
    status["throughput"] = {
        "items_done_last_minute": int(recent[0]) if recent else 0,
        "items_per_minute": round(60 * (done - 1) / span, 2) if span else None,
    }
    leases = await store.fetchall(
        "SELECT lease_owner, COUNT(*), MIN(lease_expires) FROM items "
        "WHERE state = 'processing' GROUP BY lease_owner"
    )
    status["daemons"] = [
        {"owner": owner, "items": int(n), "lease_expires_in": round(expires - now, 1)}
        for owner, n, expires in leases
    ]
    return status


__all__ = ["STATES", "queue_status"]
