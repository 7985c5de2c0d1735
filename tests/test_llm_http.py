"""The OpenAI client's HTTP client: openai's aiohttp client on asyncio, openai's default under
trio (``ragjury/llm/_http.py``), against real sockets on 127.0.0.1; and how the OpenAI
backend reads each answer (``ragjury/llm/backends.py``: ``completion``)."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import warnings
from typing import Any

import anyio
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletion

from ragjury.config import Settings
from ragjury.llm._http import http_client
from ragjury.llm.backends import OpenAIBackend

from fakeopenai import Behaviour, FakeOpenAI, Reply, chat_json

pytestmark = pytest.mark.anyio

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


async def _ignore(response: httpx2.Response) -> None:
    pass


async def test_on_asyncio_the_client_is_openais_aiohttp_client() -> None:
    # Names the transport in use: were openai's aiohttp client missing (openai installed
    # without its aiohttp extra), ragjury would fail here, not fall back slower unnoticed.
    async with http_client(_ignore) as client:
        assert isinstance(client, openai.DefaultAioHttpClient)


def test_under_trio_the_client_is_openais_default_and_answers() -> None:
    # aiohttp runs on asyncio only: a trio application that embeds ragjury (Jury runs in the
    # caller's event loop, through anyio) gets openai's default client, and it works.
    async def ask(url: str) -> tuple[bool, str | None]:
        client = http_client(_ignore)
        aiohttp_client = isinstance(client, openai.DefaultAioHttpClient)
        await client.aclose()
        backend = OpenAIBackend(Settings(base_url=url, api_key="k", model="m"))
        try:
            answer = await backend.chat(
                stage="judge", model="m", messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            await backend.aclose()
        return aiohttp_client, answer.choices[0].message.content

    with FakeOpenAI() as fake:
        fake.route("judge", chat_json({"ok": True}))
        assert anyio.run(ask, fake.base_url, backend="trio") == (False, '{"ok": true}')


async def test_a_refused_connection_is_a_connection_error_not_a_timeout() -> None:
    # openai's aiohttp transport reports it as a connect timeout; the client would then say
    # "did not answer within --timeout" to a user whose --base-url names the wrong port
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with http_client(_ignore) as client:
        with pytest.raises(httpx2.ConnectError, match=f"127.0.0.1:{port}"):
            await client.get(f"http://127.0.0.1:{port}/v1/models")


async def test_a_server_that_hangs_up_without_answering_is_a_connection_error() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, http_client(_ignore) as client:
        with pytest.raises(httpx2.RemoteProtocolError, match="disconnected"):
            await client.get(f"http://127.0.0.1:{port}/v1/models")


async def test_a_hung_answer_times_out_as_a_timeout() -> None:
    with FakeOpenAI() as fake:
        fake.route("judge", chat_json({"ok": True}, delay=3.0))
        settings = Settings(base_url=fake.base_url, api_key="k", model="m", timeout=0.3)
        backend = OpenAIBackend(settings)
        try:
            with anyio.fail_after(2):
                with pytest.raises(openai.APITimeoutError):
                    await backend.chat(
                        stage="judge", model="m", messages=[{"role": "user", "content": "hi"}]
                    )
        finally:
            await backend.aclose()


def test_requests_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as openai's default client: HTTP_PROXY / HTTPS_PROXY / ALL_PROXY, NO_PROXY respected
    # (httpx2 reads them; each proxy gets an aiohttp transport of its own)
    seen: list[bytes] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        seen.append(head.split(b"\r\n", 1)[0])
        writer.write(_ANSWER)
        await writer.drain()
        writer.close()

    async def ask() -> list[int]:
        server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("NO_PROXY", "skipped.invalid")
        monkeypatch.delenv("http_proxy", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with server, http_client(_ignore) as client:
            answer = await client.get("http://llm.invalid/v1/models")
            with pytest.raises(httpx2.ConnectError):  # not proxied: the name does not resolve
                await client.get("http://skipped.invalid/v1/models")
        return [answer.status_code]

    assert asyncio.run(ask()) == [200]
    assert seen == [b"GET http://llm.invalid/v1/models HTTP/1.1"]

    async def refused() -> None:
        with socket.socket() as probe:  # nothing listens there
            probe.bind(("127.0.0.1", 0))
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{probe.getsockname()[1]}")
        async with http_client(_ignore) as client:
            await client.get("http://llm.invalid/v1/models")

    with pytest.raises(httpx2.ProxyError, match="Cannot connect"):  # a proxy that is down
        asyncio.run(refused())


async def test_credentials_in_the_base_url_are_sent_as_the_default_client_sends_them() -> None:
    # httpx2 makes them the Authorization header (in place of the API key's); aiohttp would
    # refuse the URL that still carries them beside that header
    with FakeOpenAI() as fake:
        fake.route("judge", chat_json({"ok": True}))
        url = fake.base_url.replace("http://", "http://alice:hunter2@")
        for client in (http_client(_ignore), openai.DefaultAsyncHttpxClient()):
            async with openai.AsyncOpenAI(
                base_url=url, api_key="sk-x", max_retries=0, http_client=client
            ) as llm:
                await llm.post(
                    "/chat/completions",
                    body={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                    cast_to=bytes,
                    options={"headers": {"x-ragjury-agent": "judge"}},
                )
        ours, theirs = fake.requests_for("judge")
    assert ours.headers["authorization"] == theirs.headers["authorization"]
    assert ours.headers["authorization"].startswith("Basic ")


async def test_the_client_calls_the_hook_with_every_answer_and_closes_cleanly() -> None:
    # the hook is how the rate-limit headers are read (ragjury/llm/ratelimit.py); closing
    # leaves no aiohttp session or connection behind to warn "Unclosed client session"
    limits: list[str | None] = []

    async def hook(response: httpx2.Response) -> None:
        limits.append(response.headers.get("x-ratelimit-remaining-requests"))

    with FakeOpenAI() as fake:
        fake.route("judge", chat_json({"ok": True}))
        fake.behave(Behaviour(rpm=100))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with http_client(hook) as client:
                for _ in range(2):
                    answer = await client.post(
                        f"{fake.base_url}/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        headers={"x-ragjury-agent": "judge"},
                    )
                    assert answer.status_code == 200
            del client
            gc.collect()
        assert limits == ["99", "98"]
        assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    # A kept-alive connection the server has since closed is dropped from the pool, and the
    # next request opens a new one. Were it reused, the POST (which aiohttp never sends
    # twice on its own) would go out on the dead connection and fail. aiohttp learns of the
    # hang-up when its event loop reads the connection's end, on the loop's next pass or so
    # (httpx2's pool polled the socket at each request instead): a request started in that
    # same pass takes the dead connection and fails as a connection error, which the LLM
    # layer retries. So the client is given a few passes of its loop before the second.
    connections: list[int] = []
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(_ANSWER)  # keep-alive (HTTP/1.1, no "Connection: close") ...
        await writer.drain()
        writer.close()  # ... and then hangs up while the client holds it idle
        await writer.wait_closed()
        closed.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, http_client(_ignore) as client:
        first = await client.post(f"http://127.0.0.1:{port}/a", json={"n": 1})
        await closed.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        second = await client.post(f"http://127.0.0.1:{port}/b", json={"n": 2})
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
