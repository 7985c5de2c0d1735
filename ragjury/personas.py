"""Personas: who asks the generated questions (``--personas FILE`` or ``--personas auto[:N]``).

A file lists each persona's ``name`` and ``description``, as JSON (a list of objects, or an
object whose ``personas`` holds that list) or TOML (``[[personas]]`` tables). ``auto`` asks
the model once, with a sample of the corpus, to propose N of them
(:mod:`ragjury.persona_proposal`).

Each chunk's questions are drafted for one persona, dealt out over the job's chunks so each
persona gets an even share of every question type (:mod:`ragjury.agents.balance`).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ragjury.errors import ConfigurationError
from ragjury.schemas.records import Persona

if TYPE_CHECKING:
    pass

AUTO_DEFAULT = 3
AUTO_MAX = 12
_EXAMPLE = (
    '[{"name": "new user", "description": "has just installed it and wants a first result"}, ...]'
)


@dataclass(frozen=True)
class AutoPersonas:
    """``--personas auto[:N]``: have the model propose ``count`` personas."""

    count: int


def personas_flag(value: str) -> Path | AutoPersonas:
    """``--personas``'s value: ``auto``, ``auto:N`` or the path of a file."""
    text = value.strip()
    if text != "auto" and not text.startswith("auto:"):
        return Path(value)
    count = text.partition(":")[2].strip() or str(AUTO_DEFAULT)
    if not count.isdigit() or not 1 <= int(count) <= AUTO_MAX:
        raise ConfigurationError(
            f"--personas {value!r}: N in auto:N must be a whole number from 1 to {AUTO_MAX}, "
            f"e.g. --personas auto:4 (auto alone proposes {AUTO_DEFAULT})"
        )
    return AutoPersonas(int(count))


def auto_personas(value: str | None) -> AutoPersonas | None:
    """``--personas auto[:N]`` as what to propose; None for a file or no flag."""
    if value is None:
        return None
    chosen = personas_flag(value)
    return chosen if isinstance(chosen, AutoPersonas) else None


def load_personas(path: Path) -> tuple[Persona, ...]:
    """The personas a JSON or TOML file lists; a clear error naming the bad field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"--personas {str(path)!r}: cannot read it ({exc.strerror or exc}); give a JSON or "
            "TOML file of personas, or auto[:N] to have the model propose them"
        ) from exc
    if path.suffix.lower() == ".toml":
        try:
            data: object = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(
                f"--personas {str(path)!r} is not valid TOML ({exc}); list each persona as a "
                '[[personas]] table with name = "..." and description = "..."'
            ) from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"--personas {str(path)!r} is not valid JSON ({exc}); give a list of personas "
                f"such as {_EXAMPLE} (or a .toml file with [[personas]] tables)"
            ) from exc
    return personas_from(data, str(path))


def personas_from(data: object, where: str) -> tuple[Persona, ...]:
    """Personas from parsed JSON/TOML: a list, or a table whose ``personas`` is one."""
    if isinstance(data, dict) and "personas" in data:
        data = data["personas"]
    if not isinstance(data, list) or not data:
        raise ConfigurationError(
            f"--personas {where!r}: expected a non-empty list of personas (or a 'personas' "
            f"list), got {_kind(data)}; e.g. {_EXAMPLE}"
        )
    personas: list[Persona] = []
    for number, entry in enumerate(data, 1):
        if not isinstance(entry, dict):
            raise ConfigurationError(
                f"--personas {where!r}: persona {number} is {_kind(entry)}; give an object "
                "with a 'name' and a 'description'"
            )
        try:
            personas.append(Persona.model_validate(entry))
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"]) or "persona"
            raise ConfigurationError(
                f"--personas {where!r}: persona {number} ({entry.get('name', 'unnamed')!r}): "
                f"field {field!r}: {error['msg'].lower()}; each persona needs a 'name' (at most "
                "80 characters) and a 'description', and nothing else"
            ) from exc
    names = [persona.name for persona in personas]
    for name in names:
        if names.count(name) > 1:
            raise ConfigurationError(
                f"--personas {where!r}: the name {name!r} is given {names.count(name)} times; "
                "give each persona its own name"
            )
    return tuple(personas)


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "an object"
    return "a string" if isinstance(value, str) else type(value).__name__


def persona_lines(personas: Sequence[Persona]) -> list[str]:
    """One line per persona, as printed after ``--personas auto``."""
    return [f"{persona.name}: {persona.description}" for persona in personas]
