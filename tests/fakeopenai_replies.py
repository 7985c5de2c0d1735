"""Replies and requests of the scripted OpenAI-compatible server (``fakeopenai``).

The helpers that build a scripted answer (``chat``, ``chat_json``, ``tool_call``, ``error``,
``embedding``, or a raw :class:`Reply`), what a request looks like to a responder
(:class:`RecordedRequest`), and an agent's script of replies. Import them from
``fakeopenai``, which re-exports them.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

AGENT_HEADER = "x-ragjury-agent"

_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer."""

    status: int = 200
    body: dict[str, Any] | str | None = None  # dict -> JSON; str -> sent raw (e.g. malformed)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (slow answers)

    def encoded(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, str):
            return self.body.encode("utf-8")
        return json.dumps(self.body).encode("utf-8")


def chat(
    content: str,
    *,
    prompt_tokens: int = 20,
    completion_tokens: int = 10,
    logprobs: list[tuple[str, float]] | None = None,
    model: str = "fake-model",
    finish_reason: str = "stop",
    delay: float = 0.0,
) -> Reply:
    """A valid ``/v1/chat/completions`` answer whose message content is ``content`` verbatim."""
    return _completion(
        {"role": "assistant", "content": content},
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        logprobs=logprobs,
        model=model,
        finish_reason=finish_reason,
        delay=delay,
    )


def chat_json(obj: Any, **kw: Any) -> Reply:
    """``chat(json.dumps(obj), **kw)``."""
    return chat(json.dumps(obj), **kw)


def tool_call(
    name: str,
    arguments: Any,
    *,
    prompt_tokens: int = 20,
    completion_tokens: int = 10,
    model: str = "fake-model",
    delay: float = 0.0,
) -> Reply:
    """A chat answer that calls tool ``name`` (for ``instructor.Mode.TOOLS``).

    ``arguments`` is JSON-encoded unless it is already a string (pass a string to send
    malformed arguments).
    """
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_fake{next(_ids)}",
                "type": "function",
                "function": {"name": name, "arguments": args},
            }
        ],
    }
    return _completion(
        message,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        logprobs=None,
        model=model,
        finish_reason="tool_calls",
        delay=delay,
    )


def _completion(
    message: dict[str, Any],
    *,
    prompt_tokens: int,
    completion_tokens: int,
    logprobs: list[tuple[str, float]] | None,
    model: str,
    finish_reason: str,
    delay: float,
) -> Reply:
    logprobs_body: dict[str, Any] | None = None
    if logprobs is not None:
        logprobs_body = {
            "content": [
                {"token": token, "logprob": lp, "bytes": None, "top_logprobs": []}
                for token, lp in logprobs
            ]
        }
    body: dict[str, Any] = {
        "id": f"chatcmpl-fake{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason,
                "logprobs": logprobs_body,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return Reply(body=body, delay=delay)


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error(
    status: int,
    message: str = "simulated error from FakeOpenAI",
    *,
    retry_after: float | None = None,
    retry_after_ms: int | None = None,
    delay: float = 0.0,
) -> Reply:
    """An OpenAI-style error answer, optionally with ``Retry-After`` / ``retry-after-ms``."""
    headers: dict[str, str] = {}
    if retry_after is not None:
        whole = float(retry_after).is_integer()
        headers["Retry-After"] = str(int(retry_after)) if whole else str(float(retry_after))
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    err_type = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "api_error")
    body = {"error": {"message": message, "type": err_type, "param": None, "code": None}}
    return Reply(status=status, body=body, headers=headers, delay=delay)


def embedding(
    vectors: list[list[float]], *, prompt_tokens: int = 5, model: str = "fake-embedding"
) -> Reply:
    """A valid ``/v1/embeddings`` answer with one item per vector."""
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": vector}
            for i, vector in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return Reply(body=body)


def count_tokens(text: str) -> int:
    """A plausible token count: about four characters a token, at least one for any text."""
    return (len(text) + 3) // 4


def _answer_text(body: dict[str, Any]) -> str:
    """The content (or tool-call arguments) of every choice of a completion body."""
    parts: list[str] = []
    for choice in body.get("choices") or []:
        message = (choice.get("message") or {}) if isinstance(choice, dict) else {}
        if isinstance(message.get("content"), str):
            parts.append(message["content"])
        for call in message.get("tool_calls") or []:
            arguments = (call.get("function") or {}).get("arguments")
            if isinstance(arguments, str):
                parts.append(arguments)
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str  # without the query string, e.g. "/v1/chat/completions"
    headers: dict[str, str]  # lower-cased keys
    body: Any  # parsed JSON, or None (empty or not JSON: see raw_body)
    agent: str | None  # value of the x-ragjury-agent header, if any
    received_at: float  # time.monotonic()
    raw_body: bytes = b""

    @property
    def messages(self) -> list[dict[str, Any]]:
        if isinstance(self.body, dict):
            messages = self.body.get("messages")
            if isinstance(messages, list):
                return [m for m in messages if isinstance(m, dict)]
        return []

    def text(self) -> str:
        """All message contents joined with newlines (text parts of multi-part contents too)."""
        parts: list[str] = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        parts.append(part["text"])
        return "\n".join(parts)


Responder = Callable[[RecordedRequest], Reply]


@dataclass
class _Script:
    replies: tuple[Reply | Responder, ...]
    position: int = 0

    def next(self) -> Reply | Responder:
        item = self.replies[min(self.position, len(self.replies) - 1)]
        self.position += 1
        return item


def _default_fallback(request: RecordedRequest) -> Reply:
    return error(500, f"no scripted reply for agent {request.agent}")


def _default_embeddings(request: RecordedRequest) -> Reply:
    return error(500, "no scripted embeddings reply (call FakeOpenAI.embeddings())")
