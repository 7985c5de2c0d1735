"""A sample's verdict cannot mistake a failed judgement for a pass, from Python and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragjury import EvaluationResult, Jury
from ragjury.cli import main
from ragjury.schemas import MetricResult, Sample, SampleScored

from conftest import make_settings, read_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, chat

TOKYO: dict[str, Any] = {
    "question": "What is the capital of Japan?",
    "answer": "Tokyo is the capital of Japan.",
    "contexts": ["Tokyo is the capital of Japan."],
    "reference": "Tokyo",
}


def script_failing_faithfulness(fake: FakeOpenAI) -> None:
    """Every judge answers well, except the verdict judge, whose output never parses."""
    script_judges(fake)
    fake.route("verdict_judge", lambda request: chat("not JSON at all"))


@pytest.mark.anyio
async def test_a_failed_metric_makes_the_verdict_false_never_a_pass(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_failing_faithfulness(fake)
    async with Jury(make_settings(fake, tmp_path, max_retries=0)) as jury:
        result = await jury.evaluate_one(**TOKYO)

    assert result["faithfulness"].outcome == "failed"
    assert result.correctness.passing is True
    assert result.passing is False
    assert result.reason.startswith("not judged: faithfulness failed")


@pytest.mark.anyio
async def test_a_failed_faithfulness_has_no_statements_and_says_why(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_failing_faithfulness(fake)
    async with Jury(make_settings(fake, tmp_path, max_retries=0)) as jury:
        result = await jury.evaluate_one(**TOKYO)

    assert result.faithfulness.statements == ()
    assert result.faithfulness.error is not None
    assert result.faithfulness.reason == result.faithfulness.error.message


@pytest.mark.anyio
async def test_statements_are_typed_when_faithfulness_scored(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    async with Jury(make_settings(fake, tmp_path)) as jury:
        result = await jury.evaluate_one(**TOKYO)

    [statement] = result.faithfulness.statements
    assert (statement.text, statement.supported) == ("Tokyo is the capital of Japan.", True)
    assert result.correctness.reasoning == "scripted: 5"
    assert result.passing is True


def test_feedback_names_failed_metrics_first_and_there_is_no_cross_metric_score() -> None:
    passed = MetricResult(outcome="scored", score=5, passing=True, reason="agrees")
    below = MetricResult(outcome="scored", score=0.5, passing=False, reason="1 of 2")
    result = EvaluationResult(
        sample=Sample(id="s", question="q"),
        metrics={"correctness": passed, "faithfulness": below},
    )

    assert result.feedback.splitlines() == [
        "faithfulness: did not pass, score 0.5 (1 of 2)",
        "correctness: passed, score 5 (agrees)",
    ]
    assert result.passing is False
    assert not hasattr(result, "score")


def test_a_metric_that_was_not_requested_is_a_key_error_that_says_how_to_ask() -> None:
    result = EvaluationResult(
        sample=Sample(id="s", question="q"),
        metrics={"keywords": MetricResult(outcome="scored", score=1, passing=True)},
    )

    with pytest.raises(KeyError, match=r"faithfulness was not requested.*metrics=\["):
        result.faithfulness  # noqa: B018 - the access is the test


def test_sample_scored_carries_the_verdict_through_json() -> None:
    scored = SampleScored(
        sample=Sample(id="s", question="q"),
        metrics={
            "correctness": MetricResult(outcome="scored", score=5, passing=True),
            "similarity": MetricResult.not_applicable("the sample has no reference answer"),
        },
    )
    data = json.loads(scored.model_dump_json())

    assert (data["passing"], data["reason"]) == (
        None,
        "not judged: similarity not_applicable (the sample has no reference answer)",
    )
    assert SampleScored.model_validate(data) == scored


def test_the_cli_record_has_the_same_verdict(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_failing_faithfulness(fake)
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"id": "tokyo", **TOKYO}) + "\n", encoding="utf-8")
    out = tmp_path / "results.jsonl"

    endpoint = ["--base-url", fake.base_url, "--api-key", "k", "--max-retries", "0"]
    code = main(
        ["evaluate", str(samples), "--out", str(out), "--db", str(tmp_path / "r.db"), *endpoint]
    )

    assert code == 0
    [record] = read_jsonl(out)
    assert record["metrics"]["correctness"]["passing"] is True
    assert record["passing"] is False
    assert record["reason"].startswith("not judged: faithfulness failed")
    assert (record["contexts"], record["reference"]) == (TOKYO["contexts"], "Tokyo")
