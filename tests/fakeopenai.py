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

Import everything from here; the parts live beside it: ``fakeopenai_replies`` (the reply
helpers, :class:`RecordedRequest`, an agent's script), ``fakeopenai_load`` (``Behaviour``:
latency, faults, rate limits, outages) and ``fakeopenai_http`` (the server and its handler).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import warnings
from collections import Counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

from fakeopenai_http import Server
from fakeopenai_load import RESET_MEANINGS, Behaviour, LoadShaping
from fakeopenai_replies import (
    AGENT_HEADER,
    RecordedRequest,
    Reply,
    Responder,
    _default_embeddings,
    _default_fallback,
    _Script,
    chat,
    chat_json,
    count_tokens,
    embedding,
    error,
    tool_call,
)
from fakeopenai_replies import _answer_text as _answer_text  # fakebatches and tests use it

if TYPE_CHECKING:
    from fakebatches import FakeBatches

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

_JOIN_TIMEOUT = 10.0  # stop() waits this long for each handler thread


class FakeOpenAI(LoadShaping):
    """A scripted OpenAI-compatible HTTP server on 127.0.0.1 (see the module docstring)."""

    def __init__(self, *, keep_requests: bool = True) -> None:
        self._keep_requests = keep_requests
        self._init_load()
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._server: Server | None = None
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
        self._first_ok = self._last_ok = 0.0
        self._first_arrival = 0.0
        self.batches: FakeBatches | None = None
        """The Files and Batch APIs, when a ``fakebatches.FakeBatches`` is attached."""

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("FakeOpenAI is already running")
        self._stopping.clear()
        server = Server(self)
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

    # -- answering ------------------------------------------------------------------------

    def _reply_for(self, request: RecordedRequest) -> Reply:
        item: Reply | Responder
        path = request.path.rstrip("/")
        if path.startswith("/v1/") or path == "/v1":
            path = path[3:]
        if self.batches is not None:
            answer = self.batches.reply(request)
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
