"""`ragjury serve --batch` as a real process, killed with SIGKILL while its batches are out
and started again: every item ends exactly once, with a direct daemon's results, and no
request is submitted in two batches (generate and evaluate jobs)."""

from __future__ import annotations

import json
import signal
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fakebatches import FakeBatches
from test_daemon import Daemon, daemons, endpoint, serve, states, until

from ragjury.cli import main

from conftest import read_jsonl, script_happy_path, write_qa_document
from evalcli import EIFFEL, REFUSAL, TOKYO, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

__all__ = ["daemons"]  # the fixture: the daemons a test started, killed at its end

FAST = ("--batch", "--batch-wait", "0", "--batch-poll", "0.05")
ITEMS = 3


def _inputs(kind: str, tmp_path: Path) -> list[str]:
    if kind == "generate":
        docs = tmp_path / "docs"
        for i in range(ITEMS):
            write_qa_document(docs, f"doc{i}.md", [(f"What is setting {i}?", f"value {i}")])
        return [str(docs), "--whole-documents"]
    samples = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL, TOKYO, REFUSAL])
    return [str(samples), "--metrics", "faithfulness,correctness"]


def _direct(kind: str, fake: FakeOpenAI, inputs: list[str], db: Path) -> None:
    """The same job run directly by the command in this process, into ``db``."""
    out = db.with_suffix(".out.jsonl")
    args = [kind, *inputs, "--out", str(out), "--db", str(db), *endpoint(fake)]
    assert main(args) == 0


def _submit(kind: str, inputs: list[str], db: Path) -> None:
    first, *rest = inputs
    given = [first] if kind == "generate" else ["--samples", first]
    assert main(["submit", *given, *rest, "--db", str(db)]) == 0


def _records(kind: str, db: Path) -> list[dict[str, Any]]:
    out = db.with_suffix(".jsonl")
    flag = "--out" if kind == "generate" else "--results"
    assert main(["export", "--db", str(db), flag, str(out)]) == 0
    return sorted(read_jsonl(out), key=lambda r: str(r["id"]))


def _parked(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM batch_waits").fetchone()[0])
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0


def _served(daemons: list[Daemon], fake: FakeOpenAI, db: Path, name: str, *extra: str) -> None:
    daemon = serve(daemons, fake, db, name, *extra)
    try:
        until(lambda: states(db)["done"] == ITEMS, f"{name}: every item done")
    except AssertionError as exc:  # the daemon's own log says where it stood
        raise AssertionError(f"{exc}; items {dict(states(db))}\n{daemon.stderr()}") from exc
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()


@pytest.mark.parametrize("kind", ["generate", "evaluate"])
def test_serve_killed_while_batches_are_out_ends_every_item_once_and_submits_nothing_twice(
    kind: str, fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    (script_happy_path if kind == "generate" else script_judges)(fake)
    inputs = _inputs(kind, tmp_path)
    direct_db = tmp_path / "direct.db"
    _direct(kind, fake, inputs, direct_db)
    batches = FakeBatches(fake, delay=3600)  # nothing comes back while the first daemon lives
    db = tmp_path / "batch.db"
    _submit(kind, inputs, db)

    first = serve(daemons, fake, db, "first", *FAST)
    until(lambda: batches.polls > 0 and _parked(db) > 0, "a batch out and steps parked")
    first.process.kill()  # SIGKILL: no cleanup of any kind
    assert first.wait() == -signal.SIGKILL
    out_at_kill = list(batches.created)
    batches.delay = 0
    _served(daemons, fake, db, "second", *FAST)

    assert states(db) == Counter({"done": ITEMS})
    records = _records(kind, db)
    assert len({r["id"] for r in records}) == len(records) > 0  # each item's results once
    assert records == _records(kind, direct_db)
    assert batches.created[: len(out_at_kill)] == out_at_kill
    submitted = [
        json.loads(line)["custom_id"]
        for batch in batches.batches.values()
        for line in batches.files[batch.input_file_id].decode().splitlines()
    ]
    assert len(submitted) == len(set(submitted))  # no request went out in two batches
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM batch_waits").fetchone()[0] == 0
