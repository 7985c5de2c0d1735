"""A corpus of related pages and a scripted generator that drafts every question type from
the texts it is given, for the question-type tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import generator_reply, own_answer_reply, question_of
from fakeopenai import RecordedRequest, Reply, chat_json

_TEXT = re.compile(r"<text>\n(.*?)\n</text>", re.DOTALL)
_NUMBERED = re.compile(r'<text number="(\d+)" source="([^"]*)">\n(.*?)\n</text>', re.DOTALL)
_WANTED = re.compile(r"Write exactly (\d+) ")
_HEADING = re.compile(r"^# (.+)$", re.MULTILINE)
_STATEMENT = re.compile(r"^(?:The|Its) .+\.$", re.MULTILINE)


def tag(k: int) -> str:
    return chr(97 + k // 26) + chr(97 + k % 26)


def write_topics(folder: Path, topics: int) -> Path:
    """Two pages per topic (``{tag}-a.md``, ``{tag}-b.md``) that share three rare words of
    their own; every page has a factoid Q:/A: line too."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(topics):
        t = tag(k)
        service, record, pipeline = f"vel{t}", f"mor{t}", f"dan{t}"
        pages = {
            "a": (
                f"The {service} service stores {record} records for the {pipeline} pipeline.\n"
                f"Its {service} limit is {10 + k} items per batch.",
                f"What is the {service} limit of the {pipeline} pipeline?",
                f"{10 + k} items",
            ),
            "b": (
                f"The {pipeline} pipeline reads {record} records through the {service} gateway.\n"
                f"Its {pipeline} retention is {k + 2} days.",
                f"How long does the {pipeline} pipeline keep {record} records?",
                f"{k + 2} days",
            ),
        }
        for part, (statements, question, answer) in pages.items():
            body = f"# Topic {t} part {part}\n\n{statements}\n\nQ: {question}\nA: {answer}\n"
            (folder / f"{t}-{part}.md").write_text(body, encoding="utf-8")
    return folder


def _wanted(text: str) -> int:
    return int(_WANTED.search(text).group(1))  # type: ignore[union-attr]  # our prompts have it


def typed_generator_reply(request: RecordedRequest) -> Reply:
    """Draft what the prompt asks for: factoids from the Q:/A: lines; a reasoning question
    from the two statements of its text; multi-hop and comparative questions quoting every
    numbered text."""
    text = request.text()
    wanted = _wanted(text)
    if "<text number=" in text:
        parts = [(int(n), source, body) for n, source, body in _NUMBERED.findall(text)]
        headings = [_HEADING.search(body).group(1) for _, _, body in parts]  # type: ignore[union-attr]
        quotes = [_STATEMENT.findall(body)[0] for _, _, body in parts]
        t, part = headings[0].split()[1], headings[0][-1]
        if "comparison question" in text:
            pair = {
                "question": f"How do the vel{t} service and the dan{t} pipeline differ "
                + ("in storing records?" if part == "a" else "as gateways for readers?"),
                "answer": "One stores the records, the other reads them.",
                "compared": [
                    {"name": headings[i], "text_number": n, "quote": quotes[i]}
                    for i, (n, _, _) in enumerate(parts)
                ],
            }
        else:
            pair = {
                "question": f"Which mor{t} records join vel{t} and dan{t} "
                + ("when stored?" if part == "a" else "once read back?"),
                "answer": "The records both of them name.",
                "evidence": [
                    {"text_number": n, "quote": quotes[i]} for i, (n, _, _) in enumerate(parts)
                ],
            }
        return chat_json({"pairs": [pair] * wanted}, prompt_tokens=200, completion_tokens=60)
    if "reasoning question" in text:
        context = _TEXT.search(text).group(1)  # type: ignore[union-attr]  # our prompt has it
        heading = _HEADING.search(context).group(1)  # type: ignore[union-attr]
        t, part = heading.split()[1], heading[-1]
        pair = {
            "question": f"Given its vel{t} limit, how many mor{t} records can dan{t} take "
            + ("per batch?" if part == "a" else "before retention ends?"),
            "answer": "Both figures apply together.",
            "steps": _STATEMENT.findall(context)[:2],
        }
        return chat_json({"pairs": [pair] * wanted}, prompt_tokens=150, completion_tokens=50)
    return generator_reply(request)


_TOPIC = re.compile(r"\b(?:vel|mor|dan)([a-z]{2})\b")
_TYPED_ANSWERS = (
    ("Which mor", "The records both of them name.", ("a", "b")),
    ("How do the vel", "One stores the records, the other reads them.", ("a", "b")),
    ("Given its vel", "Both figures apply together.", ()),
)
"""A typed question's start, its answer, and the parts of its topic a reader needs to see
(none: either part's page will do)."""


def typed_answer_reply(request: RecordedRequest, *, alone: frozenset[str] = frozenset()) -> Reply:
    """The answerability critic answering a typed corpus's questions from the text it is
    shown: a multi-hop or comparative question only when it sees both pages of its topic, or
    a page named in ``alone`` (``"aa-b"``: topic aa's page b answers it by itself); a
    reasoning question from its page; a factoid from its Q:/A: line."""
    question = question_of(request)
    context = _TEXT.search(request.text()).group(1)  # type: ignore[union-attr]  # our prompt
    topic = _TOPIC.search(question)
    for start, answer, needed in _TYPED_ANSWERS:
        if not question.startswith(start) or topic is None:
            continue
        t = topic.group(1)
        seen = {part for part in ("a", "b") if f"# Topic {t} part {part}" in context}
        enough = set(needed) <= seen if needed else bool(seen)
        if enough or any(f"{t}-{part}" in alone for part in seen):
            return chat_json({"answer": answer, "answerable": True})
        return chat_json({"answer": "The text names only part of it.", "answerable": False})
    return own_answer_reply(request)


def record_types(path: Path) -> list[str]:
    return [json.loads(line)["question_type"] for line in path.read_text().splitlines()]
