"""The OpenAI client's HTTP client: openai's default, its idle connections checked with one
``poll`` (``ragjury/llm/_http.py``), against real sockets on 127.0.0.1; and how the OpenAI
backend reads each answer (``ragjury/llm/backends.py``: ``completion``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletion

from ragjury.config import Settings
from ragjury.llm._http import cheap_idle_checks, http_client
from ragjury.llm.backends import OpenAIBackend

from fakeopenai import FakeOpenAI, Reply, chat_json

pytestmark = pytest.mark.anyio

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def _ignore(response: httpx2.Response) -> None:
    pass


def test_this_install_checks_idle_connections_cheaply() -> None:
    # Names the path in use: when an httpx2 / httpcore2 upgrade lays the pool out otherwise,
    # this fails until _http.py is checked against it (the client still works, slower).
    assert cheap_idle_checks(http_client(_ignore))


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    # The check the wrapper answers: a kept-alive connection the server has since closed is
    # readable (its b""), so the pool drops it and the next request opens a new one. Were
    # the check wrong, the second request would go out on the dead connection and fail.
    connections: list[int] = []
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(_ANSWER)  # keep-alive (HTTP/1.1, no "Connection: close") ...
        await writer.drain()
        writer.close()  # ... and then hangs up while the client holds it idle
        await writer.wait_closed()
        closed.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, http_client(_ignore) as client:
        first = await client.get(f"http://127.0.0.1:{port}/a")
        await closed.wait()
        second = await client.get(f"http://127.0.0.1:{port}/b")
    assert (first.status_code, second.status_code) == (200, 200)
    assert len(connections) == 2


async def test_the_openai_backend_reuses_its_connections_and_reads_each_answer() -> None:
    with FakeOpenAI() as fake:
        fake.route("judge", chat_json({"ok": True}))
        backend = OpenAIBackend(Settings(base_url=fake.base_url, api_key="k", model="m"))
        try:
            for _ in range(3):
                completion = await backend.chat(
                    stage="judge", model="m", messages=[{"role": "user", "content": "hi"}]
                )
                assert completion.choices[0].message.content == '{"ok": true}'
        finally:
            await backend.aclose()
        assert len(fake.requests_for("judge")) == 3


def _answer(**changes: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": '{"ok": true}'}
    answer: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    answer.update(changes)
    return answer


@pytest.mark.parametrize(
    "answer",
    [
        _answer(),
        # what a strict reading would refuse and the openai client accepts as it is
        _answer(id=None, created=1.5, system_fingerprint=7, extra_field={"x": 1}),
        {k: v for k, v in _answer().items() if k not in ("id", "object", "created")},
        _answer(
            choices=[{"index": 0, "message": {"role": "assistant", "content": "a"},
                      "finish_reason": "eos", "logprobs": {"content": [{"token": "a"}]}}]
        ),
    ],
    ids=["exact", "wrong types", "fields missing", "unknown finish reason"],
)  # fmt: skip
async def test_the_backend_reads_an_answer_as_the_openai_client_does(
    answer: dict[str, Any],
) -> None:
    """The answer read in one pass, or (when it does not fit the schema) built as the client
    builds it: either way what the client's own ``chat.completions.create`` returns."""
    with FakeOpenAI() as fake:
        fake.route("judge", Reply(body=answer))
        fake.route("plain", Reply(body=answer))
        backend = OpenAIBackend(Settings(base_url=fake.base_url, api_key="k", model="m"))
        messages = [{"role": "user", "content": "hi"}]
        try:
            ours = await backend.chat(stage="judge", model="m", messages=messages)
        finally:
            await backend.aclose()
        async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k") as client:
            theirs = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-ragjury-agent": "plain"},
            )  # fmt: skip
    assert isinstance(ours, ChatCompletion)
    assert ours.choices[0].message.content == theirs.choices[0].message.content
    assert ours.choices[0].finish_reason == theirs.choices[0].finish_reason
    assert ours.usage == theirs.usage
    assert json.loads(ours.model_dump_json(warnings=False)) == json.loads(
        theirs.model_dump_json(warnings=False)
    )


async def test_an_answer_that_is_not_json_fails_the_call() -> None:
    with FakeOpenAI() as fake:
        fake.route("judge", Reply(body="<html>busy</html>"))
        backend = OpenAIBackend(Settings(base_url=fake.base_url, api_key="k", model="m"))
        try:
            with pytest.raises(json.JSONDecodeError):
                await backend.chat(
                    stage="judge", model="m", messages=[{"role": "user", "content": "hi"}]
                )
        finally:
            await backend.aclose()
