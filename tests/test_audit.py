"""`ragjury audit`: coverage, spread, near-duplicates, leakage and difficulty of a set, from
the library and from the real CLI in a subprocess; and the audit's lines after `generate`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragjury.config import GenerationOptions
from ragjury.errors import InputError
from ragjury.report.audit import AuditOptions, audit_dataset
from ragjury.report.audit_input import AuditRecord, load_corpus, read_dataset

from conftest import read_jsonl, script_happy_path, write_qa_document
from fakeopenai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
ANTHROPIC = ROOT.parent / "shared" / "data" / "corpus" / "anthropic-docs"
WHOLE = GenerationOptions(whole_documents=True)

TOPICS = {
    "ports.md": "Uvicorn serves the application on port 8000 unless told otherwise.",
    "cors.md": "Cross-origin requests are allowed by adding the CORSMiddleware to the app.",
    "tasks.md": "Background tasks run after the response is sent to the client.",
    "big.md": "Dependency injection lets a path operation declare what it needs. " * 20,
}


def write_corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in TOPICS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def record(n: int, question: str, name: str, folder: Path, **extra: Any) -> dict[str, Any]:
    source = str(folder / name)
    return {
        "id": f"q{n}",
        "question": question,
        "answer": "-",
        "context": TOPICS[name],
        "source": source,
        "chunk_id": f"{source}::0",
        "outcome": "kept",
        **extra,
    }


def skewed_set(folder: Path) -> list[dict[str, Any]]:
    """Eight pairs from ports.md, one from cors.md, none from tasks.md or big.md."""
    ports = [
        record(n, f"Which port number, case {word}, does the server use?", "ports.md", folder)
        for n, word in enumerate(["one", "two", "three", "four", "five", "six", "seven", "eight"])
    ]
    cors = record(9, "How are cross-origin requests allowed?", "cors.md", folder)
    rejected = record(10, "What runs after the response?", "tasks.md", folder, outcome="rejected")
    return [*ports, cors, rejected]


def as_records(raw: list[dict[str, Any]]) -> list[AuditRecord]:
    from ragjury.report.audit_input import audit_record

    return [audit_record(r, f"line {i}") for i, r in enumerate(raw, start=1)]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_set_skewed_to_one_document_reports_the_skew_and_the_documents_left_out(
    tmp_path: Path,
) -> None:
    folder = write_corpus(tmp_path)

    audit = audit_dataset(as_records(skewed_set(folder)), load_corpus([folder], WHOLE))

    skew = audit["skew"]
    assert skew["document"] == str(folder / "ports.md")
    assert (skew["kept"], skew["share"], skew["documents"], skew["times_even"]) == (
        8,
        0.8889,
        4,
        3.56,
    )
    coverage = audit["coverage"]
    assert (coverage["documents_covered"], coverage["documents"]) == (2, 4)
    assert (coverage["chunks_covered"], coverage["chunks"]) == (2, 4)
    assert [d["document"] for d in coverage["largest_uncovered"]] == [
        str(folder / "big.md"),
        str(folder / "tasks.md"),
    ]
    by_document = {row["document"]: (row["kept"], row["not_kept"]) for row in audit["by_document"]}
    assert by_document == {
        str(folder / "ports.md"): (8, 0),
        str(folder / "cors.md"): (1, 0),
        str(folder / "tasks.md"): (0, 1),
    }
    assert audit["records"] == {"kept": 9, "rejected": 1}


def test_counts_per_question_type_and_persona_default_to_factoid_and_none(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path)
    raw = skewed_set(folder)
    raw[0]["question_type"], raw[0]["persona"] = "reasoning", "new user"
    raw[1]["persona"] = {"name": "new user", "description": "first week with FastAPI"}

    audit = audit_dataset(as_records(raw))

    assert audit["by_question_type"] == {"factoid": 8, "reasoning": 1}
    assert audit["by_persona"] == {"(none)": 7, "new user": 2}


def test_near_duplicates_are_found_at_the_threshold_and_different_questions_are_not(
    tmp_path: Path,
) -> None:
    folder = tmp_path
    raw = [
        record(1, "What port does uvicorn use by default?", "ports.md", folder),
        record(2, "What port does Uvicorn use, by default?", "ports.md", folder),
        record(3, "How do I declare a path parameter?", "cors.md", folder),
        record(4, "How do I declare a query parameter?", "cors.md", folder),
    ]

    strict = audit_dataset(as_records(raw), options=AuditOptions(near_duplicate=0.9))
    loose = audit_dataset(as_records(raw), options=AuditOptions(near_duplicate=0.85))

    assert [
        (p["first"], p["second"], p["similarity"]) for p in strict["near_duplicates"]["pairs"]
    ] == [("q1", "q2", 1.0)]
    assert [(p["first"], p["second"]) for p in loose["near_duplicates"]["pairs"]] == [
        ("q1", "q2"),
        ("q3", "q4"),
    ]


def test_a_question_copying_a_long_run_of_its_chunk_is_leakage_and_a_paraphrase_is_not(
    tmp_path: Path,
) -> None:
    raw = [
        record(
            1,
            "Does uvicorn serve the application on port 8000 unless told otherwise?",
            "ports.md",
            tmp_path,
        ),
        record(2, "Which port is used when none is configured?", "ports.md", tmp_path),
        record(3, "When do background tasks run?", "tasks.md", tmp_path, context=""),
    ]

    audit = audit_dataset(as_records(raw), options=AuditOptions(leak_words=7))
    stricter = audit_dataset(as_records(raw), options=AuditOptions(leak_words=9))

    [leak] = audit["leakage"]["questions"]
    assert (leak["id"], leak["words"]) == ("q1", 8)
    assert leak["span"] == "the application on port 8000 unless told otherwise"
    assert (audit["leakage"]["checked"], audit["leakage"]["not_checked"]) == (2, 1)
    assert stricter["leakage"]["questions"] == []


def test_difficulty_ranks_the_source_chunk_under_bm25(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path)
    raw = [
        record(1, "How is CORSMiddleware added for cross-origin requests?", "cors.md", folder),
        record(2, "How is CORSMiddleware added for cross-origin requests?", "ports.md", folder),
        record(3, "When are background tasks run?", "tasks.md", folder),
    ]

    audit = audit_dataset(as_records(raw), load_corpus([folder], WHOLE))

    ranks = {row["id"]: row["rank"] for row in audit["difficulty"]["ranks"]}
    assert ranks == {"q1": 1, "q2": None, "q3": 1}
    figures = audit["difficulty"]
    assert (figures["rank_1"], figures["top_5"], figures["beyond_5"]) == (2, 2, 1)
    assert figures["no_shared_word"] == 1


def test_without_the_corpus_coverage_and_difficulty_say_what_they_need(tmp_path: Path) -> None:
    audit = audit_dataset(as_records(skewed_set(tmp_path)))

    assert audit["coverage"] is None
    assert audit["difficulty"] is None
    assert "--corpus" in audit["coverage_note"]
    assert "--corpus" in audit["difficulty_note"]
    assert audit["skew"]["documents"] == 2  # only the documents the set names


@pytest.mark.skipif(not ANTHROPIC.exists(), reason="needs ../shared/data beside the project")
def test_on_the_anthropic_docs_human_questions_it_reports_coverage_and_difficulty() -> None:
    questions = json.loads((ANTHROPIC / "docs_evaluation_dataset.json").read_text("utf-8"))
    chunks = json.loads((ANTHROPIC / "anthropic_docs.json").read_text("utf-8"))
    options = GenerationOptions(whole_documents=True, id_field="chunk_link")

    records = read_dataset([ANTHROPIC / "docs_evaluation_dataset.json"])
    audit = audit_dataset(records, load_corpus([ANTHROPIC / "anthropic_docs.json"], options))

    needed = {link for q in questions for link in q["correct_chunks"]}
    coverage = audit["coverage"]
    assert (coverage["documents"], coverage["chunks"]) == (len(chunks), len(chunks))
    assert coverage["documents_covered"] == coverage["chunks_covered"] == len(needed)
    assert "unknown_chunk_ids" not in audit
    figures = audit["difficulty"]
    assert figures["ranked"] == len(questions) == len(figures["ranks"])
    assert figures["rank_1"] + (figures["top_5"] - figures["rank_1"]) + figures["beyond_5"] == 100
    # people wrote these questions: keyword search finds some sources first, not all
    assert 0 < figures["rank_1"] < figures["top_5"] < len(questions)
    two_chunk = {q["id"] for q in questions if len(q["correct_chunks"]) > 1}
    assert all(
        r["rank"] is None or r["rank"] >= 2 for r in figures["ranks"] if r["id"] in two_chunk
    )


def ragjury(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "ragjury", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_cli_prints_the_audit_as_json(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path)
    dataset = write_jsonl(tmp_path / "set.jsonl", skewed_set(folder))

    done = ragjury(
        "audit", str(dataset), "--corpus", str(folder), "--whole-documents", "--json", cwd=tmp_path
    )

    assert done.returncode == 0, done.stderr
    audit = json.loads(done.stdout)
    assert audit["coverage"]["document_share"] == 0.5
    assert audit["skew"]["document"] == str(folder / "ports.md")
    assert audit["difficulty"]["ranked"] == 9


def test_the_cli_table_ends_with_the_summary_lines(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path)
    dataset = write_jsonl(tmp_path / "set.jsonl", skewed_set(folder))

    done = ragjury("audit", str(dataset), cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "kept pairs per document" in done.stdout
    assert "coverage: needs --corpus" in done.stdout
    assert f"skew: {folder / 'ports.md'} holds 89% of the kept pairs" in done.stdout


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            ['{"question": "q?", "chunk_id": "a::0"}', "{not json"],
            ["set.jsonl:2: line is not JSON", "one JSON object per line"],
        ),
        (
            ['{"question": "q?", "context": "c"}'],
            ["set.jsonl:1: no 'chunk_id' or 'chunk_ids' (fields 'question', 'context')"],
        ),
        (
            ['{"answer": "a", "chunk_id": "a::0"}'],
            ["set.jsonl:1: no 'question' field", "`ragjury generate --out`"],
        ),
        (
            ['{"chunk_id": "a::0", "outcome": "failed", "error": {}}'],
            ["set.jsonl:1: a failed chunk", "leave that file out"],
        ),
    ],
)
def test_bad_records_are_named_by_their_line_with_the_fix(
    tmp_path: Path, lines: list[str], expected: list[str]
) -> None:
    (tmp_path / "set.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

    done = ragjury("audit", "set.jsonl", cwd=tmp_path)

    assert done.returncode == 2
    assert [text for text in expected if text not in done.stderr] == [], done.stderr


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    done = ragjury("audit", "nowhere.jsonl", cwd=tmp_path)

    assert done.returncode == 2
    assert "'nowhere.jsonl' does not exist" in done.stderr
    with pytest.raises(InputError, match="does not exist"):
        read_dataset([tmp_path / "nowhere.jsonl"])


def test_chunk_ids_the_corpus_lacks_say_to_read_it_as_generate_did(tmp_path: Path) -> None:
    folder = write_corpus(tmp_path)
    raw = skewed_set(folder)
    dataset = write_jsonl(tmp_path / "set.jsonl", raw)
    stray = {**raw[0], "id": "stray", "chunk_id": f"{raw[0]['source']}::3"}
    partly = write_jsonl(tmp_path / "partly.jsonl", [*raw, stray])

    # the set names its documents by absolute paths; a relative --corpus names them otherwise
    none_known = ragjury(
        "audit", str(dataset), "--corpus", "docs", "--whole-documents", cwd=tmp_path
    )
    some_known = ragjury(
        "audit", str(partly), "--corpus", str(folder), "--whole-documents", cwd=tmp_path
    )

    assert none_known.returncode == 2
    assert "9 source chunk id(s) of the set are not chunks of --corpus" in none_known.stderr
    assert "give the same paths as to generate, and its --chunk-size" in none_known.stderr
    assert some_known.returncode == 0
    assert "warning: 1 source chunk id(s)" in some_known.stderr
    assert "::3'" in some_known.stderr


def test_generate_ends_with_the_audit_and_its_set_audits_against_the_same_corpus(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # ports.md: two pairs kept; tasks.md: one kept, one rejected; blank.md: nothing drafted
    script_happy_path(fake, {"relevance_critic": {"Who sends the response?": 1}})
    docs = tmp_path / "docs"
    write_qa_document(
        docs,
        "ports.md",
        [("What port is the default?", "8000"), ("Which host is the default?", "127.0.0.1")],
    )
    write_qa_document(
        docs,
        "tasks.md",
        [("When do background tasks run?", "after"), ("Who sends the response?", "the app")],
    )
    blank = write_qa_document(docs, "blank.md", []).read_text(encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAGJURY_BASE_URL": fake.base_url,
        "RAGJURY_MODEL": "m",
        "OPENAI_API_KEY": "k",
    }

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragjury",
            "generate",
            str(docs),
            "--whole-documents",
            "--questions-per-chunk",
            "2",
            "--out",
            "kept.jsonl",
            "--db",
            "r.db",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )

    assert len(read_jsonl(tmp_path / "kept.jsonl")) == 3, done.stderr
    lines = done.stderr.splitlines()
    assert (
        "ragjury audit: coverage: 2 of 3 documents (67%) and 2 of 3 chunks (67%) have a kept pair"
        in lines
    )
    assert (
        f"ragjury audit: skew: {docs / 'ports.md'} holds 67% of the kept pairs (2; 2.0x an even "
        "share over 3 documents)"
    ) in lines
    assert f"ragjury audit: in full: ragjury audit kept.jsonl --corpus {docs}" in lines
    audited = ragjury(
        "audit", "kept.jsonl", "--corpus", str(docs), "--whole-documents", "--json", cwd=tmp_path
    )
    assert audited.returncode == 0, audited.stderr
    audit = json.loads(audited.stdout)
    assert "unknown_chunk_ids" not in audit
    assert audit["coverage"]["largest_uncovered"] == [
        {"document": str(docs / "blank.md"), "characters": len(blank), "chunks": 1}
    ]
