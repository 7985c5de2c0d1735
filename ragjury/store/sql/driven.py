"""What every part of the SQL core stands on: a driver's ``_read`` and ``_write``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from ragjury.store._common import UNFINISHED_STATES
from ragjury.store._values import Param, Params, Row
from ragjury.store.sql.steps import Steps, fetch

T = TypeVar("T")
Operation = Callable[[], Steps[T]]
"""A fresh operation each call: a driver may run it again after a lost connection."""

FINISHED = ("done", "failed")
UNFINISHED = list(UNFINISHED_STATES)


def of_jobs(job_ids: Sequence[str] | None, column: str = "job_id") -> tuple[str, Params]:
    """A condition limiting a query to ``job_ids`` (none when None), and its parameter."""
    if job_ids is None:
        return "", ()
    return f" AND {column} = ANY(?)", (list(job_ids),)


class Driven:
    """A store's connection to its database, as its driver runs operations on it."""

    location: str
    """Where it is, for messages (a path, or a URL with any password redacted)."""

    async def _connect(self) -> None:
        """Connect, and create or upgrade the schema (see :meth:`__aenter__`)."""
        raise NotImplementedError

    async def __aexit__(self, *exc_info: object) -> None:
        await self._close()

    async def _opened(self) -> None:
        """Connect; what was opened is closed again if that fails, however it fails."""
        try:
            await self._connect()
        except BaseException:
            await self._close()
            raise

    async def _close(self) -> None:
        raise NotImplementedError

    async def _read(self, operation: Operation[T]) -> T:
        """Run a read-only operation."""
        raise NotImplementedError

    async def _write(self, operation: Operation[T], *, single: bool = False) -> T:
        """Run an operation in a transaction (``single``: each of its statements is atomic
        alone and it needs no transaction around them; PostgreSQL then runs each on its
        own, while SQLite's group commit puts every write in a transaction)."""
        raise NotImplementedError

    async def read(self, sql: str, params: Sequence[Param] = ()) -> list[Row]:
        """Rows of a read-only query in the core's SQL (the status report, tests)."""
        return await self._read(lambda: fetch(sql, *params))

    async def now(self) -> float:
        """The database's clock, in seconds since the epoch (leases are measured on it)."""
        return float((await self.read("SELECT now_epoch()"))[0][0])
