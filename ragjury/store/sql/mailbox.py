"""The durable bus's messages: put, claimed by group under a lease, acknowledged with their
replies in one transaction, offered again or taken out (:class:`~ragjury.store.base.Mailbox`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from ragjury.llm.usage import IN_FLIGHT
from ragjury.store._common import iso, poison
from ragjury.store._values import Param, Row
from ragjury.store.base import (
    Acked,
    Claim,
    Lease,
    OutgoingMessage,
    StepWrites,
    StoredMessage,
)
from ragjury.store.sql.calls import CLOSE_CALL, DROP_CALLS, PUT_STEP, closing_row
from ragjury.store.sql.driven import FINISHED, Driven, of_jobs
from ragjury.store.sql.items import STARTED, end_item_plainly, ending, fail
from ragjury.store.sql.joins import JOIN_PARTS, join_parts
from ragjury.store.sql.steps import (
    Acknowledge,
    ClaimedSteps,
    ExecuteMany,
    Fetch,
    Publish,
    Steps,
    acknowledge,
    execute,
    execute_many,
    fetch,
    fetch_one,
    publish,
    text,
)


class MailboxSQL(Driven):
    async def put_messages(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        lease: Lease | None = None,
        started: Sequence[int] = (),
        joins: Sequence[tuple[str, str, Mapping[str, str]]] = (),
    ) -> list[StoredMessage]:
        if not messages:
            return []
        owner, seconds = (lease.owner, lease.seconds) if lease else ("", 0.0)
        if lease is None and any(m.leased for m in messages):
            raise ValueError("messages marked leased need a lease")
        parts = [(job, key, join_parts(given)) for job, key, given in joins if given]
        opens = _opens(lease)
        return await self._write(
            lambda: publish(messages, owner, seconds, started, parts, opens), single=True
        )

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
        jobs, in_jobs = of_jobs(job_ids)
        # One statement takes the messages and says, with each, whether its item has
        # ended: an item can end while a reply to it is being put (another process stored
        # its result), and such a leftover is dropped rather than handled for nothing.
        # A message delivered max_attempts times already (its workers died) is taken out
        # and its item failed. Each later statement is atomic alone, and a crash between
        # them leaves a message leased that comes back to be dropped or taken out again.
        take = (
            "UPDATE messages SET lease_owner = ?, available_at = now_epoch() + ?, "
            "attempts = attempts + 1 WHERE id IN (SELECT id FROM messages "
            f"WHERE grp = ANY(?) AND available_at <= now_epoch(){jobs} "
            "ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED) "
            "RETURNING id, grp, body, attempts, job_id, item_key, last_error, (SELECT state "
            "FROM items i WHERE i.job_id = messages.job_id AND i.key = messages.item_key)"
        )

        def claim() -> Steps[Claim]:
            found, leftovers = Claim(), list[int]()
            rows = yield from fetch(take, owner, lease_seconds, list(groups), *in_jobs, limit)
            for message_id, group, body, attempts, job_id, key, last_error, state in sorted(rows):
                if state in FINISHED:
                    leftovers.append(int(message_id))
                elif attempts > max_attempts:
                    found.dead += 1
                    yield from fail(job_id, key, poison(group, attempts - 1, last_error))
                    leftovers.append(int(message_id))
                else:
                    found.messages.append(
                        StoredMessage(int(message_id), str(group), str(body), int(attempts),
                                      str(job_id), str(key))
                    )  # fmt: skip
            if leftovers:
                yield from execute("DELETE FROM messages WHERE id = ANY(?)", leftovers)
            return found

        return await self._write(claim, single=True)

    async def claimed_steps(
        self, messages: Sequence[tuple[str, str]], *, run_id: str = ""
    ) -> list[tuple[str | None, int | None]]:
        if not messages:
            return []
        rows = [(text(group), text(key)) for group, key in messages]
        opens = (run_id, iso()) if run_id else None

        def look_up() -> Steps[list[tuple[str | None, int | None]]]:
            found: list[Row] = yield ClaimedSteps(rows, opens)
            return [
                (None if output is None else str(output), None if call is None else int(call))
                for output, call in found
            ]

        if opens is None:  # nothing to open: a read
            return await self._read(look_up)
        return await self._write(look_up, single=True)

    async def ack_message(
        self,
        message_id: int,
        replies: Sequence[OutgoingMessage],
        writes: StepWrites | None = None,
        *,
        lease: Lease | None = None,
    ) -> Acked:
        writes = writes or _NO_WRITES
        if (
            not replies
            and writes.step is None
            and not writes.calls
            and writes.end is None
            and not writes.unused_calls
        ):
            await self._write(lambda: execute(_REMOVE, message_id), single=True)
            return Acked()
        if lease is None and any(m.leased for m in replies):
            raise ValueError("replies marked leased need a lease")
        owner, seconds = (lease.owner, lease.seconds) if lease else ("", 0.0)
        step = None if writes.step is None else (*writes.step, time.time())
        calls = [closing_row(stats, error) for stats, error in writes.calls]
        end = None if writes.end is None else ending(*writes.end[:2], "done", writes.end[2])
        return await self._write(
            lambda: acknowledge(
                message_id,
                replies,
                owner=owner,
                lease_seconds=seconds,
                step=step,
                calls=calls,
                end=end,
                unused_calls=writes.unused_calls,
                opens=_opens(lease),
            ),
            single=True,
        )

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
        self,
        owner: str,
        message_ids: Sequence[int],
        *,
        started: bool = False,
        calls: Sequence[int] = (),
    ) -> None:
        refund = "" if started else ", attempts = GREATEST(attempts - 1, 0)"
        sql = (
            f"UPDATE messages SET lease_owner = NULL, available_at = now_epoch(){refund} "
            "WHERE lease_owner = ? AND id = ANY(?)"
        )

        def release() -> Steps[None]:
            if message_ids:
                yield from execute(sql, owner, list(message_ids))
            if calls:
                yield from execute(DROP_CALLS, list(calls))

        if message_ids or calls:
            await self._write(release, single=not (message_ids and calls))

    async def waiting_messages(self) -> dict[str, int]:
        rows = await self.read("SELECT grp, COUNT(*) FROM messages GROUP BY grp ORDER BY grp")
        return {str(group): int(n) for group, n in rows}

    async def claimable_groups(
        self, groups: Sequence[str], job_ids: Sequence[str] | None = None
    ) -> set[str]:
        if not groups:
            return set()
        jobs, in_jobs = of_jobs(job_ids)
        # one indexed look per group (a DISTINCT would read every message waiting)
        one = (
            "SELECT CAST(? AS TEXT) WHERE EXISTS (SELECT 1 FROM messages WHERE grp = ? "
            f"AND available_at <= now_epoch(){jobs})"
        )
        params = [value for group in groups for value in (group, group, *in_jobs)]
        rows = await self.read(" UNION ALL ".join([one] * len(groups)), params)
        return {str(row[0]) for row in rows}


_REMOVE = "DELETE FROM messages WHERE id = ?"
_NO_WRITES = StepWrites()


def _opens(lease: Lease | None) -> tuple[str, str] | None:
    """(run, created_at) under which a put may open its leased messages' first calls'
    in-flight records (:attr:`~ragjury.store.base.Lease.run_id`), or None."""
    return (lease.run_id, iso()) if lease is not None and lease.run_id else None


def acknowledge_plainly(step: Acknowledge) -> Steps[Acked]:
    """:class:`~ragjury.store.sql.steps.Acknowledge` as plain statements, in the driver's
    transaction. The step's cache row and its calls' records are stored in any case, and
    the item ended first if asked. Only the delivery that removes the message publishes its
    replies: an ack repeated after a lost connection, or by a second worker whose lease ran
    out, adds nothing; nor does one for an item that has ended."""
    if step.step is not None:
        yield from execute(PUT_STEP, *step.step)
    yield from execute_many(CLOSE_CALL, step.calls)
    if step.unused_calls:
        yield from execute(DROP_CALLS, list(step.unused_calls))
    ended = None if step.end is None else (yield from end_item_plainly(step.end))
    if (yield from execute(_REMOVE, step.message_id)) and step.replies and not ended:
        state = yield from fetch_one(
            "SELECT state FROM items WHERE job_id = ? AND key = ?", step.job_id, step.key
        )
        if state is None or state[0] not in FINISHED:
            publish = Publish(step.replies, step.owner, step.lease_seconds, opens=step.opens)
            return Acked((yield from publish_plainly(publish)), ended)
    return Acked([], ended)


_INSERT = (
    "INSERT INTO messages (grp, kind, job_id, item_key, body, available_at, created_at) "
    "VALUES (?, ?, ?, ?, ?, now_epoch(), now_epoch())"
)
_INSERT_LEASED = (
    "INSERT INTO messages "
    "(grp, kind, job_id, item_key, body, available_at, created_at, lease_owner, attempts) "
    "VALUES (?, ?, ?, ?, ?, now_epoch() + ?, now_epoch(), ?, 1) RETURNING id"
)

_CACHED = "SELECT key, output FROM steps WHERE key = ANY(?)"
_OPEN_CALL = (
    "INSERT INTO llm_calls (run_id, stage, requests, prompt_tokens, completion_tokens, "
    "latency_ms, statuses, error, created_at) VALUES (?, ?, 0, 0, 0, 0, '[]', ?, ?) "
    "RETURNING id"
)
"""A leased message's first call's in-flight record, as :meth:`CallLogSQL.open_call` opens
one (the call's own figures and model are written when it closes)."""


def claimed_steps_plainly(step: ClaimedSteps) -> Steps[list[Row]]:
    """:class:`~ragjury.store.sql.steps.ClaimedSteps` as plain statements, in the driver's
    transaction."""
    keys = sorted({str(key) for _, key in step.messages})
    cached: list[Row] = yield Fetch(_CACHED, (keys,))
    found = {str(key): output for key, output in cached}
    rows: list[Row] = []
    for group, key in step.messages:
        output = found.get(str(key))
        call = None
        if step.opens is not None and output is None:
            opened: list[Row] = yield Fetch(
                _OPEN_CALL, (step.opens[0], group, IN_FLIGHT, step.opens[1])
            )
            call = opened[0][0]
        rows.append((output, call))
    return rows


def publish_plainly(step: Publish) -> Steps[list[StoredMessage]]:
    """:class:`~ragjury.store.sql.steps.Publish` as plain statements, in the driver's
    transaction (a driver that wakes other processes does so itself). Under a run
    (:attr:`Publish.opens`), each leased message whose step is not cached comes with its
    first call's in-flight record, opened here: the call takes it rather than opening one in
    a write of its own (on SQLite a group-commit entry a call). The messages' text is clean
    already (:func:`~ragjury.store.sql.steps.publish`), so their statements bind it as it
    is."""
    yield from execute_many(JOIN_PARTS, step.joins)
    plain = [(m.group, m.kind, m.job_id, m.item_key, m.body) for m in step.messages if not m.leased]
    if plain:
        yield ExecuteMany(_INSERT, plain)
    leased = [m for m in step.messages if m.leased]
    keys = [text(m.step_key) for m in leased if m.step_key]
    found: dict[str, Param] = {}
    if keys:
        cached: list[Row] = yield Fetch(_CACHED, (keys,))
        found = {str(key): output for key, output in cached}
    taken: list[StoredMessage] = []
    for m in leased:
        inserted: list[Row] = yield Fetch(
            _INSERT_LEASED,
            (m.group, m.kind, m.job_id, m.item_key, m.body, step.lease_seconds, step.owner),
        )
        [(message_id,)] = inserted
        output = found.get(m.step_key)
        call = None
        if step.opens is not None and m.step_key and output is None:
            opened: list[Row] = yield Fetch(
                _OPEN_CALL, (step.opens[0], m.group, IN_FLIGHT, step.opens[1])
            )
            call = int(opened[0][0])
        taken.append(
            StoredMessage(int(message_id), m.group, m.body, 1, m.job_id, m.item_key,
                          None if output is None else str(output), m.step_key, call)
        )  # fmt: skip
    if step.started:
        yield from execute(STARTED, list(step.started))
    return taken
