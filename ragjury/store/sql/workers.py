"""The worker processes on a database, its status report and its pruning
(:class:`~ragjury.store.base.Workers`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ragjury.store._common import (
    alive,
    iso,
    machine,
)
from ragjury.store.sql.driven import UNFINISHED, Driven
from ragjury.store.sql.steps import (
    Steps,
    execute,
    fetch,
)


class WorkersSQL(Driven):
    async def register_worker(self, owner: str, agents: Sequence[str]) -> int:
        host, pid = machine(), os.getpid()

        def register() -> Steps[int]:
            released = 0
            for other, other_pid, registered in (
                yield from fetch(
                    "SELECT owner, pid, started_at FROM workers WHERE host = ? AND owner <> ?",
                    *(host, owner),
                )
            ):
                # gone, or its pid now another process's (this one's, or one started since)
                if int(other_pid) != pid and alive(int(other_pid), float(registered)):
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
                # and its batch pollers' leases (owners "<worker>:batches:<n>"): a batch it
                # was submitting or polling is taken over now, not when its lease runs out
                yield from execute(
                    "UPDATE batches SET lease_owner = NULL, lease_until = 0 "
                    "WHERE lease_owner >= ? AND lease_owner < ? AND state <> 'ended'",
                    *(f"{other}:batches:", f"{other}:batches;"),
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

    async def prune(self, before: float) -> dict[str, int]:
        cutoff = iso(before)

        def prune() -> Steps[dict[str, int]]:
            jobs = [
                str(row[0])
                for row in (
                    yield from fetch(
                        "SELECT id FROM jobs WHERE NOT EXISTS (SELECT 1 FROM items i "
                        "WHERE i.job_id = jobs.id AND (i.state = ANY(?) OR i.finished_at >= ?))",
                        *(UNFINISHED, before),
                    )
                )
            ]
            deleted: dict[str, int] = {}
            for table in ("pairs", "samples", "questions", "joins", "messages", "items"):
                stored = "item_joins" if table == "joins" else table  # one row per item
                deleted[table] = yield from execute(
                    f"DELETE FROM {stored} WHERE job_id = ANY(?)", jobs
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
