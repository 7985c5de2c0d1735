"""Steps that several operations take on one item: lock it, store its results, end it."""

from __future__ import annotations

import json
import time

from ragjury.store._common import (
    pair_row,
    sample_row,
)
from ragjury.store.base import (
    ItemResults,
)
from ragjury.store.sql.driven import FINISHED
from ragjury.store.sql.steps import (
    Steps,
    execute,
    execute_many,
    fetch_one,
    lock,
)


def locked_item(job_id: str, key: str) -> Steps[tuple[int, int] | None]:
    """Lock the item for this transaction; its (id, position) unless it has finished."""
    yield from lock(f"item/{job_id}/{key}")
    found = yield from fetch_one(
        "SELECT id, position, state FROM items WHERE job_id = ? AND key = ?", job_id, key
    )
    if found is None or found[2] in FINISHED:
        return None
    return int(found[0]), int(found[1])


def fail(job_id: str, key: str, error: str, results: ItemResults | None = None) -> Steps[bool]:
    found = yield from locked_item(job_id, key)
    if found is None:
        return False
    item_id, position = found
    if results is not None:
        yield from store_results(job_id, item_id, position, results)
    yield from execute(
        "UPDATE items SET state = 'failed', lease_owner = NULL, lease_expires = NULL, "
        "error = ?, finished_at = ?, report = ? WHERE id = ?",
        error,
        time.time(),
        json.dumps(results.report) if results and results.report else None,
        item_id,
    )
    yield from forget(job_id, key)
    return True


def store_results(job_id: str, item_id: int, position: int, results: ItemResults) -> Steps[None]:
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


def forget(job_id: str, key: str) -> Steps[None]:
    """A finished item needs no join state, and its leftover messages no handling."""
    yield from execute("DELETE FROM joins WHERE job_id = ? AND item_key = ?", job_id, key)
    yield from execute("DELETE FROM messages WHERE job_id = ? AND item_key = ?", job_id, key)


def requeue_transient(job_id: str) -> Steps[int]:
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
