"""Where `ragjury evaluate` gets its samples: RAGAS, DeepEval and generated records, HTTP and
callable RAG targets, invalid records, and keyword-only runs with no endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragjury.cli import main

from conftest import read_summary
from evalcli import TOKYO, evaluate, rag_server, results, write_jsonl
from evalfakes import (
    script_judges,
)
from fakeopenai import FakeOpenAI


def test_ragas_deepeval_and_generate_records_are_read_without_mapping(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    ragas = {
        "user_input": "What is the capital of Japan?",
        "response": "Tokyo is the capital of Japan.",
        "retrieved_contexts": ["Tokyo is the capital of Japan."],
        "reference": "Tokyo",
    }
    deepeval = {
        "input": "Capital of Japan?",
        "actual_output": "Tokyo is the capital of Japan.",
        "retrieval_context": ["Tokyo is the capital of Japan."],
        "expected_output": "Tokyo",
    }
    samples = write_jsonl(tmp_path / "s.jsonl", [ragas, deepeval])

    assert evaluate(fake, tmp_path, samples) == 0

    out = list(results(tmp_path).values())
    assert [r["metrics"]["faithfulness"]["score"] for r in out] == [1.0, 1.0]
    assert [r["metrics"]["correctness"]["score"] for r in out] == [5, 5]


def test_generated_dataset_is_answered_by_an_http_target(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    generated = {
        "id": "g1",
        "question": "What is the capital of Japan?",
        "answer": "Tokyo",
        "context": "Tokyo is the capital of Japan.",
        "source": "jp.md",
        "chunk_id": "jp.md::0",
        "critiques": {},
        "outcome": "kept",
    }
    with rag_server(
        {"reply": "Tokyo is the capital of Japan.", "docs": ["Tokyo is the capital of Japan."]}
    ) as url:
        code = evaluate(
            fake,
            tmp_path,
            write_jsonl(tmp_path / "s.jsonl", [generated]),
            "--target",
            url,
            "--target-answer-field",
            "reply",
            "--target-contexts-field",
            "docs",
        )

    assert code == 0
    record = results(tmp_path)["g1"]
    assert record["answer"] == "Tokyo is the capital of Japan."
    assert record["metrics"]["correctness"]["score"] == 5  # graded against the generated answer
    assert read_summary(tmp_path)["answered_by_target"] == 1


def test_a_callable_target_answers_samples_without_an_answer(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_judges(fake)
    (tmp_path / "myrag.py").write_text(
        "async def ask(question):\n"
        "    return {'answer': 'Tokyo is the capital of Japan.',\n"
        "            'contexts': ['Tokyo is the capital of Japan.']}\n"
    )
    monkeypatch.chdir(tmp_path)  # a user runs ragjury beside their module
    samples = write_jsonl(tmp_path / "s.jsonl", [{"id": "q", "question": "Capital of Japan?"}])

    assert evaluate(fake, tmp_path, samples, "--target", "myrag:ask") == 0

    assert results(tmp_path)["q"]["metrics"]["faithfulness"]["score"] == 1.0


def test_an_invalid_record_is_reported_by_line_and_the_rest_are_scored(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps(TOKYO) + "\n{not json\n" + json.dumps({"answer": "x"}) + "\n")

    assert evaluate(fake, tmp_path, samples) == 1

    err = capsys.readouterr().err
    assert "s.jsonl:2:" in err
    assert "s.jsonl:3:" in err
    assert list(results(tmp_path)) == ["tokyo"]
    assert read_summary(tmp_path)["invalid_input"] == 2


def test_keyword_only_runs_need_no_llm_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGJURY_BASE_URL", "RAGJURY_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    sample = {
        "id": "k",
        "question": "q",
        "answer": "  Sorry, Paris.",
        "must_contain": ["paris"],
        "must_not_start_with": ["sorry"],
    }

    code = main(
        [
            "evaluate",
            str(write_jsonl(tmp_path / "s.jsonl", [sample])),
            "--out",
            str(tmp_path / "results.jsonl"),
            "--metrics",
            "keywords",
            "--db",
            str(tmp_path / "r.db"),
        ]
    )

    assert code == 0
    checks = results(tmp_path)["k"]["metrics"]["keywords"]["checks"]
    assert [c["passed"] for c in checks] == [True, False]


def test_another_target_is_another_job_with_new_answers_and_the_same_one_resumes(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(
        tmp_path / "s.jsonl",
        [{"id": "q1", "question": "What is the capital of Japan?", "reference": "Tokyo"}],
    )
    fields = ["--target-answer-field", "reply", "--target-contexts-field", "docs"]

    def answer_with(url: str | None) -> str | None:
        evaluate(fake, tmp_path, samples, *(["--target", url, *fields] if url else []))
        answer: str | None = results(tmp_path)["q1"]["answer"]
        return answer

    assert answer_with(None) is None  # warned to pass --target: nothing answered it
    capsys.readouterr()
    tokyo = {"reply": "Tokyo is the capital.", "docs": ["Tokyo is the capital of Japan."]}
    kyoto = {"reply": "Kyoto was the capital.", "docs": ["Kyoto was the capital until 1869."]}
    with rag_server(tokyo) as first, rag_server(kyoto) as second:
        assert answer_with(first) == "Tokyo is the capital."
        said = capsys.readouterr().err
        assert "new job" in said
        assert "had another target" in said
        assert "resuming" not in said

        assert answer_with(first) == "Tokyo is the capital."
        assert "resuming job" in capsys.readouterr().err  # the same target: the same job

        assert answer_with(second) == "Kyoto was the capital."
        assert "had another target" in capsys.readouterr().err
