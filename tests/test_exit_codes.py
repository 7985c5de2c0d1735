"""The exit codes CI can trust, one case each (the README's table)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from evalcli import EIFFEL, TOKYO, evaluate, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, error

NO_CONTEXTS = {"id": "bare", "question": "Q?", "answer": "A."}


def run(fake: FakeOpenAI, tmp_path: Path, records: list[dict[str, Any]], *flags: str) -> int:
    script_judges(fake)
    path = write_jsonl(tmp_path / "samples.jsonl", [dict(r) for r in records])
    return evaluate(fake, tmp_path, path, *flags)


def test_0_when_everything_is_judged_and_passes(fake: FakeOpenAI, tmp_path: Path) -> None:
    assert run(fake, tmp_path, [TOKYO], "--metrics", "faithfulness") == 0


def test_1_when_some_input_lines_are_invalid_and_the_rest_pass(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])
    path.write_text(path.read_text() + "{not json\n")
    script_judges(fake)
    assert evaluate(fake, tmp_path, path, "--metrics", "faithfulness") == 1


def test_2_for_usage_errors_before_any_llm_call(fake: FakeOpenAI, tmp_path: Path) -> None:
    assert run(fake, tmp_path, [TOKYO], "--metrics", "faithfulnes") == 2
    # a gate on a metric not requested, and one off its metric's scale (1-5)
    assert (
        run(fake, tmp_path, [TOKYO], "--metrics", "keywords", "--fail-under", "correctness=4") == 2
    )
    gate = ("--fail-under", "answer_relevance=0.8")
    assert run(fake, tmp_path, [TOKYO], "--metrics", "answer_relevance", *gate) == 2
    assert fake.requests == []


def test_3_when_more_judgements_failed_than_allowed(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    fake.route("correctness_judge", error(400, "bad request"))  # permanent: fails at once
    path = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])
    code = evaluate(
        fake, tmp_path, path, "--metrics", "faithfulness,correctness", "--max-failed", "0"
    )
    assert code == 3


def test_4_when_every_judgement_failed_and_it_says_so(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fallback(error(503, "overloaded"))
    path = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])
    assert evaluate(fake, tmp_path, path, "--max-transport-retries", "0") == 4
    assert "nothing was judged: all" in capsys.readouterr().err


def test_4_when_the_endpoint_refuses_connections_and_it_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:  # a port of this machine that nothing listens on
        taken.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{taken.getsockname()[1]}/v1"
    path = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])
    args = ["--metrics", "faithfulness", "--base-url", closed, "--api-key", "k"]
    assert evaluate(None, tmp_path, path, *args, "--max-transport-retries", "0") == 4
    err = " ".join(capsys.readouterr().err.split())
    assert "ragjury: error: nothing was judged:" in err  # which: the endpoint, by its URL
    assert f"check that {closed} is up" in err


def test_the_first_of_4_3_5_is_the_code_when_several_apply(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", error(400, "bad request"))  # fails one metric at once
    path = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL])
    flags = ("--metrics", "faithfulness,correctness", "--fail-under", "faithfulness=0.9")
    assert evaluate(fake, tmp_path, path, *flags) == 5  # the failure is within --max-failed
    assert evaluate(fake, tmp_path, path, *flags, "--max-failed", "0", "--no-cache") == 3


def test_4_when_nothing_was_applicable_and_it_says_so(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(fake, tmp_path, [NO_CONTEXTS], "--metrics", "faithfulness") == 4
    assert "were not applicable" in capsys.readouterr().err


def test_5_when_a_gate_fails(fake: FakeOpenAI, tmp_path: Path) -> None:
    assert (
        run(
            fake,
            tmp_path,
            [EIFFEL],
            "--metrics",
            "faithfulness",
            "--fail-under",
            "faithfulness=0.9",
        )
        == 5
    )


def test_6_when_a_budget_stopped_the_run(fake: FakeOpenAI, tmp_path: Path) -> None:
    records = [{**TOKYO, "id": f"s{i}"} for i in range(40)]
    code = run(
        fake,
        tmp_path,
        records,
        "--metrics",
        "faithfulness",
        "--max-tokens",
        "1",
        "--concurrency",
        "1",
        "--items-in-flight",
        "1",
    )
    assert code == 6
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by_budget"] is True


def test_samples_without_an_answer_get_a_sentence_for_people_not_a_log_record(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(fake, tmp_path, [TOKYO, {"id": "open", "question": "Who?"}], "--metrics", "faithfulness")

    err = capsys.readouterr().err
    assert "1 sample(s) have no answer" in err
    assert "pass --target URL" in err
    assert "samples_without_answer" not in err  # no JSON log line for a person to read
