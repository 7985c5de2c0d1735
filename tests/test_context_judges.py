"""The LLM-judged retrieval metrics against the scripted server: context_relevance,
context_precision, context_recall and answer_relevance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ragjury.commands._display import evaluation_table, retrieval_table

from conftest import read_jsonl, read_summary
from evalcli import evaluate, write_jsonl
from evalfakes import context_relevance_reply, numbered_contexts, script_judges, statements_of
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json

CONTEXTS = [
    {"id": "d1", "text": "Bananas grow in warm climates."},
    {"id": "d2", "text": "Paris is the capital of France."},
    {"id": "d3", "text": "France is a country whose capital is Paris, on the Seine."},
]
PARIS: dict[str, Any] = {
    "id": "paris",
    "question": "What is the capital of France?",
    "answer": "Paris is the capital of France.",
    "contexts": CONTEXTS,
    "reference": "Paris",
}


def judged(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r["metrics"] for r in read_jsonl(tmp_path / "results.jsonl")}


def run(fake: FakeOpenAI, tmp_path: Path, records: list[dict[str, Any]], *extra: str) -> int:
    """``ragjury evaluate`` on ``records`` against the scripted server."""
    return evaluate(fake, tmp_path, write_jsonl(tmp_path / "s.jsonl", records), *extra)


def test_context_relevance_judges_every_context_of_a_sample_in_one_call(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    assert run(fake, tmp_path, [PARIS], "--metrics", "context_relevance") == 0

    relevance = judged(tmp_path)["paris"]["context_relevance"]
    assert len(fake.requests_for("context_relevance_judge")) == 1
    assert relevance["llm_calls"] == 1
    assert relevance["score"] == pytest.approx(2 / 3)
    assert relevance["passing"] is True
    assert relevance["contexts"] == [
        {"index": 0, "id": "d1", "relevant": False, "reason": "off topic"},
        {"index": 1, "id": "d2", "relevant": True, "reason": "shares the question's words"},
        {"index": 2, "id": "d3", "relevant": True, "reason": "shares the question's words"},
    ]


def test_context_precision_is_average_precision_over_the_ranking(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    assert run(fake, tmp_path, [PARIS], "--metrics", "context_precision") == 0

    precision = judged(tmp_path)["paris"]["context_precision"]
    assert len(fake.requests_for("context_precision_judge")) == 1
    assert (
        "Answer known to be right:\nParis" in fake.requests_for("context_precision_judge")[0].text()
    )
    assert precision["against"] == "reference"
    assert [c["relevant"] for c in precision["contexts"]] == [False, True, True]
    # useful contexts at ranks 2 and 3: (1/2 + 2/3) / 2
    assert precision["score"] == pytest.approx((1 / 2 + 2 / 3) / 2)


def test_context_precision_is_judged_against_the_answer_without_a_reference(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    sample = {**PARIS, "reference": None, "answer": "The capital of France is Paris"}

    assert run(fake, tmp_path, [sample], "--metrics", "context_precision") == 0

    precision = judged(tmp_path)["paris"]["context_precision"]
    assert precision["against"] == "answer"
    assert "Answer given:" in fake.requests_for("context_precision_judge")[0].text()


def test_a_context_verdict_batch_with_a_missing_verdict_is_reasked(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    calls = 0

    def short_then_full(request: RecordedRequest) -> Reply:
        nonlocal calls
        calls += 1
        full = context_relevance_reply(request)
        if calls == 1:
            body = json.loads(full.body["choices"][0]["message"]["content"])  # type: ignore[index]  # chat body
            return chat_json({"verdicts": body["verdicts"][:2]})
        return full

    fake.route("context_relevance_judge", short_then_full)

    assert run(fake, tmp_path, [PARIS], "--metrics", "context_relevance") == 0

    reask = fake.requests_for("context_relevance_judge")[1].text()
    assert "one verdict for each context 0..2; got verdicts for contexts [0, 1]" in reask
    relevance = judged(tmp_path)["paris"]["context_relevance"]
    assert relevance["score"] == pytest.approx(2 / 3)
    assert relevance["llm_calls"] == 2


def test_contexts_longer_than_the_window_are_judged_in_groups_keeping_their_indexes(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    filler = " Unrelated words." * 20
    sample = {
        **PARIS,
        "contexts": [c["text"] + filler for c in CONTEXTS],
    }

    code = run(
        fake, tmp_path, [sample], "--metrics", "context_relevance", "--context-window-chars", "800"
    )

    assert code == 0
    groups = [numbered_contexts(r) for r in fake.requests_for("context_relevance_judge")]
    assert [len(g) for g in groups] == [2, 1]
    relevance = judged(tmp_path)["paris"]["context_relevance"]
    assert [c["relevant"] for c in relevance["contexts"]] == [False, True, True]
    assert [c["id"] for c in relevance["contexts"]] == [None, None, None]


def test_context_recall_splits_the_reference_and_judges_it_against_the_contexts(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    sample = {
        **PARIS,
        "reference": "Paris is the capital of France. Paris has forty bridges.",
    }

    assert run(fake, tmp_path, [sample], "--metrics", "context_recall") == 0

    recall = judged(tmp_path)["paris"]["context_recall"]
    [split] = fake.requests_for("statement_splitter")
    assert "Paris has forty bridges." in split.text()
    assert len(fake.requests_for("verdict_judge")) == 1
    assert recall["score"] == 0.5
    assert recall["passing"] is False
    assert [s["supported"] for s in recall["statements"]] == [True, False]
    assert recall["statements"][1] == {
        "text": "Paris has forty bridges.",
        "supported": False,
        "reason": "not in the passages",
        "evidence": None,
        "confidence": None,
    }
    assert "statements of the reference answer" in recall["reason"]
    assert recall["llm_calls"] == 2


def test_faithfulness_and_context_recall_split_the_answer_and_the_reference_once_each(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    assert run(fake, tmp_path, [PARIS], "--metrics", "faithfulness,context_recall") == 0

    splits = fake.requests_for("statement_splitter")
    assert len(splits) == 2
    assert {statements_of(r)[0] for r in fake.requests_for("verdict_judge")} == {
        "Paris is the capital of France.",
        "Paris.",
    }
    metrics = judged(tmp_path)["paris"]
    assert metrics["faithfulness"]["score"] == 1.0
    assert metrics["context_recall"]["score"] == 1.0


def test_answer_relevance_scores_a_refusal_as_not_answering(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    refusal = {**PARIS, "id": "refusal", "answer": "I don't know."}

    assert run(fake, tmp_path, [PARIS, refusal], "--metrics", "answer_relevance") == 0

    out = judged(tmp_path)
    assert out["paris"]["answer_relevance"]["score"] == 5
    assert out["paris"]["answer_relevance"]["passing"] is True
    declined = out["refusal"]["answer_relevance"]
    assert (declined["outcome"], declined["score"], declined["passing"]) == ("scored", 1, False)
    assert declined["refusal"] is True


def test_a_refusal_graded_above_one_is_reasked(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    lenient = chat_json({"reasoning": "polite", "refusal": True, "score": 3})
    fake.route(
        "answer_relevance_judge",
        lenient,
        chat_json({"reasoning": "declines", "refusal": True, "score": 1}),
    )
    refusal = {**PARIS, "answer": "I cannot help with that."}

    assert run(fake, tmp_path, [refusal], "--metrics", "answer_relevance") == 0

    reask = fake.requests_for("answer_relevance_judge")[1].text()
    assert "a refusal does not address the question, so score it 1" in reask
    assert judged(tmp_path)["paris"]["answer_relevance"]["score"] == 1


def test_the_new_metrics_are_not_applicable_without_what_they_judge(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    nothing = {"id": "nothing", "question": "What is the capital of France?", "answer": ""}
    no_reference = {**PARIS, "id": "no-reference", "reference": None}
    metrics = "context_relevance,context_precision,context_recall,answer_relevance"

    assert run(fake, tmp_path, [nothing, no_reference], "--metrics", metrics) == 0

    out = judged(tmp_path)
    assert {m["outcome"] for m in out["nothing"].values()} == {"not_applicable"}
    assert out["nothing"]["context_relevance"]["reason"] == "no contexts were retrieved to judge"
    assert out["nothing"]["answer_relevance"]["reason"] == "the sample has no answer to grade"
    recall = out["no-reference"]["context_recall"]
    assert (recall["outcome"], recall["reason"]) == (
        "not_applicable",
        "the sample has no reference answer",
    )
    assert out["no-reference"]["context_relevance"]["outcome"] == "scored"


def test_context_recall_with_nothing_retrieved_is_zero_without_a_call(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    sample = {**PARIS, "contexts": []}

    assert run(fake, tmp_path, [sample], "--metrics", "context_recall") == 0

    recall = judged(tmp_path)["paris"]["context_recall"]
    assert (recall["outcome"], recall["score"], recall["llm_calls"]) == ("scored", 0.0, 0)
    assert fake.requests == []


def test_a_context_judge_that_never_validates_fails_only_its_metric(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("context_relevance_judge", chat_json({"verdicts": []}))

    code = run(fake, tmp_path, [PARIS], "--metrics", "rag_triad", "--max-retries", "1")

    assert code == 0
    metrics = judged(tmp_path)["paris"]
    assert set(metrics) == {"context_relevance", "faithfulness", "answer_relevance"}
    failed = metrics["context_relevance"]
    assert (failed["outcome"], failed["score"]) == ("failed", None)
    assert failed["error"]["stage"] == "context_relevance_judge"
    assert failed["error"]["attempts"] == 2
    assert metrics["faithfulness"]["outcome"] == "scored"
    assert metrics["answer_relevance"]["outcome"] == "scored"
    figures = read_summary(tmp_path)["metrics"]["context_relevance"]
    assert (figures["mean"], figures["failed"]) == (None, 1)


def test_the_summary_and_the_terminal_tables_show_the_new_metrics(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    sample = {**PARIS, "reference_context_ids": ["d2"]}
    metrics = "retrieval,context_relevance,context_precision,context_recall,answer_relevance"

    assert run(fake, tmp_path, [sample], "--metrics", metrics) == 0

    summary = read_summary(tmp_path)
    for name in metrics.split(","):
        assert {"mean", "median", "pass_rate"} <= summary["metrics"][name].keys()
    assert summary["metrics"]["retrieval"]["at_k"]["1"] == {
        "hit_rate": 0.0,
        "mrr": 0.0,
        "recall": 0.0,
        "precision": 0.0,
        "ndcg": 0.0,
    }
    assert summary["metrics"]["retrieval"]["at_k"]["3"]["mrr"] == 0.5
    console = Console(record=True, width=150)
    console.print(evaluation_table({**summary, "cost_usd": 0.0, "rate_limit": _LIMIT}))
    at_k = retrieval_table(summary)
    assert at_k is not None
    console.print(at_k)
    shown = console.export_text()
    assert "context_relevance" in shown
    assert "answer_relevance" in shown
    assert "retrieval at k" in shown
    assert "0.500" in shown


_LIMIT = {"limit": 4, "concurrency": 4, "throttled": 0, "lowest_limit": 4}


def test_a_model_that_numbers_passages_from_1_is_understood(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    def from_one(request: RecordedRequest) -> Reply:
        body = context_relevance_reply(request).body
        assert isinstance(body, dict)
        reply = json.loads(body["choices"][0]["message"]["content"])
        for verdict in reply["verdicts"]:
            verdict["context_index"] += 1  # "(1) ... (2) ... (3)", as most models count
        return chat_json(reply)

    script_judges(fake)
    fake.route("context_relevance_judge", from_one)

    assert run(fake, tmp_path, [PARIS], "--metrics", "context_relevance") == 0

    assert len(fake.requests_for("context_relevance_judge")) == 1  # no re-ask
    relevance = judged(tmp_path)["paris"]["context_relevance"]
    assert [c["relevant"] for c in relevance["contexts"]] == [False, True, True]
