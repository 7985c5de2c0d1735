"""Hand-written sets for the audit's tests: a small corpus of four documents, and records
drafted from it as `ragjury generate` writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragjury.report.audit_input import AuditRecord, audit_record

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
    return [audit_record(r, f"line {i}") for i, r in enumerate(raw, start=1)]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path
