"""`ragjury audit` as a user runs it (a subprocess): the table, --json, errors that name the
line and the fix; the audit's lines at the end of `generate`; the dataset report's section."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragjury.cli import main
from ragjury.errors import InputError
from ragjury.report.audit_input import read_dataset

from auditsets import record, skewed_set, write_corpus, write_jsonl
from conftest import read_jsonl, script_happy_path, write_qa_document
from fakeopenai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]


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
            "--summary",
            "summary.json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )

    assert len(read_jsonl(tmp_path / "kept.jsonl")) == 3, done.stderr
    kept_audit = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))["audit"]
    assert (kept_audit["coverage"]["documents_covered"], kept_audit["coverage"]["documents"]) == (
        2,
        3,
    )
    assert kept_audit["skew"]["kept"] == 2
    lines = done.stderr.splitlines()
    assert (
        "ragjury audit: coverage: 2 of 3 documents (67%) and 2 of 3 chunks (67%) have a kept pair"
        in lines
    )
    assert (
        f"ragjury audit: skew: {docs / 'ports.md'} holds 67% of the kept pairs (2; 2.0x an even "
        "share over 3 documents)"
    ) in lines
    command = f"ragjury audit kept.jsonl --corpus {docs} --whole-documents"
    assert f"ragjury audit: difficulty, and the documents without a pair: {command}" in lines
    audited = ragjury(
        "audit", "kept.jsonl", "--corpus", str(docs), "--whole-documents", "--json", cwd=tmp_path
    )
    assert audited.returncode == 0, audited.stderr
    audit = json.loads(audited.stdout)
    assert "unknown_chunk_ids" not in audit
    assert audit["coverage"]["largest_uncovered"] == [
        {"document": str(docs / "blank.md"), "characters": len(blank), "chunks": 1}
    ]

    # the same set as CSV (lists as JSON text in their cells) audits the same
    exported = ragjury("export", "--db", "r.db", "--out", "kept.csv", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    from_csv = ragjury(
        "audit", "kept.csv", "--corpus", str(docs), "--whole-documents", "--json", cwd=tmp_path
    )
    assert from_csv.returncode == 0, from_csv.stderr
    assert json.loads(from_csv.stdout) == audit


def test_the_dataset_report_has_an_audit_section(tmp_path: Path) -> None:
    raw = [
        {**r, "critiques": {}}
        for r in [
            record(1, "What port does uvicorn use by default?", "ports.md", tmp_path),
            record(2, "What port does Uvicorn use, by default?", "ports.md", tmp_path),
            record(
                3,
                "Is it true that cross-origin requests are allowed by adding the CORSMiddleware?",
                "cors.md",
                tmp_path,
            ),
        ]
    ]
    dataset = write_jsonl(tmp_path / "kept.jsonl", raw)
    (tmp_path / "summary.json").write_text('{"documents": 4, "chunks": 4}', encoding="utf-8")
    out = tmp_path / "dataset.html"

    code = main(
        ["report", str(dataset), "--summary", str(tmp_path / "summary.json"), "--out", str(out)]
    )

    assert code == 0
    html = out.read_text(encoding="utf-8")
    section = html.split('id="audit-title"', 1)[1].split("</section>", 1)[0]
    assert "coverage: 2 of 4 documents (50%) and 2 of 4 chunks (50%) have a kept pair" in section
    assert "<td>q1: What port does uvicorn use by default?</td>" in section
    assert "cross origin requests are allowed by adding the corsmiddleware" in section


def test_without_bm25s_the_audit_says_how_to_install_it_and_reports_the_rest(
    tmp_path: Path,
) -> None:
    folder = write_corpus(tmp_path)
    dataset = write_jsonl(tmp_path / "set.jsonl", skewed_set(folder))
    blocked = tmp_path / "blocked" / "bm25s"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('bm25s is not installed')\n")

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragjury",
            "audit",
            str(dataset),
            "--corpus",
            str(folder),
            "--whole-documents",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": f"{tmp_path / 'blocked'}{os.pathsep}{ROOT}"},
    )

    assert done.returncode == 0, done.stderr
    audit = json.loads(done.stdout)
    assert audit["difficulty"] is None
    assert audit["difficulty_note"] == "difficulty needs bm25s: pip install 'ragjury[audit]'"
    assert audit["coverage"]["documents_covered"] == 2
