"""What the accounting and budget tests share: `ragjury generate` as they run it, and the
database's rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ragjury.cli import main

from fakeopenai import FakeOpenAI


def generate(fake: FakeOpenAI, tmp_path: Path, *extra: str, model: str = "fake-model") -> int:
    return main(
        [
            "generate",
            str(tmp_path / "docs"),
            "--out",
            str(tmp_path / "kept.jsonl"),
            "--summary",
            str(tmp_path / "summary.json"),
            "--db",
            str(tmp_path / "ragjury.db"),
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            model,
            "--whole-documents",
            "--no-cache",  # each run here spends: these tests are about what spending costs
            *extra,
        ]
    )


def db_rows(tmp_path: Path, sql: str) -> list[Any]:
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        return db.execute(sql).fetchall()


# -- accounting -------------------------------------------------------------------------------
