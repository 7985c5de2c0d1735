"""End to end: generate questions from a few documents, answer them through a ``--target``
retriever written for the test (keyword overlap over the same documents), evaluate, and
check the hit rate and MRR are what that retriever's rankings give."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragjury.cli import main
from ragjury.evaluation.retrieval import text_finds

from conftest import _TEXT, read_jsonl, read_summary, script_happy_path
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json

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


ROOT = Path(__file__).resolve().parents[1]
_HEADING = re.compile(r"^#+ (.+?)(?: \{ #[^}]*\})?$", re.MULTILINE)


def heading_question(request: RecordedRequest) -> Reply:
    """A generator for any docs: one question on the chunk's first heading (or its words)."""
    text = _TEXT.search(request.text()).group(1)  # type: ignore[union-attr]  # our prompt has it
    heading = _HEADING.search(text)
    subject = heading.group(1) if heading else " ".join(text.split()[:6])
    pair = {"question": f"How do I use {subject} in FastAPI?", "answer": text.split("\n")[0]}
    return chat_json({"pairs": [pair]}, prompt_tokens=100, completion_tokens=30)


def first_line_answer(request: RecordedRequest) -> Reply:
    """The answerability critic reading the chunk as the heading generator does: its answer
    is the chunk's first line."""
    text = _TEXT.search(request.text()).group(1)  # type: ignore[union-attr]  # our prompt has it
    return chat_json({"answer": text.split("\n")[0], "answerable": True})


def test_the_readme_retrieval_example_runs_on_the_shipped_corpus(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Judging retrieval")[1].split("```bash\n")[1].split("```")[0]
    commands = [line.split("  #")[0].strip().rstrip("&").strip() for line in section.splitlines()]
    assert commands[0] == "ragjury generate examples/fastapi-docs --out dataset.jsonl"
    assert commands[1] == "python examples/tiny_retriever.py examples/fastapi-docs"
    assert commands[2].startswith(
        "ragjury evaluate dataset.jsonl --target http://localhost:8000/query"
    )
    script_happy_path(fake)
    fake.route("generator", heading_question)
    fake.route("answerability_critic", first_line_answer)
    script_judges(fake)
    monkeypatch.chdir(tmp_path)
    endpoint = ["--base-url", fake.base_url, "--api-key", "test-key", "--db", "r.db"]
    retriever = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / commands[1].split()[1]),
            str(ROOT / "examples/fastapi-docs"),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert retriever.stdout is not None
        url = retriever.stdout.readline().strip()
        generate = commands[0].split()[1:]
        generate[1] = str(ROOT / generate[1])
        assert main([*generate, *endpoint]) == 0
        evaluate = commands[2].split()[1:]
        evaluate[evaluate.index("--target") + 1] = url
        assert main([*evaluate, *endpoint]) == 0
    finally:
        retriever.terminate()
        retriever.wait(timeout=10)

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        tiny = importlib.import_module("tiny_retriever")
    finally:
        sys.path.remove(str(ROOT / "examples"))
    index = tiny.sections(ROOT / "examples/fastapi-docs")
    ranks: list[int | None] = []
    for record in read_jsonl(tmp_path / "results.jsonl"):
        top = tiny.rank(record["question"], index)[: tiny.TOP]
        [reference] = record["reference_contexts"]
        found = [n for n, s in enumerate(top, 1) if text_finds(s["text"], reference)]
        ranks.append(found[0] if found else None)
        assert record["metrics"]["retrieval"]["first_relevant_rank"] == ranks[-1]
    assert len(ranks) >= 5
    figures = read_summary(tmp_path)["metrics"]["retrieval"]["at_k"]
    for k in ("1", "3", "5"):
        hits = sum(r is not None and r <= int(k) for r in ranks) / len(ranks)
        assert figures[k]["hit_rate"] == pytest.approx(hits, abs=1e-4)
    # the table the README shows is this run's
    table = readme.split("### Judging retrieval")[1].split("retrieval at k\n")[1].split("```")[0]
    shown = {row.split()[0]: [float(x) for x in row.split()[1:]] for row in table.splitlines()[1:]}
    names = ("hit_rate", "mrr", "recall", "precision", "ndcg")
    assert shown == {k: [round(f[n], 3) for n in names] for k, f in figures.items()}
