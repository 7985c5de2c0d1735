"""The circuit breaker on its own clock: when it opens, when a probe goes, how the wait
between probes grows, and what closes it. The clock is a variable the test moves, so these
say nothing of how fast the machine is (the end-to-end test against the scripted server is
``tests/test_ratelimit.py::test_an_endpoint_that_goes_down_is_probed_not_hammered...``)."""

from __future__ import annotations

import anyio
import pytest

from ragjury.llm.breaker import PROBE_EVERY, CircuitBreaker

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def opened(clock: Clock, trip_after: int = 3) -> CircuitBreaker:
    breaker = CircuitBreaker(trip_after=trip_after, base=0.5, cap=30.0, clock=clock)
    breaker.record("answered", probe=False, sent=breaker.sent())
    for _ in range(trip_after):
        breaker.record("down", probe=False, sent=breaker.sent())
    return breaker


async def probes_now(breaker: CircuitBreaker) -> bool | None:
    """What admit() answers at once: True (this request is the probe), False (it may go),
    or None (it waits: the clock has not reached the next probe, or a probe is out)."""
    with anyio.move_on_after(0.01):
        return await breaker.admit()
    return None


async def test_it_opens_after_failures_in_a_row_only_once_the_endpoint_has_answered() -> None:
    clock = Clock()
    never_reached = CircuitBreaker(trip_after=3, clock=clock)
    for _ in range(10):
        never_reached.record("down", probe=False, sent=never_reached.sent())
    assert not never_reached.is_open  # a configuration error, reported as such elsewhere

    breaker = opened(clock)
    assert breaker.is_open
    assert breaker.outages == 1


async def test_an_answer_to_a_request_sent_before_the_row_does_not_break_it() -> None:
    clock = Clock()
    breaker = CircuitBreaker(trip_after=3, clock=clock)
    early, late = breaker.sent(), breaker.sent()  # sent before the failures, answered late
    breaker.record("answered", probe=False, sent=early)
    breaker.record("down", probe=False, sent=breaker.sent())
    breaker.record("down", probe=False, sent=breaker.sent())
    breaker.record("answered", probe=False, sent=late)  # in flight before the failures
    breaker.record("down", probe=False, sent=breaker.sent())
    assert breaker.is_open


async def test_an_answer_sent_after_a_failure_but_before_it_came_back_does_not_break_it() -> None:
    # Requests in flight together reach the endpoint in any order: the one sent second may
    # have been answered before the endpoint went down under the one sent first.
    clock = Clock()
    breaker = CircuitBreaker(trip_after=3, clock=clock)
    breaker.record("answered", probe=False, sent=breaker.sent())
    failing, overtaking = breaker.sent(), breaker.sent()
    breaker.record("down", probe=False, sent=failing)
    breaker.record("answered", probe=False, sent=overtaking)
    breaker.record("down", probe=False, sent=breaker.sent())
    breaker.record("down", probe=False, sent=breaker.sent())
    assert breaker.is_open


async def test_an_answer_sent_after_the_first_failure_came_back_breaks_the_row() -> None:
    clock = Clock()
    breaker = CircuitBreaker(trip_after=3, clock=clock)
    breaker.record("answered", probe=False, sent=breaker.sent())
    breaker.record("down", probe=False, sent=breaker.sent())
    breaker.record("down", probe=False, sent=breaker.sent())
    breaker.record("answered", probe=False, sent=breaker.sent())  # up again after both
    breaker.record("down", probe=False, sent=breaker.sent())
    assert not breaker.is_open  # one failure since the answer, not three


async def test_probes_go_one_at_a_time_with_a_growing_wait_capped_at_probe_every() -> None:
    clock = Clock()
    breaker = opened(clock)
    waits = []
    for _ in range(6):
        opened_at = clock.now
        clock.now += 0.001
        assert await probes_now(breaker) is None  # not yet
        while (answer := await probes_now(breaker)) is None:
            clock.now += 0.25
        assert answer is True  # the probe
        assert await probes_now(breaker) is None  # one probe out: the others wait
        waits.append(round(clock.now - opened_at, 2))
        breaker.record("down", probe=True, sent=breaker.sent())
    # first after base (0.5 s), then doubling from each failed probe, at most PROBE_EVERY
    assert waits[0] == 0.5
    assert waits[1:] == [1.0, 2.0, 4.0, PROBE_EVERY, PROBE_EVERY]
    assert breaker.probes == 6


async def test_only_an_answered_probe_closes_it_and_the_outage_is_timed_on_the_clock() -> None:
    clock = Clock()
    breaker = opened(clock)
    breaker.record("answered", probe=False, sent=breaker.sent())  # not the probe: says nothing
    assert breaker.is_open
    clock.now += 0.5
    assert await probes_now(breaker) is True
    clock.now += 2.0
    breaker.record("answered", probe=True, sent=breaker.sent())
    assert not breaker.is_open
    assert breaker.down_seconds == pytest.approx(2.5)
    assert await probes_now(breaker) is False  # closed: requests go
