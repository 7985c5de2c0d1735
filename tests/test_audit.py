"""The audit of a set: coverage, spread, near-duplicates, leakage and difficulty, on
hand-written records and on the Anthropic docs' human questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragjury.config import GenerationOptions
from ragjury.report.audit import AuditOptions, audit_dataset
from ragjury.report.audit_input import load_corpus, read_dataset

from auditsets import as_records, record, skewed_set, write_corpus

ROOT = Path(__file__).resolve().parents[1]
ANTHROPIC = ROOT.parent / "shared" / "data" / "corpus" / "anthropic-docs"
WHOLE = GenerationOptions(whole_documents=True)


def test_a_set_skewed_to_one_document_reports_the_skew_and_the_documents_left_out(
    tmp_path: Path,
) -> None:
    folder = write_corpus(tmp_path)

    audit = audit_dataset(as_records(skewed_set(folder)), load_corpus([folder], WHOLE))

    skew = audit["skew"]
    assert skew is not None
    assert skew["document"] == str(folder / "ports.md")
    assert (skew["kept"], skew["share"], skew["documents"], skew["times_even"]) == (
        8,
        0.8889,
        4,
        3.56,
    )
    coverage = audit["coverage"]
    assert coverage is not None
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

    difficulty = audit["difficulty"]
    assert difficulty is not None
    ranks = {row["id"]: row["rank"] for row in difficulty["ranks"]}
    assert ranks == {"q1": 1, "q2": None, "q3": 1}
    figures = audit["difficulty"]
    assert figures is not None
    assert (figures["rank_1"], figures["top_5"], figures["beyond_5"]) == (2, 2, 1)
    assert figures["no_shared_word"] == 1


def test_without_the_corpus_coverage_and_difficulty_say_what_they_need(tmp_path: Path) -> None:
    audit = audit_dataset(as_records(skewed_set(tmp_path)))

    assert audit["coverage"] is None
    assert audit["difficulty"] is None
    assert "--corpus" in audit["coverage_note"]
    assert "--corpus" in audit["difficulty_note"]
    skew = audit["skew"]
    assert skew is not None
    assert skew["documents"] == 2  # only the documents the set names


@pytest.mark.skipif(not ANTHROPIC.exists(), reason="needs ../shared/data beside the project")
def test_on_the_anthropic_docs_human_questions_it_reports_coverage_and_difficulty() -> None:
    questions = json.loads((ANTHROPIC / "docs_evaluation_dataset.json").read_text("utf-8"))
    chunks = json.loads((ANTHROPIC / "anthropic_docs.json").read_text("utf-8"))
    options = GenerationOptions(whole_documents=True, id_field="chunk_link")

    records = read_dataset([ANTHROPIC / "docs_evaluation_dataset.json"])
    audit = audit_dataset(records, load_corpus([ANTHROPIC / "anthropic_docs.json"], options))

    needed = {link for q in questions for link in q["correct_chunks"]}
    coverage = audit["coverage"]
    assert coverage is not None
    assert (coverage["documents"], coverage["chunks"]) == (len(chunks), len(chunks))
    assert coverage["documents_covered"] == coverage["chunks_covered"] == len(needed)
    assert "unknown_chunk_ids" not in audit
    figures = audit["difficulty"]
    assert figures is not None
    assert figures["ranked"] == len(questions) == len(figures["ranks"])
    assert figures["rank_1"] + (figures["top_5"] - figures["rank_1"]) + figures["beyond_5"] == 100
    # people wrote these questions: keyword search finds some sources first, not all
    assert 0 < figures["rank_1"] < figures["top_5"] < len(questions)
    two_chunk = {q["id"] for q in questions if len(q["correct_chunks"]) > 1}
    assert all(
        r["rank"] is None or r["rank"] >= 2 for r in figures["ranks"] if r["id"] in two_chunk
    )
