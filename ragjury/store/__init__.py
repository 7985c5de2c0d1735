"""aiosqlite persistence: runs, results and LLM call records in one WAL database file."""

from ragjury.store.db import Store

__all__ = ["Store"]
