"""Budgets (--max-tokens, --max-cost) and --dry-run estimates, through the real CLI against
the scripted server and a real SQLite file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_generate import corpus

from ragjury import Jury
from ragjury.cli import main
from ragjury.commands._run import EXIT_BUDGET
from ragjury.errors import RagjuryError
from ragjury.schemas import Sample

from conftest import (
    make_settings,
    read_jsonl,
    read_summary,
    script_happy_path,
)
from costcli import db_rows, generate
from evalcli import evaluate
from evalfakes import script_judges
from fakeopenai import FakeOpenAI


def many_documents(tmp_path: Path, count: int) -> dict[str, list[tuple[str, str]]]:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    facts = {
        f"doc{i:03d}.md": [
            (f"Which {words[i % 8]} {words[(i // 8) % 8]} value has item {i}?", str(i))
        ]
        for i in range(count)
    }
    corpus(tmp_path, facts)
    return facts


def test_max_tokens_stops_intake_finishes_in_flight_work_and_says_so(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many_documents(tmp_path, 120)
    script_happy_path(fake)  # a generator call costs 130 tokens, a critique 62

    code = generate(fake, tmp_path, "--max-tokens", "1000", "--concurrency", "2")

    assert code == EXIT_BUDGET == 6
    err = capsys.readouterr().err
    assert "budget reached: --max-tokens 1000 reached" in err
    assert "Stopped taking new documents after" in err
    s = read_summary(tmp_path)
    assert s["stopped_by_budget"] is True
    assert s["budget"]["exhausted"] is True
    assert s["prompt_tokens"] + s["completion_tokens"] >= 1000
    submitted = s["documents"] - s["documents_not_submitted"]
    assert 0 < submitted < 120  # intake stopped
    # everything taken in was finished: every chunk drafted, every drafted pair judged
    assert s["chunks"] == submitted
    assert s["chunks_failed"] == 0
    assert s["kept"] + s["rejected"] + s["failed"] + s["duplicates_dropped"] == s["pairs_drafted"]
    assert s["pairs_drafted"] == submitted
    assert len(read_jsonl(tmp_path / "kept.jsonl")) == s["kept"]
    assert db_rows(tmp_path, "SELECT COUNT(*) FROM pairs") == [(s["kept"] + s["rejected"],)]
    assert len(fake.requests_for("generator")) == submitted


def test_a_budget_reached_after_all_work_was_taken_is_a_note_not_a_stop(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many_documents(tmp_path, 3)  # fewer than the 4 a daemon takes at --concurrency 2
    script_happy_path(fake)

    code = generate(fake, tmp_path, "--max-tokens", "100", "--concurrency", "2")

    assert code == 0  # everything was done: nothing stays queued
    err = " ".join(capsys.readouterr().err.split())
    assert "note: budget reached (--max-tokens 100 reached" in err
    assert "after every document had been taken" in err
    assert "Up to 4 documents are worked at once; lower --items-in-flight" in err
    s = read_summary(tmp_path)
    assert s["stopped_by_budget"] is False
    assert s["budget"]["exhausted"] is True
    assert s["kept"] == 3


def test_max_tokens_stops_an_evaluation_and_writes_what_finished(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)  # a split costs 80 tokens, a verdict batch 160
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"s{i}",
                    "question": "Capital?",
                    "answer": "Tokyo is the capital of Japan.",
                    "contexts": ["Tokyo is the capital of Japan."],
                }
            )
            + "\n"
            for i in range(200)
        )
    )

    code = evaluate(fake, tmp_path, samples, "--max-tokens", "2000", "--concurrency", "2")

    assert code == EXIT_BUDGET == 6
    assert "Stopped taking new samples after" in capsys.readouterr().err
    s = read_summary(tmp_path)
    assert 0 < s["samples_not_submitted"] < 200
    assert s["samples"] == 200 - s["samples_not_submitted"]
    written = read_jsonl(tmp_path / "results.jsonl")
    assert [r["id"] for r in written] == [f"s{i}" for i in range(s["samples"])]
    assert all(r["metrics"]["faithfulness"]["outcome"] == "scored" for r in written)

    # the same command without the budget resumes the job: its figures are the job's
    # samples, its LLM use this run's, with the job's totals over both runs beside them
    first = s
    markdown = tmp_path / "summary.md"
    assert evaluate(fake, tmp_path, samples, "--markdown", str(markdown)) == 0
    second = read_summary(tmp_path)
    assert second["resumed"] is True
    assert second["samples"] == 200
    assert second["items_done_now"] == first["samples_not_submitted"]
    totals = second["job_totals"]
    assert totals["runs"] == 2
    for key in ("llm_calls", "prompt_tokens", "completion_tokens"):
        assert totals[key] == first[key] + second[key]
        assert second[key] < totals[key]
    err = capsys.readouterr().err
    assert (
        f"resumed job {second['job']}: this run judged {second['items_done_now']} sample(s)" in err
    )
    assert f"the job over 2 runs: 200 samples, {totals['llm_calls']} LLM calls" in err
    assert "the job over 2 runs" in markdown.read_text(encoding="utf-8")


# -- dry run ----------------------------------------------------------------------------------


def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGJURY_BASE_URL", "RAGJURY_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_generate_dry_run_needs_no_endpoint_and_is_within_20_percent_of_a_real_run(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = {
        f"doc{i}.md": [
            (f"Which {w} option sets part {i}?", f"{w}-{i}"),
            (f"What does the {w} flag print in section {i}?", f"{w} output {i}"),
        ]
        for i, w in enumerate(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"])
    }
    corpus(tmp_path, facts)
    no_endpoint(monkeypatch)
    args = [
        "generate",
        str(tmp_path / "docs"),
        "--out",
        str(tmp_path / "dry.jsonl"),
        "--summary",
        str(tmp_path / "estimate.json"),
        "--whole-documents",
        "--questions-per-chunk",
        "2",
    ]

    assert main([*args, "--dry-run"]) == 0

    estimate = json.loads((tmp_path / "estimate.json").read_text())
    assert not (tmp_path / "dry.jsonl").exists()
    assert fake.requests == []
    assert estimate["dry_run"] is True
    assert estimate["cost_usd"] is not None  # gpt-4o-mini, the default, has a price
    script_happy_path(fake)
    assert generate(fake, tmp_path, "--questions-per-chunk", "2") == 0
    real = read_summary(tmp_path)
    assert real["kept"] == 12
    assert math.isclose(estimate["llm_calls"], real["llm_calls"], rel_tol=0.2)
    for stage, figures in real["by_stage"].items():
        assert math.isclose(
            estimate["by_stage"][stage]["llm_calls"], figures["llm_calls"], rel_tol=0.2
        )


def test_evaluate_dry_run_needs_no_endpoint_and_is_within_20_percent_of_a_real_run(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = [f"Setting number {n} defaults to {n * 7}." for n in range(12)]
    records = [
        {
            "id": f"s{k}",
            "question": "Defaults?",
            "answer": " ".join(facts[:k]),
            "contexts": [" ".join(facts)],
            "reference": facts[0],
        }
        for k in (1, 3, 5, 10, 12)
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    no_endpoint(monkeypatch)
    extra = ["--metrics", "faithfulness,correctness,rubric", "--verdict-batch", "4"]

    assert evaluate(None, tmp_path, samples, *extra, "--dry-run") == 0

    estimate = read_summary(tmp_path)
    assert fake.requests == []
    assert not (tmp_path / "results.jsonl").exists()
    script_judges(fake)
    assert evaluate(fake, tmp_path, samples, *extra) == 0
    real = read_summary(tmp_path)
    assert real["llm_calls"] == 5 * 3 + (1 + 1 + 2 + 3 + 3)
    assert math.isclose(estimate["llm_calls"], real["llm_calls"], rel_tol=0.2)
    assert set(estimate["by_stage"]) == set(real["by_stage"])


def test_evaluate_dry_run_covers_the_retrieval_metrics_call_for_call(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [
        {
            "id": f"s{n}",
            "question": f"What does setting {n} default to?",
            "answer": f"Setting {n} defaults to {n * 7}.",
            "contexts": [f"Setting {n} defaults to {n * 7}.", "Unrelated text.", "More of it."],
            "reference": f"Setting {n} defaults to {n * 7}. Setting {n} is read at start.",
            "reference_contexts": [f"Setting {n} defaults to {n * 7}."],
        }
        for n in range(4)
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in records))
    no_endpoint(monkeypatch)
    extra = ["--metrics", "rag_triad,context_precision,context_recall,retrieval"]

    assert evaluate(None, tmp_path, samples, *extra, "--dry-run") == 0

    estimate = read_summary(tmp_path)
    script_judges(fake)
    assert evaluate(fake, tmp_path, samples, *extra) == 0
    real = read_summary(tmp_path)
    # per sample: relevance 1, precision 1, answer relevance 1, two splits, two verdict batches
    assert real["llm_calls"] == 4 * 7
    assert estimate["llm_calls"] == real["llm_calls"]
    assert {s: f["llm_calls"] for s, f in estimate["by_stage"].items()} == {
        s: f["llm_calls"] for s, f in real["by_stage"].items()
    }
    assert estimate["by_stage"]["context_relevance_judge"]["prompt_tokens"] > 0


@pytest.mark.anyio
async def test_a_jury_over_budget_says_how_many_samples_were_not_judged(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = [
        Sample(
            id=f"s{i}",
            question="Capital?",
            answer="Tokyo is the capital of Japan.",
            contexts=("Tokyo is the capital of Japan.",),
        )
        for i in range(200)
    ]
    settings = make_settings(fake, tmp_path, max_tokens=500, concurrency=2)
    async with Jury(settings) as jury:
        with pytest.raises(RagjuryError, match=r"budget reached: --max-tokens 500 reached"):
            await jury.evaluate(samples, metrics=["faithfulness"])
