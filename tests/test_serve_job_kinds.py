"""`ragjury serve` works every kind of submitted job as the one-process command would: a
judge file's job from the declaration the job kept, a typed generate job planned the same
by two daemons, and one with auto personas, reference answers and ``--max-pairs``.

The daemons are real subprocesses (``test_daemon``'s helpers) sharing one database file.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from test_daemon import Daemon, daemons, endpoint, exported, serve, states, until

from ragjury.cli import main

from conftest import CRITIC_AGENTS, agreement_reply, critic_reply, read_jsonl
from fakeopenai import FakeOpenAI, chat_json
from typed_corpus import typed_answer_reply, typed_generator_reply, write_topics

__all__ = ["daemons"]  # the fixture, shared with test_daemon


def test_serve_works_a_judge_file_job_from_what_the_job_kept(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    from test_judge_files import AGENT, POLITENESS, graded

    fake.route(AGENT, graded(5))
    judge = tmp_path / "politeness.toml"
    judge.write_text(POLITENESS, encoding="utf-8")
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"id": "s", "question": "Hi?", "answer": "Hello, glad to help."}\n')
    db = tmp_path / "queue.db"
    flags = ["--judge", str(judge), "--metrics", "politeness"]
    assert main(["submit", "--samples", str(samples), "--db", str(db), *flags]) == 0
    judge.unlink()  # serve never reads the file: the job holds its declaration

    daemon = serve(daemons, fake, db, "serve")
    until(lambda: states(db).get("done") == 1, "the sample to be judged")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()

    out = tmp_path / "results.jsonl"
    assert main(["export", "--db", str(db), "--results", str(out)]) == 0
    [record] = read_jsonl(out)
    assert record["metrics"]["politeness"]["score"] == 5.0
    assert len(fake.requests_for(AGENT)) == 1


def test_two_daemons_plan_a_typed_job_as_one_generate_process_does(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    fake.route("generator", typed_generator_reply)
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply())
    fake.route("answerability_critic", typed_answer_reply)
    fake.route("answer_agreement", agreement_reply)
    docs = write_topics(tmp_path / "docs", 5)
    typed = ["--whole-documents", "--question-types", "factoid=1,multi_hop=1,comparative=1"]
    db = tmp_path / "queue.db"
    assert main(["submit", str(docs), "--db", str(db), *typed, "--seed", "9"]) == 0
    pair = [serve(daemons, fake, db, "one"), serve(daemons, fake, db, "two")]
    until(lambda: states(db)["done"] == 10, "every item done")
    for daemon in pair:
        daemon.signal(signal.SIGTERM)
    assert [daemon.wait() for daemon in pair] == [0, 0]
    out, other = tmp_path / "one-process.jsonl", str(tmp_path / "one-process.db")
    args = ["generate", str(docs), "--out", str(out), "--db", other, *endpoint(fake)]
    assert main([*args, *typed, "--seed", "9"]) == 0

    def plans(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["question_type"], r["chunk_ids"]) for r in records)

    served = exported(db, tmp_path)
    assert len(served) == 10
    assert plans(served) == plans(read_jsonl(out))  # each process built the same index
    assert any(len(r["chunk_ids"]) == 2 for r in served)


def test_daemons_work_a_submitted_job_with_auto_personas_references_and_max_pairs(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_personas import PERSONAS
    from test_reference_answers import reference_reply

    fake.route("generator", typed_generator_reply)
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply())
    fake.route("answerability_critic", typed_answer_reply)
    fake.route("answer_agreement", agreement_reply)
    fake.route("reference_writer", reference_reply)
    fake.route("persona_proposer", chat_json({"personas": PERSONAS}))
    docs = write_topics(tmp_path / "docs", 5)
    options = ["--whole-documents", "--question-types", "factoid=1,multi_hop=1"]
    options += ["--personas", "auto:2", "--reference-answers", "--max-pairs", "6", "--seed", "5"]
    db = tmp_path / "queue.db"
    for name, value in (("BASE_URL", fake.base_url), ("API_KEY", "k"), ("MODEL", "fake-model")):
        monkeypatch.setenv(f"RAGJURY_{name}", value)  # submit proposes the personas with them

    assert main(["submit", str(docs), "--db", str(db), *options]) == 0

    assert len(fake.requests_for("persona_proposer")) == 1
    pair = [serve(daemons, fake, db, "one"), serve(daemons, fake, db, "two")]
    until(lambda: states(db)["done"] == 10, "every item done")
    # one daemon may have done all the work while the other was still starting: a SIGTERM
    # before serve catches signals ends it as for any process (the full suite saw -15)
    until(lambda: all("SIGINT/SIGTERM to stop" in d.stderr() for d in pair), "both serving")
    for daemon in pair:
        daemon.signal(signal.SIGTERM)
    assert [daemon.wait() for daemon in pair] == [0, 0]
    served = exported(db, tmp_path)
    out, other = tmp_path / "one-process.jsonl", str(tmp_path / "one-process.db")
    assert main(["generate", str(docs), "--out", str(out), "--db", other, *options]) == 0

    def fields(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (r["id"], r["question_type"], r["persona"], r["reference_answer"]) for r in records
        )

    assert len(served) == 6
    assert fields(served) == fields(read_jsonl(out))
    assert {r["persona"] for r in served} == {p["name"] for p in PERSONAS}
