"""Admission to one endpoint: an adaptive (AIMD) concurrency limit and optional
requests-per-minute and tokens-per-minute token buckets.

Every request to the endpoint takes a :class:`Permit` from :meth:`AdaptiveLimiter.acquire`
and gives it back with :meth:`AdaptiveLimiter.release`, saying how the request went:

* ``"ok"``: one success. After ``limit`` successes in a row the limit grows by one, up to the
  cap (``--concurrency``): additive increase, so a limit climbs back slowly.
* ``"throttled"`` (a 429): the limit halves (never below 1), at most once per window: a
  request sent before the last cut does not cut again, so a burst of 429s from one overload
  halves once, as TCP does per round trip. The throttled request itself waits its
  ``Retry-After`` before it is sent again (the caller does that); the others go on under the
  lower limit. (Pausing the whole endpoint on every Retry-After made a steady 5% of 429s
  with ``Retry-After: 1`` a near-permanent pause: 12x slower, where the lower limit alone
  slows the run down about as much as the endpoint asks.)
* ``"failed"`` (5xx, timeout, connection error): neither; the caller backs off on its own.

Requests in flight never exceed the current limit when they are sent, and the limit never
exceeds the cap. ``rpm`` and ``tpm`` are static token buckets refilled continuously; a tpm
reservation is an estimate made before the send, reconciled with the real usage on release.
The clock and sleep are injectable, so tests drive time by hand.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from ragjury.errors import ConfigurationError

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
Outcome = Literal["ok", "throttled", "failed"]


class TokenBucket:
    """``capacity`` units, refilled at ``per_minute / 60`` units per second.

    The level may go below zero when a reservation turns out too small: the debt is repaid
    by the refill before anyone else is admitted.
    """

    def __init__(self, per_minute: int, clock: Clock) -> None:
        if per_minute < 1:
            raise ConfigurationError(
                f"a rate limit must be at least 1 per minute, got {per_minute}; leave it unset "
                "for no limit"
            )
        self.capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._level = self.capacity
        self._stamp = clock()

    @property
    def level(self) -> float:
        self._refill()
        return self._level

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` (at most the capacity) is available; 0 if it is now."""
        missing = min(amount, self.capacity) - self.level
        return max(missing / self._rate, 0.0)

    def take(self, amount: float) -> None:
        self._refill()
        self._level -= amount

    def give(self, amount: float) -> None:
        self._refill()
        self._level = min(self._level + amount, self.capacity)

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._stamp) * self._rate)
        self._stamp = now


@dataclass(frozen=True)
class Permit:
    """One admitted request: its place in the send order and the tokens it reserved."""

    seq: int
    tokens: int


class AdaptiveLimiter:
    """Per-endpoint admission (see the module docstring)."""

    def __init__(
        self,
        cap: int,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        if cap < 1:
            raise ConfigurationError(f"--concurrency must be >= 1, got {cap}")
        self.cap = cap
        self._limit = cap
        self._clock, self._sleep = clock, sleep
        self._requests = TokenBucket(rpm, clock) if rpm is not None else None
        self._tokens = TokenBucket(tpm, clock) if tpm is not None else None
        self.rpm, self.tpm = rpm, tpm
        self._in_flight = 0
        self._issued = 0  # permits handed out so far; a permit's seq is its number
        self._cut_at = 0  # permits issued when the limit was last cut
        self._successes = 0
        self._changed = anyio.Event()
        self.lowest_limit = cap
        self.throttled = 0
        self.cuts = 0
        self.retry_after_seconds = 0.0
        """Seconds throttled requests were asked to wait (Retry-After), summed over them."""
        self.rate_wait_seconds = 0.0
        """Seconds requests waited for the rpm/tpm buckets, summed over requests."""

    @property
    def limit(self) -> int:
        """Requests allowed in flight right now (1 .. cap)."""
        return self._limit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def acquire(self, tokens: int = 0) -> Permit:
        """Wait until a request (reserving ``tokens`` against tpm) may be sent; admit it."""
        while True:
            if self._in_flight >= self._limit:
                await self._changed.wait()
                continue
            wait = max(
                self._requests.wait_for(1) if self._requests else 0.0,
                self._tokens.wait_for(tokens) if self._tokens else 0.0,
            )
            if wait > 0:
                self.rate_wait_seconds += wait
                await self._sleep(wait)
                continue
            break
        if self._requests is not None:
            self._requests.take(1)
        if self._tokens is not None:
            self._tokens.take(tokens)
        self._in_flight += 1
        self._issued += 1
        return Permit(seq=self._issued, tokens=tokens)

    def release(
        self,
        permit: Permit,
        outcome: Outcome,
        *,
        retry_after: float | None = None,
        tokens_used: int | None = None,
    ) -> bool:
        """Give ``permit`` back. Returns True when this release cut the limit."""
        self._in_flight -= 1
        if self._tokens is not None and tokens_used is not None:
            self._tokens.give(permit.tokens - tokens_used)  # negative: the estimate was low
        cut = False
        if outcome == "ok":
            if self._limit < self.cap:
                self._successes += 1
                if self._successes >= self._limit:
                    self._limit += 1
                    self._successes = 0
        elif outcome == "throttled":
            self.throttled += 1
            if retry_after is not None and retry_after > 0:
                self.retry_after_seconds += retry_after
            if permit.seq > self._cut_at:
                self._limit = max(1, self._limit // 2)
                self.lowest_limit = min(self.lowest_limit, self._limit)
                self._cut_at = self._issued
                self._successes = 0
                self.cuts += 1
                cut = True
        self._wake()
        return cut

    def snapshot(self) -> dict[str, Any]:
        """The limiter's state for logs and run summaries."""
        return {
            "concurrency": self.cap,
            "limit": self._limit,
            "lowest_limit": self.lowest_limit,
            "throttled": self.throttled,
            "cuts": self.cuts,
            "retry_after_seconds": round(self.retry_after_seconds, 3),
            "rate_wait_seconds": round(self.rate_wait_seconds, 3),
            "rpm": self.rpm,
            "tpm": self.tpm,
        }

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
