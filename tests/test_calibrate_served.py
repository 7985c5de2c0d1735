"""Judges served by a daemon: ``ragjury calibrate --submit`` (the judging queued in the
database, worked by a real ``ragjury serve`` process, the figures read back by the same
command without ``--submit`` at no LLM call) and ``ragjury submit --judges``, as a user runs
them."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_daemon import Daemon, daemons, endpoint, serve, states, until
from test_panel_endpoints import declare, two_endpoints
from test_panels import QUESTIONS, SCORES, scripted

from ragjury.cli import main

from calibratecli import write_labels
from conftest import read_jsonl
from fakeopenai import Behaviour, FakeOpenAI

__all__ = ["daemons", "two_endpoints"]  # the fixtures, used by name

HUMAN = {"s1": True, "s2": True, "s3": False, "s4": True}  # judge a's own verdicts


def test_a_calibration_submitted_is_served_by_a_daemon_and_read_back_without_a_call(
    fake: FakeOpenAI,
    tmp_path: Path,
    daemons: list[Daemon],
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake.route("correctness_judge", scripted(SCORES["a"]))
    labels = write_labels(
        tmp_path,
        [
            {"id": sid, "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}.",
             "human": HUMAN[sid]}
            for sid, q in QUESTIONS.items()
        ],
    )  # fmt: skip
    db = tmp_path / "queue.db"
    command = ["calibrate", str(labels), "--metric", "correctness", "--db", str(db),
               *endpoint(fake)]  # fmt: skip

    assert main([*command, "--submit"]) == 0
    assert "queued 4 labelled sample(s) for correctness as job" in capsys.readouterr().err
    assert fake.requests == []
    assert states(db) == {"queued": 4}

    daemon = serve(daemons, fake, db, "serve")
    until(lambda: states(db).get("done") == 4, "the daemon to judge the four samples")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()
    assert len(fake.requests_for("correctness_judge")) == 4

    assert main([*command, "--submit"]) == 0  # submitted again: nothing added
    assert "(4 done, 0 to go, 0 failed); nothing added" in capsys.readouterr().err

    summary = tmp_path / "summary.json"
    assert main([*command, "--json", "--summary", str(summary)]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["compared"] == 4
    assert figures["agreement"]["accuracy"]["value"] == 1.0  # the judge is the person
    assert len(fake.requests) == 4  # read back: no call
    assert json.loads(summary.read_text(encoding="utf-8"))["llm_calls"] == 0


def test_a_served_panel_uses_the_judges_declared_where_the_daemon_runs(
    two_endpoints: dict[str, FakeOpenAI],
    tmp_path: Path,
    daemons: list[Daemon],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The job keeps each judge's name, model and URL; the key and limits are read by the
    process that makes the calls: here the daemon, from its ragjury.toml and environment."""
    for fake in two_endpoints.values():
        fake.behave(Behaviour(latency=0.05))
    declare(tmp_path, two_endpoints, monkeypatch, {"a": "concurrency = 1"})
    labels = write_labels(
        tmp_path,
        [
            {"id": f"{sid}-{n}", "question": q, "answer": f"Fact {sid}.",
             "reference": f"Fact {sid}.", "human": HUMAN[sid]}
            for sid, q in QUESTIONS.items()
            for n in range(2)
        ],
    )  # fmt: skip
    db = tmp_path / "queue.db"
    command = ["calibrate", str(labels), "--metric", "correctness", "--judges", "a,b",
               "--db", str(db), *endpoint(two_endpoints["a"])]  # fmt: skip
    assert main([*command, "--submit"]) == 0
    assert all(fake.requests == [] for fake in two_endpoints.values())

    daemon = serve(daemons, two_endpoints["a"], db, "serve", "--concurrency", "8")
    until(lambda: states(db).get("done") == 8, "the daemon to judge the eight samples")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()
    a, b = two_endpoints["a"], two_endpoints["b"]
    assert len(a.requests_for("correctness_judge@a")) == 8
    assert len(b.requests_for("correctness_judge@b")) == 8
    assert a.stats()["in_flight_max"] == 1  # the daemon kept judge a's declared limit
    assert {r.headers["authorization"] for r in b.requests} == {"Bearer key-of-b"}

    capsys.readouterr()
    assert main([*command, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["by_judge"]["a"]["agreement"]["accuracy"]["value"] == 1.0
    assert figures["compared"] == 8


def test_a_panel_submitted_with_submit_is_judged_by_each_judge_in_the_daemon(
    two_endpoints: dict[str, FakeOpenAI],
    tmp_path: Path,
    daemons: list[Daemon],
    capsys: pytest.CaptureFixture[str],
) -> None:
    samples = write_labels(
        tmp_path,
        [
            {"id": sid, "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}."}
            for sid, q in QUESTIONS.items()
        ],
    )
    db = tmp_path / "queue.db"
    judges = ",".join(f"{n}=model-{n}@{f.base_url}" for n, f in two_endpoints.items())
    assert main(["submit", "--samples", str(samples), "--db", str(db), "--metrics",
                 "correctness", "--judges", judges, "--repeats", "2"]) == 0  # fmt: skip
    assert "4 sample(s) for evaluation (correctness), asked of a, b 2 times each" in (
        capsys.readouterr().err
    )
    daemon = serve(daemons, two_endpoints["a"], db, "serve")
    until(lambda: states(db).get("done") == 4, "the daemon to judge the four samples")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()
    for name, fake in two_endpoints.items():
        assert len(fake.requests_for(f"correctness_judge@{name}")) == 8  # 4 samples x 2

    out = tmp_path / "results.jsonl"
    assert main(["export", "--db", str(db), "--results", str(out)]) == 0
    for record in read_jsonl(out):
        panel = record["metrics"]["correctness"]["panel"]
        assert (panel["answered"], panel["of"], panel["repeats"]) == (2, 2, 2)
        votes = [SCORES[j][record["id"]] >= 4 for j in ("a", "b")]
        assert record["metrics"]["correctness"]["passing"] is all(votes)
