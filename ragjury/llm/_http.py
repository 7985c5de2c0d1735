"""The HTTP client of ragjury's OpenAI client: openai's own aiohttp client on asyncio.

openai's default HTTP stack (httpx2 over httpcore2 and h11) parses HTTP in Python and checks
every idle kept-alive connection twice a request: on the throughput benchmark it is most of
the bare openai client's CPU per request. ``openai.DefaultAioHttpClient`` (the
``openai[aiohttp]`` extra, a ragjury dependency) is the same ``httpx2.AsyncClient`` (openai's
limits and timeouts, its event hooks, proxies from the environment) with aiohttp as its
transport: HTTP parsed in C, aiohttp's own connection pool. On that benchmark the bare client
spends about 30% less CPU per request on it, ragjury about 15% less. aiohttp runs on asyncio
only: under another event loop (trio, through anyio, when ``Jury`` runs inside a trio
application) the client is openai's default.

Two things are put right (:class:`_AsTheDefault`), so that the transport behaves as openai's
default one does. openai's aiohttp transport reports every connection failure (a refused
connection, an unknown host, a server that hung up) as a connect *timeout*, so the client
would call a refused connection "did not answer within --timeout" and give up after two
tries: they are raised as the connection errors they are; a timeout stays a timeout. And a
base URL with credentials in it (``http://user:password@host/v1``) has already been turned
into the request's ``Authorization`` header by httpx2, as for the default transport, but
aiohttp refuses a URL with credentials beside that header: they are taken out of the URL
(they never go on the wire in the URL with the default transport either).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx2
import openai


def http_client(
    on_response: Callable[[httpx2.Response], Awaitable[None]],
) -> httpx2.AsyncClient:
    """openai's aiohttp client (its limits, timeouts, proxies from the environment) calling
    ``on_response`` with each answer; openai's default client when not on asyncio. Made
    inside the event loop that will use it."""
    hooks = {"response": [on_response]}
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio): aiohttp cannot run there
        return openai.DefaultAsyncHttpxClient(event_hooks=hooks)
    client = openai.DefaultAioHttpClient(event_hooks=hooks)
    # the transport, and one for each proxy the environment names (None: no proxy there)
    client._transport = _AsTheDefault(client._transport)
    client._mounts = {
        pattern: None if transport is None else _AsTheDefault(transport)
        for pattern, transport in client._mounts.items()
    }
    return client


class _AsTheDefault(httpx2.AsyncBaseTransport):
    """``inner``'s requests, a connection failure reported as one (not as a timeout), the
    URL's credentials (already the ``Authorization`` header) left out of it."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # (the body is read with its own errors right: a cut-off answer is a ReadError, a
        # stalled one a ReadTimeout)
        if request.url.userinfo:
            request.url = request.url.copy_with(userinfo=b"")
        try:
            return await self._inner.handle_async_request(request)
        except httpx2.ConnectTimeout as exc:
            raise _as_connection_error(exc, request) from exc.__cause__

    async def aclose(self) -> None:
        await self._inner.aclose()


def _as_connection_error(
    exc: httpx2.ConnectTimeout, request: httpx2.Request
) -> httpx2.TransportError:
    """What ``exc`` (the aiohttp transport's report) is: a timeout if aiohttp's own error
    was one, else a connection made or refused, as httpx2's own transport would say."""
    import aiohttp

    cause = exc.__cause__
    message = str(exc)
    if cause is None or isinstance(cause, TimeoutError):  # aiohttp's timeouts are these
        return exc
    if isinstance(cause, aiohttp.ClientProxyConnectionError):
        return httpx2.ProxyError(message, request=request)
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx2.RemoteProtocolError(message, request=request)
    if isinstance(cause, aiohttp.ClientConnectorError):
        return httpx2.ConnectError(message, request=request)
    return httpx2.ReadError(message, request=request)
