"""``--reference-answers``: a reference writer answers each kept pair (and only those) from its
context(s); the record carries it in JSONL, CSV and Parquet beside the short answer; a pair
whose reference cannot be written ends failed at that stage; ``ragjury evaluate`` grades
against it. Real CLI, real HTTP fake, real SQLite."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_personas import generate

from ragjury.evaluation.inputs import load_samples

from conftest import (
    CRITIC_AGENTS,
    critic_reply,
    generator_reply,
    read_jsonl,
    read_summary,
    script_answer_check,
    write_qa_document,
)
from evalcli import evaluate
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json, error

_ASKED = re.compile(r"^Question: (.+)$", re.MULTILINE)
_SHORT = re.compile(r"^Short answer already drafted: (.+)$", re.MULTILINE)


def reference_reply(request: RecordedRequest) -> Reply:
    """A complete answer that repeats the question and the short answer."""
    text = request.text()
    question = _ASKED.search(text).group(1)  # type: ignore[union-attr]  # our prompt has it
    short = _SHORT.search(text).group(1)  # type: ignore[union-attr]  # our prompt has it
    answer = f"In full: the answer to '{question}' is {short}, as the documentation sets it."
    return chat_json({"answer": answer}, prompt_tokens=120, completion_tokens=40)


def script(fake: FakeOpenAI, rejected: str) -> None:
    """The generator from the Q:/A: lines; ``rejected`` rated 2 by the relevance critic."""
    fake.route("generator", generator_reply)
    for agent in CRITIC_AGENTS:
        ratings = {rejected: 2} if agent == "relevance_critic" else None
        fake.route(agent, critic_reply(ratings))
    script_answer_check(fake)
    fake.route("reference_writer", reference_reply)


def write_docs(folder: Path) -> Path:
    write_qa_document(folder, "limits.md", [("What is the upload limit?", "10 MB")])
    write_qa_document(folder, "auth.md", [("Which header carries the token?", "Authorization")])
    write_qa_document(folder, "trivia.md", [("Who drew the logo?", "A volunteer")])
    return folder


def test_kept_pairs_and_only_they_get_a_complete_reference_answer(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake, rejected="Who drew the logo?")
    docs = write_docs(tmp_path / "docs")

    code = generate(
        fake,
        tmp_path,
        docs,
        "--reference-answers",
        "--rejected",
        str(tmp_path / "rejected.jsonl"),
    )

    assert code == 0
    kept = {r["question"]: r for r in read_jsonl(tmp_path / "kept.jsonl")}
    assert set(kept) == {"What is the upload limit?", "Which header carries the token?"}
    upload = kept["What is the upload limit?"]
    assert upload["answer"] == "10 MB"  # the short answer stays
    assert upload["reference_answer"] == (
        "In full: the answer to 'What is the upload limit?' is 10 MB, as the documentation sets it."
    )
    [rejected] = read_jsonl(tmp_path / "rejected.jsonl")
    assert rejected["outcome"] == "rejected"
    assert "reference_answer" not in rejected
    asked = fake.requests_for("reference_writer")
    assert sorted(_ASKED.search(r.text()).group(1) for r in asked) == sorted(kept)  # type: ignore[union-attr]
    limits = (docs / "limits.md").read_text(encoding="utf-8").strip()
    [upload_request] = [r for r in asked if "upload" in r.text()]
    assert limits in upload_request.text()  # answered from its context
    summary = read_summary(tmp_path)
    assert summary["by_stage"]["reference_writer"]["llm_calls"] == 2
    assert summary["kept"] == 2


def test_a_reference_that_never_validates_fails_its_pair_with_the_stage(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake, rejected="Who drew the logo?")
    short = chat_json({"answer": "10"})  # shorter than the short answer, every time
    fake.route("reference_writer", *([short] * 10))
    folder = tmp_path / "docs"
    write_qa_document(folder, "limits.md", [("What is the upload limit?", "10 MB")])

    code = generate(
        fake, tmp_path, folder, "--reference-answers", "--rejected", str(tmp_path / "r.jsonl")
    )

    assert code == 4  # nothing kept: the one pair failed
    assert read_jsonl(tmp_path / "kept.jsonl") == []
    [failed] = read_jsonl(tmp_path / "r.jsonl")
    assert failed["outcome"] == "failed"
    assert failed["error"]["stage"] == "reference_writer"
    kept_by = {"groundedness", "relevance", "standalone", "answerability"}
    assert set(failed["critiques"]) == kept_by  # its critiques are kept
    assert "shorter than the short answer" in fake.requests_for("reference_writer")[1].text()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_the_reference_answer_is_a_column_of_csv_and_parquet_and_evaluate_reads_it(
    fake: FakeOpenAI, tmp_path: Path, suffix: str
) -> None:
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    script(fake, rejected="Who drew the logo?")
    docs = write_docs(tmp_path / "docs")
    out = tmp_path / f"kept{suffix}"

    code = generate(fake, tmp_path, docs, "--reference-answers", "--out", str(out))

    assert code == 0
    samples = {s.question: s for s in load_samples(out)}
    assert samples["Which header carries the token?"].reference == (
        "In full: the answer to 'Which header carries the token?' is Authorization, as the "
        "documentation sets it."
    )


def test_evaluate_grades_against_the_reference_answer_of_a_generated_set(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake, rejected="Who drew the logo?")
    docs = write_docs(tmp_path / "docs")
    assert generate(fake, tmp_path, docs, "--reference-answers") == 0
    kept = read_jsonl(tmp_path / "kept.jsonl")
    fake.route(
        "correctness_judge",
        *[chat_json({"reasoning": "agrees", "score": 5}) for _ in kept],
    )
    run = tmp_path / "eval"
    run.mkdir()

    code = evaluate(
        fake,
        run,
        tmp_path / "kept.jsonl",
        "--target",
        "eval_targets:sync_answer",
        "--metrics",
        "correctness",
        "--model",
        "fake-model",
    )

    assert code == 0
    graded = fake.requests_for("correctness_judge")
    assert len(graded) == len(kept)
    for record in kept:
        [request] = [r for r in graded if record["question"] in r.text()]
        assert record["reference_answer"] in request.text()


def test_without_the_flag_no_reference_is_written(fake: FakeOpenAI, tmp_path: Path) -> None:
    script(fake, rejected="Who drew the logo?")
    docs = write_docs(tmp_path / "docs")

    assert generate(fake, tmp_path, docs) == 0

    assert fake.requests_for("reference_writer") == []
    assert all("reference_answer" not in r for r in read_jsonl(tmp_path / "kept.jsonl"))
    assert json.loads((tmp_path / "summary.json").read_text())["kept"] == 2


def test_a_run_whose_references_the_endpoint_failed_resumes_asking_only_for_them(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake, rejected="Who drew the logo?")
    fake.route("reference_writer", error(503, "overloaded"))  # the endpoint fails them all
    docs = write_docs(tmp_path / "docs")
    flags = ("--reference-answers", "--rejected", str(tmp_path / "rejected.jsonl"))

    generate(fake, tmp_path, docs, *flags, "--max-transport-retries", "0")

    assert read_jsonl(tmp_path / "kept.jsonl") == []
    failed = [r for r in read_jsonl(tmp_path / "rejected.jsonl") if r["outcome"] == "failed"]
    assert [r["error"]["stage"] for r in failed] == ["reference_writer"] * 2
    assert all(r["error"]["transient"] for r in failed)
    drafted = len(fake.requests_for("generator"))
    critiqued = sum(len(fake.requests_for(agent)) for agent in CRITIC_AGENTS)

    fake.route("reference_writer", reference_reply)  # back up: the same command resumes
    assert generate(fake, tmp_path, docs, *flags) == 0

    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert len(kept) == 2
    assert all(r["reference_answer"].startswith("In full:") for r in kept)
    assert len(fake.requests_for("generator")) == drafted  # from the step cache
    assert sum(len(fake.requests_for(agent)) for agent in CRITIC_AGENTS) == critiqued
