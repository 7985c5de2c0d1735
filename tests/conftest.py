"""Shared fixtures: a scripted OpenAI-compatible server on loopback and a scripted "LLM" for
the generation agents that answers from the text it is given, so runs are deterministic
however the agents interleave."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog

from ragjury.config import GenerationOptions, Settings

from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json
from pgserver import PostgresServer, start_or_skip


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Each test starts from structlog's defaults: a command run in-process configures the
    logging for its own level (``--quiet`` filters below warnings), and a later test that
    captures logs must not inherit that filter."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


CRITIC_AGENTS = ("groundedness_critic", "relevance_critic", "standalone_critic")
ANSWER_AGENTS = ("answerability_critic", "answer_agreement")
"""The answerability critic's two stages: its own answers, and their comparisons."""
CHECK_CALLS = 2
"""LLM calls the answerability critic makes for a pair it can answer (answer, compare)."""
_WANTED = re.compile(r"Write exactly (\d+) question")
_TEXT = re.compile(r"<text>\n(.*?)\n</text>", re.DOTALL)
_PAIR = re.compile(r"^Q: (?P<q>.+)\nA: (?P<a>.+)$", re.MULTILINE)
_QUESTION = re.compile(r"^Question: (.+)$", re.MULTILINE)
_ANSWERS = re.compile(
    r"The key's answer:\n(?P<key>.*?)\n\nThe second reader's answer:\n(?P<own>.*)\Z", re.DOTALL
)


class ManualClock:
    """A clock that only moves when something sleeps on it: ``clock()`` is the time,
    ``clock.sleep`` records each wait and moves the time on by it (then yields once)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await anyio.lowlevel.checkpoint()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL server for the session (see ``tests/pgserver.py``)."""
    server = start_or_skip()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> str:
    """The URL of a fresh database of its own on the session's server."""
    return postgres.database()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def make_settings(fake: FakeOpenAI, tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for a test run against ``fake``, with a database in ``tmp_path``."""
    generate = GenerationOptions(whole_documents=True, **overrides.pop("generate", {}))
    base: dict[str, Any] = {
        "base_url": fake.base_url,
        "api_key": "test-key",
        "model": "fake-model",
        "db": tmp_path / "ragjury.db",
        "concurrency": 4,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        "generate": generate,
    }
    base.update(overrides)
    return Settings(**base)


def write_qa_document(folder: Path, name: str, pairs: list[tuple[str, str]]) -> Path:
    """A document whose text carries Q:/A: lines that the scripted generator turns into pairs."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    body = "\n".join(f"Q: {q}\nA: {a}" for q, a in pairs)
    path.write_text(f"# {name}\n\n{body}\n", encoding="utf-8")
    return path


def generator_reply(request: RecordedRequest) -> Reply:
    """Answer a generator prompt with the Q:/A: pairs found in its text, as many as asked."""
    text = request.text()
    wanted = int(_WANTED.search(text).group(1))  # type: ignore[union-attr]  # our prompt has it
    context = _TEXT.search(text).group(1)  # type: ignore[union-attr]  # our prompt has it
    pairs = [{"question": m["q"], "answer": m["a"]} for m in _PAIR.finditer(context)][:wanted]
    return chat_json({"pairs": pairs}, prompt_tokens=100, completion_tokens=30)


def question_of(request: RecordedRequest) -> str:
    """The question a critic prompt asks about (the first one in the request)."""
    return _QUESTION.search(request.text()).group(1)  # type: ignore[union-attr]  # our prompt


def critic_reply(
    ratings: Mapping[str, int] | None = None, default: int = 5
) -> Callable[[RecordedRequest], Reply]:
    """A critic that rates each question by ``ratings`` (``default`` for any other)."""

    def respond(request: RecordedRequest) -> Reply:
        rating = (ratings or {}).get(question_of(request), default)
        return chat_json(
            {"rationale": f"scripted rating {rating}", "rating": rating},
            prompt_tokens=50,
            completion_tokens=12,
        )

    return respond


def own_answer_reply(request: RecordedRequest) -> Reply:
    """The answerability critic answering from its text alone, as a careful reader would:
    the answer on the ``A:`` line under the question's ``Q:`` line, if the text has one."""
    text = request.text()
    question = question_of(request)
    context = _TEXT.search(text).group(1)  # type: ignore[union-attr]  # our prompt has it
    found = re.search(rf"^Q: {re.escape(question)}\nA: (.+)$", context, re.MULTILINE)
    if found is None:
        reply = {"answer": "The text does not say.", "answerable": False}
    else:
        reply = {"answer": found.group(1), "answerable": True}
    return chat_json(reply, prompt_tokens=60, completion_tokens=15)


def agreement_reply(request: RecordedRequest) -> Reply:
    """The comparison of the drafted answer with the critic's own: 5 when they are the same
    text (case and spaces aside), else 1."""
    found = _ANSWERS.search(request.messages[-1]["content"])
    assert found is not None, "the answer_agreement prompt gives both answers"
    same = " ".join(found["key"].split()).casefold() == " ".join(found["own"].split()).casefold()
    rating = 5 if same else 1
    return chat_json(
        {"rationale": f"the answers {'agree' if same else 'differ'}", "rating": rating},
        prompt_tokens=40,
        completion_tokens=12,
    )


def script_answer_check(fake: FakeOpenAI) -> None:
    """The answerability critic: answers from the text, compared by exact text."""
    fake.route("answerability_critic", own_answer_reply)
    fake.route("answer_agreement", agreement_reply)


def script_happy_path(
    fake: FakeOpenAI, ratings: Mapping[str, Mapping[str, int]] | None = None
) -> None:
    """Generator from the text; each critic from ``ratings[agent]`` (default 5); the
    answerability critic answers from the text (:func:`script_answer_check`)."""
    fake.route("generator", generator_reply)
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply((ratings or {}).get(agent)))
    script_answer_check(fake)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_summary(folder: Path) -> dict[str, Any]:
    """The ``--summary`` JSON a test run wrote to ``folder / "summary.json"``."""
    data: dict[str, Any] = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    return data
