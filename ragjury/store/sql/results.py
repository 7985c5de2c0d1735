"""What finished items left: their reports, pairs and samples, read a page at a time in
item order (:class:`~ragjury.store.base.Results`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

from ragjury._json import JSONObject
from ragjury.store._common import PAGE
from ragjury.store._values import Param
from ragjury.store.base import FailedItem
from ragjury.store.sql.driven import Driven, of_jobs


class ResultsSQL(Driven):
    async def reports(self, job_id: str) -> AsyncIterator[JSONObject]:
        page = (
            "SELECT report, id FROM items WHERE job_id = ? AND id > ? "
            f"ORDER BY id LIMIT {PAGE}"  # through items_order: each page costs the same
        )
        after = -1
        while True:
            rows = await self.read(page, (job_id, after))
            for report, _ in rows:
                if report is not None:
                    yield json.loads(report)
            if len(rows) < PAGE:
                return
            after = int(rows[-1][1])

    async def failed_items(self, job_id: str) -> list[FailedItem]:
        rows = await self.read(
            "SELECT key, error FROM items WHERE job_id = ? AND state = 'failed' ORDER BY position",
            (job_id,),
        )
        return [{"item": str(key), "error": str(error)} for key, error in rows]

    async def pair_outcomes(self, job_id: str) -> dict[str, int]:
        rows = await self.read(
            "SELECT outcome, COUNT(*) FROM pairs WHERE job_id = ? GROUP BY outcome", (job_id,)
        )
        return {str(outcome): int(n) for outcome, n in rows}

    def pairs(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[JSONObject]:
        return self._records("pairs", job_ids)

    def samples(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[JSONObject]:
        return self._records("samples", job_ids)

    async def sample_texts(self, job_id: str) -> AsyncIterator[str]:
        async for value in self._pages("samples", "record", job_id):
            yield str(value)

    async def scored(self, job_id: str) -> AsyncIterator[str]:
        async for value in self._pages("samples", "scored", job_id):
            yield str(value)

    async def _records(
        self, table: str, job_ids: Sequence[str] | None
    ) -> AsyncIterator[JSONObject]:
        jobs, params = of_jobs(job_ids, "id")
        for (job_id,) in await self.read(
            f"SELECT id FROM jobs WHERE 1 = 1{jobs} ORDER BY seq", params
        ):
            async for value in self._pages(table, "record", job_id):
                yield json.loads(value)

    async def _pages(self, table: str, column: str, job_id: str) -> AsyncIterator[str]:
        """``column`` of a job's rows of ``table`` in item order, a page at a time: no
        statement stays open between pages, and each page starts where the last ended, found
        through the ``{table}_order`` index, so every page costs the same however many rows
        came before (no OFFSET, no sort of the whole job per page). A job's items are
        inserted in position order in one transaction, so their ids follow their positions."""
        page = (
            f"SELECT {column}, item_id, position, seq FROM {table} "
            "WHERE job_id = ? AND (item_id, position, seq) > (?, ?, ?) "
            f"ORDER BY item_id, position, seq LIMIT {PAGE}"
        )
        after: tuple[Param, ...] = (-1, -1, -1)
        while True:
            rows = await self.read(page, (job_id, *after))
            for row in rows:
                yield str(row[0])
            if len(rows) < PAGE:
                return
            after = tuple(rows[-1][1:])
