"""An endpoint's rate limits as it states them, and the buckets requests are paced from.

OpenAI, Azure OpenAI, LiteLLM proxies and most gateways in front of vLLM send, on every
answer, ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests`` and
``x-ratelimit-reset-requests`` (the time until the budget is full again, e.g. ``1s``,
``6m0s``, ``20ms``), and the same for ``-tokens``. :class:`RateHeaders` reads them; from
two of them (limit L, remaining R, reset T) the refill rate is (L - R) / T (counted as
(L - R - 1) / T, since R is rounded down).

The buckets themselves live in a :class:`RateLedger`: :class:`LocalLedger` in memory for one
process, or the store (:meth:`ragjury.store.base.CallLog.take_rate`) for every process on one
database. Both have the same semantics: a reservation is taken at once, the level may go
below zero, and the answer is how long to wait before sending.
"""

from __future__ import annotations

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
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(number) * scale[unit] for number, unit in parts)


@dataclass(frozen=True)
class Window:
    """One budget as an answer stated it: ``limit``, ``remaining``, seconds to ``reset``."""

    limit: float
    remaining: float
    reset: float

    @property
    def per_second(self) -> float | None:
        """The refill rate the figures imply, (limit - remaining) / reset, the remaining
        figure taken as up to one more than stated (endpoints round it down); None when the
        budget is full or nearly."""
        used = self.limit - self.remaining - 1
        if self.reset <= 0 or used < 1:
            return None
        return used / self.reset


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
    reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}") or "0")
    try:
        return Window(float(limit), float(remaining), reset or 0.0)
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
