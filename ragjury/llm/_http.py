"""The HTTP client of ragjury's OpenAI client: openai's default, with idle connections that
are cheap to check.

Each time the connection pool hands out or takes back a connection (twice a request), httpcore
checks every idle kept-alive connection for a server that hung up: it asks the network
stream whether its socket is readable. Through anyio that question builds the stream's whole
attribute table (a ``getpeername`` system call and a dozen closures) before one ``poll``: with
a dozen idle connections, about a tenth of ragjury's client CPU per request on the throughput
benchmark. :class:`_CheapIdleChecks` wraps the pool's network backend so that each stream
keeps its socket from the start and answers that question with the ``poll`` alone: the same
check, on the same socket.

It is httpcore2's pool's backend that is wrapped (``_network_backend``, the attribute its
connections are made with): if the installed httpx2 / httpcore2 lays its pool out otherwise,
the client is openai's default as it is (same requests, slower), and
``tests/test_llm_http.py`` says which one this install uses.
"""

# ruff: noqa: ASYNC109  (httpcore2's network interface takes its timeouts as parameters)
from __future__ import annotations

import select
import socket
import ssl
import typing
from collections.abc import Awaitable, Callable, Iterable

import httpcore2
import httpx2
import openai

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)
"""A ``setsockopt`` argument tuple, as httpcore2 passes them."""

ExtraInfo = bool | socket.socket | ssl.SSLObject | tuple[str, int] | None
"""What a network stream tells of itself (``get_extra_info``)."""


def http_client(
    on_response: Callable[[httpx2.Response], Awaitable[None]],
) -> httpx2.AsyncClient:
    """openai's default async HTTP client (its limits, timeouts, proxies from the environment)
    calling ``on_response`` with each answer, its pool's idle connections checked with one
    ``poll`` each."""
    client = openai.DefaultAsyncHttpxClient(event_hooks={"response": [on_response]})
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(pool, httpcore2.AsyncConnectionPool) and isinstance(
        backend, httpcore2.AsyncNetworkBackend
    ):
        pool._network_backend = _CheapIdleChecks(backend)
    return client


def cheap_idle_checks(client: httpx2.AsyncClient) -> bool:
    """Whether ``client``'s pool checks idle connections with :class:`_CheapIdleChecks`."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    return isinstance(getattr(pool, "_network_backend", None), _CheapIdleChecks)


class _CheapIdleChecks(httpcore2.AsyncNetworkBackend):
    """A network backend whose streams answer ``is_readable`` from the socket they keep."""

    def __init__(self, inner: httpcore2.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _Stream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _Stream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _Stream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        # a socket, or asyncio's TransportSocket around one: either has its descriptor
        sock = inner.get_extra_info("socket")
        self._socket: _Descriptor | None = sock if isinstance(sock, _Descriptor) else None
        # one poll object for the stream's life, its descriptor registered once: each idle
        # check is then the poll alone (half the cost of a poll object made for each check)
        self._poller: select.poll | None = None
        if self._socket is not None and self._socket.fileno() >= 0:
            self._poller = select.poll()
            self._poller.register(self._socket.fileno(), select.POLLIN)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> ExtraInfo:
        if info == "is_readable" and self._socket is not None and self._poller is not None:
            return _readable(self._socket, self._poller)
        extra: ExtraInfo = self._inner.get_extra_info(info)
        return extra


@typing.runtime_checkable
class _Descriptor(typing.Protocol):
    def fileno(self) -> int: ...


def _readable(sock: _Descriptor, poller: select.poll) -> bool:
    """Would a read return at once (data, or the b"" of a closed connection)? As httpcore's
    own check: a socket without a file descriptor (closed) counts as readable. ``poller``
    has the socket's descriptor registered for reading."""
    if sock.fileno() < 0:
        return True
    return bool(poller.poll(0))
