"""Persistence behind one interface (:class:`Store`): the queue, the durable bus's messages,
join state, results, the step cache and LLM call records. All SQL lives in this package."""

from pathlib import Path

from ragjury.store.base import STATES, Item, ItemResults, Job, JobKind, RunRecord, Store
from ragjury.store.location import Location, parse_location
from ragjury.store.sqlite import SQLiteStore
from ragjury.urls import redacted


def open_store(db: str | Path | Location, *, concurrency: int = 8) -> Store:
    """The store at ``--db`` (not yet open: use ``async with``). ``concurrency`` (the LLM
    requests this process sends at once) sizes a PostgreSQL connection pool."""
    location = db if isinstance(db, Location) else parse_location(db)
    if location.kind == "postgresql":
        assert location.url is not None
        from ragjury.store.postgres import PostgresStore, _driver, pool_size_for

        _driver()  # a clear message now if the postgres extra is missing
        return PostgresStore(location.url, pool_size=pool_size_for(concurrency))
    assert location.path is not None
    return SQLiteStore(location.path)


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
