"""Tests for the FakeOpenAI test server; they double as its usage documentation.

Everything goes over real HTTP: the real ``openai.AsyncOpenAI`` client (and ``instructor`` on
top of it) talks to ``FakeOpenAI`` on 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import instructor
import openai
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel

from fakeopenai import (
    Behaviour,
    FakeOpenAI,
    RecordedRequest,
    Reply,
    chat,
    chat_json,
    count_tokens,
    embedding,
    error,
    tool_call,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def client_for(fake: FakeOpenAI, **kwargs: Any) -> AsyncOpenAI:
    """A real client pointed at the fake; use it as ``async with client_for(fake) as client``."""
    kwargs.setdefault("max_retries", 0)
    return AsyncOpenAI(base_url=fake.base_url, api_key="test", **kwargs)


def as_agent(agent: str) -> dict[str, str]:
    return {"x-ragjury-agent": agent}


async def ask(client: AsyncOpenAI, agent: str, prompt: str = "hi") -> str | None:
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], extra_headers=as_agent(agent)
    )
    return completion.choices[0].message.content


pytestmark = pytest.mark.anyio


async def test_routed_json_reply_is_parsed_with_usage(fake: FakeOpenAI) -> None:
    fake.route("generator", chat_json({"question": "Why?"}, prompt_tokens=7, completion_tokens=3))
    async with client_for(fake) as client:
        completion = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "write a question"}],
            extra_headers=as_agent("generator"),
        )
    assert json.loads(completion.choices[0].message.content or "") == {"question": "Why?"}
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 3)
    assert completion.usage.total_tokens == 10
    [request] = fake.requests
    assert (request.method, request.path, request.agent) == (
        "POST",
        "/v1/chat/completions",
        "generator",
    )
    assert request.headers["authorization"] == "Bearer test"
    assert request.body["model"] == "m"


async def test_routes_by_agent_header_and_unscripted_agents_get_a_clear_500(
    fake: FakeOpenAI,
) -> None:
    fake.route("generator", chat("from generator"))
    fake.route("judge", chat("from judge"))
    async with client_for(fake) as client:
        assert await ask(client, "judge") == "from judge"
        assert await ask(client, "generator") == "from generator"
        with pytest.raises(openai.InternalServerError, match="no scripted reply for agent nobody"):
            await ask(client, "nobody")
    assert [r.agent for r in fake.requests] == ["judge", "generator", "nobody"]
    assert len(fake.requests_for("judge")) == 1


async def test_replies_play_in_order_then_the_last_repeats(fake: FakeOpenAI) -> None:
    fake.route("a", chat("one"), chat("two"))
    async with client_for(fake) as client:
        answers = [await ask(client, "a") for _ in range(4)]
        assert answers == ["one", "two", "two", "two"]
        fake.route("a", chat("fresh"), chat("again"))  # replaces the script and rewinds it
        assert await ask(client, "a") == "fresh"


async def test_rate_limit_surfaces_with_retry_after_headers(fake: FakeOpenAI) -> None:
    fake.route("a", error(429, "slow down", retry_after=1.5, retry_after_ms=1500), chat("ok"))
    async with client_for(fake) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await ask(client, "a")
        assert await ask(client, "a") == "ok"
    exc = caught.value
    assert exc.status_code == 429
    assert exc.response.headers["retry-after"] == "1.5"
    assert exc.response.headers["retry-after-ms"] == "1500"
    assert exc.body == {
        "message": "slow down",
        "type": "rate_limit_error",
        "param": None,
        "code": None,
    }
    assert error(429, retry_after=2).headers == {"Retry-After": "2"}


async def test_malformed_content_is_delivered_verbatim(fake: FakeOpenAI) -> None:
    fake.route("a", chat("{not json"))
    async with client_for(fake) as client:
        assert await ask(client, "a") == "{not json"


async def test_a_malformed_http_body_is_sent_raw(fake: FakeOpenAI) -> None:
    fake.route("a", Reply(body="{this is not a completion"))
    async with client_for(fake) as client:
        # openai 3.x lets the decoder error escape as json.JSONDecodeError, not an APIError
        with pytest.raises(json.JSONDecodeError):
            await ask(client, "a")
        raw = await client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "x"}], extra_headers=as_agent("a")
        )
    assert raw.http_response.text == "{this is not a completion"


async def test_a_responder_answers_from_the_prompt(fake: FakeOpenAI) -> None:
    seen: list[RecordedRequest] = []

    def judge(request: RecordedRequest) -> Reply:
        seen.append(request)
        return chat_json({"grounded": "Paris" in request.text()})

    fake.route("judge", judge)
    async with client_for(fake) as client:
        completion = await client.chat.completions.create(
            model="m",
            messages=[
                {"role": "system", "content": "You are a judge."},
                {"role": "user", "content": "Context: Paris is in France."},
            ],
            extra_headers=as_agent("judge"),
        )
        assert await ask(client, "judge", "Context: Rome.") == '{"grounded": false}'
    assert completion.choices[0].message.content == '{"grounded": true}'
    assert [m["role"] for m in seen[0].messages] == ["system", "user"]
    assert seen[0].text() == "You are a judge.\nContext: Paris is in France."


async def test_a_failing_responder_becomes_a_500_and_is_kept(fake: FakeOpenAI) -> None:
    def broken(request: RecordedRequest) -> Reply:
        raise KeyError("oops")

    fake.route("a", broken)
    async with client_for(fake) as client:
        with pytest.raises(openai.InternalServerError, match="responder raised"):
            await ask(client, "a")
    assert isinstance(fake.errors[0], KeyError)


async def test_in_flight_max_counts_concurrent_requests(fake: FakeOpenAI) -> None:
    fake.route("slow", chat("done", delay=0.3))
    answers: list[str | None] = []

    async def one(client: AsyncOpenAI) -> None:
        answers.append(await ask(client, "slow"))

    started = time.monotonic()
    async with client_for(fake) as client, anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one, client)
    assert answers == ["done"] * 3
    assert fake.in_flight_max == 3
    assert fake.in_flight == 0
    assert time.monotonic() - started < 0.9  # answered concurrently, not one after another


async def test_client_timeout_and_the_server_survives(fake: FakeOpenAI) -> None:
    fake.route("slow", chat("too late", delay=2.0), chat("fine"))
    async with client_for(fake, timeout=0.2) as client:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            await ask(client, "slow")
        assert time.monotonic() - started < 1.0
        assert await ask(client, "slow") == "fine"
    for _ in range(200):  # the server notices within ~20 ms; give it up to 2 s
        if fake.disconnects:
            break
        await anyio.sleep(0.01)
    assert fake.disconnects == 1  # the server noticed the hang-up and did not answer


async def test_embeddings(fake: FakeOpenAI) -> None:
    fake.embeddings(embedding([[1.0, 0.0], [0.0, 1.0]], prompt_tokens=4))
    async with client_for(fake) as client:
        result = await client.embeddings.create(
            model="e", input=["a", "b"], extra_headers=as_agent("indexer")
        )
    assert [item.embedding for item in result.data] == [[1.0, 0.0], [0.0, 1.0]]
    assert result.usage.prompt_tokens == 4
    assert fake.requests_for("indexer")[0].body["input"] == ["a", "b"]


async def test_embeddings_from_a_responder(fake: FakeOpenAI) -> None:
    fake.embeddings(lambda req: embedding([[float(len(s))] for s in req.body["input"]]))
    async with client_for(fake) as client:
        result = await client.embeddings.create(
            model="e", input=["ab", "abc"], encoding_format="float"
        )
    assert [item.embedding for item in result.data] == [[2.0], [3.0]]


async def test_logprobs(fake: FakeOpenAI) -> None:
    fake.route("judge", chat("Yes", logprobs=[("Yes", -0.1)]))
    async with client_for(fake) as client:
        completion = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "?"}],
            logprobs=True,
            extra_headers=as_agent("judge"),
        )
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.content is not None
    assert [(t.token, t.logprob) for t in logprobs.content] == [("Yes", -0.1)]


async def test_models_unknown_paths_and_fallback(fake: FakeOpenAI) -> None:
    async with client_for(fake) as client:
        models = await client.models.list()
        assert "fake-model" in [m.id async for m in models]
        with pytest.raises(openai.NotFoundError, match="unknown path"):
            await client.files.list()
        fake.fallback(chat("default answer"))
        assert await ask(client, "anyone") == "default answer"
    assert [r.path for r in fake.requests] == ["/v1/models", "/v1/files", "/v1/chat/completions"]


async def test_reset_forgets_everything(fake: FakeOpenAI) -> None:
    fake.route("a", chat("x"))
    async with client_for(fake) as client:
        await ask(client, "a")
        fake.reset()
        assert (fake.requests, fake.in_flight_max) == ([], 0)
        with pytest.raises(openai.InternalServerError):
            await ask(client, "a")


class Answer(BaseModel):
    answer: str
    confidence: float


async def test_instructor_json_mode_reasks_on_malformed_json(fake: FakeOpenAI) -> None:
    fake.route("generator", chat("{not json"), chat_json({"answer": "42", "confidence": 0.9}))
    async with client_for(fake) as raw_client:
        client = instructor.from_openai(raw_client, mode=instructor.Mode.JSON)
        result = await client.chat.completions.create(
            model="m",
            response_model=Answer,
            messages=[{"role": "user", "content": "What is the answer?"}],
            max_retries=2,
            extra_headers=as_agent("generator"),
        )
    assert result.model_dump() == {"answer": "42", "confidence": 0.9}  # (result also carries
    # instructor's private _raw_response, so compare the fields)
    first, second = fake.requests
    # JSON mode: response_format json_object, the schema goes into the system message...
    assert first.body["response_format"] == {"type": "json_object"}
    assert first.messages[0]["role"] == "system"
    assert '"confidence"' in first.messages[0]["content"]
    # ...and the re-ask echoes the bad output back with the validation error.
    assert "{not json" in second.text()
    assert len(second.messages) > len(first.messages)


async def test_instructor_tools_mode(fake: FakeOpenAI) -> None:
    fake.route("judge", tool_call("Answer", {"answer": "yes", "confidence": 1}))
    async with client_for(fake) as raw_client:
        client = instructor.from_openai(raw_client, mode=instructor.Mode.TOOLS)
        result = await client.chat.completions.create(
            model="m",
            response_model=Answer,
            messages=[{"role": "user", "content": "Is it grounded?"}],
            extra_headers=as_agent("judge"),
        )
    assert result.model_dump() == {"answer": "yes", "confidence": 1.0}
    assert fake.requests[0].body["tool_choice"]["function"]["name"] == "Answer"


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
