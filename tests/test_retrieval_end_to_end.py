"""End to end: generate questions from a few documents, answer them through a ``--target``
retriever written for the test (keyword overlap over the same documents), evaluate, and
check the hit rate and MRR are what that retriever's rankings give."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from ragjury.cli import main

from conftest import read_jsonl, read_summary, script_happy_path
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

DOCUMENTS = {
    "ports.md": (
        "Uvicorn serves the application on a port of its own choosing.",
        "What port does uvicorn listen on by default?",
        "8000",
    ),
    "auto-reload.md": (
        # every word of the ports question, as ports.md has: the retriever breaks the tie by
        # name and ranks this page first for it
        "What port does uvicorn listen on by default? Not on this page: here, reloading.",
        "Which flag makes uvicorn reload on code changes?",
        "--reload",
    ),
    "docs.md": (
        "FastAPI documents the API for you.",
        "At which path are the interactive API docs served?",
        "/docs",
    ),
    "cors.md": (
        "Browsers block requests to other origins unless the server allows them.",
        "Which middleware allows cross-origin requests?",
        "CORSMiddleware",
    ),
}

RETRIEVER = '''
"""Keyword overlap over the documents in ./docs: the test's RAG system."""
import re
from pathlib import Path

DOCS = {p.name: p.read_text(encoding="utf-8") for p in sorted(Path("docs").glob("*.md"))}


def words(text):
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def ranking(question):
    asked = words(question)
    return sorted(DOCS, key=lambda name: (-len(asked & words(DOCS[name])), name))


def answer(question):
    top = ranking(question)[:3]
    return {"answer": "See " + top[0], "contexts": [DOCS[name] for name in top]}
'''


def write_documents(folder: Path) -> None:
    folder.mkdir()
    for name, (intro, question, answer) in DOCUMENTS.items():
        text = f"# {name}\n\n{intro}\n\nQ: {question}\nA: {answer}\n"
        (folder / name).write_text(text, encoding="utf-8")


def test_the_hit_rate_is_what_the_targets_rankings_give(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_happy_path(fake)
    script_judges(fake)
    monkeypatch.chdir(tmp_path)  # the retriever reads ./docs, and is imported from here
    write_documents(tmp_path / "docs")
    (tmp_path / "kwrag.py").write_text(RETRIEVER, encoding="utf-8")
    endpoint = ["--base-url", fake.base_url, "--api-key", "test-key"]
    db = ["--db", str(tmp_path / "ragjury.db")]

    assert main(["generate", "docs", "--out", "dataset.jsonl", *db, *endpoint]) == 0
    generated = read_jsonl(tmp_path / "dataset.jsonl")
    assert len(generated) == len(DOCUMENTS)

    code = main(
        [
            "evaluate",
            "dataset.jsonl",
            "--target",
            "kwrag:answer",
            "--out",
            "results.jsonl",
            "--summary",
            "summary.json",
            *db,
            *endpoint,
        ]
    )

    assert code == 0
    sys.path.insert(0, str(tmp_path))
    try:
        retriever = importlib.import_module("kwrag")
    finally:
        sys.path.remove(str(tmp_path))
    expected_ranks = {
        record["question"]: retriever.ranking(record["question"]).index(Path(record["source"]).name)
        + 1
        for record in generated
    }
    assert sorted(expected_ranks.values()) == [1, 1, 1, 2]  # the ports question ranks 2nd

    results = {r["question"]: r for r in read_jsonl(tmp_path / "results.jsonl")}
    for question, rank in expected_ranks.items():
        retrieval = results[question]["metrics"]["retrieval"]  # a default metric here
        assert retrieval["first_relevant_rank"] == rank
        assert retrieval["references"][0]["matched_by"] == "text"
    figures = read_summary(tmp_path)["metrics"]["retrieval"]
    expected_hit_1 = sum(rank <= 1 for rank in expected_ranks.values()) / len(expected_ranks)
    assert figures["at_k"]["1"]["hit_rate"] == pytest.approx(expected_hit_1)
    assert figures["at_k"]["3"]["hit_rate"] == 1.0
    expected_mrr = sum(1 / rank for rank in expected_ranks.values()) / len(expected_ranks)
    assert figures["at_k"]["3"]["mrr"] == pytest.approx(expected_mrr, abs=1e-4)
    assert figures["mean"] == pytest.approx(expected_mrr, abs=1e-4)
    assert json.loads((tmp_path / "summary.json").read_text())["answered_by_target"] == 4
