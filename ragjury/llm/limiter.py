"""Admission to one endpoint: an adaptive (AIMD) concurrency limit, and pacing to the
endpoint's rate limits, as its headers state them and as ``--rpm`` / ``--tpm`` cap them.

Every request takes a :class:`Permit` from :meth:`AdaptiveLimiter.acquire` and gives it back
with :meth:`AdaptiveLimiter.release`, saying how it went (``"ok"``, ``"throttled"``: a 429,
``"failed"``: anything else) and passing the answer's headers.

**Pacing.** Requests and tokens are drawn from two token buckets per endpoint, kept in a
:class:`~ragjury.llm.ratelimit.RateLedger`: this process's memory, or the store, so that
every process on one database draws from the same two buckets. A bucket's rate and size are
the smaller of ``--rpm`` / ``--tpm`` (per minute) and what the endpoint's ``x-ratelimit-*``
headers say (limit L, remaining R, reset T: L units, refilled at (L - R) / T a second). Each
answer bounds the refill rate (R is rounded down, T to its last digit); the bucket is paced
at :data:`HEADROOM` of the highest rate every answer since the limit last changed allows
(L / 60 until one does). Each answer's remaining figure also lowers the bucket to what it
says is left, less what this process has reserved since that request was sent. A request
reserves its units before it is sent and waits until the bucket is back at zero; a token
reservation is an estimate, reconciled with the real usage at the next reservation. Without
headers and without ``--rpm`` / ``--tpm`` nothing is paced. A reset of 0 while a fiftieth
of the budget is used contradicts OpenAI's meaning (the time until it is full): no rate is
read from that budget's reset.

**Headers that mislead.** Some endpoints mean something else by the headers (a reset that
is the time to the next request, say), and paced by them, requests meet 429 after 429.
When :data:`DISTRUST_AFTER` of the last 100 answers to requests sent after the first
headers were read are 429s whose headers say there was room, or that a spent budget is
full again as soon as the next request may go (a reset under twice the ``Retry-After``;
OpenAI's is the time until the whole budget is back), the limiter stops using the
headers and paces requests from what the endpoint gives (:mod:`ragjury.llm._answer_pacing`:
after each 429, the answers per second of the last few seconds, less a margin; growing
slowly while it holds requests back; each request waits its turn in this process);
``--rpm`` / ``--tpm`` still cap. It logs ``llm_rate_headers_distrusted`` once, with a
sentence saying so. When :data:`TRUST_AGAIN_AFTER` 429s in a row have headers that agree
with them (a budget spent, full again no sooner than twice the ``Retry-After``), it trusts
the headers again (``llm_rate_headers_trusted``).

**Concurrency (AIMD).** After ``limit`` successes in a row the limit grows by one, up to the
cap (``--concurrency``). A 429 that is load halves it (never below 1), at most once per
window: a request sent before the last cut does not cut again, as TCP halves once per round
trip. Which 429s are load:

* with rate-limit headers on the 429: none. A 429 whose headers say a budget is spent is
  a pacing error, corrected in the bucket (the request waits its ``Retry-After``); one whose
  headers say there was room is not about us at all. Neither says anything of concurrency.
* without headers: a 429 halves the limit unless the 429s are known to be *noise*: a low,
  steady share that does not fall when concurrency falls. To find out, the first cut is a
  trial: the limit is held at half, and the share of 429s among the answers to requests
  sent after the cut is compared, after ``max(2 x limit, 100)`` of them, with the share in
  the last 100 answers before it. If it is at least a third of that, at least two 429s, and
  at most :data:`NOISE_CEILING`, halving did not help: the limit goes back to where the cuts
  began and that share is the noise; after that a 429 cuts only when the share of 429s in
  the last 100 answers rises above what chance allows for that noise (:func:`noise_bar`).
  Otherwise the 429s were load: the cut stays and AIMD goes on. A trial whose share passes
  :func:`clearly_load` (after 20 answers) ends at once as load. Until a run has 100
  answers its share is counted over 100, so that its first few cannot decide.

The clock and sleep are injectable, so tests drive time by hand.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import anyio
import structlog

from ragjury._json import JSONData
from ragjury.errors import ConfigurationError
from ragjury.llm._answer_pacing import AnswerPacer, AnswerRate
from ragjury.llm.ratelimit import Clock, LocalLedger, RateHeaders, RateLedger, Window

if TYPE_CHECKING:
    import httpx2

Sleep = Callable[[float], Awaitable[None]]
Outcome = Literal["ok", "throttled", "failed"]
Kind = Literal["requests", "tokens"]
KINDS: tuple[Kind, ...] = ("requests", "tokens")

HEADROOM = 0.97
"""The share of an endpoint's stated rate that requests are paced to."""
NOISE_CEILING = 0.15
"""A share of 429s above this is never noise."""
_RECENT = 100
_TRIAL_MIN = 100
_CLEARLY_LOAD_AFTER = 20  # answers in a trial before its share alone can end it as load
CLEARLY_LOAD = 0.2
"""A trial whose share of 429s passes this (after 20 answers, and more than noise could give
by chance: :func:`clearly_load`) ends at once as load."""
DISTRUST_AFTER = 5
"""429s among the last 100 answers with headers that make the limiter stop trusting them."""
TRUST_AGAIN_AFTER = 3
"""429s in a row whose headers agree with them that make it trust the headers again (twice
as many each further time, so that it does not flap)."""

log = structlog.get_logger("ragjury.llm")


def clearly_load(answers: int) -> float:
    """The share of 429s over a trial's first ``answers`` answers above which it ends at
    once as load: :data:`CLEARLY_LOAD`, or more if noise at :data:`NOISE_CEILING` could
    reach it by chance over so few (two standard errors). Over 20 answers that is 31%: a
    steady 5% gives 5 in 20 often enough that a bar at 20% ended trials of noise as load
    and cut again, down to a fifth of the limit, in the first seconds of a run."""
    spread = 2 * math.sqrt(NOISE_CEILING * (1 - NOISE_CEILING) / max(answers, 1))
    return max(CLEARLY_LOAD, NOISE_CEILING + spread)


def noise_bar(noise: float, measured_over: int) -> float:
    """The share of 429s in the last :data:`_RECENT` answers above which 429s found to be
    ``noise`` (a share measured over ``measured_over`` answers) are load again.

    Both shares are counts of chance events: a trial over 100 answers reads a steady 5% as
    anything from 1% to 9%, and so does each window of 100 answers after it. So the bar is
    the highest the noise may be, given its trial (two standard errors above the share
    measured), plus two standard errors of a window at that share; never below twice the
    noise plus two points, never above :data:`NOISE_CEILING`. A bar at twice the measured
    share alone cut a steady 5% again in about a third of 1,500-answer runs, whenever its
    trial read it low."""
    high = noise + 2 * math.sqrt(noise * (1 - noise) / max(measured_over, 1))
    window = high + 2 * math.sqrt(high * (1 - high) / _RECENT)
    return min(max(window, 2 * noise + 0.02), NOISE_CEILING)


__all__ = ["AdaptiveLimiter", "Clock", "Outcome", "Permit", "Sleep"]


@dataclass(frozen=True)
class Permit:
    """One admitted request: its place in the send order, its token estimate, and how many
    requests and tokens had been reserved when it was (itself included)."""

    seq: int
    tokens: int
    marks: tuple[float, float] = (0.0, 0.0)


@dataclass
class _Seen:
    """The latest remaining figure of one budget, and the reservations made up to its send."""

    seq: int
    remaining: float
    mark: float


@dataclass
class _Trial:
    limit_before: int
    share_before: float
    after_seq: int
    answers: int = 0
    throttled: int = 0


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
        ledger: RateLedger | None = None,
        key: str = "endpoint",
    ) -> None:
        if cap < 1:
            raise ConfigurationError(f"--concurrency must be >= 1, got {cap}")
        for name, value in (("--rpm", rpm), ("--tpm", tpm)):
            if value is not None and value < 1:
                raise ConfigurationError(
                    f"a rate limit must be at least 1 per minute, got {name} {value}; leave it "
                    "unset for no limit"
                )
        self.cap = cap
        self._limit = cap
        self._clock, self._sleep = clock, sleep
        self._ledger: RateLedger = ledger or LocalLedger(clock)
        self.shared = ledger is not None
        self._key = key
        self.rpm, self.tpm = rpm, tpm
        self._in_flight = 0
        self._issued = 0  # permits handed out so far; a permit's seq is its number
        self._cut_at = 0  # permits issued when the limit was last cut
        self._successes = 0
        self._waiting: deque[anyio.Event] = deque()
        """Requests waiting for room under the limit, first come first: a slot given back
        wakes one of them (waking them all made each answer cost a wake-up of every waiting
        request: about 60 a request on the throughput benchmark, 0.3-0.4 ms of CPU)."""
        self._woken = 0  # waiting requests woken for a slot that have not yet taken it
        self._learned: dict[Kind, tuple[float, float]] = {}  # per second, capacity
        self._bounds: dict[Kind, tuple[float, float, float]] = {}  # limit; refill rate low, high
        self._unreliable: set[Kind] = set()  # budgets whose reset contradicts OpenAI's meaning
        self._headers_from: int | None = None  # permits issued when headers were first read
        self._surprises: deque[bool] = deque(maxlen=_RECENT)  # 429s of header-paced requests
        self._answers = AnswerRate(clock)
        self._pacer: AnswerPacer | None = None
        self._agreeing = 0  # 429s in a row whose headers agree, while they are distrusted
        self._trust_needs = TRUST_AGAIN_AFTER
        self.distrusted = 0
        """Times the headers were found misleading (see the module docstring)."""
        self._seen: dict[Kind, _Seen] = {}
        self._reserved = {"requests": 0.0, "tokens": 0.0}
        self._refund = {"requests": 0.0, "tokens": 0.0}
        self._recent: deque[bool] = deque(maxlen=_RECENT)
        self._trial: _Trial | None = None
        self._before_cuts: int | None = None  # the limit before the cuts since load was last seen
        self.noise: float | None = None
        self._noise_bar = NOISE_CEILING  # the share of 429s above which they are load again
        """The share of 429s found to be noise (see the module docstring), once known."""
        self.lowest_limit = cap
        self.throttled = 0
        self.throttled_spent = 0
        """429s whose headers said a budget was spent (corrected by pacing)."""
        self.throttled_noise = 0
        """429s taken for noise: their headers said there was room, or the share is noise."""
        self.cuts = 0
        self.retry_after_seconds = 0.0
        """Seconds throttled requests were asked to wait (Retry-After), summed over them."""
        self.rate_wait_seconds = 0.0
        """Seconds requests waited for the rate buckets, summed over requests."""

    @property
    def limit(self) -> int:
        """Requests allowed in flight right now (1 .. cap)."""
        return self._limit

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def budget(self, kind: Kind) -> tuple[float, float] | None:
        """The (per second, capacity) a bucket is paced to, or None when it is not."""
        static = self.rpm if kind == "requests" else self.tpm
        options = [(static / 60.0, float(static))] if static is not None else []
        if kind in self._learned:
            options.append(self._learned[kind])
        if not options:
            return None
        return min(rate for rate, _ in options), min(size for _, size in options)

    async def acquire(self, tokens: int = 0) -> Permit:
        """Wait for room under the limit, reserve the request (and ``tokens``) in the rate
        buckets, wait until the reservation is due; admit it."""
        if self._in_flight + self._woken >= self._limit or self._waiting:
            await self._wait_for_room()  # (a slot a woken request is about to take is its)
        self._in_flight += 1
        self._issued += 1
        seq = self._issued
        try:
            if self._pacer is not None:  # the headers mislead: paced from the answers
                self.rate_wait_seconds += await self._pacer.turn(self._sleep)
            wait, marks = 0.0, [0.0, 0.0]
            for index, kind in enumerate(KINDS):
                amount = 1.0 if kind == "requests" else float(tokens)
                self._reserved[kind] += amount
                marks[index] = self._reserved[kind]
                wait = max(wait, await self._reserve(kind, amount))
            if wait > 0:
                self.rate_wait_seconds += wait
                await self._sleep(wait)
        except BaseException:
            self._in_flight -= 1
            self._wake()
            raise
        return Permit(seq=seq, tokens=tokens, marks=(marks[0], marks[1]))

    async def _wait_for_room(self) -> None:
        """Wait in line until a slot under the limit is free (one woken and beaten to its
        slot waits again at the head of the line)."""
        first = True
        while first or self._in_flight >= self._limit:
            turn = anyio.Event()
            if first:
                self._waiting.append(turn)
            else:
                self._waiting.appendleft(turn)
            first = False
            try:
                await turn.wait()
            except BaseException:
                if turn.is_set():
                    self._woken -= 1
                    self._wake()  # the slot it was woken for goes to the next in line
                else:
                    self._waiting.remove(turn)
                raise
            self._woken -= 1

    @property
    def headers_trusted(self) -> bool:
        """Whether requests are paced from the endpoint's headers (when it sends them), or
        from the answers it gives, because its headers were found misleading."""
        return self._pacer is None

    async def _reserve(self, kind: Kind, amount: float) -> float:
        """Take ``amount`` (already added to ``_reserved``) from the bucket; the wait."""
        refund, self._refund[kind] = self._refund[kind], 0.0
        budget = self.budget(kind)
        if budget is None:
            return 0.0
        per_second, capacity = budget
        seen = self._seen.pop(kind, None)
        at_most = None
        if seen is not None:  # what the endpoint said was left, less what was reserved since
            at_most = seen.remaining - (self._reserved[kind] - amount - seen.mark)
            # (reservations made since its request, this one excepted: it is taken below)
        return await self._ledger.take_rate(
            f"{self._key}:{kind}",
            amount - refund,
            per_second=per_second,
            capacity=capacity,
            at_most=at_most,
        )

    def release(
        self,
        permit: Permit,
        outcome: Outcome,
        *,
        retry_after: float | None = None,
        tokens_used: int | None = None,
        headers: Mapping[str, str] | httpx2.Headers | None = None,
    ) -> bool:
        """Give ``permit`` back. Returns True when this release cut the limit."""
        self._in_flight -= 1
        stated = RateHeaders.parse(headers)
        if stated is not None:
            self._observe(permit, stated)
        if outcome == "ok":
            if tokens_used is not None:
                self._refund["tokens"] += permit.tokens - tokens_used
        elif outcome == "failed" or stated is None:  # the endpoint did not count it
            self._refund["requests"] += 1
            self._refund["tokens"] += permit.tokens
        # (a 429 with headers gives nothing back: its remaining figure lowers the bucket, and
        # a unit given back on top would let the next request meet the same 429)
        cut = False
        if stated is not None or self._pacer is not None:
            self._weigh_headers(permit, stated, outcome, retry_after)
        if outcome == "ok":
            self._answers.add()
            self._count(permit, throttled=False)
            if self._limit < self.cap and self._trial is None:  # a trial holds the limit
                self._successes += 1
                if self._successes >= self._limit:
                    self._limit += 1
                    self._successes = 0
        elif outcome == "throttled":
            self.throttled += 1
            if retry_after is not None and retry_after > 0:
                self.retry_after_seconds += retry_after
            if stated is not None:
                self._count(permit, throttled=False)
                if stated.room_for(permit.tokens):
                    self.throttled_noise += 1
                else:
                    self.throttled_spent += 1
            else:
                cut = self._throttled_without_headers(permit)
        self._wake()
        return cut

    def _observe(self, permit: Permit, stated: RateHeaders) -> None:
        if self._headers_from is None:
            self._headers_from = self._issued
        if self._pacer is not None:
            return  # distrusted: neither their rates nor their remaining figures are used
        for index, kind in enumerate(KINDS):
            window: Window | None = getattr(stated, kind)
            if window is None:
                continue
            self._learn(kind, window)
            seen = self._seen.get(kind)
            if seen is None or permit.seq >= seen.seq:
                self._seen[kind] = _Seen(permit.seq, window.remaining, permit.marks[index])

    def _learn(self, kind: Kind, window: Window) -> None:
        """The refill rate of one budget: the narrowest range every answer since its limit
        last changed allows, paced at its low end (once any answer bounds it)."""
        if window.contradicts_reset:
            self._unreliable.add(kind)  # no rate can be read from its reset
        if kind in self._unreliable:
            self._learned.pop(kind, None)
            return
        known = self._bounds.get(kind)
        if known is not None and known[0] != window.limit:
            known = None  # a new limit: what the old one allowed says nothing
        bounds = window.bounds()
        if bounds is not None:
            low, high = bounds
            if known is not None and max(known[1], low) <= min(known[2], high):
                low, high = max(known[1], low), min(known[2], high)
            # else the ranges do not meet (the rate changed): start again from this answer
            known = (window.limit, low, high)
        if known is not None:
            self._bounds[kind] = known
        if known is not None and known[1] > 0:
            rate = known[1]
        elif kind in self._learned:
            rate = self._learned[kind][0] / HEADROOM
        else:
            rate = window.limit / 60.0  # nothing says the refill yet: OpenAI's minute budgets
        self._learned[kind] = (rate * HEADROOM, window.limit)

    def _weigh_headers(
        self,
        permit: Permit,
        stated: RateHeaders | None,
        outcome: Outcome,
        retry_after: float | None,
    ) -> None:
        """Whether the headers keep their word: distrust them when 429s that contradict them
        keep coming to requests they paced; trust them again when 429s agree with them."""
        throttled = outcome == "throttled"
        pacer = self._pacer
        if pacer is None:
            if stated is None or permit.seq <= (self._headers_from or 0):
                return  # sent before any header was read: the headers did not pace it
            misled = throttled and not _agrees(stated, permit.tokens, retry_after)
            self._surprises.append(misled)
            if misled and sum(self._surprises) >= DISTRUST_AFTER:
                self._distrust()
            return
        if not throttled:
            return
        pacer.throttled(permit.seq, self._issued)
        if stated is not None and _agrees(stated, permit.tokens, retry_after):
            self._agreeing += 1
            if self._agreeing >= self._trust_needs:
                self._trust_again()
                self._observe(permit, stated)  # learn from the headers that agreed
        else:
            self._agreeing = 0

    def _distrust(self) -> None:
        pacer = AnswerPacer(self._clock, self._answers, issued=self._issued)
        self._pacer = pacer
        self._learned.clear()
        self._bounds.clear()
        self._seen.clear()
        self._agreeing = 0
        self.distrusted += 1
        say = log.warning if self.distrusted == 1 else log.debug
        say(
            "llm_rate_headers_distrusted",
            endpoint=self._key,
            throttled=sum(self._surprises),
            of_answers=len(self._surprises),
            paced_rpm=round(pacer.rate * 60.0, 1),
            say=f"{self._key} kept answering 429 while its x-ratelimit-* headers said there "
            "was room or that the budget would be back soon; requests are now paced from the "
            f"answers it gives per second instead (about {pacer.rate * 60.0:.0f} a minute)",
        )
        self._surprises.clear()

    def _trust_again(self) -> None:
        self._pacer = None
        self._unreliable.clear()
        self._agreeing = 0
        self._trust_needs *= 2
        self._headers_from = self._issued
        say = log.info if self._trust_needs == 2 * TRUST_AGAIN_AFTER else log.debug
        say(
            "llm_rate_headers_trusted",
            endpoint=self._key,
            note="the endpoint's 429s agree with its x-ratelimit-* headers again; requests "
            "are paced from the headers",
        )

    def _share(self) -> float:
        """The share of 429s in the last answers; until there are :data:`_TRIAL_MIN` of
        them, over that many (the first answers of a run are too few to tell)."""
        return sum(self._recent) / max(len(self._recent), _TRIAL_MIN)

    def _count(self, permit: Permit, *, throttled: bool) -> None:
        """One answer, into the recent share of 429s and the trial running, if any."""
        self._recent.append(throttled)
        trial = self._trial
        if trial is None or permit.seq <= trial.after_seq:
            return
        trial.answers += 1
        trial.throttled += throttled
        if trial.answers >= max(2 * self._limit, _TRIAL_MIN):
            self._trial = None
            share = trial.throttled / trial.answers
            if trial.throttled >= 2 and trial.share_before / 3 <= share <= NOISE_CEILING:
                self.noise = share
                self._noise_bar = noise_bar(share, trial.answers)
                self._limit = max(self._limit, trial.limit_before, self._before_cuts or 0)
                self._successes = 0
                log.info("llm_429s_are_noise", share=round(share, 3), limit=self._limit)
            else:
                self._before_cuts = None  # the cuts helped: where they began was too high

    def _throttled_without_headers(self, permit: Permit) -> bool:
        """Whether a 429 with no rate-limit headers cuts the limit (the rule above)."""
        self._count(permit, throttled=True)
        share = self._share()
        trial = self._trial
        if trial is not None:
            share_now = trial.throttled / max(trial.answers, 1)
            if trial.answers < _CLEARLY_LOAD_AFTER or share_now <= clearly_load(trial.answers):
                return False  # measuring: not yet known
            self._trial = None  # clearly load: cut again below
        elif self.noise is not None and share <= self._noise_bar:
            self.throttled_noise += 1
            return False
        if permit.seq <= self._cut_at:
            return False
        before = self._limit
        if self._before_cuts is None:
            self._before_cuts = before
        self._limit = max(1, self._limit // 2)
        self.lowest_limit = min(self.lowest_limit, self._limit)
        self._cut_at = self._issued
        self._successes = 0
        self.cuts += 1
        if trial is None:
            self._trial = _Trial(limit_before=before, share_before=share, after_seq=self._issued)
        return True

    def snapshot(self) -> dict[str, JSONData]:
        """The limiter's state for logs and run summaries."""
        return {
            "concurrency": self.cap,
            "limit": self._limit,
            "lowest_limit": self.lowest_limit,
            "throttled": self.throttled,
            "throttled_budget_spent": self.throttled_spent,
            "throttled_noise": self.throttled_noise,
            "noise_share": None if self.noise is None else round(self.noise, 3),
            "cuts": self.cuts,
            "retry_after_seconds": round(self.retry_after_seconds, 3),
            "rate_wait_seconds": round(self.rate_wait_seconds, 3),
            "rpm": self.rpm,
            "tpm": self.tpm,
            "rate_headers_trusted": self.headers_trusted,
            "rate_headers_distrusted": self.distrusted,
            "paced_from_answers_rpm": (
                None if self._pacer is None else round(self._pacer.rate * 60.0, 1)
            ),
            "paced_rpm": _per_minute(self.budget("requests")),
            "paced_tpm": _per_minute(self.budget("tokens")),
            "shared": self.shared,
        }

    def _wake(self) -> None:
        """Wake as many waiting requests as there are free slots under the limit."""
        free = self._limit - self._in_flight - self._woken
        while free > 0 and self._waiting:
            self._waiting.popleft().set()
            self._woken += 1
            free -= 1


def _agrees(stated: RateHeaders, tokens: int, retry_after: float | None) -> bool:
    """Whether a 429's headers agree with it as OpenAI means them: a budget is spent, and
    each spent one is full again no sooner than twice the wait for the next request (a
    reset as near as that wait is the time to the next request, not to a full budget).
    Without a ``Retry-After`` a spent budget is taken at its word."""
    if stated.room_for(tokens):
        return False
    if retry_after is None or retry_after <= 0:
        return True
    spent = [
        window
        for window, needed in ((stated.requests, 1.0), (stated.tokens, float(tokens)))
        if window is not None and window.remaining < needed
    ]
    return all(window.reset >= 2.0 * retry_after for window in spent)


def _per_minute(budget: tuple[float, float] | None) -> float | None:
    return None if budget is None else round(budget[0] * 60.0, 1)
