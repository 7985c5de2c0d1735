"""A circuit breaker per endpoint: when an endpoint that answered before fails every
request, new requests wait instead of each spending its own retries.

* **closed** (the normal state): requests go. ``trip_after`` failures in a row that say the
  endpoint is down (connection refused, timeout, 5xx) open it, but only once the endpoint
  has answered at least once: an endpoint never reached is a configuration error, which the
  client reports as such. Only an answer to a request sent after the row's first failure
  came back breaks the row (each request takes a number from :meth:`CircuitBreaker.sent` as
  it goes): one sent before may have reached the endpoint before it went down, even when it
  was sent after the failing request, as requests in flight together arrive in any order.
* **open**: every request waits in :meth:`CircuitBreaker.admit`. After a backoff (``base``,
  doubling up to ``cap``, at most :data:`PROBE_EVERY` seconds, so that an endpoint that
  comes back is found soon) the request that has waited longest goes alone as a probe.
* A probe that is answered (any answer, a 429 or a 4xx too: the endpoint is up) closes it
  and wakes every waiting request; a probe that fails opens it again with the next backoff.
  Only a probe closes it: answers to requests sent before it opened say nothing of now.

Waiting here costs a request none of its transport retries; only a probe that fails is one
of its probing request's attempts, and probes go to the waiting requests in turn. The
breaker logs ``endpoint_down`` once when it opens and ``endpoint_back`` when it closes.

Time is the injected ``clock`` and ``sleep`` (the waiting request first in line is the only
one with a timer), so a test can drive the backoff by hand.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio
import structlog

from ragjury.llm.ratelimit import Clock

log = structlog.get_logger("ragjury.llm")

Sleep = Callable[[float], Awaitable[None]]

PROBE_EVERY = 5.0
"""The longest wait between two probes, seconds."""

Health = Literal["answered", "down", "unknown"]
"""What one request said about the endpoint: it answered (with anything), it looked down
(connection refused, timeout, 5xx), or nothing (cancelled before an answer)."""


class CircuitBreaker:
    """See the module docstring."""

    def __init__(
        self,
        *,
        trip_after: int = 5,
        base: float = 0.5,
        cap: float = 30.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
        name: str = "the endpoint",
    ) -> None:
        self.trip_after, self.base, self.cap = trip_after, base, cap
        self._clock, self._sleep, self._name = clock, sleep, name
        self._sent = 0  # requests sent so far; a request's number is its place in the order
        self._failures = 0
        self._row_seen = 0  # requests sent when the current row's first failure came back
        self._answered = False
        self._open = False
        self._probe_out = False
        self._probes_failed = 0
        self._next_probe = 0.0
        self._opened_at = 0.0
        self._waiting: deque[object] = deque()
        self._changed = anyio.Event()
        self.outages = 0
        self.down_seconds = 0.0
        self.probes = 0

    @property
    def is_open(self) -> bool:
        return self._open

    def sent(self) -> int:
        """A request is being sent now: its place in the send order, for :meth:`record`."""
        self._sent += 1
        return self._sent

    async def admit(self) -> bool:
        """Wait while the endpoint is down; True when this request goes as the probe."""
        if not self._open:
            return False
        me = object()
        self._waiting.append(me)
        try:
            while self._open:
                now = self._clock()
                if not self._probe_out and self._waiting[0] is me and now >= self._next_probe:
                    self._probe_out = True
                    self.probes += 1
                    return True
                changed = self._changed
                first = not self._probe_out and self._waiting[0] is me
                await self._wait(changed, self._next_probe - now if first else math.inf)
            return False
        finally:
            self._waiting.remove(me)
            self._wake()  # the next in line may be the probe now

    async def _wait(self, changed: anyio.Event, delay: float) -> None:
        """Until ``changed`` is set or ``delay`` seconds have passed on the breaker's clock."""
        if delay == math.inf:
            await changed.wait()
            return
        async with anyio.create_task_group() as tg:

            async def timer() -> None:
                await self._sleep(max(delay, 0.0))
                tg.cancel_scope.cancel()

            tg.start_soon(timer)
            await changed.wait()
            tg.cancel_scope.cancel()

    def record(self, health: Health, *, probe: bool, sent: int) -> None:
        """What one request (``probe``: the probe), ``sent``-th in the send order (see
        :meth:`sent`), found."""
        if probe:
            self._probe_out = False
        if health == "answered":
            self._answered = True
            if self._failures and sent <= self._row_seen and not probe:
                pass  # sent before the row was seen: it may have arrived before the failures
            else:
                self._failures = 0
            if self._open and probe:
                self._close()
        elif health == "down":
            if self._failures == 0:
                self._row_seen = self._sent
            self._failures += 1
            if probe:
                self._probes_failed += 1
                self._next_probe = self._clock() + self._backoff()
            elif not self._open and self._answered and self._failures >= self.trip_after:
                self._trip()
        self._wake()

    def _backoff(self) -> float:
        return min(self.cap, PROBE_EVERY, self.base * 2.0**self._probes_failed)

    def _trip(self) -> None:
        self._open = True
        self._probes_failed = 0
        self._opened_at = self._clock()
        self._next_probe = self._opened_at + self.base
        self.outages += 1
        log.warning(
            "endpoint_down",
            endpoint=self._name,
            failures_in_a_row=self._failures,
            say=f"{self._name} looks down ({self._failures} failures in a row): new requests "
            "wait, and one probe at a time is sent until it answers",
        )

    def _close(self) -> None:
        self._open = False
        down = self._clock() - self._opened_at
        self.down_seconds += down
        log.warning(
            "endpoint_back",
            endpoint=self._name,
            down_seconds=round(down, 1),
            probes=self.probes,
            say=f"{self._name} answers again after {down:.1f} s down; the waiting requests go",
        )

    def _wake(self) -> None:
        if self._waiting:  # (every request's record ends here: no event made for no one)
            self._changed.set()
            self._changed = anyio.Event()
