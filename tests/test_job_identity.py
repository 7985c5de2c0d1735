"""A job is what is judged and how: rerunning ``evaluate`` with any option that changes an
answer or a judgement starts a new job and says which option in one line; the same options
resume the job. Each option is run as a user runs it, against the scripted server."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragjury.config import Settings
from ragjury.store.cache import fingerprint, llm_fingerprint

from evalcli import EIFFEL, TOKYO, evaluate, rag_server, results, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

BASE = ["--metrics", "faithfulness,correctness,similarity,retrieval", "--max-retries", "0"]

# (flags of the rerun, the option the new-job line names)
CHANGES = [
    (["--model", "another-model"], "model"),
    (["--metrics", "faithfulness,correctness,retrieval"], "metrics"),
    (["--threshold", "faithfulness=0.9"], "thresholds"),
    (["--k", "1,2"], "k"),
    (["--verdict-batch", "1"], "verdict-batch"),
    (["--context-window-chars", "900"], "context-window-chars"),
    (["--embedding-model", "another-embedding"], "embedding model"),
    (["--repeats", "2"], "judge panel"),
    (["--max-retries", "1"], "model"),  # a re-ask changes what the model finally says
]


@pytest.mark.parametrize(("flags", "named"), CHANGES, ids=[c[0][0] for c in CHANGES])
def test_an_option_that_changes_the_judgements_starts_a_new_job_and_says_which(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    named: str,
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    assert evaluate(fake, tmp_path, samples, *BASE) == 0
    capsys.readouterr()

    assert evaluate(fake, tmp_path, samples, *BASE, *flags) == 0
    said = capsys.readouterr().err
    new = [line for line in said.splitlines() if line.startswith("ragjury: new job")]
    assert len(new) == 1  # one line says so
    assert f"had another {named}" in " ".join(said.split())
    assert "resuming" not in said

    assert evaluate(fake, tmp_path, samples, *BASE, *flags) == 0
    assert "resuming job" in capsys.readouterr().err  # the same options: the same job


@pytest.mark.parametrize(
    "flags",
    [
        ["--fail-under", "faithfulness=0.1"],
        ["--gate-on", "lower-bound"],
        ["--max-failed", "3"],
        ["--concurrency", "2"],
        ["--timeout", "30"],
    ],
    ids=lambda flags: flags[0],
)
def test_an_option_that_changes_no_judgement_resumes_the_job(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    assert evaluate(fake, tmp_path, samples, *BASE) == 0
    capsys.readouterr()

    assert evaluate(fake, tmp_path, samples, *BASE, *flags) == 0

    said = capsys.readouterr().err
    assert "resuming job" in said
    assert "new job" not in said


def test_k_is_no_part_of_a_job_that_judges_no_retrieval_figure(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    metrics = ["--metrics", "faithfulness,correctness", "--max-retries", "0"]
    assert evaluate(fake, tmp_path, samples, *metrics) == 0
    capsys.readouterr()

    assert evaluate(fake, tmp_path, samples, *metrics, "--k", "1,2") == 0
    said = capsys.readouterr().err
    assert "resuming job" in said  # --k cuts only the retrieval figures, none judged here
    assert "new job" not in said


def test_reading_another_reply_field_of_the_same_target_gets_new_answers(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(
        tmp_path / "s.jsonl", [{"id": "q1", "question": "What is the capital of Japan?"}]
    )
    reply = {
        "answer": "I am not sure.",
        "final": "Tokyo is the capital.",
        "contexts": ["Tokyo is the capital of Japan."],
    }
    with rag_server(reply) as url:
        assert evaluate(fake, tmp_path, samples, "--target", url) == 0
        assert results(tmp_path)["q1"]["answer"] == "I am not sure."
        capsys.readouterr()

        flags = ["--target", url, "--target-answer-field", "final"]
        assert evaluate(fake, tmp_path, samples, *flags) == 0

    assert results(tmp_path)["q1"]["answer"] == "Tokyo is the capital."
    said = " ".join(capsys.readouterr().err.split())
    assert "new job" in said
    assert "had another target" in said


def test_a_local_model_is_another_job_than_an_endpoint_or_another_file(tmp_path: Path) -> None:
    endpoint = Settings(api_key="k", model="m")
    bundled = Settings(model="m")  # nothing configured: the bundled local model
    mine = Settings(model="m", llm=f"local:{tmp_path / 'a.gguf'}")
    other = Settings(model="m", llm=f"local:{tmp_path / 'b.gguf'}")

    found = {llm_fingerprint(s) for s in (endpoint, bundled, mine, other)}

    assert len(found) == 4
    # an endpoint's fingerprint is what earlier versions stored, so its jobs resume
    assert llm_fingerprint(endpoint) == fingerprint(None, "m", "json", 0.0, False, 3)
