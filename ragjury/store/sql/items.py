"""Steps that several operations take on one item: end it (storing its results), forget
what it left, put it back in the queue."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from ragjury._json import JSONData
from ragjury.store._common import (
    pair_row,
    sample_row,
)
from ragjury.store._values import Params
from ragjury.store.base import (
    ItemResults,
)
from ragjury.store.sql.driven import FINISHED
from ragjury.store.sql.steps import (
    EndItem,
    Steps,
    end_item,
    execute,
    execute_many,
    fetch_one,
)

STARTED = (
    "UPDATE items SET state = 'running', lease_owner = NULL, lease_expires = NULL "
    "WHERE state = 'processing' AND id = ANY(?)"
)
"""Items whose first messages are on the bus: running, no longer leased to their intake."""


def end(
    job_id: str, key: str, state: str, results: ItemResults | None, error: str | None = None
) -> Steps[bool]:
    """End the item ``state`` (``done`` or ``failed``) with ``results``, unless it has ended
    already (False); see :class:`~ragjury.store.sql.steps.EndItem`."""
    return (yield from end_item(ending(job_id, key, state, results, error)))


def ending(
    job_id: str, key: str, state: str, results: ItemResults | None, error: str | None = None
) -> EndItem:
    """The step that ends the item (see :func:`end`)."""
    if state == "done":
        report: str | None = json.dumps((results.report if results else None) or {})
    else:
        report = json.dumps(results.report) if results and results.report else None
    return EndItem(
        job_id,
        key,
        state,
        report,
        error,
        time.time(),
        results.transient_failures if results and state == "done" else None,
        [pair_record(record) for record in results.pairs] if results else [],
        [sample_record(record, scored) for record, scored in results.samples] if results else [],
    )


def fail(job_id: str, key: str, error: str, results: ItemResults | None = None) -> Steps[bool]:
    return (yield from end(job_id, key, "failed", results, error))


def pair_record(record: Mapping[str, JSONData]) -> Params:
    """A pair's columns but its item's: (id, outcome, question, source, record)."""
    row = pair_row("", 0, 0, record)
    return (row[1], *row[4:])


def sample_record(record: Mapping[str, JSONData], scored: str) -> Params:
    """A judged sample's columns but its item's: (id, record, scored)."""
    row = sample_row("", 0, 0, record, scored)
    return (row[1], *row[4:])


_UNENDED = "state NOT IN (" + ", ".join(f"'{state}'" for state in FINISHED) + ")"


def end_item_plainly(step: EndItem) -> Steps[bool]:
    """:class:`~ragjury.store.sql.steps.EndItem` as plain statements, in the driver's
    transaction."""
    found = yield from fetch_one(
        "UPDATE items SET state = ?, lease_owner = NULL, lease_expires = NULL, report = ?, "
        "error = COALESCE(?, error), finished_at = ?, "
        "transient_failures = COALESCE(?, transient_failures) "
        f"WHERE job_id = ? AND key = ? AND {_UNENDED} RETURNING id, position",
        *(step.state, step.report, step.error, step.finished_at, step.transient_failures),
        *(step.job_id, step.key),
    )
    if found is None:
        return False
    item_id, position = int(found[0]), int(found[1])
    yield from execute_many(
        PAIRS_UPSERT,
        [(step.job_id, p[0], item_id, n, *p[1:]) for n, p in enumerate(step.pairs)],
    )
    yield from execute_many(
        SAMPLES_UPSERT,
        [(step.job_id, s[0], item_id, position, *s[1:]) for s in step.samples],
    )
    yield from forget(step.job_id, step.key)
    return True


PAIRS_UPSERT = (
    "INSERT INTO pairs (job_id, id, item_id, position, outcome, question, source, record) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, id) DO UPDATE SET "
    "item_id = excluded.item_id, position = excluded.position, "
    "outcome = excluded.outcome, question = excluded.question, "
    "source = excluded.source, record = excluded.record"
)
SAMPLES_UPSERT = (
    "INSERT INTO samples (job_id, id, item_id, position, record, scored) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, id) DO UPDATE SET "
    "item_id = excluded.item_id, position = excluded.position, "
    "record = excluded.record, scored = excluded.scored"
)


def forget(job_id: str, key: str) -> Steps[None]:
    """An ended item needs no join state, and its leftover messages no handling."""
    yield from execute("DELETE FROM item_joins WHERE job_id = ? AND item_key = ?", job_id, key)
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
