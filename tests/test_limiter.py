"""The endpoint limiter: AIMD concurrency, rpm/tpm buckets. Time is a
ManualClock that only moves when the limiter sleeps, so every wait is observed exactly."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import anyio
import pytest

from ragjury.errors import ConfigurationError
from ragjury.llm import LLM
from ragjury.llm.limiter import AdaptiveLimiter, Permit
from ragjury.schemas import Critique

from conftest import ManualClock, make_settings
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, Responder, chat_json, error

pytestmark = pytest.mark.anyio


def limiter(
    cap: int, clock: ManualClock, *, rpm: int | None = None, tpm: int | None = None
) -> AdaptiveLimiter:
    return AdaptiveLimiter(cap, rpm=rpm, tpm=tpm, clock=clock, sleep=clock.sleep)


async def take(lim: AdaptiveLimiter, n: int, tokens: int = 0) -> list[Permit]:
    return [await lim.acquire(tokens) for _ in range(n)]


async def test_a_429_halves_the_limit() -> None:
    lim = limiter(8, ManualClock())
    permits = await take(lim, 8)

    assert lim.release(permits[0], "throttled") is True
    assert lim.limit == 4


async def test_a_burst_of_429s_from_one_window_halves_once() -> None:
    lim = limiter(8, ManualClock())
    permits = await take(lim, 8)

    cuts = [lim.release(p, "throttled") for p in permits]

    assert cuts == [True] + [False] * 7
    assert lim.limit == 4


async def test_the_limit_never_drops_below_one() -> None:
    lim = limiter(2, ManualClock())
    for _ in range(5):
        lim.release(await lim.acquire(), "throttled")
    assert lim.limit == 1
    assert lim.lowest_limit == 1


async def test_a_throttle_lowers_the_limit_but_does_not_stop_the_other_requests() -> None:
    clock = ManualClock()
    lim = limiter(4, clock)
    permits = [await lim.acquire() for _ in range(4)]
    lim.release(permits[0], "throttled", retry_after=5.0)  # limit 4 -> 2, three still out
    lim.release(permits[1], "ok")
    lim.release(permits[2], "ok")

    await lim.acquire()  # room under the new limit: sent at once, no endpoint-wide pause

    assert clock.sleeps == []
    assert lim.limit == 3  # halved to 2, then two successes climbed one back
    assert lim.retry_after_seconds == 5.0


async def test_the_limit_climbs_back_by_one_after_limit_successes_up_to_the_cap() -> None:
    lim = limiter(8, ManualClock())
    lim.release(await lim.acquire(), "throttled")
    assert lim.limit == 4
    seen = [lim.limit]
    for _ in range(40):
        lim.release(await lim.acquire(), "ok")
        if lim.limit != seen[-1]:
            seen.append(lim.limit)
    assert seen == [4, 5, 6, 7, 8]
    assert lim.limit == 8  # never above the cap however many successes follow


async def test_failures_that_are_not_429_leave_the_limit_alone() -> None:
    lim = limiter(4, ManualClock())
    lim.release(await lim.acquire(), "failed")
    assert lim.limit == 4


async def test_requests_in_flight_never_exceed_the_limit_even_after_a_cut() -> None:
    clock = ManualClock()
    lim = limiter(6, clock)
    peak_over_limit: list[int] = []
    throttle_once = itertools.count()

    async def request() -> None:
        permit = await lim.acquire()
        peak_over_limit.append(lim.in_flight - lim.limit)
        await clock.sleep(1.0)
        lim.release(permit, "throttled" if next(throttle_once) == 3 else "ok")

    async with anyio.create_task_group() as tg:
        for _ in range(60):
            tg.start_soon(request)

    assert lim.lowest_limit == 3
    assert max(peak_over_limit) <= 0
    assert lim.in_flight == 0


async def test_rpm_admits_a_burst_then_one_request_per_interval() -> None:
    clock = ManualClock()
    lim = limiter(100, clock, rpm=60)
    for permit in await take(lim, 60):
        lim.release(permit, "ok")
    assert clock.sleeps == []

    lim.release(await lim.acquire(), "ok")

    assert clock.sleeps == [pytest.approx(1.0)]


async def test_tpm_reservations_are_reconciled_with_the_real_usage() -> None:
    clock = ManualClock()
    lim = limiter(100, clock, tpm=1000)
    permit = await lim.acquire(tokens=600)
    lim.release(permit, "ok", tokens_used=900)  # 300 more than reserved: a debt

    await lim.acquire(tokens=600)

    # 1000 - 900 = 100 left; 500 more at 1000/60 per second
    assert clock.sleeps == [pytest.approx(30.0)]


async def test_a_zero_rate_limit_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="at least 1 per minute"):
        limiter(4, ManualClock(), rpm=0)


def every_fourth_is_a_429() -> Responder:
    counter = itertools.count()
    lock = threading.Lock()

    def respond(request: RecordedRequest) -> Reply:
        with lock:
            n = next(counter)
        if n % 4 == 3:
            return error(429, "slow down", retry_after_ms=5)
        return chat_json({"rationale": "ok", "rating": 4}, delay=0.02)

    return respond


async def test_a_steady_429_rate_slows_the_run_without_failing_it_or_exceeding_the_cap(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", every_fourth_is_a_429())
    async with LLM(make_settings(fake, tmp_path, concurrency=4)) as llm:
        async with anyio.create_task_group() as tg:
            for _ in range(40):
                tg.start_soon(_rate, llm)

        sent = len(fake.requests_for("critic"))
        assert llm.usage.stage("critic").calls == 40
        assert llm.usage.stage("critic").failed_calls == 0
        assert sent > 40  # the 429s were retried, not failed
        assert llm.limiter.throttled == sent - 40
        assert llm.limiter.lowest_limit < 4  # the limit was cut
        assert fake.in_flight_max <= 4  # and never exceeded


async def _rate(llm: LLM) -> None:
    await llm.structured(Critique, [{"role": "user", "content": "Rate it."}], stage="critic")
