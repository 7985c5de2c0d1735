"""The values a statement binds and the rows a query returns, as every store passes them."""

from __future__ import annotations

from typing import Any

Row = tuple[Any, ...]  # cells as the driver returns them (asyncpg and sqlite3 type none)
Param = str | int | float | bool | None | list[str] | list[int]
"""A value a statement binds (a list only as ``x = ANY(?)``)."""
Params = tuple[Param, ...]
