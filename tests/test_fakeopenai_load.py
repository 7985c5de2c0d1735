"""The FakeOpenAI test server under load and faults: concurrency, shutdown, counted usage,
fault rates, latency, request budgets and outages."""

from __future__ import annotations

import threading
import time

import anyio
import openai
import pytest
from openai import AsyncOpenAI

from fakeclient import as_agent, ask, client_for
from fakeopenai import (
    Behaviour,
    FakeOpenAI,
    RecordedRequest,
    Reply,
    chat,
    count_tokens,
)

pytestmark = pytest.mark.anyio


async def test_stop_closes_kept_alive_connections_and_joins_threads() -> None:
    server = FakeOpenAI()
    server.start()
    server.route("a", chat("x"))
    async with client_for(server) as client:
        assert await ask(client, "a") == "x"
        # the client still holds a kept-alive connection while the server stops
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 1.0
    assert not [t for t in threading.enumerate() if t.name.startswith("fakeopenai")]
    server.stop()  # idempotent
    with pytest.raises(RuntimeError):
        _ = server.base_url


# -- Behaviour: the fake as a busy, realistic endpoint (benchmarks) ---------------------------


async def test_forty_slow_requests_are_in_flight_at_once(fake: FakeOpenAI) -> None:
    # Every answer waits until all forty requests are being handled: only a server that
    # really holds forty requests at once can answer any of them.
    barrier = threading.Barrier(40, timeout=20)

    def together(request: RecordedRequest) -> Reply:
        barrier.wait()
        return chat("together")

    fake.route("slow", together)
    answers: list[str | None] = []

    async def one(client: AsyncOpenAI) -> None:
        answers.append(await ask(client, "slow"))

    async with client_for(fake, timeout=30) as client, anyio.create_task_group() as tg:
        for _ in range(40):
            tg.start_soon(one, client)
    assert answers == ["together"] * 40
    assert fake.in_flight_max == 40


async def test_counted_usage_follows_the_text(fake: FakeOpenAI) -> None:
    fake.behave(Behaviour(count_tokens=True))
    fake.route("a", chat("x" * 40, prompt_tokens=1, completion_tokens=1))
    async with client_for(fake) as client:
        completion = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "y" * 400}],
            extra_headers=as_agent("a"),
        )
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (100, 10)
    assert fake.stats()["prompt_tokens"] == 100
    assert fake.stats()["completion_tokens"] == 10
    assert count_tokens("") == 0
    assert count_tokens("abcde") == 2


async def test_fault_rates_answer_429_with_retry_after_and_500_without_using_the_script(
    fake: FakeOpenAI,
) -> None:
    fake.behave(Behaviour(rate_429=0.25, rate_500=0.25, retry_after=0.5, seed=7))
    fake.route("a", chat("first"), chat("second"))
    statuses: list[int] = []
    contents: list[str | None] = []
    retry_afters: set[str | None] = set()
    async with client_for(fake) as client:
        for _ in range(200):
            try:
                contents.append(await ask(client, "a"))
                statuses.append(200)
            except openai.RateLimitError as exc:
                retry_afters.add(exc.response.headers.get("retry-after"))
                statuses.append(429)
            except openai.InternalServerError:
                statuses.append(500)
    assert retry_afters == {"0.5"}
    assert contents[:2] == ["first", "second"]  # faults did not advance the script
    assert 25 <= statuses.count(429) <= 75
    assert 25 <= statuses.count(500) <= 75
    stats = fake.stats()
    assert stats["chat_requests"] == 200
    assert (stats["status_429"], stats["status_500"]) == (statuses.count(429), statuses.count(500))


async def test_latency_is_fixed_plus_per_completion_token(fake: FakeOpenAI) -> None:
    fake.behave(Behaviour(latency=0.05, latency_per_token=0.01, count_tokens=True))
    fake.route("a", chat("z" * 20))  # 5 tokens: 0.05 + 5 * 0.01 = 0.1 s
    started = time.monotonic()
    async with client_for(fake) as client:
        assert await ask(client, "a") == "z" * 20
    assert time.monotonic() - started >= 0.1
    assert fake.stats()["delay_seconds"] == pytest.approx(0.1)


async def test_without_keep_requests_nothing_is_recorded_but_everything_is_counted() -> None:
    with FakeOpenAI(keep_requests=False) as server:
        server.route("a", chat("x"))
        async with client_for(server) as client:
            for _ in range(3):
                await ask(client, "a")
        assert server.requests == []
        assert server.stats()["requests"] == 3


def test_a_behaviour_with_impossible_rates_is_refused() -> None:
    with pytest.raises(ValueError, match=r"rate_429=0\.8, rate_500=0\.5"):
        Behaviour(rate_429=0.8, rate_500=0.5)
    with pytest.raises(ValueError, match="latency=-1"):
        Behaviour(latency=-1)


async def test_a_request_budget_answers_its_headers_every_time_and_429_when_spent(
    fake: FakeOpenAI,
) -> None:
    fake.behave(Behaviour(rpm=3, window=60.0))  # 3 a minute, all at once at first
    fake.route("a", chat("ok"))
    async with client_for(fake) as client:
        answers = [
            await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=as_agent("a")
            )
            for _ in range(3)
        ]
        with pytest.raises(openai.RateLimitError) as refused:
            await ask(client, "a")
    remaining = [a.headers["x-ratelimit-remaining-requests"] for a in answers]
    assert remaining == ["2", "1", "0"]
    assert {a.headers["x-ratelimit-limit-requests"] for a in answers} == {"3"}
    headers = refused.value.response.headers
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert 15 <= float(headers["retry-after"]) <= 20  # a third of a minute, whole seconds
    assert fake.stats()["limit_429"] == 1


async def test_an_outage_answers_every_chat_request_503_while_it_lasts(fake: FakeOpenAI) -> None:
    fake.route("a", chat("ok"))
    fake.outage(60.0)
    async with client_for(fake) as client:
        with pytest.raises(openai.InternalServerError):
            await ask(client, "a")
        fake.outage(0.0)  # over
        assert await ask(client, "a") == "ok"
    assert fake.stats()["outage_requests"] == 1
