"""Persistence behind one interface (:class:`Store`): the queue, the durable bus's messages,
join state, results, the step cache and LLM call records. All SQL lives in this package.

The names are imported when first used, so that a module that needs the interfaces
(``ragjury.store.base``) does not load the SQLite store and its driver."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ragjury._lazy import lazy_names

if TYPE_CHECKING:
    from ragjury.store.base import STATES as STATES
    from ragjury.store.base import Item as Item
    from ragjury.store.base import ItemResults as ItemResults
    from ragjury.store.base import Job as Job
    from ragjury.store.base import JobKind as JobKind
    from ragjury.store.base import RunRecord as RunRecord
    from ragjury.store.base import Store as Store
    from ragjury.store.location import Location as Location
    from ragjury.store.location import parse_location as parse_location
    from ragjury.store.sqlite import SQLiteStore as SQLiteStore
    from ragjury.urls import redacted as redacted


def open_store(
    db: str | Path | Location, *, concurrency: int = 8, reconnect: float = 600.0
) -> Store:
    """The store at ``--db`` (not yet open: use ``async with``). ``concurrency`` (the LLM
    requests this process sends at once) sizes a PostgreSQL connection pool; ``reconnect``
    is how many seconds a lost PostgreSQL server is waited for (``--db-reconnect``)."""
    from ragjury.store.location import Location, parse_location

    location = db if isinstance(db, Location) else parse_location(db)
    if location.kind == "postgresql":
        assert location.url is not None
        from ragjury.store.postgres import PostgresStore, _driver, pool_size_for

        _driver()  # a clear message now if the postgres extra is missing
        return PostgresStore(
            location.url, pool_size=pool_size_for(concurrency), reconnect_seconds=reconnect
        )
    assert location.path is not None
    from ragjury.store.sqlite import SQLiteStore

    return SQLiteStore(location.path)


_WHERE = {
    "Item": "ragjury.store.base",
    "ItemResults": "ragjury.store.base",
    "Job": "ragjury.store.base",
    "JobKind": "ragjury.store.base",
    "Location": "ragjury.store.location",
    "RunRecord": "ragjury.store.base",
    "SQLiteStore": "ragjury.store.sqlite",
    "STATES": "ragjury.store.base",
    "Store": "ragjury.store.base",
    "parse_location": "ragjury.store.location",
    "redacted": "ragjury.urls",
}

__getattr__ = lazy_names(__name__, _WHERE)

__all__ = [
    "STATES",
    "Item",
    "ItemResults",
    "Job",
    "JobKind",
    "Location",
    "RunRecord",
    "SQLiteStore",
    "Store",
    "open_store",
    "parse_location",
    "redacted",
]
