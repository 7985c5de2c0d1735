"""``--question-types``: weighted, seeded types per chunk; multi-chunk drafts judged against
every chunk; a default run exactly as before. Real CLI, real HTTP fake, real SQLite."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ragjury.agents.question_plan import choose_type
from ragjury.cli import main
from ragjury.config import GenerationOptions, Settings
from ragjury.evaluation.inputs import load_samples
from ragjury.llm import LLM
from ragjury.pipelines.generation import GenerationPipeline
from ragjury.schemas import (
    QUESTION_TYPES,
    ChunkReady,
    Document,
    DocumentSubmitted,
    PairDrafted,
    QAPair,
)
from ragjury.store.base import Job
from ragjury.store.cache import StepCache
from ragjury.store.sqlite import SQLiteStore

from conftest import (
    CHECK_CALLS,
    CRITIC_AGENTS,
    agreement_reply,
    critic_reply,
    read_jsonl,
    read_summary,
)
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json, error
from typed_corpus import record_types, typed_answer_reply, typed_generator_reply, write_topics

WEIGHTS = "factoid=0.5,reasoning=0.2,multi_hop=0.2,comparative=0.1"


def script(fake: FakeOpenAI) -> None:
    fake.route("generator", typed_generator_reply)
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply())
    fake.route("answerability_critic", typed_answer_reply)
    fake.route("answer_agreement", agreement_reply)


def calls_of(records: list[dict[str, str]]) -> int:
    """The LLM calls a run made for ``records`` of one chunk each: a draft, three critics and
    the answerability check's two, and a multi-hop pair's answers from each of its two chunks
    alone (which do not answer it, so no comparison)."""
    multi_hop = sum(r["question_type"] == "multi_hop" for r in records)
    return len(records) * (1 + 3 + CHECK_CALLS) + multi_hop * 2


def run(fake: FakeOpenAI, tmp_path: Path, docs: Path, *extra: str, db: str = "ragjury.db") -> int:
    return main(
        [
            "generate",
            str(docs),
            "--out",
            str(tmp_path / "kept.jsonl"),
            "--rejected",
            str(tmp_path / "rejected.jsonl"),
            "--summary",
            str(tmp_path / "summary.json"),
            "--db",
            str(tmp_path / db),
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            "fake-model",
            "--whole-documents",
            *extra,
        ]
    )


def test_each_type_gets_about_its_weight_of_the_chunks_over_a_seeded_run(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 30)  # 60 pages, each related to its twin

    assert run(fake, tmp_path, docs, "--question-types", WEIGHTS, "--seed", "7") == 0

    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert read_jsonl(tmp_path / "rejected.jsonl") == []
    assert len(kept) == 60
    # each chunk gets the type drawn for it (chunk ids hold the documents' paths, so which
    # types 60 chunks draw depends on the folder the test runs in: checked draw by draw,
    # every page having a twin to relate to, and the weights' shares over many draws below)
    weights = {"factoid": 0.5, "reasoning": 0.2, "multi_hop": 0.2, "comparative": 0.1}
    for record in kept:
        assert record["question_type"] == choose_type(record["chunk_id"], 7, weights), record
    assert set(Counter(r["question_type"] for r in kept)) <= set(QUESTION_TYPES)
    assert read_summary(tmp_path)["llm_calls"] == calls_of(kept)


def test_the_draw_gives_each_type_its_weight_over_many_chunks() -> None:
    weights = {"factoid": 0.5, "reasoning": 0.2, "multi_hop": 0.2, "comparative": 0.1}
    drawn: Counter[str] = Counter(
        choose_type(f"docs/page-{i}.md::0", 7, weights) for i in range(10_000)
    )
    for kind, weight in weights.items():
        assert abs(drawn[kind] / 10_000 - weight) <= 0.015, (kind, drawn)
    assert choose_type("docs/a.md::0", 7, {"reasoning": 1.0}) == "reasoning"


def test_the_same_seed_draws_the_same_types_and_another_seed_others(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 10)

    drawn = []
    for db, seed in (("one.db", "3"), ("two.db", "3"), ("three.db", "4")):
        assert run(fake, tmp_path, docs, "--question-types", WEIGHTS, "--seed", seed, db=db) == 0
        drawn.append(record_types(tmp_path / "kept.jsonl"))

    assert drawn[0] == drawn[1]  # a new database, so every step was asked again
    assert drawn[0] != drawn[2]


def test_multi_hop_drafts_name_both_chunks_and_the_critics_judge_against_both(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 3)

    assert run(fake, tmp_path, docs, "--question-types", "multi_hop=1") == 0

    kept = sorted(read_jsonl(tmp_path / "kept.jsonl"), key=lambda r: r["chunk_id"])
    assert [r["question_type"] for r in kept] == ["multi_hop"] * 6
    first = kept[0]
    a, b = (docs / "aa-a.md").read_text().strip(), (docs / "aa-b.md").read_text().strip()
    assert first["chunk_id"].endswith("aa-a.md::0")
    assert [Path(c).name for c in first["chunk_ids"]] == ["aa-a.md::0", "aa-b.md::0"]
    assert first["contexts"] == [a, b]
    assert first["context"] == a  # the single-chunk fields stay, for older readers
    assert set(first["shared_terms"]) == {"velaa", "moraa", "danaa"}
    drafted = [r.text() for r in fake.requests_for("generator") if "velaa" in r.text()]
    assert len(drafted) == 2
    assert all(a in text and b in text for text in drafted)
    grounded = [r.text() for r in fake.requests_for("groundedness_critic")]
    assert len(grounded) == 6
    assert sum(a in text and b in text for text in grounded) == 2
    questions = {r["question"] for r in kept}
    for agent in ("relevance_critic", "standalone_critic"):
        assert {q for r in fake.requests_for(agent) for q in questions if q in r.text()} == (
            questions
        )


def test_a_multi_hop_draft_without_evidence_from_every_chunk_is_asked_again(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    docs = write_topics(tmp_path / "docs", 1)

    def one_sided(request: RecordedRequest) -> Reply:
        """Both quotes from the first text: the draft leaves the second one out."""
        first = request.text().split('<text number="1"', 1)[1].split("</text>", 1)[0]
        quotes = [line for line in first.splitlines() if line.startswith(("The ", "Its "))]
        pair = {
            "question": "Which gateway does the velaa service use?",
            "answer": "The velaa gateway.",
            "evidence": [{"text_number": 1, "quote": quote} for quote in quotes],
        }
        return chat_json({"pairs": [pair]})

    script(fake)
    fake.route("generator", one_sided, typed_generator_reply)

    assert run(fake, tmp_path, docs, "--question-types", "multi_hop=1") == 0

    asked = fake.requests_for("generator")
    assert len(asked) == 3  # one page re-asked once
    assert sum("no evidence from text 2" in r.text() for r in asked) == 1
    assert [len(r["chunk_ids"]) for r in read_jsonl(tmp_path / "kept.jsonl")] == [2, 2]


def test_a_default_run_keeps_its_records_and_adds_the_answer_check(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 2)
    unchecked_out = tmp_path / "unchecked.jsonl"

    assert run(fake, tmp_path, docs, "--no-answer-check", "--out", str(unchecked_out)) == 0
    assert run(fake, tmp_path, docs, db="checked.db") == 0

    base = ("id", "question", "answer", "context", "source", "chunk_id", "critiques", "outcome")
    # --no-answer-check: the records of earlier versions; the check adds what it did
    assert {tuple(r) for r in read_jsonl(unchecked_out)} == {base}
    assert {tuple(r) for r in read_jsonl(tmp_path / "kept.jsonl")} == {(*base, "answer_check")}
    for name, check in (("ragjury.db", False), ("checked.db", True)):
        with sqlite3.connect(tmp_path / name) as db:
            [(options,)] = db.execute("SELECT options FROM jobs").fetchall()
        # the options of earlier versions, and whether the check runs (always stored: a job
        # stored without it predates the check)
        stored = {**_DEFAULT_OPTIONS, "whole_documents": True, "answer_check": check}
        assert json.loads(options)["generate"] == stored


def test_bad_question_types_are_refused_naming_the_value_and_the_types(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = write_topics(tmp_path / "docs", 1)
    for value, said in (
        ("factoid=0.5,hypothetical=0.5", "unknown question type 'hypothetical'"),
        ("factoid=-1", "the weight of factoid must be a number >= 0, got '-1'"),
        ("factoid=0,reasoning=0", "at least one question type needs a weight above 0"),
        ("factoid:1", "'factoid:1' in 'factoid:1' is not TYPE=WEIGHT"),
        ("factoid=1,factoid=2", "question type 'factoid' is given twice"),
    ):
        assert run(fake, tmp_path, docs, "--question-types", value) == 2
        err = capsys.readouterr().err
        assert err.startswith("ragjury: error: --question-types"), err
        assert said in err, err
        assert f"(got {value!r})" in err, err
        assert "the types are factoid, reasoning, multi_hop, comparative" in err, err
    assert fake.requests == []


def test_question_types_are_read_from_ragjury_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ragjury.toml").write_text(
        '[generate]\nquestion_types = "factoid=3,multi_hop=1"\nseed = 5\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)

    options = Settings().generate

    assert options.question_types == {"factoid": 3.0, "multi_hop": 1.0}
    assert options.seed == 5
    assert GenerationOptions(question_types={"factoid": 2, "reasoning": 0}).typed is False


def test_dry_run_counts_the_calls_a_typed_run_makes(fake: FakeOpenAI, tmp_path: Path) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 5)
    typed = ("--question-types", WEIGHTS, "--seed", "1")

    assert run(fake, tmp_path, docs, *typed, "--dry-run") == 0
    estimate = read_summary(tmp_path)
    assert fake.requests == []
    assert run(fake, tmp_path, docs, *typed) == 0
    ran = read_summary(tmp_path)
    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert ran["llm_calls"] == estimate["llm_calls"] == calls_of(kept)
    for stage, figures in estimate["by_stage"].items():
        assert figures["llm_calls"] == ran["by_stage"][stage]["llm_calls"], stage
    factoid = run(fake, tmp_path, docs, "--dry-run", db="other.db")
    assert factoid == 0
    # the multi-chunk prompts hold two pages: more prompt tokens than factoids alone
    assert estimate["prompt_tokens"] > read_summary(tmp_path)["prompt_tokens"]


# What ragjury computed for a default job before question types existed: its stored options,
# its agents' fingerprints and the step-cache keys of one chunk and one drafted pair. The
# answerability check (on by default) adds a critic and stores answer_check with the options,
# so a default job is a new job now; its other agents keep these fingerprints and keys, so a
# run after an upgrade takes their steps from the cache and only the check costs calls.
_DEFAULT_FINGERPRINTS = {
    "generator": "e13d0a4dfb35d2eb",
    "groundedness_critic": "2f6bc8d32a497158",
    "relevance_critic": "eb4e4358f37a1d65",
    "standalone_critic": "a35fb379df36b085",
}
_CHUNK_KEY = "d675b9c6f504a2e64c7ed53ce418e9f18e4688e1b2b5068ebaabe9d8a3174b64"
_PAIR_KEY = "1abfe58cc229f1b78696621528840db22da99468d005b55e48ccb45a08cf3ab2"


@pytest.mark.anyio
async def test_a_default_job_has_the_fingerprints_and_cache_keys_it_always_had(
    tmp_path: Path,
) -> None:
    settings = Settings(
        base_url="http://127.0.0.1:9/v1", api_key="k", model="m", db=str(tmp_path / "g.db")
    )
    spec = GenerationPipeline.spec(settings, {})
    assert spec.stored() == {"generate": {**_DEFAULT_OPTIONS, "answer_check": True}, "prompts": {}}
    job = Job(id="j1", kind="generate", options=spec.stored())
    document = Document(id="d.md", source="d.md", text="# Title\n\nSome text about FastAPI.")

    async with SQLiteStore(tmp_path / "g.db") as store:
        pipeline = GenerationPipeline(job, settings, LLM(settings), store)
        out = await pipeline.steps["chunker"].handle(DocumentSubmitted(document=document))

    fingerprints = {role: step.fingerprint for role, step in pipeline.steps.items()}
    checked = fingerprints.pop("answerability_critic")
    assert checked is not None
    assert checked not in _DEFAULT_FINGERPRINTS.values()
    assert {r: f for r, f in fingerprints.items() if f is not None} == _DEFAULT_FINGERPRINTS
    [ready] = [event for event in out if isinstance(event, ChunkReady)]
    assert StepCache.key("generator", _DEFAULT_FINGERPRINTS["generator"], ready) == _CHUNK_KEY
    pair = QAPair(
        id="p1",
        question="Q?",
        answer="A",
        context=ready.chunk.text,
        source="d.md",
        chunk_id=ready.chunk.id,
    )
    key = StepCache.key(
        "groundedness_critic", _DEFAULT_FINGERPRINTS["groundedness_critic"], PairDrafted(pair=pair)
    )
    assert key == _PAIR_KEY


_DEFAULT_OPTIONS = {
    "answer_style": "factoid",
    "audience": "users of these documents",
    "chunk_overlap": 200,
    "chunk_size": 2000,
    "dedup_threshold": 0.9,
    "globs": None,
    "id_field": None,
    "min_score": 4,
    "questions_per_chunk": 1,
    "text_field": "text",
    "whole_documents": False,
}


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_evaluate_reads_every_source_chunk_of_a_typed_record_as_its_reference(
    fake: FakeOpenAI, tmp_path: Path, suffix: str
) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 3)
    out = tmp_path / f"set.{suffix}"

    assert run(fake, tmp_path, docs, "--question-types", "multi_hop=1", "--out", str(out)) == 0

    samples = sorted(load_samples(out).samples, key=lambda s: s.reference_context_ids)
    first = samples[0]
    assert [Path(i).name for i in first.reference_context_ids] == ["aa-a.md::0", "aa-b.md::0"]
    assert first.reference_contexts == (
        (docs / "aa-a.md").read_text().strip(),
        (docs / "aa-b.md").read_text().strip(),
    )
    assert first.contexts == ()  # the source chunks are not what a retriever found


def test_export_writes_a_typed_jobs_csv_with_the_same_columns_as_generate(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script(fake)
    docs = write_topics(tmp_path / "docs", 3)
    typed = ("--question-types", "factoid=1,multi_hop=1", "--out", str(tmp_path / "kept.csv"))
    assert run(fake, tmp_path, docs, *typed) == 0

    exported = tmp_path / "exported.csv"
    assert main(["export", "--db", str(tmp_path / "ragjury.db"), "--out", str(exported)]) == 0

    written = (tmp_path / "kept.csv").read_text(encoding="utf-8")
    assert exported.read_text(encoding="utf-8") == written
    header = written.splitlines()[0].split(",")
    assert header[7:12] == ["question_type", "chunk_ids", "contexts", "sources", "shared_terms"]


def test_a_resumed_typed_run_plans_every_chunk_as_an_uninterrupted_one(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    docs = write_topics(tmp_path / "docs", 4)
    typed = ("--question-types", WEIGHTS, "--seed", "2")
    script(fake)
    fake.route("generator", error(503, "overloaded"))  # the endpoint fails every draft
    run(fake, tmp_path, docs, *typed, "--max-transport-retries", "0")
    assert read_jsonl(tmp_path / "kept.jsonl") == []

    script(fake)  # back up: the same command resumes the job, its chunks planned again
    assert run(fake, tmp_path, docs, *typed) == 0
    resumed = read_jsonl(tmp_path / "kept.jsonl")
    assert run(fake, tmp_path, docs, *typed, db="fresh.db") == 0
    fresh = read_jsonl(tmp_path / "kept.jsonl")

    def plans(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["question_type"], r["chunk_ids"]) for r in records)

    assert len(resumed) == 8
    assert plans(resumed) == plans(fresh)
    assert {r["question_type"] for r in resumed} != {"factoid"}
