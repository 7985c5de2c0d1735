"""Accounting and prices, through the real CLI against the scripted server and a real SQLite
file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from test_generate import corpus

from ragjury.config import Settings
from ragjury.pricing import BUILTIN_PRICES, ModelPrice, PriceTable

from conftest import (
    CHECK_CALLS,
    generator_reply,
    read_summary,
    script_happy_path,
)
from costcli import db_rows, generate
from fakeopenai import FakeOpenAI, chat, error


def test_tokens_of_every_attempt_are_counted_in_the_ledger_the_database_and_the_summary(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    corpus(tmp_path)
    # generator: 100+30 tokens; each critic: 50+12; the answerability check: 60+15 to answer,
    # 40+12 to compare
    script_happy_path(fake)
    fake.route(
        "generator",
        error(429, retry_after_ms=5),
        error(500, retry_after_ms=5),
        chat("{not json", prompt_tokens=70, completion_tokens=5),  # re-asked by instructor
        generator_reply,
    )

    assert generate(fake, tmp_path, "--workers", "generator=1", model="gpt-4o-mini") == 0

    s = read_summary(tmp_path)
    prompt = 70 + 3 * 100 + 9 * 50 + 3 * (60 + 40)
    completion = 5 + 3 * 30 + 9 * 12 + 3 * (15 + 12)
    assert s["llm_calls"] == len(fake.requests) == 3 + 3 + 9 + 3 * CHECK_CALLS
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

    calls = 3 * (4 + CHECK_CALLS)  # a draft, three critics and the check's two per document
    assert db_rows(tmp_path, "SELECT COUNT(*), COUNT(cost_usd), MIN(model) FROM llm_calls") == [
        (calls, calls, "gpt-4o-mini")
    ]
