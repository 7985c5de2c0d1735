"""The OpenAI client's HTTP client: openai's default, its idle connections checked with one
``poll`` (``ragjury/llm/_http.py``), against real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from ragjury.config import Settings
from ragjury.llm._http import cheap_idle_checks, http_client
from ragjury.llm.backends import OpenAIBackend

from fakeopenai import FakeOpenAI, chat_json

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
