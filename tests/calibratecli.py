"""`ragjury calibrate` as the tests run it: in process, on a database in the test's folder."""

from __future__ import annotations

import json
from pathlib import Path

from ragjury.cli import main

from fakeopenai import FakeOpenAI


def calibrate(fake: FakeOpenAI | None, tmp_path: Path, *args: str) -> int:
    endpoint = ["--base-url", fake.base_url, "--api-key", "test-key"] if fake else []
    return main(["calibrate", *args, "--db", str(tmp_path / "ragjury.db"), *endpoint])


def write_labels(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


SAMPLE = {"question": "Capital of Japan?", "answer": "Tokyo.", "contexts": ["Tokyo is it."]}
