"""What the accounting and budget tests share: `ragjury generate` as they run it, and the
database's rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from test_generate import run

from fakeopenai import FakeOpenAI


def generate(fake: FakeOpenAI, tmp_path: Path, *extra: str, model: str = "fake-model") -> int:
    """`ragjury generate` on ``tmp_path / "docs"`` with ``model``; each run spends (these
    tests are about what spending costs), so the step cache is off."""
    return run(fake, tmp_path, "--model", model, "--no-cache", *extra, docs=tmp_path / "docs")


def db_rows(tmp_path: Path, sql: str) -> list[Any]:
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        return db.execute(sql).fetchall()
