"""A scripted, real-HTTP, OpenAI-compatible server for tests and benchmarks.

``FakeOpenAI`` runs a standard-library ``ThreadingHTTPServer`` on ``127.0.0.1`` (an OS-chosen
port) in a daemon thread, so it is independent of the test's event loop. Point the *real*
``openai.AsyncOpenAI`` client (and ``instructor`` on top of it) at ``fake.base_url``; nothing
is monkeypatched, so timeouts, retries, headers, keep-alive and JSON parsing are all exercised
for real.

Each test scripts the answers per agent. Agents identify themselves with the
``x-ragjury-agent`` request header::

    from openai import AsyncOpenAI
    from fakeopenai import FakeOpenAI, chat, chat_json, error  # tests/ is on sys.path under pytest

    with FakeOpenAI() as fake:
        fake.route("generator", error(429, retry_after=1), chat_json({"question": "Why?"}))
        fake.route("judge", lambda req: chat("yes" if "Paris" in req.text() else "no"))
        async with AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as client:
            ...  # send requests with extra_headers={"x-ragjury-agent": "generator"}
        assert len(fake.requests_for("generator")) == 2
        assert fake.in_flight_max <= 4

Scripting rules:

* ``route(agent, *replies)`` answers that agent's chat requests with the replies in order; the
  last one then repeats forever. A reply may be a :class:`Reply` or a *responder*, a callable
  ``(RecordedRequest) -> Reply`` that can look at the prompt. Calling ``route`` again for the
  same agent replaces the script and rewinds it.
* Requests with no matching route get the ``fallback`` (default: a 500 whose message says
  ``no scripted reply for agent <x>``, so a missing script is obvious in the test output).
* ``POST /v1/embeddings`` is answered by ``embeddings(...)``; ``GET /v1/models`` lists two fake
  models; any other path is a JSON 404. The ``/v1`` prefix is optional.
* Helpers build the replies: ``chat`` / ``chat_json`` (a completion, with usage and optional
  logprobs), ``tool_call`` (for ``instructor.Mode.TOOLS``), ``error`` (OpenAI error body,
  optional ``Retry-After`` / ``retry-after-ms``) and ``embedding``. ``Reply(body="...")`` sends
  a raw, possibly malformed, HTTP body.
* ``Reply.delay`` is slept in the handler thread while the request counts as in flight, so
  ``in_flight_max`` measures real client-side concurrency (a request stops counting just before
  its answer is written, so ``in_flight`` is already 0 once the client has every answer). A
  client that gives up (timeout, cancellation) during the delay is noticed within ~20 ms,
  counted in ``disconnects`` and not answered.
* A responder that raises produces a 500 (its error text in the message) and is kept in
  ``fake.errors`` so the test can re-raise it.
* ``stream=True`` requests get a 400: streaming is not simulated.
* ``behave(Behaviour(...))`` makes every chat request look like a real, busy endpoint (for
  benchmarks): a fixed latency plus a latency per completion token, a rate of 429s (with
  ``Retry-After``) and 500s answered at once without consuming the script, and usage counted
  from the text (about four characters a token) instead of the scripted figures.
  ``FakeOpenAI(keep_requests=False)`` stops recording requests (long runs keep memory flat);
  ``stats()`` sums up what was answered: requests, statuses, tokens and the delay slept.
* A behaviour can also enforce a provider's rate limits: ``rpm`` requests and ``tpm`` tokens
  per ``window`` seconds (60: per minute), as token buckets refilled continuously. A request
  that does not fit (one request; its prompt's tokens) is answered 429 with ``Retry-After``,
  ``retry-after-ms`` and the ``x-ratelimit-*`` headers OpenAI sends; every chat answer carries
  those headers, its completion tokens charged when it is answered. ``max_in_flight`` answers
  429 (no headers) to a request beyond that many in flight: overload, as a busy vLLM does.
  ``reset_means="next_request"`` makes ``x-ratelimit-reset-*`` the time until one more
  request fits instead of the time until the budget is full: headers that mislead a client
  reading them as OpenAI's (the limit and remaining figures stay true).
* ``outage(seconds)`` answers every chat request 503 for that long: an endpoint that is down
  (``clock=`` measures the time on a test's own clock).

Every request (including 404s) is recorded in ``fake.requests`` in arrival order, with the
parsed JSON body, lower-cased headers and the agent name. ``stop()`` (or leaving the ``with``
block) closes kept-alive connections, the listening socket and joins every server thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import random
import select
import socket
import sys
import threading
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "AGENT_HEADER",
    "RESET_MEANINGS",
    "Behaviour",
    "FakeOpenAI",
    "RecordedRequest",
    "Reply",
    "Responder",
    "chat",
    "chat_json",
    "count_tokens",
    "embedding",
    "error",
    "tool_call",
]

AGENT_HEADER = "x-ragjury-agent"

_DISCONNECT_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
_JOIN_TIMEOUT = 10.0  # stop() waits this long for each handler thread
_POLL_INTERVAL = 0.02  # how often a delayed answer checks for stop() / client disconnect
_ids = itertools.count(1)


# --------------------------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Behaviour:
    """How the fake imitates a real endpoint under load (see ``FakeOpenAI.behave``).

    Applies to chat completions only. Faults (429, 500) are answered at once, before the
    script is consulted, so a scripted sequence is not advanced by them; ``Retry-After`` is
    ``retry_after`` seconds (no header when None). Latency is slept while the request counts
    as in flight: ``latency + latency_per_token * completion_tokens``, on top of any scripted
    ``Reply.delay``. With ``count_tokens`` the usage of a successful answer is recounted from
    the text: the prompt's messages and the answer's content, about four characters a token.
    """

    latency: float = 0.0
    latency_per_token: float = 0.0
    rate_429: float = 0.0
    rate_500: float = 0.0
    retry_after: float | None = 1.0
    count_tokens: bool = False
    seed: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    window: float = 60.0
    max_in_flight: int | None = None
    reset_means: str = "full"

    def __post_init__(self) -> None:
        if self.reset_means not in RESET_MEANINGS:
            raise ValueError(
                f"reset_means must be one of {', '.join(RESET_MEANINGS)}, got {self.reset_means!r}"
            )
        if self.window <= 0 or min(self.rpm or 1, self.tpm or 1, self.max_in_flight or 1) < 1:
            raise ValueError(
                f"rate limits must be >= 1 and the window > 0, got rpm={self.rpm}, "
                f"tpm={self.tpm}, window={self.window}, max_in_flight={self.max_in_flight}"
            )
        if self.latency < 0 or self.latency_per_token < 0:
            raise ValueError(
                f"latencies must be >= 0, got latency={self.latency}, "
                f"latency_per_token={self.latency_per_token}"
            )
        rates = (self.rate_429, self.rate_500)
        if min(rates) < 0 or sum(rates) > 1:
            raise ValueError(
                f"fault rates must be in 0..1 and sum to at most 1, got rate_429={self.rate_429}, "
                f"rate_500={self.rate_500}"
            )


RESET_MEANINGS = ("full", "next_request")
"""What ``x-ratelimit-reset-*`` says: the time until the budget is ``full`` again (OpenAI's
meaning, consistent with the limit and remaining figures), or the time until the
``next_request`` fits (0 while there is room), as some gateways mean it: read as OpenAI's,
it promises a refill far faster than the real one."""


class _Bucket:
    """A provider's budget: ``limit`` units per ``window`` seconds, refilled continuously."""

    def __init__(self, limit: int, window: float, reset_means: str = "full") -> None:
        self.limit, self.rate = float(limit), limit / window
        self.level, self.stamp = float(limit), time.monotonic()
        self.reset_means = reset_means

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        return max(min(amount, self.limit) - self.level, 0.0) / self.rate

    def headers(self, kind: str) -> dict[str, str]:
        if self.reset_means == "next_request":
            reset = max(1.0 - self.level, 0.0) / self.rate
        else:
            reset = max(self.limit - self.level, 0.0) / self.rate
        return {
            f"x-ratelimit-limit-{kind}": str(int(self.limit)),
            f"x-ratelimit-remaining-{kind}": str(max(int(self.level), 0)),
            f"x-ratelimit-reset-{kind}": _duration(reset),
        }


def _duration(seconds: float) -> str:
    """A wait as OpenAI writes it: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(round(seconds * 1000), 0)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s"


def count_tokens(text: str) -> int:
    """A plausible token count: about four characters a token, at least one for any text."""
    return (len(text) + 3) // 4


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


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    # Handler threads are daemons (a forgotten stop() never blocks interpreter exit), and the
    # stdlib does not join daemon threads in server_close(), so we track and join them.
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512  # listen backlog (stdlib default 5): bursts of connections

    def __init__(self, fake: FakeOpenAI) -> None:
        self.fake = fake
        self.handler_threads: list[threading.Thread] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name=f"fakeopenai-conn-{self.server_address[1]}",
            daemon=True,
        )
        self.handler_threads = [t for t in self.handler_threads if t.is_alive()]
        self.handler_threads.append(thread)  # only the serve_forever thread touches the list
        thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, _DISCONNECT_ERRORS) or self.fake._stopping.is_set():
            return  # the client went away: not interesting
        if exc is not None:
            self.fake._record_error(exc)
        traceback.print_exc(file=sys.stderr)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else Nagle + delayed ACK add ~40 ms to every answer
    server: _Server

    # -- plumbing -------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.fake._register(self.connection)

    def finish(self) -> None:
        self.server.fake._unregister(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # silence the default stderr request log

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # -- request handling -----------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        fake = self.server.fake
        try:
            raw = self._read_body()
        except _DISCONNECT_ERRORS:
            self.close_connection = True
            return
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {key.lower(): value for key, value in self.headers.items()}
        request = RecordedRequest(
            method=self.command,
            path=urlsplit(self.path).path,
            headers=headers,
            body=body,
            agent=headers.get(AGENT_HEADER),
            received_at=time.monotonic(),
            raw_body=raw,
        )
        fake._begin(request)
        ended = False
        try:
            reply = fake._fault_for(request) or fake._reply_for(request)
            reply = fake._shaped(request, reply)
            if reply.delay > 0 and not self._wait(reply.delay):
                fake._note_disconnect()
                self.close_connection = True
                return
            # Leave "in flight" before the client can see the answer, so that a client that
            # has its response always finds `in_flight` already decremented.
            fake._end()
            ended = True
            self._send(reply)
        except _DISCONNECT_ERRORS:
            fake._note_disconnect()
            self.close_connection = True
        finally:
            if not ended:
                fake._end()

    def _wait(self, delay: float) -> bool:
        """Sleep ``delay``; False if the server stops or the client hangs up meanwhile."""
        fake = self.server.fake
        deadline = time.monotonic() + delay
        watch_peer = True
        while (remaining := deadline - time.monotonic()) > 0:
            if fake._stopping.wait(min(remaining, _POLL_INTERVAL)):
                return False
            if watch_peer:
                gone = self._peer_gone()
                if gone is None:
                    watch_peer = False  # the client sent more data: stop peeking
                elif gone:
                    return False
        return True

    def _peer_gone(self) -> bool | None:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            data = self.connection.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True
        return None if data else True

    def _send(self, reply: Reply) -> None:
        payload = reply.encoded()
        self.send_response(reply.status)
        lower = {key.lower() for key in reply.headers}
        if "content-type" not in lower:
            self.send_header("Content-Type", "application/json")
        for key, value in reply.headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()


class FakeOpenAI:
    """A scripted OpenAI-compatible HTTP server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *, keep_requests: bool = True) -> None:
        self._keep_requests = keep_requests
        self._behaviour: Behaviour | None = None
        self._rng = random.Random()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._routes: dict[str, _Script] = {}
        self._fallback: Reply | Responder = _default_fallback
        self._embeddings: Reply | Responder = _default_embeddings
        self._in_flight = 0
        self.requests: list[RecordedRequest] = []
        self.in_flight_max = 0
        self.disconnects = 0  # requests whose client hung up before the (delayed) answer
        self.errors: list[BaseException] = []  # exceptions raised by responders / the server
        self._counted = Counter[str]()  # what stats() reports
        self._delay_total = 0.0
        self._buckets: dict[str, _Bucket] = {}
        self._down_until = 0.0
        self._down_clock: Callable[[], float] = time.monotonic
        self._first_ok = self._last_ok = 0.0
        self._first_arrival = 0.0
        self.batches: Any = None
        """The Files and Batch APIs, when a ``fakebatches.FakeBatches`` is attached."""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("FakeOpenAI is already running")
        self._stopping.clear()
        server = _Server(self)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fakeopenai-server-{server.server_address[1]}",
            daemon=True,
        )
        self._server, self._thread = server, thread
        thread.start()

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        with self._lock:
            self._stopping.set()  # wakes delayed answers; late connections close themselves
            connections = list(self._connections)
        server.shutdown()  # no more accepts; waits for serve_forever to return
        for conn in connections:  # wake handler threads blocked on kept-alive connections
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()  # closes the listening socket
        thread.join()
        for handler in server.handler_threads:
            handler.join(timeout=_JOIN_TIMEOUT)
            if handler.is_alive():  # only a responder that never returns can cause this
                warnings.warn(
                    f"FakeOpenAI: handler thread still busy after {_JOIN_TIMEOUT}s",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAI:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not running: call start() or use `with`")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ------------------------------------------------------------------------

    def route(self, agent: str, *replies: Reply | Responder) -> None:
        if not replies:
            raise ValueError("route() needs at least one reply")
        with self._lock:
            self._routes[agent] = _Script(replies)

    def fallback(self, responder: Responder | Reply) -> None:
        with self._lock:
            self._fallback = responder

    def embeddings(self, responder: Responder | Reply) -> None:
        with self._lock:
            self._embeddings = responder

    def behave(self, behaviour: Behaviour | None) -> None:
        """Imitate a real endpoint's latency, faults and token counts (None: stop)."""
        with self._lock:
            self._behaviour = behaviour
            self._rng = random.Random(behaviour.seed if behaviour is not None else None)
            self._buckets = {}
            if behaviour is not None and behaviour.rpm is not None:
                self._buckets["requests"] = _Bucket(
                    behaviour.rpm, behaviour.window, behaviour.reset_means
                )
            if behaviour is not None and behaviour.tpm is not None:
                self._buckets["tokens"] = _Bucket(
                    behaviour.tpm, behaviour.window, behaviour.reset_means
                )

    def outage(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Answer every chat request 503 for the next ``seconds`` on ``clock`` (counted in
        ``stats()`` as ``outage_requests``). A test's own clock (one that moves only when
        the client sleeps on it) makes the outage last a fixed stretch of the client's time,
        whatever the machine's speed."""
        with self._lock:
            self._down_clock = clock
            self._down_until = clock() + seconds

    def stats(self) -> dict[str, Any]:
        """What the server has answered since it started (or since ``reset``).

        ``requests`` (all, 404s included), ``chat_requests``, ``status_<code>`` counts of the
        chat answers, ``prompt_tokens`` / ``completion_tokens`` reported in successful chat
        answers, ``delay_seconds`` (the latency slept, summed over requests) and
        ``in_flight_max``; the 429s by cause: ``limit_429`` (a budget was spent),
        ``random_429`` (``rate_429``), ``overload_429`` (``max_in_flight``); and
        ``outage_requests``, the chat requests that arrived during an :meth:`outage`;
        ``ok_seconds``, from the first successful chat request's arrival to the last's answer;
        ``first_request_at``, the first request's arrival on ``time.monotonic()`` (a clock every
        process on the machine shares, so a client can tell how long after its start it came),
        0.0 before any request.
        """
        with self._lock:
            return {
                **dict(sorted(self._counted.items())),
                "delay_seconds": round(self._delay_total, 6),
                "in_flight_max": self.in_flight_max,
                "ok_seconds": round(self._last_ok - self._first_ok, 3),
                "first_request_at": self._first_arrival,
            }

    def reset(self) -> None:
        """Forget requests, routes, fallback/embeddings scripts, errors and counters."""
        with self._lock:
            self.requests.clear()
            self._routes.clear()
            self._fallback = _default_fallback
            self._embeddings = _default_embeddings
            self.in_flight_max = self._in_flight
            self.disconnects = 0
            self.errors.clear()
            self._counted.clear()
            self._delay_total = 0.0
            self._first_ok = self._last_ok = 0.0
            self._first_arrival = 0.0

    # -- inspection -----------------------------------------------------------------------

    def requests_for(self, agent: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.agent == agent]

    @property
    def in_flight(self) -> int:
        """Requests being handled right now."""
        with self._lock:
            return self._in_flight

    # -- used by the handler threads ------------------------------------------------------

    def _register(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)
            stopping = self._stopping.is_set()
        if stopping:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _unregister(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)

    def _begin(self, request: RecordedRequest) -> None:
        with self._lock:
            self._counted["requests"] += 1
            self._first_arrival = self._first_arrival or request.received_at
            if self._keep_requests:
                self.requests.append(request)
            self._in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self._in_flight)

    def _end(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _note_disconnect(self) -> None:
        with self._lock:
            self.disconnects += 1

    def _record_error(self, exc: BaseException) -> None:
        with self._lock:
            self.errors.append(exc)

    def _fault_for(self, request: RecordedRequest) -> Reply | None:
        """An outage's 503, an overload or rate-limit 429, or a random 429 or 500, for a chat
        request; None when it is to be answered. A request let through is charged to the
        rate-limit budgets (one request, its prompt's tokens)."""
        if not _is_chat(request):
            return None
        with self._lock:
            now = time.monotonic()
            if self._down_clock() < self._down_until:
                self._counted["outage_requests"] += 1
                return error(503, "simulated outage: the endpoint is down")
            behaviour = self._behaviour
            if behaviour is None:
                return None
            if behaviour.max_in_flight is not None and self._in_flight > behaviour.max_in_flight:
                self._counted["overload_429"] += 1
                return error(429, "simulated overload: too many requests in flight")
            draw = self._rng.random() if (behaviour.rate_429 or behaviour.rate_500) else 1.0
            if draw < behaviour.rate_429:
                self._counted["random_429"] += 1
                reply = error(429, "simulated rate limit", retry_after=behaviour.retry_after)
                return self._with_limits(reply, now)
            if draw < behaviour.rate_429 + behaviour.rate_500:
                return error(500, "simulated server error")
            if not self._buckets:
                return None
            cost = {"requests": 1, "tokens": count_tokens(request.text())}
            wait = 0.0
            for kind, bucket in self._buckets.items():
                bucket.refill(now)
                wait = max(wait, bucket.wait_for(cost[kind]))
            if wait > 0:
                self._counted["limit_429"] += 1
                headers = {"retry-after-ms": str(max(round(wait * 1000), 1))}
                headers["Retry-After"] = str(max(round(wait + 0.499), 1))
                reply = error(429, "simulated rate limit: the budget is spent")
                reply = dataclasses.replace(reply, headers={**reply.headers, **headers})
                return self._with_limits(reply, now)
            for kind, bucket in self._buckets.items():
                bucket.level -= cost[kind]
        return None

    def _with_limits(self, reply: Reply, now: float, completion_tokens: int = 0) -> Reply:
        """``reply`` with the ``x-ratelimit-*`` headers (completion tokens charged first)."""
        with self._lock:
            if not self._buckets:
                return reply
            headers = dict(reply.headers)
            for kind, bucket in self._buckets.items():
                bucket.refill(now)
                if kind == "tokens":
                    bucket.level -= completion_tokens
                headers.update(bucket.headers(kind))
        return dataclasses.replace(reply, headers=headers)

    def _shaped(self, request: RecordedRequest, reply: Reply) -> Reply:
        """``reply`` with the behaviour's latency and token counts; counted in ``stats()``."""
        with self._lock:
            behaviour = self._behaviour
        chat_request = _is_chat(request)
        body = reply.body
        completion_tokens = 0
        if chat_request and reply.status == 200 and isinstance(body, dict):
            usage = body.get("usage")
            if behaviour is not None and behaviour.count_tokens and isinstance(usage, dict):
                prompt = count_tokens(request.text())
                completion = count_tokens(_answer_text(body))
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                }
                body = {**body, "usage": usage}
            if isinstance(usage, dict):
                completion_tokens = int(usage.get("completion_tokens") or 0)
                with self._lock:
                    self._counted["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
                    self._counted["completion_tokens"] += completion_tokens
        delay = reply.delay
        if chat_request and behaviour is not None and reply.status == 200:
            delay += behaviour.latency + behaviour.latency_per_token * completion_tokens
        with self._lock:
            if chat_request:
                self._counted["chat_requests"] += 1
                self._counted[f"status_{reply.status}"] += 1
                if reply.status == 200:  # when the answers were sent, for rate figures
                    self._first_ok = self._first_ok or request.received_at
                    self._last_ok = max(self._last_ok, request.received_at + delay)
            self._delay_total += delay
        if chat_request and reply.status == 200:
            reply = self._with_limits(reply, time.monotonic(), completion_tokens)
        if body is reply.body and delay == reply.delay:
            return reply
        return dataclasses.replace(reply, body=body, delay=delay)

    def _reply_for(self, request: RecordedRequest) -> Reply:
        item: Reply | Responder
        path = request.path.rstrip("/")
        if path.startswith("/v1/") or path == "/v1":
            path = path[3:]
        if self.batches is not None:
            answer: Reply | None = self.batches.reply(request)
            if answer is not None:
                return answer
        with self._lock:
            if path == "/chat/completions" and request.method == "POST":
                if isinstance(request.body, dict) and request.body.get("stream"):
                    return error(400, "FakeOpenAI does not simulate stream=true")
                script = self._routes.get(request.agent) if request.agent is not None else None
                item = script.next() if script is not None else self._fallback
            elif path == "/embeddings" and request.method == "POST":
                item = self._embeddings
            elif path == "/models" and request.method == "GET":
                return Reply(body=_MODELS)
            elif path in ("/chat/completions", "/embeddings", "/models"):
                return error(405, f"method {request.method} not allowed on {request.path}")
            else:
                return error(404, f"unknown path {request.path}")
        if isinstance(item, Reply) or not callable(item):
            return item  # `not callable`: a Reply made by a second import of this module
        try:
            return item(request)  # outside the lock: a responder may inspect the fake
        except Exception as exc:
            self._record_error(exc)
            return error(500, f"responder raised {exc!r}")


_MODELS: dict[str, Any] = {
    "object": "list",
    "data": [
        {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakeopenai"},
        {"id": "fake-embedding", "object": "model", "created": 0, "owned_by": "fakeopenai"},
    ],
}


def _is_chat(request: RecordedRequest) -> bool:
    path = request.path.rstrip("/")
    return request.method == "POST" and path in ("/v1/chat/completions", "/chat/completions")


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
