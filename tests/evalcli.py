"""What the `ragjury evaluate` tests share: samples, running the command, reading its results,
and a tiny RAG system on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from ragjury.cli import main

from conftest import read_jsonl
from fakeopenai import FakeOpenAI

EIFFEL = {
    "id": "eiffel",
    "question": "Where is the Eiffel Tower and what is it made of?",
    "answer": "The Eiffel Tower is in Paris. The Eiffel Tower is made of cheese.",
    "contexts": ["The Eiffel Tower is in Paris. The tower is made of wrought iron."],
    "reference": "Paris",
    "must_contain": ["Paris"],
    "must_not_contain": ["cheese"],
}
TOKYO = {
    "id": "tokyo",
    "question": "What is the capital of Japan?",
    "answer": "Tokyo is the capital of Japan.",
    "contexts": ["Tokyo is the capital of Japan."],
    "reference": "Tokyo",
}
REFUSAL = {
    "id": "refusal",
    "question": "Who wrote Hamlet?",
    "answer": "I don't know.",
    "contexts": ["Hamlet is a play by William Shakespeare."],
    "reference": "William Shakespeare",
}


def keyword_samples(path: Path, n: int) -> Path:
    """``n`` one-sentence samples with a keyword test each, as JSONL at ``path``."""
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            sample = {
                "id": f"s{i}",
                "question": f"Where is landmark {i}?",
                "answer": f"Landmark {i} is in Paris.",
                "contexts": [f"Landmark {i} stands in Paris, France."],
                "must_contain": ["Paris"],
            }
            out.write(json.dumps(sample) + "\n")
    return path


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def evaluate(fake: FakeOpenAI | None, tmp_path: Path, samples: Path, *extra: str) -> int:
    """``ragjury evaluate`` on ``samples`` against ``fake`` (None: no endpoint at all)."""
    return main(evaluate_args(fake, tmp_path, samples, *extra))


def evaluate_args(fake: FakeOpenAI | None, tmp_path: Path, samples: Path, *extra: str) -> list[str]:
    """The arguments of :func:`evaluate` (a subprocess runs ``python -m ragjury`` with them):
    results, summary and database in ``tmp_path``."""
    endpoint = ["--base-url", fake.base_url, "--api-key", "test-key"] if fake else []
    return [
        "evaluate",
        str(samples),
        "--out",
        str(tmp_path / "results.jsonl"),
        "--summary",
        str(tmp_path / "summary.json"),
        "--db",
        str(tmp_path / "ragjury.db"),
        *endpoint,
        *extra,
    ]


def results(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in read_jsonl(tmp_path / "results.jsonl")}


class _RagHandler(BaseHTTPRequestHandler):
    reply: ClassVar[dict[str, Any]] = {}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps(self.reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class rag_server:
    """A tiny RAG system on loopback that answers every question with ``reply``."""

    def __init__(self, reply: dict[str, Any]) -> None:
        handler = type("Handler", (_RagHandler,), {"reply": reply})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/ask"

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
