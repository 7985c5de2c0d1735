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


def json_object(value: JSONData) -> Mapping[str, JSONData]:
    """``value`` if it is a JSON object, else an empty one: a field that is absent (or of
    another shape) reads as an object with nothing in it."""
    return value if isinstance(value, Mapping) else {}


def json_list(value: JSONData) -> Sequence[JSONData]:
    """``value`` if it is a JSON array, else an empty one (absent, or of another shape)."""
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def json_number(value: JSONData) -> float:
    """``value`` as a float, as ``float()`` reads it (a number or a numeric string); a
    TypeError for an array, object or null, as ``float()`` raises."""
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"expected a number, got {value!r}")
