"""Pacing from what an endpoint delivers, for when its rate-limit headers cannot be trusted.

:class:`AnswerRate` counts the successful answers of the last :data:`SPAN` seconds.
:class:`AnswerPacer` paces requests to a rate found from them, as a congestion controller
finds a path's capacity: when a 429 comes, the rate becomes what the endpoint actually
answered per second lately (when requests are sent faster than a budget refills, that is
the budget's rate), less a margin; while the pacer is what holds requests back, the rate
grows by :data:`GROWTH` a second, so that a budget that was underestimated, or grew, is
found again. When too few answers came lately to tell a rate, pacing starts at
:data:`START` and doubles every second it holds requests back until the first 429 (a slow
start), and a 429 halves it. A burst of 429s from one round of requests cuts once: only a
429 of a request admitted after the last cut cuts again.

Both run on the limiter's clock, so tests drive them by hand.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable

from ragjury.llm.ratelimit import Clock

Sleep = Callable[[float], Awaitable[None]]

SPAN = 5.0
"""Seconds of answers the observed rate is counted over."""
MARGIN = 0.95
"""After a 429, requests are paced at this share of what the endpoint answered."""
GROWTH = 0.03
"""How fast the paced rate grows (a share a second) while it holds requests back."""
START = 1.0
"""Requests a second paced at first when no rate can be told from the answers."""
FLOOR = 1.0 / 60.0
"""The slowest pace, requests a second: one a minute."""
RECHECK = 0.25
"""A request waiting for its turn looks again this often (seconds), as the rate may change."""
_EPSILON = 1e-6
_FEW = 5  # fewer answers than this in the span say nothing of the endpoint's rate


class AnswerRate:
    """Successful answers per second over the last :data:`SPAN` seconds."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._times: deque[float] = deque()
        self._first: float | None = None

    def add(self) -> None:
        now = self._clock()
        if self._first is None:
            self._first = now
        self._times.append(now)
        self._trim(now)

    def per_second(self) -> float:
        """The answers of the span over its length (at least a second; shorter when the
        first answer came less than a span ago)."""
        now = self._clock()
        self._trim(now)
        if self._first is None:
            return 0.0
        return len(self._times) / min(SPAN, max(now - self._first, 1.0))

    @property
    def known(self) -> bool:
        """Whether the span holds enough answers to tell a rate."""
        self._trim(self._clock())
        return len(self._times) >= _FEW

    def _trim(self, now: float) -> None:
        while self._times and self._times[0] < now - SPAN:
            self._times.popleft()


class AnswerPacer:
    """The rate to pace requests at, from the answers (see the module docstring)."""

    def __init__(self, clock: Clock, answers: AnswerRate, *, issued: int) -> None:
        self._clock, self._answers = clock, answers
        self.slow_start = not answers.known
        self.rate = START if self.slow_start else max(FLOOR, answers.per_second() * MARGIN)
        self._cut_at = issued
        self._grown_at = clock()
        self._level, self._stamp = 0.0, clock()  # the bucket of turns: empty at first
        self.cuts = 0

    @property
    def capacity(self) -> float:
        """The burst allowed: a second of the rate, at least one request."""
        return max(1.0, self.rate)

    async def turn(self, sleep: Sleep) -> float:
        """Wait until the pace allows one more request; the seconds waited. The wait is not
        fixed when it begins: a waiting request looks again every :data:`RECHECK` seconds,
        so a rate that grows (or is cut) meanwhile applies to it at once."""
        waited = 0.0
        while True:
            now = self._clock()
            self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._level >= 1.0 - _EPSILON:  # (a wait shorter than the clock's grain
                self._level -= 1.0  # would never move it)
                if not waited:
                    self.idle()
                return waited
            self.held_back()
            delay = min((1.0 - self._level) / self.rate, RECHECK)
            await sleep(delay)
            waited += delay

    def held_back(self) -> None:
        """A request waited for the pace: let the rate grow for the time since last grown."""
        now = self._clock()
        elapsed = min(max(now - self._grown_at, 0.0), 1.0)
        self._grown_at = now
        self.rate *= 2.0**elapsed if self.slow_start else 1.0 + GROWTH * elapsed

    def idle(self) -> None:
        """A request went without waiting: the pace held nothing back, so it does not grow."""
        self._grown_at = self._clock()

    def throttled(self, seq: int, issued: int) -> bool:
        """A 429 for the request admitted ``seq``-th (``issued`` so far). True when it cut."""
        if seq <= self._cut_at:
            return False
        self._cut_at = issued
        self.slow_start = False
        answered = self._answers.per_second() if self._answers.known else self.rate / 2
        self.rate = max(FLOOR, min(self.rate, answered) * MARGIN)
        self._grown_at = self._clock()
        self.cuts += 1
        return True
