"""``--db``: where the store lives. A path is a SQLite file (processes on one machine); a
``postgresql://`` URL is a PostgreSQL database (processes on any number of machines)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ragjury.errors import ConfigurationError
from ragjury.urls import redacted

_POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class Location:
    """A parsed ``--db``: ``kind`` is ``sqlite`` (``path`` set) or ``postgresql`` (``url``)."""

    kind: str
    path: Path | None = None
    url: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return str(self.path)
        return redacted(self.url or "")

    @property
    def exists(self) -> bool:
        """Whether there is a database to read (a server database is assumed to exist)."""
        return self.path is None or self.path.exists()


def parse_location(value: str | Path) -> Location:
    """A path (``queue.db``, ``:memory:``) or a ``postgresql://user@host/db`` URL."""
    text = str(value)
    if not text.strip():
        raise ConfigurationError("--db is empty; give a file path such as ragjury.db")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in _POSTGRES_SCHEMES:
        return Location(kind="postgresql", url=text)
    if scheme:
        raise ConfigurationError(
            f"--db {redacted(text)!r}: unknown scheme {scheme!r}; use a file path for SQLite "
            "or a postgresql:// URL"
        )
    return Location(kind="sqlite", path=Path(text))
