"""Persistence behind one interface (:class:`Store`): the queue, the durable bus's messages,
join state, results, the step cache and LLM call records. All SQL lives in this package."""

from pathlib import Path

from ragjury.errors import ConfigurationError
from ragjury.store.base import STATES, Item, ItemResults, Job, JobKind, RunRecord, Store
from ragjury.store.location import Location, parse_location
from ragjury.store.sqlite import SQLiteStore
from ragjury.urls import redacted


def open_store(db: str | Path | Location) -> Store:
    """The store at ``--db`` (not yet open: use ``async with``)."""
    location = db if isinstance(db, Location) else parse_location(db)
    if location.kind == "postgresql":
        raise ConfigurationError(
            f"--db {location}: PostgreSQL is not supported by this version of ragjury yet; "
            "use a SQLite file path"
        )
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
