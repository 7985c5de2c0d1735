"""Scripted judges for the evaluation agents: each reads its own prompt and answers as a
careful model would, so a run is deterministic however the agents interleave."""

from __future__ import annotations

import re

from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json, embedding

_ANSWER = re.compile(r"(?:^|\n)Answer:\n(.*)\Z", re.DOTALL)
_PASSAGES = re.compile(r"<passages>\n(.*?)</passages>", re.DOTALL)
_STATEMENT = re.compile(r"^(\d+)\. (.+)$", re.MULTILINE)
_SECTION = re.compile(r"Reference answer:\n(.*?)\n\nAnswer to grade:\n(.*)\Z", re.DOTALL)
_NUMBERED = re.compile(r"^\((\d+)\) (.*)$", re.MULTILINE)
_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_PRECISION_ANSWER = re.compile(
    r"(?:known to be right|Answer given):\n(.*?)\n\n<passages>", re.DOTALL
)
_STOPWORDS = {"what", "which", "where", "does", "is", "the", "of", "a", "an", "and", "how", "who"}


def user_message(request: RecordedRequest) -> str:
    """Our own user message (the first one; re-asks append more)."""
    return next(str(m["content"]) for m in request.messages if m["role"] == "user")


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def splitter_reply(request: RecordedRequest) -> Reply:
    """One statement per sentence of the answer; none for a refusal."""
    answer = _ANSWER.search(user_message(request)).group(1)  # type: ignore[union-attr]  # ours
    if "don't know" in answer.lower() or "cannot help" in answer.lower():
        return chat_json({"statements": []})
    sentences = [s.strip().rstrip(".") + "." for s in re.split(r"(?<=\.)\s+", answer) if s.strip()]
    return chat_json({"statements": sentences}, prompt_tokens=60, completion_tokens=20)


def passages_of(request: RecordedRequest) -> str:
    found = _PASSAGES.search(user_message(request))
    return found.group(1) if found else ""


def statements_of(request: RecordedRequest) -> list[str]:
    text = user_message(request).split("Statements:", 1)[1]
    return [m.group(2) for m in _STATEMENT.finditer(text)]


def verdict_reply(request: RecordedRequest) -> Reply:
    """Supported when the statement (without its full stop) occurs in the passages."""
    passages = _norm(passages_of(request))
    verdicts = []
    for index, statement in enumerate(statements_of(request)):
        quote = statement.rstrip(".")
        supported = _norm(quote) in passages
        verdicts.append(
            {
                "statement_index": index,
                "reason": "stated in the passages" if supported else "not in the passages",
                "evidence": quote if supported else "",
                "supported": supported,
            }
        )
    return chat_json({"verdicts": verdicts}, prompt_tokens=120, completion_tokens=40)


def correctness_reply(request: RecordedRequest) -> Reply:
    reference, answer = _SECTION.search(user_message(request)).groups()  # type: ignore[union-attr]
    score = 5 if _norm(reference).rstrip(".") in _norm(answer) else 2
    return chat_json({"reasoning": f"scripted: {score}", "score": score})


def rubric_reply(request: RecordedRequest) -> Reply:
    grade = {"reasoning": "scripted", "score": 5}
    return chat_json(
        {"toxicity": grade, "faithfulness": grade, "helpfulness": grade, "relevance": grade}
    )


def numbered_contexts(request: RecordedRequest) -> list[str]:
    """The ``(i) text`` passages of a context judge's prompt, in order."""
    return [m.group(2) for m in _NUMBERED.finditer(passages_of(request))]


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if w not in _STOPWORDS}


def context_relevance_reply(request: RecordedRequest) -> Reply:
    """Relevant when a passage shares a content word with the question."""
    question = _content_words(_QUESTION.search(user_message(request)).group(1))  # type: ignore[union-attr]  # ours
    verdicts = [
        {
            "context_index": index,
            "reason": "shares the question's words"
            if question & _content_words(c)
            else "off topic",
            "relevant": bool(question & _content_words(c)),
        }
        for index, c in enumerate(numbered_contexts(request))
    ]
    return chat_json({"verdicts": verdicts}, prompt_tokens=90, completion_tokens=30)


def context_precision_reply(request: RecordedRequest) -> Reply:
    """Useful when a passage holds the answer (without its full stop)."""
    answer = _PRECISION_ANSWER.search(user_message(request)).group(1)  # type: ignore[union-attr]  # ours
    wanted = _norm(answer).rstrip(".")
    verdicts = [
        {
            "context_index": index,
            "reason": "holds the answer" if wanted in _norm(c) else "does not hold the answer",
            "relevant": wanted in _norm(c),
        }
        for index, c in enumerate(numbered_contexts(request))
    ]
    return chat_json({"verdicts": verdicts}, prompt_tokens=90, completion_tokens=30)


def answer_relevance_reply(request: RecordedRequest) -> Reply:
    """A refusal scores 1; any other answer 5."""
    answer = _ANSWER.search(user_message(request)).group(1)  # type: ignore[union-attr]  # ours
    refusal = "don't know" in answer.lower() or "cannot help" in answer.lower()
    return chat_json(
        {"reasoning": "scripted", "refusal": refusal, "score": 1 if refusal else 5},
        prompt_tokens=50,
        completion_tokens=20,
    )


def critique_reply(request: RecordedRequest) -> Reply:
    """A question critic (groundedness, standalone) content with every question."""
    return chat_json({"rationale": "scripted", "rating": 5}, prompt_tokens=50, completion_tokens=12)


def script_judges(fake: FakeOpenAI) -> None:
    fake.route("statement_splitter", splitter_reply)
    fake.route("verdict_judge", verdict_reply)
    fake.route("correctness_judge", correctness_reply)
    fake.route("rubric_judge", rubric_reply)
    fake.route("context_relevance_judge", context_relevance_reply)
    fake.route("context_precision_judge", context_precision_reply)
    fake.route("answer_relevance_judge", answer_relevance_reply)
    fake.route("question_groundedness_judge", critique_reply)
    fake.route("question_standalone_judge", critique_reply)
    fake.embeddings(embedding([[1.0, 0.0], [0.6, 0.8]]))
