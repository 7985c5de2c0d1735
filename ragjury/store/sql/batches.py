"""Batch mode's requests, batches and parked messages
(:class:`~ragjury.llm.batch_types.BatchLedger`).

A request is queued once (its key is a hash of what it asks), claimed into a submission,
and ended by the batch that answered it, or sent back to the queue when the batch ended
without answering it. A parked message is its bus row made unavailable, with a row in
``batch_waits`` naming the request it waits for; the transaction that ends the request makes
the message available again. Parking and ending take one lock, so a request that ends while
its message is being parked still wakes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ragjury.llm.batch_types import (
    Answer,
    BatchInFlight,
    BatchRequest,
    CancelledBatches,
    OpenBatch,
    Submission,
)
from ragjury.store.sql.driven import Driven
from ragjury.store.sql.steps import Steps, execute, execute_many, fetch, fetch_one, lock

_LOCK = "batches/requests"
_PARKED = 1e9  # seconds: a parked message is not offered until its request ends
_ENDED = ("done", "failed")


def _wake(keys: list[str]) -> Steps[None]:
    """Make the messages parked on ``keys`` available again."""
    if keys:
        yield from execute(
            "UPDATE messages SET available_at = now_epoch() WHERE id IN "
            "(SELECT message_id FROM batch_waits WHERE request_key = ANY(?))",
            keys,
        )
        yield from execute("DELETE FROM batch_waits WHERE request_key = ANY(?)", keys)


class BatchesSQL(Driven):
    async def batch_request(self, key: str) -> BatchRequest | None:
        rows = await self.read(
            "SELECT state, response, error, booked FROM batch_requests WHERE key = ?", (key,)
        )
        if not rows:
            return None
        state, response, error, booked = rows[0]
        return BatchRequest(state, response, error, bool(booked))

    async def queue_batch_request(
        self, key: str, job_id: str, stage: str, body: str, endpoint: str = ""
    ) -> bool:
        def queue() -> Steps[bool]:
            cancelled = yield from fetch_one(
                "SELECT 1 FROM batches WHERE id = ?", _cancelled(job_id)
            )
            if cancelled is not None:
                return False
            yield from execute(
                "INSERT INTO batch_requests (key, job_id, stage, body, state, created_at, "
                "endpoint) VALUES (?, ?, ?, ?, 'queued', now_epoch(), ?) "
                "ON CONFLICT (key) DO NOTHING",
                *(key, job_id, stage, body, endpoint),
            )
            return True

        return await self._write(queue)

    async def book_batch_request(self, key: str) -> bool:
        sql = "UPDATE batch_requests SET booked = 1 WHERE key = ? AND booked = 0"
        return bool(await self._write(lambda: execute(sql, key), single=True))

    async def park_message(self, message_id: int, key: str) -> None:
        def park() -> Steps[None]:
            yield from lock(_LOCK)
            yield from execute(
                "UPDATE messages SET lease_owner = NULL, available_at = now_epoch() + ?, "
                "attempts = GREATEST(attempts - 1, 0) WHERE id = ?",
                _PARKED,
                message_id,
            )
            found = yield from fetch_one("SELECT state FROM batch_requests WHERE key = ?", key)
            if found is None or found[0] in _ENDED:
                yield from execute(
                    "UPDATE messages SET available_at = now_epoch() WHERE id = ?", message_id
                )
                return
            yield from execute(
                "INSERT INTO batch_waits (message_id, request_key) VALUES (?, ?) "
                "ON CONFLICT DO NOTHING",
                message_id,
                key,
            )

        await self._write(park)

    async def claim_submission(
        self, owner: str, endpoint: str, *, size: int, wait: float, lease: float
    ) -> Submission | None:
        lines_of = "SELECT key, stage, body FROM batch_requests WHERE submission = ? ORDER BY key"

        def claim() -> Steps[Submission | None]:
            yield from lock("batches/submit")
            left = yield from fetch_one(
                "SELECT id, job_id FROM batches WHERE state = 'submitting' AND endpoint = ? "
                "AND lease_until < now_epoch() ORDER BY created_at LIMIT 1",
                endpoint,
            )
            if left is not None:
                yield from execute(
                    "UPDATE batches SET lease_owner = ?, lease_until = now_epoch() + ? "
                    "WHERE id = ?",
                    *(owner, lease, left[0]),
                )
                rows = yield from fetch(lines_of, left[0])
                return Submission(str(left[0]), str(left[1]), _lines(rows), resumed=True)
            # a request queued before requests named their endpoint ('') goes to any
            due = yield from fetch_one(
                "SELECT job_id FROM batch_requests WHERE state = 'queued' "
                "AND endpoint IN (?, '') GROUP BY job_id "
                "HAVING COUNT(*) >= ? OR MIN(created_at) <= now_epoch() - ? "
                "ORDER BY MIN(created_at) LIMIT 1",
                *(endpoint, size, wait),
            )
            if due is None:
                return None
            job_id = str(due[0])
            rows = yield from fetch(
                "SELECT key, stage, body FROM batch_requests WHERE state = 'queued' "
                "AND job_id = ? AND endpoint IN (?, '') ORDER BY created_at, key LIMIT ?",
                *(job_id, endpoint, size),
            )
            submission = uuid.uuid4().hex
            yield from execute(
                "INSERT INTO batches (id, job_id, endpoint, state, requests, lease_owner, "
                "lease_until, created_at) "
                "VALUES (?, ?, ?, 'submitting', ?, ?, now_epoch() + ?, now_epoch())",
                *(submission, job_id, endpoint, len(rows), owner, lease),
            )
            yield from execute(
                "UPDATE batch_requests SET state = 'submitted', submission = ? WHERE key = ANY(?)",
                submission,
                [str(row[0]) for row in rows],
            )
            return Submission(submission, job_id, _lines(rows))

        return await self._write(claim)

    async def batch_created(self, submission: str, provider_id: str, next_poll: float) -> bool:
        sql = (
            "UPDATE batches SET provider_id = ?, state = 'open', lease_owner = NULL, "
            "lease_until = 0, next_poll = now_epoch() + ? WHERE id = ? AND state = 'submitting'"
        )
        return bool(
            await self._write(lambda: execute(sql, provider_id, next_poll, submission), single=True)
        )

    async def due_batches(
        self, owner: str, limit: int, lease: float, endpoint: str | None = None
    ) -> list[OpenBatch]:
        def due() -> Steps[list[OpenBatch]]:
            rows = yield from fetch(
                "SELECT id, provider_id, polls FROM batches WHERE state = 'open' "
                "AND next_poll <= now_epoch() AND lease_until < now_epoch() "
                "AND endpoint = COALESCE(?, endpoint) "
                "ORDER BY next_poll LIMIT ? FOR UPDATE SKIP LOCKED",
                endpoint,
                limit,
            )
            if rows:
                yield from execute(
                    "UPDATE batches SET lease_owner = ?, lease_until = now_epoch() + ? "
                    "WHERE id = ANY(?)",
                    *(owner, lease, [str(row[0]) for row in rows]),
                )
            return [OpenBatch(str(i), str(p), int(n)) for i, p, n in rows]

        return await self._write(due)

    async def batch_polled(self, batch_id: str, status: str, next_poll: float) -> None:
        sql = (
            "UPDATE batches SET status = ?, polls = polls + 1, next_poll = now_epoch() + ?, "
            "lease_owner = NULL, lease_until = 0 WHERE id = ?"
        )
        await self._write(lambda: execute(sql, status, next_poll, batch_id), single=True)

    async def end_batch(
        self, batch_id: str, status: str, answers: Sequence[Answer], *, max_tries: int
    ) -> None:
        def end() -> Steps[None]:
            yield from lock(_LOCK)
            keys = [
                str(row[0])
                for row in (
                    yield from fetch(
                        "SELECT key FROM batch_requests WHERE submission = ?", batch_id
                    )
                )
            ]
            yield from execute_many(
                "UPDATE batch_requests SET state = ?, response = ?, error = ? "
                "WHERE key = ? AND submission = ? AND state = 'submitted'",
                [
                    ("done" if a.error is None else "failed", a.response, a.error, a.key,
                     batch_id)
                    for a in answers
                ],
            )  # fmt: skip
            yield from execute(
                "UPDATE batch_requests SET tries = tries + 1, submission = NULL, "
                "state = CASE WHEN tries + 1 >= ? THEN 'failed' ELSE 'queued' END, "
                "error = ? WHERE submission = ? AND state = 'submitted'",
                *(max_tries, f"the batch ended {status} without answering it", batch_id),
            )
            ended = yield from fetch(
                "SELECT key FROM batch_requests WHERE key = ANY(?) AND state = ANY(?)",
                keys,
                list(_ENDED),
            )
            yield from _wake([str(row[0]) for row in ended])
            yield from execute(
                "UPDATE batches SET state = 'ended', status = ?, lease_owner = NULL, "
                "ended_at = now_epoch() WHERE id = ? AND state <> 'ended'",
                status,
                batch_id,
            )

        await self._write(end)

    async def batches_in_flight(self) -> list[BatchInFlight]:
        rows = await self.read(
            "SELECT job_id, provider_id, status, requests, now_epoch() - created_at "
            "FROM batches WHERE state <> 'ended' ORDER BY created_at"
        )
        return [BatchInFlight(str(j), p, s, int(n), float(age)) for j, p, s, n, age in rows]

    async def cancel_batches(self, job_id: str) -> CancelledBatches:
        def cancel() -> Steps[CancelledBatches]:
            yield from lock(_LOCK)
            rows = yield from fetch(
                "SELECT provider_id, endpoint FROM batches WHERE job_id = ? AND state <> 'ended'",
                job_id,
            )
            yield from execute(
                "UPDATE batches SET state = 'ended', status = 'cancelled', lease_owner = NULL, "
                "ended_at = now_epoch() WHERE job_id = ? AND state <> 'ended'",
                job_id,
            )
            keys = [
                str(row[0])
                for row in (
                    yield from fetch(
                        "SELECT key FROM batch_requests WHERE job_id = ? "
                        "AND state IN ('queued', 'submitted')",
                        job_id,
                    )
                )
            ]
            if keys:
                yield from execute("DELETE FROM batch_requests WHERE key = ANY(?)", keys)
                yield from _wake(keys)
            yield from execute(
                "INSERT INTO batches (id, job_id, endpoint, state, status, requests, created_at, "
                "ended_at) VALUES (?, ?, '', 'ended', 'cancelled', 0, now_epoch(), now_epoch()) "
                "ON CONFLICT (id) DO NOTHING",
                _cancelled(job_id),
                job_id,
            )
            provider = [(str(p), str(e)) for p, e in rows if p is not None]
            return CancelledBatches(
                provider, submitting=len(rows) - len(provider), requests=len(keys)
            )

        return await self._write(cancel)


def _cancelled(job_id: str) -> str:
    """The id of the row that marks a job's batches cancelled (its calls then go direct)."""
    return f"cancelled:{job_id}"


def _lines(rows: Sequence[tuple[object, ...]]) -> list[tuple[str, str, str]]:
    return [(str(key), str(stage), str(body)) for key, stage, body in rows]
