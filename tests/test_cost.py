"""Accounting, prices, budgets and --dry-run, through the real CLI against the scripted
server and a real SQLite file."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_evaluate import evaluate
from test_generate import corpus

from ragjury import Jury
from ragjury.cli import main
from ragjury.commands._run import EXIT_BUDGET
from ragjury.config import Settings
from ragjury.errors import RagjuryError
from ragjury.pricing import BUILTIN_PRICES, ModelPrice, PriceTable
from ragjury.schemas import Sample

from conftest import (
    generator_reply,
    make_settings,
    read_jsonl,
    read_summary,
    script_happy_path,
)
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, chat, error


def generate(fake: FakeOpenAI, tmp_path: Path, *extra: str, model: str = "fake-model") -> int:
    return main(
        [
            "generate",
            str(tmp_path / "docs"),
            "--out",
            str(tmp_path / "kept.jsonl"),
            "--summary",
            str(tmp_path / "summary.json"),
            "--db",
            str(tmp_path / "ragjury.db"),
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            model,
            "--whole-documents",
            "--no-cache",  # each run here spends: these tests are about what spending costs
            *extra,
        ]
    )


def db_rows(tmp_path: Path, sql: str) -> list[Any]:
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        return db.execute(sql).fetchall()


# -- accounting -------------------------------------------------------------------------------


def test_tokens_of_every_attempt_are_counted_in_the_ledger_the_database_and_the_summary(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    corpus(tmp_path)
    script_happy_path(fake)  # generator: 100+30 tokens; each critic: 50+12
    fake.route(
        "generator",
        error(429, retry_after_ms=5),
        error(500, retry_after_ms=5),
        chat("{not json", prompt_tokens=70, completion_tokens=5),  # re-asked by instructor
        generator_reply,
    )

    assert generate(fake, tmp_path, "--workers", "generator=1", model="gpt-4o-mini") == 0

    s = read_summary(tmp_path)
    prompt = 70 + 3 * 100 + 9 * 50
    completion = 5 + 3 * 30 + 9 * 12
    assert s["llm_calls"] == len(fake.requests) == 3 + 3 + 9
    assert (s["prompt_tokens"], s["completion_tokens"]) == (prompt, completion)
    assert s["by_stage"]["generator"]["llm_calls"] == 6
    assert s["by_stage"]["generator"]["prompt_tokens"] == 70 + 300
    expected_cost = (prompt * 0.15 + completion * 0.60) / 1_000_000
    assert s["cost_usd"] == pytest.approx(expected_cost, abs=1e-6)  # summaries round to 1e-6
    assert s["by_stage"]["generator"]["cost_usd"] == pytest.approx(
        (370 * 0.15 + 95 * 0.60) / 1_000_000, abs=1e-6
    )
    assert s["rate_limit"]["throttled"] == 1

    first = db_rows(
        tmp_path,
        "SELECT requests, prompt_tokens, completion_tokens, statuses, model, cost_usd "
        "FROM llm_calls WHERE stage = 'generator' ORDER BY id LIMIT 1",
    )[0]
    assert first[:4] == (4, 170, 35, "[429, 500, 200, 200]")
    assert first[4] == "gpt-4o-mini"
    assert first[5] == pytest.approx((170 * 0.15 + 35 * 0.60) / 1_000_000)
    totals = db_rows(
        tmp_path,
        "SELECT SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost_usd) "
        "FROM llm_calls",
    )[0]
    assert totals[:3] == (s["llm_calls"], prompt, completion)
    assert totals[3] == pytest.approx(expected_cost)


def test_a_model_without_a_price_has_an_unknown_cost_not_zero(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    corpus(tmp_path)
    script_happy_path(fake)

    assert generate(fake, tmp_path) == 0

    s = read_summary(tmp_path)
    assert s["prompt_tokens"] > 0
    assert s["cost_usd"] is None
    assert s["unpriced_models"] == ["fake-model"]
    assert db_rows(tmp_path, "SELECT COUNT(*) FROM llm_calls WHERE cost_usd IS NOT NULL") == [(0,)]


# -- prices -----------------------------------------------------------------------------------


def test_prices_from_a_toml_file_price_the_run(fake: FakeOpenAI, tmp_path: Path) -> None:
    corpus(tmp_path)
    script_happy_path(fake)
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices]\n"fake-model" = { input = 1.0, output = 2.0 }\n')

    assert generate(fake, tmp_path, "--prices", str(prices)) == 0

    s = read_summary(tmp_path)
    assert s["cost_usd"] == pytest.approx(
        (s["prompt_tokens"] * 1.0 + s["completion_tokens"] * 2.0) / 1_000_000, abs=1e-6
    )


def test_the_prices_flag_overrides_ragjury_toml_which_overrides_the_builtin_table(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus(tmp_path)
    script_happy_path(fake)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ragjury.toml").write_text(
        '[prices]\n"fake-model" = { input = 3.0, output = 3.0 }\n'
        '"gpt-4o-mini" = { input = 9.0, output = 9.0 }\n'
    )
    assert PriceTable(Settings.from_environment().prices).price("gpt-4o-mini") == ModelPrice(
        input=9.0, output=9.0
    )
    assert generate(fake, tmp_path) == 0
    s = read_summary(tmp_path)
    tokens = s["prompt_tokens"] + s["completion_tokens"]
    assert s["cost_usd"] == pytest.approx(tokens * 3.0 / 1_000_000, abs=1e-6)

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"fake-model": {"input": 5.0, "output": 5.0}}))
    assert generate(fake, tmp_path, "--prices", str(prices)) == 0
    s = read_summary(tmp_path)
    assert s["cost_usd"] == pytest.approx(tokens * 5.0 / 1_000_000, abs=1e-6)


def test_builtin_prices_have_a_date_and_cover_dated_snapshots() -> None:
    table = PriceTable()
    assert table.price("gpt-4o-mini-2024-07-18") == BUILTIN_PRICES["gpt-4o-mini"]
    assert table.cost("gpt-4.1", 1_000_000, 1_000_000) == pytest.approx(2.0 + 8.0)
    assert table.cost("my-local-model", 10, 10) is None


def test_a_model_run_in_process_costs_nothing_unless_priced() -> None:
    gguf = "local:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert PriceTable().cost(gguf, 1_000, 1_000) == 0.0
    assert PriceTable({gguf: ModelPrice(input=1.0, output=1.0)}).cost(gguf, 1_000_000, 0) == 1.0


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("p.toml", '"fake-model" = { input = "cheap" }\n', "fake-model.input"),
        ("p.toml", '"fake-model" = { input = -1 }\n', "greater than or equal to 0"),
        ("p.toml", '"fake-model" = { inptu = 1 }\n', "fake-model.inptu"),
        ("p.toml", "fake-model = [\n", "not valid TOML"),
        ("p.json", "{not json", "not valid JSON"),
    ],
)
def test_a_bad_price_file_is_a_clear_error(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    expected: str,
) -> None:
    corpus(tmp_path)
    path = tmp_path / name
    path.write_text(text)

    assert generate(fake, tmp_path, "--prices", str(path)) == 2

    err = capsys.readouterr().err
    assert str(path) in err
    assert expected in err
    assert fake.requests == []


def test_a_missing_price_file_is_a_clear_error(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus(tmp_path)
    assert generate(fake, tmp_path, "--prices", str(tmp_path / "nope.toml")) == 2
    assert "cannot read the price file" in capsys.readouterr().err


def test_max_cost_for_a_model_without_a_price_says_how_to_give_one(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus(tmp_path)
    assert generate(fake, tmp_path, "--max-cost", "1") == 2
    err = capsys.readouterr().err
    assert "--max-cost needs a price for the model 'fake-model'" in err
    assert "--prices" in err
    assert fake.requests == []


# -- budgets ----------------------------------------------------------------------------------


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


def test_a_database_from_before_costs_gets_the_new_columns(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        db.execute(
            "CREATE TABLE llm_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
            "stage TEXT NOT NULL, requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, "
            "completion_tokens INTEGER NOT NULL, latency_ms REAL NOT NULL, statuses TEXT NOT NULL, "
            "error TEXT, created_at TEXT NOT NULL)"
        )
    corpus(tmp_path)
    script_happy_path(fake)

    assert generate(fake, tmp_path, model="gpt-4o-mini") == 0

    assert db_rows(tmp_path, "SELECT COUNT(*), COUNT(cost_usd), MIN(model) FROM llm_calls") == [
        (12, 12, "gpt-4o-mini")
    ]
