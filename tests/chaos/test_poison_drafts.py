"""Poison drafts: questions with no words, with a NUL, or a deduplicator that takes every
question for a repeat must end as results on SQLite and on PostgreSQL alike, never crash
the run or leave items processing.

They used to crash one-shot `generate` on PostgreSQL (exit 1, an ExceptionGroup) and
crash-loop `serve`: the question index stored NUL as the key of a question with no words,
PostgreSQL's text refused it, and the error was raised outside the guard of the handler."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_daemon import Daemon, daemons, until
from test_workers import states, worker

from ragjury.cli import main

from conftest import CRITIC_AGENTS, critic_reply, read_jsonl, script_answer_check, write_qa_document
from fakeopenai import FakeOpenAI, chat_json

__all__ = ["daemons"]  # the fixture, shared with test_daemon

POISON = ["???", "What is \x00 this?", "!!! ... ???", ""]


def db_for(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store == "sqlite":
        return str(tmp_path / "run.db")
    url: str = request.getfixturevalue("pg_url")
    return url


def script(fake: FakeOpenAI) -> None:
    pairs = [{"question": q or "?", "answer": "an answer"} for q in POISON]
    fake.route("generator", chat_json({"pairs": pairs}))
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply())
    script_answer_check(fake)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
@pytest.mark.parametrize("threshold", ["0.9", "0"])
def test_poison_drafts_end_as_results_and_the_run_exits_normally(
    fake: FakeOpenAI,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    store: str,
    threshold: str,
) -> None:
    script(fake)
    docs = tmp_path / "docs"
    write_qa_document(docs, "a.md", [("What is it?", "It is.")])
    write_qa_document(docs, "b.md", [("Who made it?", "Someone.")])
    db = db_for(store, tmp_path, request)
    out = tmp_path / "kept.jsonl"
    args = ["generate", str(docs), "--out", str(out), "--rejected", str(tmp_path / "r.jsonl")]
    endpoint = ["--base-url", fake.base_url, "--api-key", "k", "--model", "m"]
    flags = ["--whole-documents", "--questions-per-chunk", str(len(POISON))]
    summary = tmp_path / "summary.json"

    code = main(
        [
            *args,
            "--db",
            db,
            *endpoint,
            *flags,
            "--dedup-threshold",
            threshold,
            "--summary",
            str(summary),
        ]
    )

    assert code in (0, 4), f"exit {code}"
    figures = json.loads(summary.read_text())
    assert figures["documents"] == 2
    assert figures["chunks_failed"] == 0, figures
    assert figures["failed"] == 0, figures  # a poison draft is judged, not crashed on
    kept_and_rejected = read_jsonl(out) + read_jsonl(tmp_path / "r.jsonl")
    # every drafted pair ended in one of the two files, none is left processing
    assert len(kept_and_rejected) == figures["kept"] + figures["rejected"] > 0
    drafted = figures["kept"] + figures["rejected"] + figures["duplicates_dropped"]
    assert drafted == figures["pairs_drafted"], figures
    assert main(["status", "--db", db, "--json"]) == 0


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_poison_drafts_through_a_serve_daemon_end_as_results_and_it_keeps_serving(
    fake: FakeOpenAI,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    daemons: list[Daemon],
    store: str,
) -> None:
    """The crash loop as an operator met it: poison drafts queued with `submit` and worked by
    a `serve` process, which must end every item and keep running until it is stopped."""
    script(fake)
    docs = tmp_path / "docs"
    write_qa_document(docs, "a.md", [("What is it?", "It is.")])
    write_qa_document(docs, "b.md", [("Who made it?", "Someone.")])
    db = db_for(store, tmp_path, request)
    flags = ["--whole-documents", "--questions-per-chunk", str(len(POISON))]
    assert main(["submit", str(docs), "--db", db, *flags, "--dedup-threshold", "0"]) == 0

    daemon = worker(daemons, fake, db, tmp_path, "poisoned")
    until(lambda: states(db)["done"] == 2, "both documents done", timeout=120)
    assert daemon.process.poll() is None, daemon.stderr()  # still serving: nothing crashed it
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()
    assert states(db) == {"queued": 0, "processing": 0, "done": 2, "failed": 0}
    assert "Traceback" not in daemon.stderr()
