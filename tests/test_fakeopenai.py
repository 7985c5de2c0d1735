"""Tests for the FakeOpenAI test server; they double as its usage documentation.

Everything goes over real HTTP: the real ``openai.AsyncOpenAI`` client (and ``instructor`` on
top of it) talks to ``FakeOpenAI`` on 127.0.0.1. The server's own fixtures (``fake``,
``anyio_backend``) are those of ``conftest.py``."""

from __future__ import annotations

import json
import time

import anyio
import instructor
import openai
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel

from fakeclient import as_agent, ask, client_for
from fakeopenai import (
    FakeOpenAI,
    RecordedRequest,
    Reply,
    chat,
    chat_json,
    embedding,
    error,
    tool_call,
)

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
