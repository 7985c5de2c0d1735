"""JSON as a type: what ``json.loads`` returns and ``json.dumps`` takes.

Records read from users' files, stored payloads, options and summaries are JSON; code that
reads one narrows it (``isinstance``) before it relies on a shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object as Python holds it after ``json.loads``."""

JSONData: TypeAlias = (
    "str | int | float | bool | Sequence[JSONData] | Mapping[str, JSONData] | None"
)
"""JSON-shaped data, read-only: what ``json.dumps`` takes (a tuple as a list), such as a
record a user gives (read from a file or a table, or a Python caller's mapping) or figures
ragjury writes. Its containers are read-only, so a ``dict[str, list[str]]`` is one."""
Record: TypeAlias = "Mapping[str, JSONData]"
"""A record a user gives: a JSON object, a table's row, a Python caller's mapping."""
