"""An endpoint's rate limits as it states them, and the buckets requests are paced from.

OpenAI, Azure OpenAI, LiteLLM proxies and most gateways in front of vLLM send, on every
answer, ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and
``x-ratelimit-reset-requests`` (the time until the budget is full again, e.g. ``1s``,
``6m0s``, ``20ms``), and the same for ``-tokens``. :class:`RateHeaders` reads them; from
two of them (limit L, remaining R, reset T) the refill rate is (L - R) / T. Each answer
bounds it (:meth:`Window.bounds`): R is rounded down, so up to one more unit may be used,
and T is rounded to its last written digit.

The buckets themselves live in a :class:`RateLedger`: :class:`LocalLedger` in memory for one
process, or the store (:meth:`ragjury.store.base.CallLog.take_rate`) for every process on one
database. Both have the same semantics: a reservation is taken at once, the level may go
below zero, and the answer is how long to wait before sending.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import httpx2


Clock = Callable[[], float]
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """Seconds in ``1s``, ``6m0s``, ``1h2m3.5s``, ``20ms`` or a bare number; None if unreadable."""
    text = text.strip()
    try:
        return max(float(text), 0.0)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _SCALE[unit] for number, unit in parts)


_SCALE = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration_slack(text: str) -> float:
    """How far the duration ``text`` may be from the true one: half its last digit
    (``20ms``: 0.0005 s, ``1.5s``: 0.05 s, ``6m0s`` or ``2``: 0.5 s)."""
    text = text.strip()
    parts = _DURATION.findall(text)
    number, unit = parts[-1] if parts else (text, "s")
    decimals = len(number.partition(".")[2])
    return 0.5 * _SCALE[unit] * 10.0**-decimals


@dataclass(frozen=True)
class Window:
    """One budget as an answer stated it: ``limit``, ``remaining``, seconds to ``reset``
    (written to within ``slack`` seconds)."""

    limit: float
    remaining: float
    reset: float
    slack: float = 0.0

    def bounds(self) -> tuple[float, float] | None:
        """The refill rates, per second, that the figures allow, read as OpenAI means them
        (the budget is full again in ``reset``): (used - 1) / (reset + slack) to used /
        (reset - slack), used being limit - remaining (remaining is rounded down, so up to
        one more may be used). None when the budget is full or the reset is 0."""
        used = self.limit - self.remaining
        if self.reset <= 0 or used <= 0:
            return None
        low = max(used - 1.0, 0.0) / (self.reset + self.slack)
        high = used / (self.reset - self.slack) if self.reset > self.slack else math.inf
        return low, high

    @property
    def contradicts_reset(self) -> bool:
        """Whether the figures contradict OpenAI's meaning of the reset, the time until the
        budget is full: a reset of 0 while at least two units and a fiftieth of the budget
        are used (refilling a fiftieth takes at least 20 ms on a one-second window, so an
        endpoint that means OpenAI's reset does not write 0 then)."""
        used = self.limit - self.remaining
        return self.reset <= 0 and used >= max(2.0, 0.02 * self.limit)


@dataclass(frozen=True)
class RateHeaders:
    """The ``x-ratelimit-*`` figures of one answer (a budget missing from it is None)."""

    requests: Window | None
    tokens: Window | None

    @classmethod
    def parse(cls, headers: Mapping[str, str] | httpx2.Headers | None) -> RateHeaders | None:
        """The figures of ``headers``, or None when they state no budget."""
        if not headers:
            return None
        found = cls(_window(headers, "requests"), _window(headers, "tokens"))
        return found if found.requests or found.tokens else None

    def room_for(self, tokens: int) -> bool:
        """Whether the budgets had room for one more request of ``tokens``."""
        requests_ok = self.requests is None or self.requests.remaining >= 1
        tokens_ok = self.tokens is None or self.tokens.remaining >= tokens
        return requests_ok and tokens_ok


def _window(headers: Mapping[str, str] | httpx2.Headers, kind: str) -> Window | None:
    limit = headers.get(f"x-ratelimit-limit-{kind}")
    remaining = headers.get(f"x-ratelimit-remaining-{kind}")
    if limit is None or remaining is None:
        return None
    written = headers.get(f"x-ratelimit-reset-{kind}") or "0"
    reset = parse_duration(written)
    try:
        return Window(float(limit), float(remaining), reset or 0.0, duration_slack(written))
    except ValueError:
        return None


class RateLedger(Protocol):
    """Where the rate buckets live (see :meth:`ragjury.store.base.CallLog.take_rate`)."""

    async def take_rate(
        self,
        key: str,
        amount: float,
        *,
        per_second: float,
        capacity: float,
        at_most: float | None = None,
    ) -> float: ...


def bucket_after(
    level: float | None,
    elapsed: float,
    amount: float,
    *,
    per_second: float,
    capacity: float,
    at_most: float | None = None,
) -> float:
    """A token bucket's level after taking ``amount`` (the semantics of ``take_rate``, for
    every ledger kept in Python): ``level`` None is a bucket met for the first time (full);
    it refills for ``elapsed`` seconds up to ``capacity``, is lowered to ``at_most`` when
    given, then ``amount`` is taken (a negative one gives back, up to ``capacity``)."""
    level = capacity if level is None else min(capacity, level + elapsed * per_second)
    if at_most is not None:
        level = min(level, at_most)
    return min(level - amount, capacity)


def wait_for(level: float, per_second: float) -> float:
    """Seconds until a bucket at ``level`` is back at zero (0 when it is not below)."""
    return max(-level / per_second, 0.0)


class LocalLedger:
    """The buckets of one process, in memory, on ``clock``: the store's semantics."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    async def take_rate(
        self,
        key: str,
        amount: float,
        *,
        per_second: float,
        capacity: float,
        at_most: float | None = None,
    ) -> float:
        now = self._clock()
        found = self._buckets.get(key)
        before, elapsed = (None, 0.0) if found is None else (found[0], now - found[1])
        level = bucket_after(
            before, elapsed, amount, per_second=per_second, capacity=capacity, at_most=at_most
        )
        self._buckets[key] = (level, now)
        return wait_for(level, per_second)


class HeaderBox:
    """Where the answer to the current request leaves its headers (see :data:`answer_box`)."""

    __slots__ = ("headers",)

    def __init__(self) -> None:
        self.headers: httpx2.Headers | None = None


answer_box: ContextVar[HeaderBox | None] = ContextVar("ragjury_answer_headers", default=None)
"""Set by the LLM around one request; the HTTP client's response hook fills it in."""


async def keep_headers(response: httpx2.Response) -> None:
    """An httpx response hook: the answer's headers, for the request that awaits it."""
    box = answer_box.get()
    if box is not None:
        box.headers = response.headers
