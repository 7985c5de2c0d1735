"""The endpoint's limits at the real boundary: the real openai client against the scripted
server enforcing a provider's budgets (x-ratelimit-* headers), shared by two stores on one
database as two processes share it, and an endpoint that goes down for a while."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import anyio
import pytest
import structlog

from ragjury.errors import LLMTransportError
from ragjury.llm import LLM
from ragjury.llm.breaker import CircuitBreaker
from ragjury.llm.limiter import DISTRUST_AFTER
from ragjury.schemas import Critique
from ragjury.store import SQLiteStore

from conftest import ManualClock, make_settings
from fakeopenai import Behaviour, FakeOpenAI, RecordedRequest, Reply, chat_json, error

pytestmark = pytest.mark.anyio

RATED = chat_json({"rationale": "ok", "rating": 4})


async def rate(llm: LLM, calls: int) -> None:
    async def one() -> None:
        await llm.structured(Critique, [{"role": "user", "content": "Rate it."}], stage="critic")

    async with anyio.create_task_group() as tg:
        for _ in range(calls):
            tg.start_soon(one)


async def test_requests_are_paced_by_the_endpoints_headers_instead_of_its_429s(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.behave(Behaviour(rpm=20, window=1.0, latency=0.02))  # 20 a second, 20 at once
    fake.route("critic", RATED)
    async with LLM(make_settings(fake, tmp_path, concurrency=16)) as llm:
        await rate(llm, 60)

        assert llm.usage.stage("critic").failed_calls == 0
        # unpaced, 16 at a time at 20 ms each would meet dozens of 429s; paced, the first burst
        # may meet a few (more when a busy CPU delays the first answers' headers)
        assert fake.stats().get("limit_429", 0) <= 5
        per_second, capacity = llm.limiter.budget("requests") or (0, 0)
        assert capacity == 20
        assert per_second == pytest.approx(20 * 0.97, rel=0.2)


async def test_two_processes_on_one_database_share_the_endpoints_limit(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.behave(Behaviour(rpm=20, window=1.0, latency=0.02))
    fake.route("critic", RATED)
    settings = make_settings(fake, tmp_path, concurrency=8)  # 16 at first: within the 20
    async with (
        SQLiteStore(tmp_path / "shared.db") as one,
        SQLiteStore(tmp_path / "shared.db") as other,
        LLM(settings, ledger=one) as first,
        LLM(settings, ledger=other) as second,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(rate, first, 40)
        tg.start_soon(rate, second, 40)

    assert fake.stats()["status_200"] == 80  # 20 at once, then 60 paced over 3 s, shared
    # each on its own, thinking it owns the limit, meets about 50; together, the first
    # second's race to learn the limit costs a few (1 to 7 in 10 runs; before a 429 stopped
    # giving its unit back to the bucket, up to 17 under load)
    assert fake.stats().get("limit_429", 0) <= 16


async def test_an_endpoint_that_goes_down_is_probed_not_hammered_and_the_run_resumes(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # The breaker's time is a clock that moves only when the breaker waits for its next
    # probe, and the outage lasts one second of that clock: however fast or slow the machine,
    # the probes fall at the same moments of the outage.
    clock = ManualClock()
    answered = itertools.count(1)
    lock = threading.Lock()

    def answer(request: RecordedRequest) -> Reply:
        with lock:
            if next(answered) == 30:
                fake.outage(1.0, clock=clock)  # down from the thirtieth answer on
        return chat_json({"rationale": "ok", "rating": 4}, delay=0.02)

    fake.route("critic", answer)
    settings = make_settings(fake, tmp_path, concurrency=16, backoff_base=0.05, backoff_max=1.0)
    breaker = CircuitBreaker(base=0.05, cap=1.0, clock=clock, sleep=clock.sleep)
    with structlog.testing.capture_logs() as logs:
        async with LLM(settings, breaker=breaker) as llm:
            await rate(llm, 80)

    assert llm.usage.stage("critic").failed_calls == 0  # nothing failed: it waited
    assert breaker.outages == 1
    events = [entry["event"] for entry in logs]
    assert events.count("endpoint_down") == 1
    assert events.count("endpoint_back") == 1
    # one probe at a time, 0.05, 0.1, 0.2 and 0.4 s apart, all within the outage; the fifth,
    # 0.8 s later (1.55 s after it opened), finds the endpoint back
    assert breaker.probes == 5
    assert sum(clock.sleeps) == pytest.approx(1.55)
    assert breaker.down_seconds == pytest.approx(1.55)
    # during the outage: the five failures in a row that opened the breaker, the other 15 in
    # flight when it opened (slots the first four failures freed are filled again at once,
    # as a 503 comes back faster than an answer), then the four probes that failed; not 50
    # waiting calls retrying on their own
    assert fake.stats()["outage_requests"] <= breaker.trip_after + 15 + 4


async def test_waiting_out_429s_uses_no_retry_and_is_bounded_by_time(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    throttled = [error(429, "slow down", retry_after_ms=1)] * 12
    fake.route("critic", *throttled, chat_json({"rationale": "ok", "rating": 4}))
    settings = make_settings(fake, tmp_path, max_transport_retries=2)
    async with LLM(settings) as llm:
        critique = await llm.structured(
            Critique, [{"role": "user", "content": "rate it"}], stage="critic"
        )

    assert critique.rating == 4  # twelve 429s, two retries allowed: it still got its answer
    assert len(fake.requests_for("critic")) == 13

    fake.route("critic", error(429, "slow down", retry_after_ms=20))
    settings = make_settings(fake, tmp_path, max_transport_retries=50, max_throttle_wait=0.2)
    async with LLM(settings) as llm:
        with pytest.raises(LLMTransportError, match="max-throttle-wait"):
            await llm.structured(Critique, [{"role": "user", "content": "rate it"}], stage="critic")


async def test_headers_that_mislead_are_distrusted_once_and_no_call_fails(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # 20 a second, but the reset header is the time to the next request: read as OpenAI's
    # (the time until the budget is full) it promises a refill far faster than the real one
    fake.behave(Behaviour(rpm=20, window=1.0, latency=0.02, reset_means="next_request"))
    fake.route("critic", RATED)
    with structlog.testing.capture_logs() as logs:
        async with LLM(make_settings(fake, tmp_path, concurrency=16)) as llm:
            await rate(llm, 60)

    assert llm.usage.stage("critic").failed_calls == 0
    assert fake.stats()["status_200"] == 60
    assert not llm.limiter.headers_trusted  # paced from the answers since
    said = [entry for entry in logs if entry["event"] == "llm_rate_headers_distrusted"]
    assert len(said) == 1
    assert said[0]["log_level"] == "warning"
    assert "paced from the answers it gives per second" in said[0]["say"]


async def test_429s_whose_headers_agree_with_them_keep_the_headers_trusted(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # two clients that do not share their buckets (another program on the same key): each
    # meets many 429s, and each 429 says the budget is spent until long after the next
    # request may go, as OpenAI's headers do; they are pacing errors, not misleading headers
    fake.behave(Behaviour(rpm=20, window=1.0, latency=0.02))
    fake.route("critic", RATED)
    settings = make_settings(fake, tmp_path, concurrency=8)
    with structlog.testing.capture_logs() as logs:
        async with (
            LLM(settings) as first,
            LLM(settings) as second,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(rate, first, 40)
            tg.start_soon(rate, second, 40)

    assert fake.stats()["limit_429"] >= 2 * DISTRUST_AFTER
    assert first.limiter.headers_trusted
    assert second.limiter.headers_trusted
    assert "llm_rate_headers_distrusted" not in [entry["event"] for entry in logs]
