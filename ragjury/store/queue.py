"""The intake queue: jobs of documents or samples, claimed by daemons under renewable leases.

An item moves ``queued -> processing -> done`` (or ``failed``). A daemon claims items with a
lease (an expiry time it renews while it works); if it dies, the lease runs out and any daemon
may claim the item again. Finishing an item stores its results and marks it done in one
transaction, and only if it is not done already, so an item's results are stored once however
many daemons worked on it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import aiosqlite
from pydantic import BaseModel

from ragjury.errors import InputError
from ragjury.store.db import Store

JobKind = Literal["generate", "evaluate"]
ItemState = Literal["queued", "processing", "done", "failed"]
STATES: tuple[ItemState, ...] = ("queued", "processing", "done", "failed")


@dataclass(frozen=True)
class Job:
    id: str
    kind: JobKind
    options: dict[str, Any]
    created: bool = False
    """True when this call created the job; False when an identical job already existed."""
    size: int = 0
    """How many items the job has."""
    retried: int = 0
    """Finished items put back in the queue because an LLM step of theirs failed at the
    endpoint (see :attr:`ItemResults.transient_failures`)."""


@dataclass(frozen=True)
class Item:
    id: int
    job_id: str
    key: str
    position: int
    payload: dict[str, Any]
    attempts: int


@dataclass(frozen=True)
class ItemResults:
    """What finishing an item stores: export records (pairs or samples) and a report."""

    pairs: Sequence[dict[str, Any]] = ()
    samples: Sequence[tuple[dict[str, Any], str]] = ()
    """(export record, SampleScored JSON) per sample."""
    report: dict[str, Any] | None = None
    events: tuple[Any, ...] = ()
    """The item's result events, handed to listeners once the results are stored."""
    transient_failures: int = 0
    """Failure records in the results that say the endpoint failed, not the model (one step's
    failure may be carried by more than one event: only zero or not matters). When the same
    job is submitted again, an item with any is done again, its other steps from the cache."""


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


_INSERT_ITEM = (
    "INSERT INTO items (job_id, key, position, payload, created_at) VALUES (?, ?, ?, ?, ?)"
)


def _encode(payload: Any) -> str:
    if isinstance(payload, BaseModel):
        return payload.model_dump_json()
    return json.dumps(payload, sort_keys=True)


async def _requeue_transient(db: aiosqlite.Connection, job_id: str) -> int:
    """Put the job's items that finished with endpoint failures back in the queue, dropping
    their stored results; the number put back."""
    where = "job_id = ? AND state = 'done' AND transient_failures > 0"
    for table in ("pairs", "samples"):
        await db.execute(
            f"DELETE FROM {table} WHERE item_id IN (SELECT id FROM items WHERE {where})",
            (job_id,),
        )
    cursor = await db.execute(
        "UPDATE items SET state = 'queued', attempts = 0, report = NULL, finished_at = NULL, "
        f"transient_failures = 0 WHERE {where}",
        (job_id,),
    )
    return cursor.rowcount


class Queue:
    """Queue operations on a :class:`Store`. ``clock`` is wall time shared by processes."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    async def submit(
        self,
        kind: JobKind,
        options: dict[str, Any],
        items: Sequence[tuple[str, dict[str, Any]]] | Callable[[], Iterable[tuple[str, Any]]],
        *,
        batch: int = 500,
        batch_bytes: int = 4 * 1024 * 1024,
    ) -> Job:
        """Create a job of ``items`` ((key, payload) in order), or find the identical one.

        ``items`` may be a function that returns a fresh iterator each time it is called (a
        lazy reader of files): it is read twice, once for the job's key and once to insert,
        so however many items there are, only ``batch`` of them, and about ``batch_bytes`` of
        encoded payload, are held at once (a few large documents make a batch on their own)."""
        make: Callable[[], Iterable[tuple[str, Any]]] = (
            items if callable(items) else (lambda: items)
        )
        digest = hashlib.sha256(json.dumps([kind, options], sort_keys=True, default=str).encode())
        seen: Counter[str] = Counter()
        for key, payload in make():
            seen[key] += 1
            digest.update(b"\0" + key.encode() + b"\0" + _encode(payload).encode())
        repeated = sorted(k for k, n in seen.items() if n > 1)
        if repeated:
            raise InputError(
                f"every {'document' if kind == 'generate' else 'sample'} needs its own id; "
                f"repeated: {', '.join(repeated[:5])}; give each record a unique id"
            )
        if not seen:
            return Job(id="", kind=kind, options=options, created=False, size=0)
        job_key = digest.hexdigest()
        now = self._clock()
        async with self.store.write() as db:
            async with db.execute("SELECT id FROM jobs WHERE key = ?", (job_key,)) as cursor:
                row = await cursor.fetchone()
            if row is not None:
                retried = await _requeue_transient(db, str(row[0]))
                return Job(str(row[0]), kind, options, size=len(seen), retried=retried)
            job_id = uuid.uuid4().hex[:12]
            await db.execute(
                "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?)",
                (job_id, kind, job_key, json.dumps(options, default=str), _iso(now)),
            )
            rows: list[tuple[Any, ...]] = []
            held = 0
            for position, (key, payload) in enumerate(make()):
                encoded = _encode(payload)
                rows.append((job_id, key, position, encoded, now))
                held += len(encoded)
                if len(rows) >= batch or held >= batch_bytes:
                    await db.executemany(_INSERT_ITEM, rows)
                    rows.clear()
                    held = 0
            await db.executemany(_INSERT_ITEM, rows)
        return Job(id=job_id, kind=kind, options=options, created=True, size=len(seen))

    async def job(self, job_id: str) -> Job:
        row = await self.store.fetchone("SELECT kind, options FROM jobs WHERE id = ?", (job_id,))
        if row is None:
            raise KeyError(job_id)
        return Job(id=job_id, kind=row[0], options=json.loads(row[1]))

    async def claim(
        self,
        owner: str,
        limit: int,
        *,
        lease_seconds: float,
        job_ids: Sequence[str] | None = None,
        max_attempts: int = 5,
    ) -> list[Item]:
        """Take up to ``limit`` queued items, or items whose lease ran out, for ``owner``.

        An item that ``max_attempts`` daemons have taken without finishing is marked failed
        instead: something in it keeps killing the daemon."""
        if limit <= 0:
            return []
        now = self._clock()
        # Never its own items: a daemon that renews late must not work an item twice.
        where = (
            "(state = 'queued' OR (state = 'processing' AND lease_expires < ? "
            "AND lease_owner != ?))"
        )
        params: list[Any] = [now, owner]
        if job_ids is not None:
            where += f" AND job_id IN ({', '.join('?' for _ in job_ids)})"
            params.extend(job_ids)
        claimed: list[Item] = []
        async with self.store.write() as db:
            async with db.execute(
                f"SELECT id, job_id, key, position, payload, attempts FROM items WHERE {where} "
                "ORDER BY id LIMIT ?",
                (*params, limit),
            ) as cursor:
                rows = list(await cursor.fetchall())
            for row in rows:
                item_id, attempts = int(row[0]), int(row[5])
                if attempts >= max_attempts:
                    await db.execute(
                        "UPDATE items SET state = 'failed', lease_owner = NULL, error = ?, "
                        "finished_at = ? WHERE id = ?",
                        (
                            f"abandoned: {attempts} daemon(s) took this item and never finished "
                            "it (killed or crashed while working on it); see their logs",
                            now,
                            item_id,
                        ),
                    )
                    continue
                await db.execute(
                    "UPDATE items SET state = 'processing', lease_owner = ?, lease_expires = ?, "
                    "attempts = attempts + 1 WHERE id = ?",
                    (owner, now + lease_seconds, item_id),
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

    async def renew(self, owner: str, lease_seconds: float) -> int:
        """Extend every lease ``owner`` holds; the number of items still held."""
        async with self.store.write() as db:
            cursor = await db.execute(
                "UPDATE items SET lease_expires = ? WHERE lease_owner = ? AND state = 'processing'",
                (self._clock() + lease_seconds, owner),
            )
            return cursor.rowcount

    async def finish(self, owner: str, item: Item, results: ItemResults) -> bool:
        """Store ``results`` and mark ``item`` done, unless it is done already (then False)."""
        async with self.store.write() as db:
            async with db.execute("SELECT state FROM items WHERE id = ?", (item.id,)) as cursor:
                row = await cursor.fetchone()
            if row is None or row[0] in ("done", "failed"):
                return False
            await db.executemany(
                "INSERT OR REPLACE INTO pairs "
                "(job_id, id, item_id, position, outcome, question, source, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        item.job_id,
                        record["id"],
                        item.id,
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
                    (
                        item.job_id,
                        record["id"],
                        item.id,
                        item.position,
                        json.dumps(record, ensure_ascii=False),
                        scored,
                    )
                    for record, scored in results.samples
                ],
            )
            await db.execute(
                "UPDATE items SET state = 'done', lease_owner = NULL, lease_expires = NULL, "
                "report = ?, finished_at = ?, transient_failures = ? WHERE id = ?",
                (
                    json.dumps(results.report or {}),
                    self._clock(),
                    results.transient_failures,
                    item.id,
                ),
            )
        return True

    async def fail(self, item: Item, error: str) -> None:
        async with self.store.write() as db:
            await db.execute(
                "UPDATE items SET state = 'failed', lease_owner = NULL, lease_expires = NULL, "
                "error = ?, finished_at = ? WHERE id = ? AND state = 'processing'",
                (error, self._clock(), item.id),
            )

    async def release(self, owner: str, item_ids: Iterable[int]) -> int:
        """Put unfinished items back in the queue (a daemon stopping before finishing them)."""
        ids = list(item_ids)
        if not ids:
            return 0
        async with self.store.write() as db:
            cursor = await db.execute(
                "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL, "
                "attempts = MAX(attempts - 1, 0) "
                f"WHERE lease_owner = ? AND state = 'processing' AND id IN "
                f"({', '.join('?' for _ in ids)})",
                (owner, *ids),
            )
            return cursor.rowcount

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int:
        """Items of ``job_ids`` (or of every job) that are queued or processing."""
        sql = "SELECT COUNT(*) FROM items WHERE state IN ('queued', 'processing')"
        params: tuple[Any, ...] = ()
        if job_ids is not None:
            sql += f" AND job_id IN ({', '.join('?' for _ in job_ids)})"
            params = tuple(job_ids)
        row = await self.store.fetchone(sql, params)
        return int(row[0]) if row else 0

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]:
        sql = "SELECT state, COUNT(*) FROM items"
        params: tuple[Any, ...] = ()
        if job_ids is not None:
            sql += f" WHERE job_id IN ({', '.join('?' for _ in job_ids)})"
            params = tuple(job_ids)
        rows = await self.store.fetchall(sql + " GROUP BY state", params)
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        counts.update({str(state): int(n) for state, n in rows})
        return counts

    async def reports(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT report FROM items WHERE job_id = ? AND report IS NOT NULL ORDER BY position",
            (job_id,),
        )
        return [json.loads(row[0]) for row in rows]

    async def failed_items(self, job_id: str) -> list[dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT key, error FROM items WHERE job_id = ? AND state = 'failed' ORDER BY position",
            (job_id,),
        )
        return [{"item": key, "error": error} for key, error in rows]

    def pairs(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Judged pairs in export form, in submission order, read as they are written out."""
        return self._records("pairs", job_ids)

    def samples(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Judged samples in export form, in submission order, read as they are written out."""
        return self._records("samples", job_ids)

    async def pair_questions(self, job_id: str) -> list[tuple[str, str]]:
        """(pair id, question) of a job's stored pairs: what its deduplicator has seen."""
        rows = await self.store.fetchall(
            "SELECT id, question FROM pairs WHERE job_id = ? ORDER BY item_id, position", (job_id,)
        )
        return [(str(pair_id), str(question)) for pair_id, question in rows]

    async def scored(self, job_id: str) -> list[str]:
        """The SampleScored JSON of a job's samples, in input order."""
        rows = await self.store.fetchall(
            "SELECT scored FROM samples WHERE job_id = ? ORDER BY position", (job_id,)
        )
        return [str(row[0]) for row in rows]

    async def _records(
        self, table: str, job_ids: Sequence[str] | None
    ) -> AsyncIterator[dict[str, Any]]:
        sql = (
            f"SELECT r.record FROM {table} r JOIN items i ON i.id = r.item_id "
            "JOIN jobs j ON j.id = r.job_id"
        )
        params: tuple[Any, ...] = ()
        if job_ids is not None:
            sql += f" WHERE r.job_id IN ({', '.join('?' for _ in job_ids)})"
            params = tuple(job_ids)
        sql += " ORDER BY j.rowid, i.position, r.position"
        async with self.store.db.execute(sql, params) as cursor:
            while rows := await cursor.fetchmany(200):
                for row in rows:
                    yield json.loads(row[0])
