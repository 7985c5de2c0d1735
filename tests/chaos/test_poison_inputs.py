"""Poison inputs: samples whose text has a NUL, lone surrogates, nothing or only punctuation
end as results through a one-shot `evaluate` and through `submit` + `serve`, on SQLite and
on PostgreSQL alike; no run crashes, no item is left processing. (The drafts a generator
makes of such text: ``test_poison_drafts.py``.)"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from test_daemon import Daemon, daemons, until
from test_workers import export, states, worker

from ragjury.cli import main

from evalfakes import script_judges
from fakeopenai import FakeOpenAI

__all__ = ["daemons"]  # the fixture, shared with test_daemon

CONTEXT = "The tower is in Paris."
POISON = {
    "nul": {"question": "Where\x00 is it?", "answer": "In\x00 Paris.",
            "contexts": [f"\x00{CONTEXT}"]},
    "surrogates": {"question": "Where \ud800?", "answer": "In \udfff Paris.",
                   "contexts": [CONTEXT]},
    "punctuation": {"question": "???", "answer": "!!! ...", "contexts": ["?!"]},
    "empty": {"question": "Where is it?", "answer": "", "contexts": [""]},
    "clean": {"question": "Where is the tower?", "answer": "In Paris.", "contexts": [CONTEXT]},
}  # fmt: skip


def write_samples(path: Path) -> Path:
    # json.dumps escapes lone surrogates as \ud800, as a program writing JSON would
    lines = [json.dumps({"id": key, **sample, "must_contain": ["Paris"]}) for key, sample in
             POISON.items()]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def db_for(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return str(tmp_path / "run.db") if store == "sqlite" else request.getfixturevalue("pg_url")


def assert_each_sample_ended(results: list[dict[str, Any]]) -> None:
    by_id = {str(r["id"]): r for r in results}
    assert sorted(by_id) == sorted(POISON)
    for key, record in by_id.items():
        for name, metric in record["metrics"].items():
            assert metric["outcome"] in ("scored", "not_applicable"), (key, name, metric)
    assert by_id["clean"]["metrics"]["faithfulness"]["outcome"] == "scored"


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_poison_inputs_end_as_results_in_a_one_shot_run(
    fake: FakeOpenAI, tmp_path: Path, request: pytest.FixtureRequest, store: str
) -> None:
    script_judges(fake)
    samples = write_samples(tmp_path / "samples.jsonl")
    db = db_for(store, tmp_path, request)
    out = tmp_path / "results.jsonl"
    args = ["evaluate", str(samples), "--metrics", "faithfulness,keywords", "--db", db]
    args += ["--out", str(out), "--base-url", fake.base_url, "--api-key", "k"]

    assert main(args) in (0, 5)  # judged (a keyword may fail its gate), never crashed
    assert_each_sample_ended([json.loads(line) for line in out.read_text().splitlines()])
    assert states(db) == {"queued": 0, "processing": 0, "done": len(POISON), "failed": 0}


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_poison_inputs_through_a_serve_daemon_end_as_results_and_it_keeps_serving(
    fake: FakeOpenAI,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    daemons: list[Daemon],
    store: str,
) -> None:
    script_judges(fake)
    samples = write_samples(tmp_path / "samples.jsonl")
    db = db_for(store, tmp_path, request)
    args = ["submit", "--samples", str(samples), "--db", db]
    assert main([*args, "--metrics", "faithfulness,keywords"]) == 0

    daemon = worker(daemons, fake, db, tmp_path, "poisoned")
    until(lambda: states(db)["done"] == len(POISON), "every sample done", timeout=120)
    assert daemon.process.poll() is None, daemon.stderr()  # still serving: nothing crashed it
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()
    assert states(db) == {"queued": 0, "processing": 0, "done": len(POISON), "failed": 0}
    assert "Traceback" not in daemon.stderr()
    assert_each_sample_ended(export(db, tmp_path / "export.jsonl"))
