"""Tiny RAG "systems" for CallableTarget tests, importable as ``eval_targets:NAME``."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ragjury.evaluation.targets import TargetAnswer

CONTEXT = "Paris is the capital of France."

calling_threads: list[int] = []
"""Ident of the thread each call to ``sync_answer`` ran on."""

not_a_function = 42


def sync_answer(question: str) -> dict[str, Any]:
    calling_threads.append(threading.get_ident())
    return {"answer": f"sync: {question}", "contexts": [CONTEXT]}


async def async_answer(question: str) -> TargetAnswer:
    return TargetAnswer(answer=f"async: {question}", contexts=(CONTEXT,), logprobs=(-0.5,))


def tuple_answer(question: str) -> tuple[str, list[str]]:
    return f"tuple: {question}", [CONTEXT, "France is in Europe."]


@dataclass
class Document:
    """Shaped like a LangChain document."""

    page_content: str


def document_answer(question: str) -> tuple[str, list[Document]]:
    return "documents", [Document(page_content=CONTEXT)]


@dataclass
class Node:
    """Shaped like a LlamaIndex node: text and an id."""

    text: str
    node_id: str


def node_answer(question: str) -> tuple[str, list[Node]]:
    return "nodes", [Node(CONTEXT, "node-1"), Node("France is in Europe.", "node-2")]


def failing_answer(question: str) -> TargetAnswer:
    raise RuntimeError("vector index is not loaded")


def string_answer(question: str) -> str:
    return "just text, no contexts"


class Assistant:
    """A target reached through a dotted attribute: ``eval_targets:assistant.ask``."""

    def ask(self, question: str) -> tuple[str, list[str]]:
        return f"assistant: {question}", [CONTEXT]


assistant = Assistant()
