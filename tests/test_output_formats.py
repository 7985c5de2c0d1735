"""What evaluate, generate and export write: JSONL, CSV or Parquet, chosen by --format or
the file's suffix, read back with pandas as a spreadsheet or notebook user would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ragjury.cli import main
from ragjury.evaluation.inputs import load_samples

from conftest import read_jsonl, script_happy_path, write_qa_document
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, chat

SAMPLES = [
    {
        "id": "tokyo",
        "question": "What is the capital of Japan?",
        "answer": "Tokyo is the capital of Japan.",
        "contexts": ["Tokyo is the capital of Japan.", "Japan is in Asia."],
        "reference": "Tokyo",
    },
    {
        "id": "paris",
        "question": "Where is the Eiffel Tower?",
        "answer": "The Eiffel Tower is in Rome.",
        "contexts": ["The Eiffel Tower is in Paris."],
        "reference": "Paris",
    },
]


def endpoint(fake: FakeOpenAI) -> list[str]:
    return ["--base-url", fake.base_url, "--api-key", "k", "--model", "fake-model"]


def evaluate(fake: FakeOpenAI, tmp_path: Path, out: str, *extra: str) -> int:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(s) + "\n" for s in SAMPLES), encoding="utf-8")
    db = str(tmp_path / "r.db")
    return main(["evaluate", str(samples), "--out", str(tmp_path / out), "--db", db, *extra])


@pytest.fixture
def judged(fake: FakeOpenAI) -> FakeOpenAI:
    script_judges(fake)
    return fake


def test_evaluate_out_csv_writes_flat_columns_with_the_inputs(
    judged: FakeOpenAI, tmp_path: Path
) -> None:
    assert evaluate(judged, tmp_path, "results.csv", *endpoint(judged)) == 0

    frame = pd.read_csv(tmp_path / "results.csv")

    assert list(frame["id"]) == ["tokyo", "paris"]
    for column in ("question", "answer", "contexts", "reference", "passing", "reason"):
        assert column in frame.columns
    assert json.loads(frame["contexts"][0]) == SAMPLES[0]["contexts"]
    assert list(frame["faithfulness_outcome"]) == ["scored", "scored"]
    assert list(frame["faithfulness_score"]) == [1.0, 0.0]
    assert list(frame["faithfulness_passing"]) == [True, False]
    assert list(frame["correctness_score"]) == [5.0, 2.0]
    assert list(frame["passing"]) == [True, False]
    assert json.loads(frame["faithfulness_details"][0])["statements"][0]["supported"] is True


def test_evaluate_csv_reads_back_as_the_same_samples(judged: FakeOpenAI, tmp_path: Path) -> None:
    assert evaluate(judged, tmp_path, "results.csv", *endpoint(judged)) == 0

    again = load_samples(tmp_path / "results.csv").samples

    assert [(s.id, list(s.contexts), s.reference) for s in again] == [
        (s["id"], s["contexts"], s["reference"]) for s in SAMPLES
    ]


def test_evaluate_parquet_round_trips_through_pandas(judged: FakeOpenAI, tmp_path: Path) -> None:
    assert evaluate(judged, tmp_path, "results.parquet", *endpoint(judged)) == 0

    frame = pd.read_parquet(tmp_path / "results.parquet")

    assert list(frame["id"]) == ["tokyo", "paris"]
    assert list(frame["contexts"][0]) == SAMPLES[0]["contexts"]
    assert list(frame["faithfulness_passing"]) == [True, False]
    assert list(frame["correctness_score"]) == [5.0, 2.0]
    assert list(frame["passing"]) == [True, False]


def test_evaluate_jsonl_round_trips_through_pandas(judged: FakeOpenAI, tmp_path: Path) -> None:
    assert evaluate(judged, tmp_path, "results.jsonl", *endpoint(judged)) == 0

    frame = pd.read_json(tmp_path / "results.jsonl", lines=True)

    assert list(frame["id"]) == ["tokyo", "paris"]
    assert frame["metrics"][1]["faithfulness"]["passing"] is False
    assert list(frame["passing"]) == [True, False]


def test_evaluate_format_flag_wins_over_an_unknown_suffix(
    judged: FakeOpenAI, tmp_path: Path
) -> None:
    assert evaluate(judged, tmp_path, "results.txt", "--format", "csv", *endpoint(judged)) == 0

    assert pd.read_csv(tmp_path / "results.txt")["id"].tolist() == ["tokyo", "paris"]


def test_a_format_the_suffix_contradicts_is_refused_before_any_llm_call(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = evaluate(fake, tmp_path, "results.jsonl", "--format", "csv", *endpoint(fake))

    assert code == 2
    assert "--format csv but --out" in capsys.readouterr().err
    assert fake.requests == []


def generate(fake: FakeOpenAI, tmp_path: Path, *outputs: str) -> int:
    docs = tmp_path / "docs"
    write_qa_document(docs, "ports.md", [("What port does uvicorn use by default?", "8000")])
    write_qa_document(docs, "docs.md", [("At which path are the API docs served?", "/docs")])
    db = str(tmp_path / "g.db")
    return main(["generate", str(docs), "--whole-documents", "--db", db, *outputs, *endpoint(fake)])


def test_generate_out_csv_without_format_writes_csv(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)

    assert generate(fake, tmp_path, "--out", str(tmp_path / "kept.csv")) == 0

    frame = pd.read_csv(tmp_path / "kept.csv")
    assert sorted(frame["answer"].astype(str)) == ["/docs", "8000"]
    assert list(frame["groundedness_rating"]) == [5, 5]


def test_generate_parquet_round_trips_through_pandas(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)

    assert generate(fake, tmp_path, "--out", str(tmp_path / "kept.parquet")) == 0

    frame = pd.read_parquet(tmp_path / "kept.parquet")
    assert sorted(frame["answer"]) == ["/docs", "8000"]
    assert list(frame["outcome"]) == ["kept", "kept"]


def test_generate_failed_writes_every_chunk_the_generator_gave_up_on(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    fake.route("generator", lambda request: chat("not JSON"))
    failed = tmp_path / "failed.jsonl"

    code = generate(fake, tmp_path, "--out", str(tmp_path / "kept.jsonl"), "--failed", str(failed))

    assert code == 1  # every chunk failed
    records = read_jsonl(failed)
    assert sorted(Path(r["source"]).name for r in records) == ["docs.md", "ports.md"]
    assert {r["outcome"] for r in records} == {"failed"}
    assert all(r["error"]["stage"] == "generator" and r["error"]["message"] for r in records)
    assert all(r["chunk_id"] for r in records)


def _export(tmp_path: Path, *outputs: str) -> int:
    return main(["export", "--db", str(tmp_path / "r.db"), *outputs])


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("results.csv", pd.read_csv),
        ("results.parquet", pd.read_parquet),
        ("results.jsonl", lambda path: pd.read_json(path, lines=True)),
    ],
)
def test_export_results_writes_the_format_its_suffix_names(
    judged: FakeOpenAI, tmp_path: Path, name: str, read: Any
) -> None:
    assert evaluate(judged, tmp_path, "first.jsonl", *endpoint(judged)) == 0

    assert _export(tmp_path, "--results", str(tmp_path / name)) == 0

    frame = read(tmp_path / name)
    assert list(frame["id"]) == ["tokyo", "paris"]
    assert list(frame["passing"]) == [True, False]
    if not name.endswith(".jsonl"):
        assert list(frame["faithfulness_passing"]) == [True, False]
