"""`ragjury evaluate` against a real HTTP server and SQLite file: faithfulness and
correctness, re-asks, outages and long contexts."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ragjury.agents.verdict_judge import context_windows

from conftest import read_summary
from evalcli import EIFFEL, REFUSAL, TOKYO, evaluate, results, write_jsonl
from evalfakes import (
    passages_of,
    script_judges,
    statements_of,
    verdict_reply,
)
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json, error


def test_default_metrics_score_faithfulness_correctness_and_keywords(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO, REFUSAL])

    assert evaluate(fake, tmp_path, samples) == 0

    out = results(tmp_path)
    assert list(out) == ["eiffel", "tokyo", "refusal"]  # input order
    eiffel = out["eiffel"]["metrics"]
    assert set(eiffel) == {"faithfulness", "correctness", "keywords"}
    faith = eiffel["faithfulness"]
    assert (faith["outcome"], faith["score"], faith["passing"]) == ("scored", 0.5, False)
    assert [s["supported"] for s in faith["statements"]] == [True, False]
    assert faith["statements"][0]["evidence"] == "The Eiffel Tower is in Paris"
    assert faith["statements"][1]["reason"] == "not in the passages"
    assert eiffel["correctness"]["score"] == 5
    assert eiffel["correctness"]["reasoning"] == "scripted: 5"
    assert eiffel["keywords"]["checks"] == [
        {"type": "must_contain", "keyword": "Paris", "passed": True},
        {"type": "must_not_contain", "keyword": "cheese", "passed": False},
    ]
    assert out["tokyo"]["metrics"]["keywords"]["outcome"] == "not_applicable"

    s = read_summary(tmp_path)
    assert s["samples"] == 3
    assert s["invalid_input"] == 0
    assert s["llm_calls"] == len(fake.requests)
    assert s["metrics"]["faithfulness"] == {
        "mean": 0.75,
        "mean_interval": [0.5, 1.0],
        "median": 0.75,
        "pass_rate": 0.5,
        "pass_rate_interval": [0.0, 1.0],
        "scored": 2,
        "not_applicable": 1,
        "failed": 0,
        "llm_calls": 5,
    }
    assert s["metrics"]["correctness"]["pass_rate"] == pytest.approx(2 / 3, abs=1e-3)
    assert s["metrics"]["keywords"]["failure_rates"]["must_not_contain"]["failure_rate"] == 1.0
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        stored = [row[0] for row in db.execute("SELECT id FROM samples ORDER BY position")]
    assert stored == ["eiffel", "tokyo", "refusal"]


def test_a_metric_lost_to_an_endpoint_outage_is_judged_again_by_the_same_command(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", error(500, "upstream down"))
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    assert evaluate(fake, tmp_path, samples, "--max-transport-retries", "0") == 0
    first = results(tmp_path)["tokyo"]["metrics"]["correctness"]
    assert first["outcome"] == "failed"
    assert first["error"]["transient"] is True
    splits = len(fake.requests_for("statement_splitter"))

    script_judges(fake)  # the endpoint is back
    assert evaluate(fake, tmp_path, samples) == 0

    out = results(tmp_path)
    assert [out[s]["metrics"]["correctness"]["outcome"] for s in out] == ["scored", "scored"]
    assert len(fake.requests_for("statement_splitter")) == splits  # faithfulness was cached
    assert read_summary(tmp_path)["metrics"]["correctness"]["failed"] == 0


def test_a_refusal_is_not_applicable_with_the_reason(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [REFUSAL])) == 0

    faith = results(tmp_path)["refusal"]["metrics"]["faithfulness"]
    assert faith["outcome"] == "not_applicable"
    assert faith["score"] is None
    assert "no factual statement" in faith["reason"]
    assert fake.requests_for("verdict_judge") == []


def test_faithfulness_costs_one_split_plus_one_call_per_batch(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    facts = [f"Setting number {n} defaults to {n * 7}." for n in range(10)]
    long = {
        "id": "long",
        "question": "Defaults?",
        "answer": " ".join(facts),
        "contexts": [" ".join(facts)],
    }

    code = evaluate(
        fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [long]), "--verdict-batch", "4"
    )

    assert code == 0
    faith = results(tmp_path)["long"]["metrics"]["faithfulness"]
    assert faith["score"] == 1.0
    assert len(fake.requests_for("statement_splitter")) == 1
    assert [len(statements_of(r)) for r in fake.requests_for("verdict_judge")] == [4, 4, 2]
    assert faith["llm_calls"] == 1 + 3


def test_a_verdict_batch_with_a_missing_verdict_is_reasked(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    calls = 0

    def short_then_full(request: RecordedRequest) -> Reply:
        nonlocal calls
        calls += 1
        full = verdict_reply(request)
        if calls == 1:
            body = json.loads(full.body["choices"][0]["message"]["content"])  # type: ignore[index]  # chat body
            return chat_json({"verdicts": body["verdicts"][:1]})
        return full

    fake.route("verdict_judge", short_then_full)

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [EIFFEL])) == 0

    reask = fake.requests_for("verdict_judge")[1].text()
    assert "one verdict for each statement 0..1" in reask
    assert results(tmp_path)["eiffel"]["metrics"]["faithfulness"]["score"] == 0.5


def test_an_invented_quote_is_reasked(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    invented = {
        "statement_index": 0,
        "reason": "r",
        "evidence": "Tokyo has 40 million people",
        "supported": True,
    }
    fake.route("verdict_judge", chat_json({"verdicts": [invented]}), verdict_reply)

    assert evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [TOKYO])) == 0

    assert "does not occur in the contexts" in fake.requests_for("verdict_judge")[1].text()
    faith = results(tmp_path)["tokyo"]["metrics"]["faithfulness"]
    assert faith["statements"][0]["evidence"] == "Tokyo is the capital of Japan"


def test_a_judge_that_never_validates_fails_only_its_metric(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", chat_json({"reasoning": "fine", "score": 9}))

    code = evaluate(
        fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", [TOKYO]), "--max-retries", "1"
    )

    assert code == 0
    metrics = results(tmp_path)["tokyo"]["metrics"]
    assert metrics["faithfulness"]["outcome"] == "scored"
    failed = metrics["correctness"]
    assert failed["outcome"] == "failed"
    assert failed["score"] is None
    assert failed["error"]["stage"] == "correctness_judge"
    assert failed["error"]["attempts"] == 2
    assert '"score": 9' in failed["error"]["last_raw_output"]
    assert read_summary(tmp_path)["metrics"]["correctness"]["mean"] is None


def test_long_contexts_are_judged_in_windows_and_any_window_supports(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    filler = "Unrelated words fill this passage. " * 40
    sample = {
        "id": "w",
        "question": "q",
        "answer": "The port is 8000. The host is local.",
        "contexts": [filler + "The port is 8000.", filler + "The host is local."],
    }

    code = evaluate(
        fake,
        tmp_path,
        write_jsonl(tmp_path / "s.jsonl", [sample]),
        "--context-window-chars",
        "1500",
    )

    assert code == 0
    windows = [passages_of(r) for r in fake.requests_for("verdict_judge")]
    assert len(windows) == 2
    assert all(len(w) < 1700 for w in windows)
    # the second window only re-judges what the first did not support
    assert len(statements_of(fake.requests_for("verdict_judge")[1])) == 1
    assert results(tmp_path)["w"]["metrics"]["faithfulness"]["score"] == 1.0


def test_context_windows_never_exceed_the_budget() -> None:
    windows = context_windows(["a" * 2500, "b" * 300, "c" * 300], budget=1000)
    assert all(sum(len(p) for p in w) <= 1000 for w in windows)
    assert windows[0][0] == "a" * 1000  # a long context is cut to the budget
    pieces = [piece for window in windows for piece in window]
    assert "b" * 300 in pieces  # short contexts stay whole
    assert "c" * 300 in pieces
    assert sum(piece.count("a") for piece in pieces) > 2500  # the cuts overlap
