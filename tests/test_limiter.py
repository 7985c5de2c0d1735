"""The endpoint limiter: AIMD concurrency, rpm/tpm buckets. Time is a
ManualClock that only moves when the limiter sleeps, so every wait is observed exactly."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import structlog

from ragjury.errors import ConfigurationError
from ragjury.llm import LLM
from ragjury.llm.limiter import (
    DISTRUST_AFTER,
    NOISE_CEILING,
    TRUST_AGAIN_AFTER,
    AdaptiveLimiter,
    Permit,
    noise_bar,
)
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
    assert lim.limit == 2  # halved, and held there while the cut is on trial
    assert lim.retry_after_seconds == 5.0


async def test_the_limit_climbs_back_by_one_after_limit_successes_up_to_the_cap() -> None:
    lim = limiter(8, ManualClock())
    lim.release(await lim.acquire(), "throttled")
    assert lim.limit == 4
    seen = [lim.limit]
    for _ in range(200):  # the first 100 are the cut's trial: no 429, so it was load
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


async def waiters(
    lim: AdaptiveLimiter, tg: anyio.abc.TaskGroup, n: int
) -> tuple[list[int], list[anyio.CancelScope], dict[int, Permit]]:
    """``n`` requests waiting for room, in order: the order they got in, a scope to cancel
    each, and the permits they hold."""
    admitted: list[int] = []
    scopes = [anyio.CancelScope() for _ in range(n)]
    held: dict[int, Permit] = {}

    async def wait(i: int) -> None:
        with scopes[i]:
            held[i] = await lim.acquire()
            admitted.append(i)

    for i in range(n):
        tg.start_soon(wait, i)
        await anyio.wait_all_tasks_blocked()  # each in line before the next
    return admitted, scopes, held


async def test_each_slot_given_back_admits_the_next_waiting_request_in_order() -> None:
    lim = limiter(2, ManualClock())
    out = await take(lim, 2)
    async with anyio.create_task_group() as tg:
        admitted, _, held = await waiters(lim, tg, 4)
        assert admitted == []
        lim.release(out[0], "ok")
        await anyio.wait_all_tasks_blocked()
        assert admitted == [0]
        lim.release(out[1], "failed")
        lim.release(held[0], "ok")
        await anyio.wait_all_tasks_blocked()
        assert admitted == [0, 1, 2]
        assert lim.in_flight == 2
        for i in (1, 2):
            lim.release(held[i], "ok")
    assert admitted == [0, 1, 2, 3]
    assert lim.in_flight == 1


async def test_a_waiting_request_cancelled_as_it_is_woken_passes_its_slot_on() -> None:
    lim = limiter(1, ManualClock())
    (out,) = await take(lim, 1)
    async with anyio.create_task_group() as tg:
        admitted, scopes, held = await waiters(lim, tg, 3)
        scopes[0].cancel()  # the first in line is cancelled, and before it runs ...
        lim.release(out, "ok")  # ... the slot given back wakes it
        await anyio.wait_all_tasks_blocked()
        assert admitted == [1]
        scopes[2].cancel()  # cancelled while still in line: nothing to pass on
        await anyio.wait_all_tasks_blocked()
        lim.release(held[1], "ok")
    assert admitted == [1]
    assert lim.in_flight == 0
    assert [await lim.acquire() for _ in range(1)]  # the slot is free again


async def test_a_limit_that_grows_admits_as_many_waiting_requests_as_it_has_room_for() -> None:
    lim = limiter(4, ManualClock())
    lim.release(await lim.acquire(), "throttled")  # 4 -> 2, held while the cut is on trial
    while lim.limit < 3:  # the trial ends (no 429: load), then 2 successes: 3
        lim.release(await lim.acquire(), "ok")
    out = await take(lim, 3)
    async with anyio.create_task_group() as tg:
        admitted, _, held = await waiters(lim, tg, 4)
        lim.release(out[0], "ok")
        lim.release(out[1], "ok")
        await anyio.wait_all_tasks_blocked()
        assert admitted == [0, 1]  # a slot each
        lim.release(out[2], "ok")  # the third success in a row: limit 3 -> 4, two slots
        await anyio.wait_all_tasks_blocked()
        assert lim.limit == 4
        assert admitted == [0, 1, 2, 3]
        for permit in held.values():
            lim.release(permit, "ok")


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


def stated(remaining: int, *, limit: int = 60, reset: str = "10s") -> dict[str, str]:
    """An answer's request-budget headers, as OpenAI writes them."""
    return {
        "x-ratelimit-limit-requests": str(limit),
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": reset,
    }


async def test_without_headers_or_rpm_nothing_is_paced() -> None:
    clock = ManualClock()
    lim = limiter(100, clock)
    for permit in await take(lim, 100):
        lim.release(permit, "ok")
    assert clock.sleeps == []
    assert lim.budget("requests") is None


async def test_headers_pace_requests_to_what_remains_before_the_reset() -> None:
    clock = ManualClock()
    lim = limiter(100, clock)
    first = await lim.acquire()
    # 11 used (10 or 11: remaining is rounded down), back in 10 s (written to the second, so
    # at most 10.5): at least 10 / 10.5 a second, and paced at 0.97 of that
    lim.release(first, "ok", headers=stated(50, limit=61, reset="10s"))

    for permit in await take(lim, 50):  # the 50 that remain go at once
        lim.release(permit, "ok")
    assert clock.sleeps == []
    await lim.acquire()  # the next waits for the refill, paced a little under 1/s

    assert clock.sleeps == [pytest.approx(10.5 / 10 / 0.97)]
    assert lim.budget("requests") == pytest.approx((10 / 10.5 * 0.97, 61))


async def test_what_remains_counts_the_requests_sent_since_the_answered_one() -> None:
    clock = ManualClock()
    lim = limiter(100, clock)
    first = await lim.acquire()
    later = await take(lim, 4)  # sent after `first`, before its answer came
    lim.release(first, "ok", headers=stated(5, reset="54s"))

    await take(lim, 1)  # 5 remained when `first` was counted; 4 have gone since

    assert clock.sleeps == []
    await lim.acquire()
    # 54 or 55 used in 54 s written to the second: at least 54 / 54.5 a second, at 0.97
    assert clock.sleeps == [pytest.approx(54.5 / 54 / 0.97)]
    assert len(later) == 4


async def test_rpm_still_caps_an_endpoint_whose_headers_allow_more() -> None:
    lim = limiter(100, ManualClock(), rpm=30)
    lim.release(await lim.acquire(), "ok", headers=stated(9000, limit=10000, reset="1s"))
    assert lim.budget("requests") == pytest.approx((0.5, 30))


async def test_a_429_whose_headers_show_room_is_noise_and_leaves_the_limit_alone() -> None:
    lim = limiter(8, ManualClock())
    permits = await take(lim, 8)
    assert lim.release(permits[0], "throttled", headers=stated(40)) is False
    assert (lim.limit, lim.throttled_noise) == (8, 1)


async def test_a_429_whose_headers_say_the_budget_is_spent_is_paced_not_cut() -> None:
    clock = ManualClock()
    lim = limiter(8, clock)
    permits = await take(lim, 8)
    assert lim.release(permits[0], "throttled", headers=stated(0, reset="2s")) is False
    assert (lim.limit, lim.throttled_spent) == (8, 1)

    await lim.acquire()  # nothing remained, and 7 were sent after the refused one

    # 59 or 60 used, full in 2 s written to the second (at most 2.5 s): at least 59 / 2.5 a
    # second, paced at 0.97 of it; 8 to wait for: the 7 and this one (the refused one is not
    # given back: what remained says the budget, and it will be asked for again)
    assert clock.sleeps == [pytest.approx(8 / (59 / 2.5 * 0.97))]


async def serve_answers(
    lim: AdaptiveLimiter, answers: int, throttled: Callable[[int], bool]
) -> None:
    """``answers`` requests, one after another; ``throttled(n)`` says which are 429s."""
    for n in range(answers):
        lim.release(await lim.acquire(), "throttled" if throttled(n) else "ok")


async def test_a_steady_share_of_429s_that_halving_does_not_lower_is_noise() -> None:
    lim = limiter(32, ManualClock())

    await serve_answers(lim, 2000, lambda n: n % 20 == 19)  # 5%, whatever the concurrency

    assert lim.cuts == 1  # the trial: halving did not lower the share...
    assert lim.noise == pytest.approx(0.05, abs=0.02)
    assert lim.limit == 32  # ...so the limit went back, and the 429s since cut nothing


def at_random(share: float, seed: int) -> Callable[[int], bool]:
    """429s at random, ``share`` of the answers (seeded: the same answers every run)."""
    rng = random.Random(seed)
    return lambda _n: rng.random() < share


async def test_a_steady_share_of_429s_read_low_by_its_trial_is_seldom_cut_again() -> None:
    # 5% of answers are 429s at random, whatever the concurrency. A trial over 100 answers
    # reads that anywhere from about 1% to 9%; read low, a bar at twice the share measured
    # cut again (and trialled again, at half the limit) in about a third of these runs
    cut_again = 0
    for seed in range(100):
        lim = limiter(32, ManualClock())
        await serve_answers(lim, 1500, at_random(0.05, seed))
        assert lim.noise is not None
        cut_again += lim.cuts > 1
    assert cut_again <= 12


async def test_a_burst_of_noise_early_in_a_trial_does_not_end_it_as_load() -> None:
    # the first 429 cuts, as a trial; five of the trial's first 20 answers are 429s (a
    # burst, as a steady 5% gives now and then), then one in 20 as before: noise, not load
    lim = limiter(32, ManualClock())

    def throttled(n: int) -> bool:
        return n == 0 or (1 <= n <= 20 and n % 4 == 0) or (n > 20 and n % 20 == 0)

    await serve_answers(lim, 400, throttled)

    assert lim.cuts == 1
    assert lim.noise is not None
    assert lim.limit == 32


async def test_429s_found_to_be_noise_that_then_rise_are_load_again() -> None:
    lim = limiter(32, ManualClock())
    await serve_answers(lim, 1000, lambda n: n % 20 == 19)  # 5%: noise
    assert (lim.cuts, lim.limit) == (1, 32)
    assert noise_bar(0.05, 100) <= NOISE_CEILING

    await serve_answers(lim, 100, lambda n: n % 4 == 3)  # then a quarter of the answers

    assert lim.cuts > 1
    assert lim.limit < 32


async def test_429s_that_stop_when_concurrency_falls_are_load_and_keep_halving() -> None:
    clock = ManualClock()
    lim = limiter(32, clock)
    refused = 0

    async def request() -> None:
        nonlocal refused
        permit = await lim.acquire()
        overloaded = lim.in_flight > 6  # the endpoint takes 6 at once; beyond that, 429
        await clock.sleep(0.2)
        refused += overloaded
        lim.release(permit, "throttled" if overloaded else "ok")

    async with anyio.create_task_group() as tg:
        for _ in range(600):
            tg.start_soon(request)

    assert lim.noise is None
    assert lim.lowest_limit <= 6
    assert lim.limit <= 12  # around the endpoint's 6, as AIMD keeps it
    assert refused < 600 * 0.15


async def mislead_and_agree(lim: AdaptiveLimiter, *, misled: int, agreed: int) -> None:
    """``misled`` 429s whose headers say the budget is back by the next request (a reset
    as near as the Retry-After), then ``agreed`` 429s whose headers say it is full only
    in 3 s, as OpenAI's do; a success between each, as the endpoint lets some through."""
    for _ in range(misled):
        lim.release(await lim.acquire(), "ok", headers=stated(30))
        lim.release(
            await lim.acquire(), "throttled", retry_after=0.05, headers=stated(0, reset="50ms")
        )
    for _ in range(agreed):
        lim.release(await lim.acquire(), "ok", headers=stated(30))
        lim.release(
            await lim.acquire(), "throttled", retry_after=0.05, headers=stated(0, reset="3s")
        )


async def test_429s_that_contradict_the_headers_make_the_limiter_pace_from_answers() -> None:
    lim = limiter(8, ManualClock())
    lim.release(await lim.acquire(), "ok", headers=stated(59, reset="1s"))  # headers read

    await mislead_and_agree(lim, misled=DISTRUST_AFTER - 1, agreed=0)
    assert lim.headers_trusted  # not yet: a few may be a race
    await mislead_and_agree(lim, misled=1, agreed=0)

    assert not lim.headers_trusted
    assert lim.budget("requests") is None  # nothing learned from the headers is used
    assert lim.snapshot()["paced_from_answers_rpm"] is not None


async def test_the_limiter_trusts_headers_again_once_429s_agree_with_them() -> None:
    lim = limiter(8, ManualClock())
    lim.release(await lim.acquire(), "ok", headers=stated(59, reset="1s"))
    with structlog.testing.capture_logs() as logs:
        await mislead_and_agree(lim, misled=DISTRUST_AFTER, agreed=TRUST_AGAIN_AFTER - 1)
        assert not lim.headers_trusted
        await mislead_and_agree(lim, misled=0, agreed=1)
        assert lim.headers_trusted
        assert lim.budget("requests") is not None  # paced from the headers again

        # misled again, and trusting again takes twice the agreement: no flapping, and
        # neither change is logged a second time
        await mislead_and_agree(lim, misled=DISTRUST_AFTER, agreed=TRUST_AGAIN_AFTER)
        assert not lim.headers_trusted
        await mislead_and_agree(lim, misled=0, agreed=TRUST_AGAIN_AFTER)
        assert lim.headers_trusted

    said = [(e["event"], e["log_level"]) for e in logs if "note" in e or "say" in e]
    assert said == [
        ("llm_rate_headers_distrusted", "warning"),
        ("llm_rate_headers_trusted", "info"),
        ("llm_rate_headers_distrusted", "debug"),
        ("llm_rate_headers_trusted", "debug"),
    ]
    assert lim.distrusted == 2
