"""How the scripted server imitates a real endpoint under load (``FakeOpenAI.behave``,
``FakeOpenAI.outage``): latency, random faults, token counts recounted from the text, a
provider's rate limits as token buckets with the ``x-ratelimit-*`` headers, overload and
outages. :class:`LoadShaping` is the part of ``FakeOpenAI`` that does it.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from fakeopenai_replies import RecordedRequest, Reply, _answer_text, count_tokens, error


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


def _is_chat(request: RecordedRequest) -> bool:
    path = request.path.rstrip("/")
    return request.method == "POST" and path in ("/v1/chat/completions", "/chat/completions")


class LoadShaping:
    """The faults, limits and latency ``FakeOpenAI`` adds to its answers (a mixin: the
    state below is ``FakeOpenAI``'s, shared under its lock)."""

    _lock: threading.RLock
    _counted: Counter[str]
    _in_flight: int
    _delay_total: float
    _first_ok: float
    _last_ok: float

    def _init_load(self) -> None:
        self._behaviour: Behaviour | None = None
        self._rng = random.Random()
        self._buckets: dict[str, _Bucket] = {}
        self._down_until = 0.0
        self._down_clock: Callable[[], float] = time.monotonic

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
