"""Jobs and their items: submitting, claiming under a lease, finishing and counting them
(:class:`~ragjury.store.base.Queue`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import partial

from pydantic import BaseModel

from ragjury._json import JSONData, JSONObject
from ragjury.store._common import (
    PAGE,
    STORING,
    JobKey,
    abandoned,
    encode,
    iso,
    job_key,
    job_record,
)
from ragjury.store._values import Row
from ragjury.store.base import (
    STATES,
    Item,
    ItemEnds,
    ItemResults,
    ItemsFactory,
    Job,
    JobKind,
)
from ragjury.store.sql.driven import UNFINISHED, Driven, of_jobs
from ragjury.store.sql.items import (
    PAIRS_UPSERT,
    SAMPLES_UPSERT,
    STARTED,
    end,
    fail,
    pair_record,
    requeue_transient,
    sample_record,
)
from ragjury.store.sql.steps import (
    ClaimItems,
    Steps,
    execute,
    execute_many,
    fetch,
    insert_items,
    text,
)

_UNFINISHED = "(" + ", ".join(f"'{state}'" for state in UNFINISHED) + ")"
"""The unfinished states written out, not bound: a plan PostgreSQL keeps for the statement
then knows it asks only for rows of ``items_open``, the index of the unfinished items."""


class QueueSQL(Driven):
    async def submit(
        self,
        kind: JobKind,
        options: Mapping[str, JSONData],
        items: ItemsFactory,
        *,
        batch: int = 500,
        batch_bytes: int = 4 * 1024 * 1024,
        ends: ItemEnds | None = None,
        told: Callable[[str], None] | None = None,
    ) -> Job:
        text = json.dumps(options, default=str)
        stored: JSONObject = json.loads(text)  # the options as the job keeps them
        known = await self.read("SELECT key FROM jobs WHERE kind = ? AND options = ?", (kind, text))
        if ends is not None:  # judged as it is stored: committed a chunk at a time
            intake = _Intake(kind, options, text, items, ends, batch, batch_bytes, told)
            marks = [str(row[0]) for row in known if str(row[0]).startswith(STORING)]
            try:
                if (marks and await intake.resume(marks)) or not known:
                    return await intake.store(self)
            except Exception:  # read again the careful way, which says why (as below)
                pass
        elif not known:  # no job does this: the items are read once, hashed as they are stored
            key = JobKey(kind, options)
            try:
                return await self._write(
                    partial(self._submit_new, key, text, items, batch, batch_bytes, ends)
                )
            except Exception:  # read again the careful way, which says why
                # no items, repeated ids (the store refused the second), or the same job
                # stored meanwhile by another process (PostgreSQL refuses the key at the end)
                pass
        key_of_job, size = job_key(kind, options, items)
        if not size:
            return Job(id="", kind=kind, options=stored, created=False, size=0)
        if ends is not None and not await self.read(
            "SELECT 1 FROM jobs WHERE key = ?", (key_of_job,)
        ):  # another job with these options: this one is new, stored a chunk at a time
            intake = _Intake(kind, options, text, items, ends, batch, batch_bytes, told)
            return await intake.store(self)

        def submit() -> Steps[Job]:
            job_id = uuid.uuid4().hex[:12]
            inserted = yield from fetch(
                "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (key) DO NOTHING RETURNING id",
                *(job_id, kind, key_of_job, text, iso(time.time())[:19]),
            )
            if not inserted:  # the same job exists (maybe submitted a moment ago)
                [(found,)] = yield from fetch("SELECT id FROM jobs WHERE key = ?", key_of_job)
                retried = yield from requeue_transient(str(found))
                return Job(str(found), kind, stored, size=size, retried=retried)
            ended = yield from _insert_all(job_id, items, batch, batch_bytes, ends=ends)
            return Job(job_id, kind, stored, created=True, size=size, ended=ended)

        job = await self._write(submit)
        if ends is not None and not job.created:  # what it left queued is judged here too
            ended = await self._end_queued(job.id, ends, told)
            job = dataclasses.replace(job, ended=ended)
        return job

    async def _end_queued(
        self, job_id: str, ends: ItemEnds, told: Callable[[str], None] | None
    ) -> int:
        """End the job's queued items ``ends`` gives results, a chunk at a time (a job
        judged as it is stored, stopped before the rest were judged, or stored by another
        process or version): the number ended. One another process claimed meanwhile is
        left to it."""
        page = (
            "SELECT id, key, payload FROM items WHERE job_id = ? AND state = 'queued' "
            f"AND id > ? ORDER BY id LIMIT {INTAKE_CHUNK}"
        )
        ended = after = 0
        while rows := await self.read(page, (job_id, after)):
            after = int(rows[-1][0])
            chunk = [(str(key), str(payload)) for _, key, payload in rows]
            ended += await self._write(partial(_end_items, job_id, chunk, ends))
            if told is not None:
                told(job_id)
            if len(rows) < INTAKE_CHUNK:
                break
        return ended

    @staticmethod
    def _submit_new(
        key: JobKey,
        text: str,
        items: ItemsFactory,
        batch: int,
        batch_bytes: int,
        ends: ItemEnds | None,
    ) -> Steps[Job]:
        """A job no other has the options of: stored under a key of its own while its items
        are stored and added to ``key``, then under its real key. Raises :class:`_NotNew`
        (and the transaction is rolled back) when it has no items or a job with that key
        exists."""
        job_id = uuid.uuid4().hex[:12]
        yield from execute(
            "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?)",
            *(job_id, key.kind, f"storing {job_id}", text, iso(time.time())[:19]),
        )
        ended = yield from _insert_all(job_id, items, batch, batch_bytes, key, ends)
        key_of_job = key.finish(items)
        if not key.size or (yield from fetch("SELECT 1 FROM jobs WHERE key = ?", key_of_job)):
            raise _NotNew
        yield from execute("UPDATE jobs SET key = ? WHERE id = ?", key_of_job, job_id)
        stored: JSONObject = json.loads(text)
        return Job(job_id, key.kind, stored, created=True, size=key.size, ended=ended)

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
        step = ClaimItems(text(owner), limit, lease_seconds, job_ids, max_attempts)

        def claim() -> Steps[list[Item]]:
            claimed: list[Item] = []
            rows = yield step
            for item_id, job_id, key, position, payload, attempts, taken in sorted(rows):
                if not taken:
                    yield from fail(str(job_id), str(key), abandoned(int(attempts)))
                    continue
                claimed.append(
                    Item(int(item_id), str(job_id), str(key), int(position),
                         str(payload), int(attempts) + 1)
                )  # fmt: skip
            return claimed

        # the claim is one statement on PostgreSQL; an item it finds started too often is
        # failed by a statement of its own after it (if that is cut off, the next claim
        # finds the item again)
        return await self._write(claim, single=True)

    async def items_started(self, item_ids: Sequence[int]) -> None:
        if item_ids:
            await self._write(lambda: execute(STARTED, list(item_ids)), single=True)

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
        return await self._write(lambda: end(job_id, key, "done", results), single=True)

    async def fail_item(
        self, job_id: str, key: str, error: str, results: ItemResults | None = None
    ) -> bool:
        return await self._write(lambda: fail(job_id, key, error, results), single=True)

    async def item_payload(self, job_id: str, key: str) -> JSONObject | None:
        rows = await self.read(
            "SELECT payload FROM items WHERE job_id = ? AND key = ?", (job_id, key)
        )
        return json.loads(rows[0][0]) if rows else None

    async def item_payloads(self, job_id: str) -> AsyncIterator[tuple[str, JSONObject]]:
        page = (
            "SELECT key, payload, id FROM items WHERE job_id = ? AND id > ? "
            f"ORDER BY id LIMIT {PAGE}"
        )
        after = -1
        while True:
            rows = await self.read(page, (job_id, after))
            for key, payload, _ in rows:
                yield str(key), json.loads(payload)
            if len(rows) < PAGE:
                return
            after = int(rows[-1][2])

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]:
        jobs, params = of_jobs(job_ids)
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for state, n in await self.read(
            f"SELECT state, COUNT(*) FROM items WHERE 1 = 1{jobs} GROUP BY state", params
        ):
            counts["processing" if state == "running" else str(state)] += int(n)
        return counts

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int:
        jobs, params = of_jobs(job_ids)
        sql = f"SELECT COUNT(*) FROM items WHERE state IN {_UNFINISHED}{jobs}"
        return int((await self.read(sql, params))[0][0])


def claim_items_plainly(step: ClaimItems) -> Steps[list[Row]]:
    """:class:`~ragjury.store.sql.steps.ClaimItems` as plain statements, in the driver's
    transaction."""
    jobs, in_jobs = of_jobs(step.job_ids)
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
    rows = yield from fetch(expired, step.owner, *in_jobs, step.limit)
    if len(rows) < step.limit:
        rows += yield from fetch(queued, *in_jobs, step.limit - len(rows))
    found = [(*row, int(row[5]) < step.max_attempts) for row in rows]
    taken = [row[0] for row in found if row[6]]
    if taken:
        yield from execute(
            "UPDATE items SET state = 'processing', lease_owner = ?, "
            "lease_expires = now_epoch() + ?, attempts = attempts + 1, started_by = ? "
            "WHERE id = ANY(?)",
            *(step.owner, step.lease_seconds, step.owner, taken),
        )
    return found


class _NotNew(Exception):
    """A job thought new has no items, or its key is another job's: rolled back."""


INTAKE_CHUNK = 250
INTAKE_CHUNK_BYTES = 1 * 1024 * 1024
"""A job judged as it is stored is committed every this many items (or bytes of their
payloads; their results are about twice as large again): a run killed meanwhile keeps what
it committed, and the write-ahead log stays small however large the job (see the SQLite
store's checkpoints). A chunk's items and results are held in memory until it is stored:
a keywords-only evaluate of 20,000 samples peaked at 116 MiB with 4,000 a chunk, 83 with
500 (as the one transaction of before, in batches of 500), 72 with 250, at the same CPU."""


Payload = BaseModel | Mapping[str, JSONData] | str


class _TakenOver(Exception):
    """Another process took over (or finished) the intake of a job this one was storing."""


class _Intake:
    """A job judged as it is stored (``ends``), committed a chunk at a time. Until its last
    chunk the job's key is ``storing <id> <items stored> <hash of them>`` (see
    :meth:`~ragjury.store._common.JobKey.progress`), so the same submission run again after a
    kill finds it, checks its input begins with the items stored, and stores only the rest;
    then the key becomes the job's real key. Each chunk moves the key on only from the one it
    read, so two processes never store the same job's items together."""

    def __init__(
        self,
        kind: JobKind,
        options: Mapping[str, JSONData],
        text: str,
        items: ItemsFactory,
        ends: ItemEnds,
        batch: int,
        batch_bytes: int,
        told: Callable[[str], None] | None,
    ) -> None:
        self.kind, self.options, self.text = kind, options, text
        self.told = told
        self.items, self.ends = items, ends
        self.batch, self.batch_bytes = batch, batch_bytes
        self.key = JobKey(kind, options)
        self.source: Iterator[tuple[str, Payload]] = iter(())
        self.job_id = uuid.uuid4().hex[:12]
        self.mark: str | None = None

    async def resume(self, marks: Sequence[str]) -> bool:
        """Whether one of the unfinished intakes ``marks`` stored the first items of this
        input (then this one goes on from there)."""
        stored: dict[int, tuple[str, str]] = {}
        for mark in marks:
            parts = mark.split(" ")
            if len(parts) == 4 and parts[2].isdigit():
                stored[int(parts[2])] = (parts[1], parts[3])
        if not stored:
            return False
        key = JobKey(self.kind, self.options)
        source = iter(self.items())
        found = None
        last = max(stored)
        for item_key, payload in source:
            key.add(item_key, encode(payload))
            if key.size in stored and key.progress() == stored[key.size][1]:
                found = key.size
            if key.size == last:
                break
        if found is None:
            return False
        if found != last:  # a longer one was another input's: read this one again to there
            key = JobKey(self.kind, self.options)
            source = iter(self.items())
            for item_key, payload in itertools.islice(source, found):
                key.add(item_key, encode(payload))
        self.key, self.source = key, source
        self.job_id = stored[found][0]
        self.mark = f"{STORING}{self.job_id} {found} {stored[found][1]}"
        return True

    async def store(self, queue: QueueSQL) -> Job:
        stored: JSONObject = json.loads(self.text)
        resumed = self.mark is not None
        if not resumed:
            self.source = iter(self.items())
        ended = 0
        try:
            while chunk := self._chunk():
                mark = f"{STORING}{self.job_id} {self.key.size} {self.key.progress()}"
                operation = partial(self._store_chunk, chunk, self.mark, mark)
                ended += await queue._write(operation)
                self.mark = mark
                if self.told is not None:
                    self.told(self.job_id)
            if not self.key.size:
                return Job(id="", kind=self.kind, options=stored, created=False, size=0)
            real = self.key.finish(self.items)
            if not await queue._write(partial(self._finish, self.mark, real)):
                return await queue.submit(self.kind, self.options, self.items)  # the other's
        except _TakenOver:
            raise
        except Exception:  # repeated ids (the store refused the second), a lost database
            if self.mark is not None and not resumed:  # what this call stored goes
                await queue._write(partial(_forget_job, self.job_id, self.mark))
            raise
        return Job(
            self.job_id, self.kind, stored, created=not resumed, size=self.key.size, ended=ended
        )

    def _chunk(self) -> list[tuple[str, str]]:
        chunk: list[tuple[str, str]] = []
        held = 0
        for item_key, payload in self.source:
            encoded = encode(payload)
            self.key.add(item_key, encoded)
            chunk.append((item_key, encoded))
            held += len(encoded)
            if len(chunk) >= INTAKE_CHUNK or held >= INTAKE_CHUNK_BYTES:
                break
        return chunk

    def _store_chunk(
        self, chunk: Sequence[tuple[str, str]], mark: str | None, new: str
    ) -> Steps[int]:
        if mark is None:
            yield from execute(
                "INSERT INTO jobs (id, kind, key, options, created_at) VALUES (?, ?, ?, ?, ?)",
                *(self.job_id, self.kind, new, self.text, iso(time.time())[:19]),
            )
        elif not (yield from _move_key(self.job_id, mark, new)):
            raise _TakenOver
        start = self.key.size - len(chunk)
        return (
            yield from _insert_all(
                self.job_id, lambda: chunk, self.batch, self.batch_bytes, None, self.ends, start
            )
        )

    def _finish(self, mark: str | None, real: str) -> Steps[bool]:
        """The job under its real key; False (and the job forgotten) if another job has it."""
        if (yield from fetch("SELECT 1 FROM jobs WHERE key = ?", real)):
            yield from _forget_job(self.job_id, mark)
            return False
        if not (yield from _move_key(self.job_id, mark, real)):
            raise _TakenOver
        return True


def _end_items(job_id: str, chunk: Sequence[tuple[str, str]], ends: ItemEnds) -> Steps[int]:
    """End the queued items of ``chunk`` that ``ends`` gives results, in a few statements
    (not a few each): those still queued are marked done, then given their reports, results
    and nothing left of their joins and messages. The number ended."""
    judged = {key: results for key, payload in chunk if (results := ends(key, payload)) is not None}
    if not judged:
        return 0
    rows = yield from fetch(
        "UPDATE items SET state = 'done', lease_owner = NULL, lease_expires = NULL, "
        "finished_at = ? WHERE job_id = ? AND state = 'queued' AND key = ANY(?) "
        "RETURNING key, id, position",
        *(time.time(), job_id, list(judged)),
    )
    ended = [(judged[str(key)], int(item_id), int(position)) for key, item_id, position in rows]
    yield from execute_many(
        "UPDATE items SET report = ?, transient_failures = ? WHERE id = ?",
        [(json.dumps(r.report or {}), r.transient_failures, i) for r, i, _ in ended],
    )
    pairs = [
        (job_id, pair[0], item_id, n, *pair[1:])
        for results, item_id, _ in ended
        for n, pair in enumerate(map(pair_record, results.pairs))
    ]
    yield from execute_many(PAIRS_UPSERT, pairs)
    samples = [
        (job_id, sample[0], item_id, position, *sample[1:])
        for results, item_id, position in ended
        for sample in (sample_record(record, scored) for record, scored in results.samples)
    ]
    yield from execute_many(SAMPLES_UPSERT, samples)
    keys = [str(row[0]) for row in rows]
    for table in ("item_joins", "messages"):  # (a queued item has none, unless released)
        yield from execute(
            f"DELETE FROM {table} WHERE job_id = ? AND item_key = ANY(?)", job_id, keys
        )
    return len(rows)


def _move_key(job_id: str, mark: str | None, new: str) -> Steps[int]:
    sql = "UPDATE jobs SET key = ? WHERE id = ? AND key = ?"
    return (yield from execute(sql, new, job_id, mark))


def _forget_job(job_id: str, mark: str | None) -> Steps[None]:
    """A job whose intake did not finish, and what was stored of it, if it is still under
    ``mark`` (no other process took it over)."""
    if (yield from fetch("SELECT 1 FROM jobs WHERE id = ? AND key = ?", job_id, mark)):
        for table in ("samples", "pairs", "items"):
            yield from execute(f"DELETE FROM {table} WHERE job_id = ?", job_id)
        yield from execute("DELETE FROM jobs WHERE id = ?", job_id)


def _insert_all(
    job_id: str,
    items: ItemsFactory,
    batch: int,
    batch_bytes: int,
    key: JobKey | None = None,
    ends: ItemEnds | None = None,
    start: int = 0,
) -> Steps[int]:
    """Store every item of ``items`` in the job ``job_id`` (in batches of ``batch`` items or
    ``batch_bytes`` of payloads and results), each added to ``key`` too when given; with
    ``ends``, those it gives results are stored ended with them. The number stored ended."""
    now = time.time()
    rows: list[Row] = []
    results: list[tuple[str, ItemResults]] = []
    held = ended = 0
    for position, (item_key, payload) in enumerate(items(), start):
        encoded = encode(payload)
        if key is not None:
            key.add(item_key, encoded)
        # the payload as the store keeps it (what a runner would read back): judged alike
        end = None if ends is None else ends(item_key, text(encoded))
        if end is None:
            rows.append((job_id, item_key, position, encoded, now, "queued", None, None, 0))
        else:
            report = json.dumps(end.report or {})
            done = (job_id, item_key, position, encoded, now, "done", report, now)
            rows.append((*done, end.transient_failures))
            results.append((item_key, end))
            held += sum(len(scored) for _, scored in end.samples)  # and its record, as long
        held += len(encoded)
        if len(rows) >= batch or held >= batch_bytes:
            ended += yield from _insert_rows(job_id, rows, results)
            rows, results, held = [], [], 0
    ended += yield from _insert_rows(job_id, rows, results)
    return ended


def _insert_rows(
    job_id: str, rows: Sequence[Row], results: Sequence[tuple[str, ItemResults]]
) -> Steps[int]:
    """Items in one statement (in order: their row ids follow their positions), then the
    results of those ended (their row ids and positions read from their items)."""
    yield from insert_items(rows)
    pairs = [
        (job_id, row[0], n, *row[1:], job_id, key)
        for key, end in results
        for n, row in enumerate(map(pair_record, end.pairs))
    ]
    yield from execute_many(_PAIRS_OF_NEW_ITEMS, pairs)
    samples = [
        (job_id, *sample_record(record, scored), job_id, key)
        for key, end in results
        for record, scored in end.samples
    ]
    yield from execute_many(_SAMPLES_OF_NEW_ITEMS, samples)
    return len(results)


_PAIRS_OF_NEW_ITEMS = (
    "INSERT INTO pairs (job_id, id, item_id, position, outcome, question, source, record) "
    "SELECT ?, ?, id, ?, ?, ?, ?, ? FROM items WHERE job_id = ? AND key = ?"
)
_SAMPLES_OF_NEW_ITEMS = (
    "INSERT INTO samples (job_id, id, item_id, position, record, scored) "
    "SELECT ?, ?, id, position, ?, ? FROM items WHERE job_id = ? AND key = ?"
)
