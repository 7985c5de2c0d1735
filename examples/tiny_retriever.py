"""A tiny RAG system to judge with ``ragjury evaluate --target``: keyword overlap over the
sections of a folder of Markdown files, served over HTTP with the standard library only.

    python examples/tiny_retriever.py examples/fastapi-docs            # port 8000
    curl -s localhost:8000/query -d '{"question": "How do I add CORS?"}'

It cuts each file at its headings (not as ``ragjury generate`` chunks it: the text rule still
finds the chunk a question came from), ranks the sections by how many of the question's words
they hold, and answers ``{"answer", "contexts": [{"id", "text"}, ...]}`` with the top five,
best first. The "answer" is the best section's first line: this system only retrieves.
"""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOP = 5
_WORD = re.compile(r"[a-z0-9]+")
_HEADING = re.compile(r"^(?=#{1,3} )", re.MULTILINE)
_COMMON = frozenset(
    "a an and are as at be by can do does for from how i in is it of on or the to what "  # noqa: SIM905 - a word list reads best as one string
    "when which who why with you your".split()
)


def sections(folder: Path) -> list[dict[str, str]]:
    """Every section of every Markdown file under ``folder``, with an id ``file#n``."""
    found: list[dict[str, str]] = []
    for path in sorted(folder.rglob("*.md")):
        parts = [p.strip() for p in _HEADING.split(path.read_text(encoding="utf-8")) if p.strip()]
        found.extend({"id": f"{path.name}#{n}", "text": part} for n, part in enumerate(parts))
    return found


def words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _COMMON


def rank(question: str, index: list[dict[str, str]]) -> list[dict[str, str]]:
    """The sections that share a word with the question, most shared words first."""
    asked = words(question)
    scored = [(len(asked & words(s["text"])), n) for n, s in enumerate(index)]
    return [index[n] for shared, n in sorted(scored, key=lambda x: (-x[0], x[1])) if shared]


def handler(index: list[dict[str, str]]) -> type[BaseHTTPRequestHandler]:
    class Query(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            question = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["question"]
            top = rank(question, index)[:TOP]
            answer = top[0]["text"].splitlines()[0] if top else "I don't know."
            body = json.dumps({"answer": answer, "contexts": top}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--port", type=int, default=8000, help="0: any free port")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(sections(args.folder)))
    print(f"http://127.0.0.1:{server.server_address[1]}/query", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
