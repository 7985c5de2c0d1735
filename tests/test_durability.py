"""Durability: re-runs resume from the database, the step cache, and the queue's leases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_generate import FACTS, corpus, run

from conftest import (
    CHECK_CALLS,
    CRITIC_AGENTS,
    read_jsonl,
    read_summary,
    script_happy_path,
    write_qa_document,
)
from fakeopenai import FakeOpenAI, chat_json, error

pytestmark = pytest.mark.anyio


def _outputs(tmp_path: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    return read_jsonl(tmp_path / "kept.jsonl"), read_jsonl(tmp_path / "rejected.jsonl")


def test_rerunning_generate_on_the_same_database_makes_no_llm_request(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake, {"relevance_critic": {FACTS["cli.md"][0][0]: 2}})
    assert run(fake, tmp_path) == 0
    first = _outputs(tmp_path)
    assert [len(first[0]), len(first[1])] == [2, 1]
    asked = len(fake.requests)
    # three documents: a generator call, three critics and the answerability check's two each
    assert asked == 3 * (4 + CHECK_CALLS)

    (tmp_path / "kept.jsonl").unlink()
    assert run(fake, tmp_path) == 0

    assert len(fake.requests) == asked  # nothing asked again
    assert _outputs(tmp_path) == first
    summary = read_summary(tmp_path)
    assert summary["resumed"] is True
    assert summary["llm_calls"] == 0
    assert (summary["kept"], summary["rejected"], summary["failed"]) == (2, 1, 0)


def test_rerunning_after_endpoint_failures_asks_again_only_the_steps_that_failed(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_happy_path(fake)
    fake.route("relevance_critic", error(503, "overloaded"))  # the endpoint, not the model
    # every pair failed: exit 4, the results did not pass
    assert run(fake, tmp_path, "--max-transport-retries", "0") == 4
    assert read_summary(tmp_path)["failed"] == 3  # every pair lost its relevance critique
    failed = read_jsonl(tmp_path / "rejected.jsonl")
    assert all(r["outcome"] == "failed" for r in failed)
    before = {agent: len(fake.requests_for(agent)) for agent in ("generator", *CRITIC_AGENTS)}

    script_happy_path(fake)  # the endpoint is back: the same command again
    capsys.readouterr()
    assert run(fake, tmp_path) == 0

    assert "3 document(s) again, because the endpoint failed" in " ".join(
        capsys.readouterr().err.split()
    )
    asked = {agent: len(fake.requests_for(agent)) - before[agent] for agent in before}
    # the drafts and the two critiques that succeeded come from the step cache
    assert asked == {
        "generator": 0,
        "groundedness_critic": 0,
        "relevance_critic": 3,
        "standalone_critic": 0,
    }
    kept, rejected = _outputs(tmp_path)
    assert (len(kept), len(rejected)) == (3, 0)
    summary = read_summary(tmp_path)
    assert (summary["kept"], summary["failed"]) == (3, 0)

    assert run(fake, tmp_path) == 0  # finished now: a third run asks nothing
    assert sum(len(fake.requests_for(agent)) for agent in before) == sum(before.values()) + 3


def test_rerunning_after_the_endpoint_failed_the_drafts_drafts_those_chunks_again(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    fake.route("generator", error(503, "overloaded"))  # every chunk fails at the endpoint
    run(fake, tmp_path, "--max-transport-retries", "0")
    assert read_summary(tmp_path)["chunks_failed"] == 3

    script_happy_path(fake)  # the endpoint is back: the same command again
    assert run(fake, tmp_path) == 0

    assert len(_outputs(tmp_path)[0]) == 3
    assert read_summary(tmp_path)["chunks_failed"] == 0


def test_a_step_whose_output_never_validated_is_not_retried_by_a_rerun(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    fake.route("relevance_critic", chat_json({"rationale": "x", "rating": 9}))  # the model
    assert run(fake, tmp_path, "--max-retries", "0") == 4  # every pair failed
    asked = len(fake.requests)

    assert run(fake, tmp_path, "--max-retries", "0") == 4

    assert len(fake.requests) == asked  # a re-ask would give the same answer: not spent again
    assert read_summary(tmp_path)["failed"] == 3


def test_new_options_reuse_every_step_they_do_not_change(fake: FakeOpenAI, tmp_path: Path) -> None:
    ports = FACTS["ports.md"][0][0]
    script_happy_path(fake, {"groundedness_critic": {ports: 4}})
    assert run(fake, tmp_path, "--min-score", "4") == 0
    asked = len(fake.requests)
    assert {r["question"] for r in _outputs(tmp_path)[0]} >= {ports}

    # A stricter bar is a new job, but the drafts and critiques are the same steps.
    assert run(fake, tmp_path, "--min-score", "5") == 0

    assert len(fake.requests) == asked
    kept, rejected = _outputs(tmp_path)
    assert ports in {r["question"] for r in rejected}
    assert ports not in {r["question"] for r in kept}
    assert read_summary(tmp_path)["resumed"] is False


def test_a_changed_prompt_asks_again_only_the_agent_it_belongs_to(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    assert run(fake, tmp_path) == 0
    before = {agent: len(fake.requests_for(agent)) for agent in ("generator", *CRITIC_AGENTS)}
    builtin = (Path(__file__).parents[1] / "ragjury/prompts/templates/standalone.j2").read_text()
    custom = tmp_path / "standalone.j2"
    custom.write_text(builtin + "\nBe brief.\n", encoding="utf-8")

    assert run(fake, tmp_path, "--prompt", f"standalone={custom}") == 0

    after = {agent: len(fake.requests_for(agent)) for agent in ("generator", *CRITIC_AGENTS)}
    assert after["standalone_critic"] == before["standalone_critic"] + 3
    assert {a: after[a] for a in after if a != "standalone_critic"} == {
        a: before[a] for a in before if a != "standalone_critic"
    }


def test_no_cache_does_the_work_again(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)
    assert run(fake, tmp_path) == 0
    asked = len(fake.requests)

    assert run(fake, tmp_path, "--no-cache") == 0

    assert len(fake.requests) == 2 * asked
    assert len(_outputs(tmp_path)[0]) == 3


def test_a_finished_document_is_not_redone_when_more_are_added(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = corpus(tmp_path)
    assert run(fake, tmp_path, docs=docs) == 0
    asked = len(fake.requests)
    write_qa_document(docs, "more.md", [("Which header carries the API key?", "X-API-Key")])

    assert run(fake, tmp_path, docs=docs) == 0

    # A new batch is a new job, but three of its four documents' steps are cached.
    assert len(fake.requests) == asked + 4 + CHECK_CALLS
    assert len(_outputs(tmp_path)[0]) == 4


def test_generate_and_export_write_the_same_records(fake: FakeOpenAI, tmp_path: Path) -> None:
    from ragjury.cli import main

    script_happy_path(fake, {"relevance_critic": {FACTS["cli.md"][0][0]: 1}})
    assert run(fake, tmp_path) == 0
    db = str(tmp_path / "ragjury.db")
    code = main(
        [
            "export",
            "--db",
            db,
            "--out",
            str(tmp_path / "x-kept.jsonl"),
            "--rejected",
            str(tmp_path / "x-rejected.jsonl"),
        ]
    )
    assert code == 0
    assert read_jsonl(tmp_path / "x-kept.jsonl") == read_jsonl(tmp_path / "kept.jsonl")
    assert read_jsonl(tmp_path / "x-rejected.jsonl") == read_jsonl(tmp_path / "rejected.jsonl")


def test_status_json_counts_items_stages_and_tokens(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragjury.cli import main

    script_happy_path(fake)
    assert run(fake, tmp_path) == 0
    capsys.readouterr()

    assert main(["status", "--db", str(tmp_path / "ragjury.db"), "--json"]) == 0

    status = json.loads(capsys.readouterr().out)
    assert (status["queued"], status["processing"], status["done"], status["failed"]) == (
        0,
        0,
        3,
        0,
    )
    assert status["stages"]["generator"]["llm_calls"] == 3
    assert status["stages"]["generator"]["cached_steps"] == 3
    assert status["stages"]["relevance_critic"]["prompt_tokens"] == 3 * 50
    assert status["stages"]["answerability_critic"]["prompt_tokens"] == 3 * 60
    assert status["tokens"]["prompt"] == 3 * 100 + 9 * 50 + 3 * (60 + 40)
    assert status["throughput"]["items_done_last_minute"] == 3
    assert status["jobs"][0]["kind"] == "generate"


def test_status_of_a_missing_database_says_which_db_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragjury.cli import main

    assert main(["status", "--db", str(tmp_path / "nope.db")]) == 2
    err = capsys.readouterr().err
    assert "nope.db" in err
    assert "--db" in err


def test_prune_deletes_finished_jobs_and_gives_the_space_back(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragjury.cli import main

    script_happy_path(fake)
    assert run(fake, tmp_path) == 0
    db = tmp_path / "ragjury.db"
    assert main(["prune", "--db", str(db), "--older-than", "1d"]) == 0
    assert "deleted nothing" in capsys.readouterr().err  # nothing is a day old
    assert main(["prune", "--db", str(db), "--older-than", "0s"]) == 0
    err = capsys.readouterr().err
    assert "1 jobs" in err
    assert "3 items" in err
    assert main(["status", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == []
    assert main(["prune", "--db", str(db), "--older-than", "soon"]) == 2
    assert "--older-than 'soon'" in capsys.readouterr().err
