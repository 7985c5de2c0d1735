"""`ragjury generate` end to end: real CLI, real HTTP server, real SQLite file."""

from __future__ import annotations

import csv
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ragjury.cli import main

from conftest import (
    ANSWER_AGENTS,
    CHECK_CALLS,
    CRITIC_AGENTS,
    critic_reply,
    generator_reply,
    question_of,
    read_jsonl,
    read_summary,
    script_happy_path,
    write_qa_document,
)
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat, chat_json, error

ROOT = Path(__file__).resolve().parents[1]

FACTS = {
    "ports.md": [("What port does uvicorn serve on by default?", "8000")],
    "cli.md": [("Which command starts the FastAPI development server?", "fastapi dev")],
    "docs.md": [("At which path are the interactive API docs served?", "/docs")],
}


def corpus(tmp_path: Path, facts: dict[str, list[tuple[str, str]]] = FACTS) -> Path:
    folder = tmp_path / "docs"
    for name, pairs in facts.items():
        write_qa_document(folder, name, pairs)
    return folder


def run(fake: FakeOpenAI, tmp_path: Path, *extra: str, docs: Path | None = None) -> int:
    args = [
        "generate",
        str(docs or corpus(tmp_path)),
        "--out",
        str(tmp_path / "kept.jsonl"),
        "--rejected",
        str(tmp_path / "rejected.jsonl"),
        "--summary",
        str(tmp_path / "summary.json"),
        "--db",
        str(tmp_path / "ragjury.db"),
        "--base-url",
        fake.base_url,
        "--api-key",
        "test-key",
        "--model",
        "fake-model",
        "--whole-documents",
        *extra,
    ]
    return main(args)


def test_a_full_run_writes_vetted_pairs_summary_and_database(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)

    assert run(fake, tmp_path) == 0

    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert sorted(r["question"] for r in kept) == sorted(q for p in FACTS.values() for q, _ in p)
    record = next(r for r in kept if r["answer"] == "8000")
    assert record["source"].endswith("ports.md")
    assert "What port does uvicorn" in record["context"]
    assert record["chunk_id"].startswith(record["source"])
    assert record["outcome"] == "kept"
    assert set(record["critiques"]) == {"groundedness", "relevance", "standalone", "answerability"}
    assert record["critiques"]["relevance"] == {"rating": 5, "rationale": "scripted rating 5"}
    # the answerability critic's own answer, kept for audit
    assert record["critiques"]["answerability"] == {"rating": 5, "rationale": "the answers agree"}
    assert record["answer_check"]["answer"] == "8000"
    assert record["answer_check"]["answerable"] is True
    assert read_jsonl(tmp_path / "rejected.jsonl") == []

    s = read_summary(tmp_path)
    assert s["documents"] == 3
    assert s["chunks"] == 3
    assert s["chunks_failed"] == 0
    assert s["pairs_drafted"] == 3
    assert s["duplicates_dropped"] == 0
    assert (s["kept"], s["rejected"], s["failed"]) == (3, 0, 0)
    # a generator call per document, three critics and the answerability check's two calls
    # (its own answer, then the comparison) per pair
    assert s["llm_calls"] == len(fake.requests) == 3 + 3 * 3 + 3 * CHECK_CALLS
    assert s["prompt_tokens"] == 3 * 100 + 9 * 50 + 3 * (60 + 40)
    assert s["completion_tokens"] == 3 * 30 + 9 * 12 + 3 * (15 + 12)
    assert s["wall_seconds"] > 0

    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        stored = db.execute("SELECT outcome, COUNT(*) FROM pairs GROUP BY outcome").fetchall()
        calls = db.execute("SELECT SUM(requests), SUM(prompt_tokens) FROM llm_calls").fetchone()
    assert stored == [("kept", 3)]
    assert calls == (18, s["prompt_tokens"])


def test_filter_keeps_exactly_the_pairs_whose_every_rating_reaches_min_score(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    facts = {
        f"doc{i}.md": [(f"Which value does setting number {w} hold?", str(i))]
        for i, w in enumerate(["alpha", "bravo", "charlie", "delta", "echo"])
    }
    q = {i: facts[f"doc{i}.md"][0][0] for i in range(5)}
    ratings = {
        "groundedness_critic": {q[0]: 5, q[1]: 3, q[2]: 4, q[3]: 5, q[4]: 4},
        "relevance_critic": {q[0]: 4, q[1]: 5, q[2]: 4, q[3]: 5, q[4]: 2},
        "standalone_critic": {q[0]: 5, q[1]: 5, q[2]: 4, q[3]: 1, q[4]: 5},
    }
    script_happy_path(fake, ratings)

    assert run(fake, tmp_path, "--min-score", "4", docs=corpus(tmp_path, facts)) == 0

    kept = {r["question"] for r in read_jsonl(tmp_path / "kept.jsonl")}
    rejected = {r["question"]: r for r in read_jsonl(tmp_path / "rejected.jsonl")}
    assert kept == {q[0], q[2]}
    assert set(rejected) == {q[1], q[3], q[4]}
    assert all(r["outcome"] == "rejected" for r in rejected.values())
    assert rejected[q[3]]["critiques"]["standalone"]["rating"] == 1


def test_near_duplicate_questions_are_dropped_and_counted(fake: FakeOpenAI, tmp_path: Path) -> None:
    facts = {
        "a.md": [("What port does uvicorn serve on by default?", "8000")],
        "b.md": [("What port does Uvicorn serve on, by default?", "8000")],
        "c.md": [("Which header carries the API key?", "X-API-Key")],
    }
    script_happy_path(fake)

    assert run(fake, tmp_path, docs=corpus(tmp_path, facts)) == 0

    s = read_summary(tmp_path)
    assert s["pairs_drafted"] == 3
    assert s["duplicates_dropped"] == 1
    assert s["kept"] == 2
    questions = [r["question"].lower() for r in read_jsonl(tmp_path / "kept.jsonl")]
    assert sum("uvicorn" in question for question in questions) == 1
    # the duplicate never reached the critics
    assert len(fake.requests_for("groundedness_critic")) == 2


def test_a_pair_whose_critic_never_validates_is_failed_with_the_reason(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    victim = FACTS["cli.md"][0][0]
    good = critic_reply()

    def relevance(request: RecordedRequest) -> Reply:
        if question_of(request) == victim:
            return chat("I would say about a four.")
        return good(request)

    fake.route("relevance_critic", relevance)

    assert run(fake, tmp_path, "--max-retries", "2") == 0

    rejected = read_jsonl(tmp_path / "rejected.jsonl")
    assert [r["question"] for r in rejected] == [victim]
    failed = rejected[0]
    assert failed["outcome"] == "failed"
    assert failed["error"]["stage"] == "relevance_critic"
    assert failed["error"]["attempts"] == 3
    assert failed["error"]["last_raw_output"] == "I would say about a four."
    assert failed["error"]["message"]
    assert set(failed["critiques"]) == {"groundedness", "standalone", "answerability"}
    s = read_summary(tmp_path)
    assert (s["kept"], s["rejected"], s["failed"]) == (2, 0, 1)


def test_a_chunk_whose_generator_output_never_validates_is_counted_and_the_run_goes_on(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)

    def generator(request: RecordedRequest) -> Reply:
        if "ports.md" in request.text():
            return chat_json({"pairs": []})
        return generator_reply(request)

    fake.route("generator", generator)

    assert run(fake, tmp_path, "--max-retries", "1") == 0

    s = read_summary(tmp_path)
    assert s["chunks"] == 3
    assert s["chunks_failed"] == 1
    assert s["kept"] == 2
    assert s["failed_chunks"][0]["source"].endswith("ports.md")
    assert s["failed_chunks"][0]["attempts"] == 2


def test_rate_limits_and_server_errors_are_retried_and_counted(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    fake.route(
        "generator",
        error(429, retry_after_ms=20),
        error(500),
        generator_reply,
    )

    assert run(fake, tmp_path) == 0

    s = read_summary(tmp_path)
    assert s["kept"] == 3
    assert s["llm_calls"] == len(fake.requests) == 3 + 3 * (3 + CHECK_CALLS) + 2
    assert s["by_stage"]["generator"]["llm_calls"] == 5


def test_csv_output_has_one_row_per_pair_with_flattened_critiques(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake, {"standalone_critic": {FACTS["docs.md"][0][0]: 2}})
    kept_csv, rejected_csv = tmp_path / "kept.csv", tmp_path / "rejected.csv"

    code = run(
        fake, tmp_path, "--format", "csv", "--out", str(kept_csv), "--rejected", str(rejected_csv)
    )

    assert code == 0
    with kept_csv.open(newline="") as f:
        kept = list(csv.DictReader(f))
    with rejected_csv.open(newline="") as f:
        rejected = list(csv.DictReader(f))
    assert len(kept) == 2
    assert [r["standalone_rating"] for r in rejected] == ["2"]
    assert rejected[0]["standalone_rationale"] == "scripted rating 2"
    # the answerability critic's rating, rationale and own answer have their columns
    for row in kept + rejected:
        assert (row["answerability_rating"], row["check_answerable"]) == ("5", "True")
        assert row["answerability_rationale"] == "the answers agree"
        assert row["check_answer"] == row["answer"]


def test_questions_per_chunk_asks_for_that_many_pairs(fake: FakeOpenAI, tmp_path: Path) -> None:
    facts = {
        "many.md": [
            (f"What is the {w} limit of the widget service?", w)
            for w in ("upper", "lower", "default", "hard")
        ]
    }
    script_happy_path(fake)

    code = run(fake, tmp_path, "--questions-per-chunk", "3", docs=corpus(tmp_path, facts))

    assert code == 0
    assert read_summary(tmp_path)["pairs_drafted"] == 3
    assert "Write exactly 3 question and answer pairs" in fake.requests_for("generator")[0].text()


def test_no_readable_documents_exits_non_zero_with_the_reason(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "blank.md").write_text("   \n")

    assert run(fake, tmp_path, docs=folder) == 1

    assert "no readable documents" in capsys.readouterr().err
    assert fake.requests == []


def test_a_rejected_api_key_stops_the_run_with_a_clear_error(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fallback(error(401, "Incorrect API key provided"))
    many = {
        f"doc{n}.md": [(f"Which limit applies to service number {n}?", str(n))] for n in range(20)
    }

    code = run(fake, tmp_path, "--concurrency", "1", docs=corpus(tmp_path, many))

    assert code == 2
    err = capsys.readouterr().err
    assert "401" in err
    assert "OPENAI_API_KEY" in err
    assert len(fake.requests) == 1  # the first refusal stops the run; 19 chunks never asked


def test_an_endpoint_never_reached_stops_the_run_and_the_same_command_resumes(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    many = {
        f"doc{n}.md": [(f"Which limit applies to service number {n}?", str(n))] for n in range(20)
    }
    docs = corpus(tmp_path, many)
    retries = ("--max-transport-retries", "1", "--concurrency", "1")

    assert run(fake, tmp_path, "--base-url", dead, *retries, docs=docs) == 4  # nothing made

    err = " ".join(capsys.readouterr().err.split())
    assert f"check that {dead} is up and that --base-url is right" in err
    assert "unfinished work stays queued" in err
    script_happy_path(fake)
    assert run(fake, tmp_path, docs=docs) == 0  # the same command, the endpoint now up
    assert len(read_jsonl(tmp_path / "kept.jsonl")) == 20


def test_answer_style_and_audience_reach_the_prompts(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)

    audience = "site reliability engineers"
    code = run(fake, tmp_path, "--answer-style", "detailed", "--audience", audience)

    assert code == 0
    assert "full paragraph" in fake.requests_for("generator")[0].text()
    assert "short: a name" not in fake.requests_for("generator")[0].text()
    assert audience in fake.requests_for("relevance_critic")[0].text()


def test_bad_option_values_name_the_flag_and_the_value(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(fake, tmp_path, "--chunk-size", "500", "--chunk-overlap", "600") == 2
    err = capsys.readouterr().err
    assert "overlap=600" in err
    assert "--chunk-overlap" in err

    assert run(fake, tmp_path, "--min-score", "9") == 2
    assert "--min-score" in capsys.readouterr().err


def test_main_py_runs_generate_as_a_user_would(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)
    env = {
        "PATH": "/usr/bin:/bin",
        "RAGJURY_BASE_URL": fake.base_url,
        "RAGJURY_MODEL": "m",
        "HOME": str(tmp_path),
    }

    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "main.py"),
            "generate",
            str(corpus(tmp_path)),
            "--whole-documents",
            "--out",
            str(tmp_path / "out.jsonl"),
            "--db",
            str(tmp_path / "r.db"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert len(read_jsonl(tmp_path / "out.jsonl")) == 3
    assert "kept 3" in done.stderr
    assert {r.agent for r in fake.requests} == {"generator", *CRITIC_AGENTS, *ANSWER_AGENTS}
