"""The LLM client against a real HTTP server: validation re-asks, transport retries,
concurrency limit and token accounting (every attempt counts)."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import pytest
from pydantic.json_schema import model_json_schema as pydantic_schema

from ragjury.errors import LLMOutputError, LLMTransportError
from ragjury.llm import LLM
from ragjury.schemas import Critique, DraftedPairs

from conftest import ManualClock, make_settings
from fakeopenai import FakeOpenAI, chat, chat_json, error

pytestmark = pytest.mark.anyio
ASK = [{"role": "user", "content": "Rate it."}]


class RecordingSleep:
    """Stands in for anyio.sleep so retry waits are observed, not waited out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def test_malformed_json_is_reasked_and_both_attempts_are_counted(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route(
        "critic",
        chat("{not json", prompt_tokens=30, completion_tokens=4),
        chat_json({"rationale": "ok", "rating": 4}, prompt_tokens=45, completion_tokens=9),
    )
    async with LLM(make_settings(fake, tmp_path)) as llm:
        critique = await llm.structured(Critique, ASK, stage="critic")

        assert critique.rating == 4
        assert len(fake.requests_for("critic")) == 2
        assert llm.usage.stage("critic").requests == 2
        assert llm.usage.prompt_tokens == 75
        assert llm.usage.completion_tokens == 13
        # the re-ask tells the model what was wrong
        assert "{not json" in fake.requests_for("critic")[1].text()


async def test_out_of_range_rating_is_reasked_with_the_validation_error(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route(
        "critic",
        chat_json({"rationale": "great", "rating": 7}),
        chat_json({"rationale": "great", "rating": 5}),
    )
    async with LLM(make_settings(fake, tmp_path)) as llm:
        critique = await llm.structured(Critique, ASK, stage="critic")

        assert critique.rating == 5
        reask = fake.requests_for("critic")[1].text()
        assert "less than or equal to 5" in reask


async def test_output_that_never_validates_raises_with_attempts_and_last_output(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", chat_json({"rationale": "hm", "rating": 0}))
    async with LLM(make_settings(fake, tmp_path, max_retries=2)) as llm:
        with pytest.raises(LLMOutputError) as caught:
            await llm.structured(Critique, ASK, stage="critic")

        assert caught.value.attempts == 3  # one ask and two re-asks
        assert caught.value.last_raw_output == '{"rationale": "hm", "rating": 0}'
        assert "rating" in caught.value.message
        assert llm.usage.stage("critic").failed_calls == 1


async def test_generator_count_rule_reasks_until_exactly_n_pairs(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    one = {"question": "What port does uvicorn use by default?", "answer": "8000"}
    two = {"question": "Which command starts the dev server?", "answer": "fastapi dev"}
    fake.route("generator", chat_json({"pairs": [one]}), chat_json({"pairs": [one, two]}))
    async with LLM(make_settings(fake, tmp_path)) as llm:
        drafted = await llm.structured(
            DraftedPairs, ASK, stage="generator", context={"questions_per_chunk": 2}
        )

        assert len(drafted.pairs) == 2
        assert "expected exactly 2 pairs, got 1" in fake.requests_for("generator")[1].text()


async def test_template_syntax_in_a_document_reaches_the_model_unchanged(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # Documentation about templates is full of Jinja. instructor renders messages as Jinja
    # templates whenever it is given a validation context; ragjury must not let it.
    text = "Render it with {{ url_for('static', path='/app.css') }} inside {% block body %}."
    one = {"question": "Which function builds static file URLs in templates?", "answer": "url_for"}
    fake.route("generator", chat_json({"pairs": [one]}))
    async with LLM(make_settings(fake, tmp_path)) as llm:
        drafted = await llm.structured(
            DraftedPairs,
            [{"role": "user", "content": text}],
            stage="generator",
            context={"questions_per_chunk": 1},
        )

        assert drafted.pairs[0].answer == "url_for"
        assert text in fake.requests_for("generator")[0].text()


async def test_question_pointing_at_the_passage_is_reasked(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    bad = {"question": "What does the passage say about ports?", "answer": "8000"}
    good = {"question": "What port does uvicorn use by default?", "answer": "8000"}
    fake.route("generator", chat_json({"pairs": [bad]}), chat_json({"pairs": [good]}))
    async with LLM(make_settings(fake, tmp_path)) as llm:
        drafted = await llm.structured(
            DraftedPairs, ASK, stage="generator", context={"questions_per_chunk": 1}
        )

        assert drafted.pairs[0].question == good["question"]
        assert "the passage" in fake.requests_for("generator")[1].text()


async def test_429_waits_as_long_as_retry_after_says_then_succeeds(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", error(429, retry_after=7), chat_json({"rationale": "ok", "rating": 3}))
    clock = ManualClock()
    async with LLM(make_settings(fake, tmp_path), sleep=clock.sleep, clock=clock) as llm:
        critique = await llm.structured(Critique, ASK, stage="critic")

        assert critique.rating == 3
        assert clock.sleeps == [7.0]
        assert llm.usage.stage("critic").requests == 2


async def test_500s_are_retried_with_growing_backoff(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.route(
        "critic",
        error(500),
        error(503),
        error(502),
        chat_json({"rationale": "ok", "rating": 5}),
    )
    sleep = RecordingSleep()
    settings = make_settings(fake, tmp_path, backoff_base=1.0, backoff_max=100.0)
    async with LLM(settings, sleep=sleep, seed=1) as llm:
        await llm.structured(Critique, ASK, stage="critic")

        assert len(sleep.delays) == 3
        # full jitter inside a ceiling that doubles: 1, 2, 4 seconds
        for attempt, delay in enumerate(sleep.delays):
            assert 0.5 <= delay <= 2**attempt


async def test_transport_failures_past_the_limit_raise_a_transport_error(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", error(500, "upstream down"))
    async with LLM(
        make_settings(fake, tmp_path, max_transport_retries=2), sleep=RecordingSleep()
    ) as llm:
        with pytest.raises(LLMTransportError, match="after 3 request") as caught:
            await llm.structured(Critique, ASK, stage="critic")

        assert caught.value.status_code == 500
        assert len(fake.requests_for("critic")) == 3


async def test_an_endpoint_that_is_not_listening_is_named_with_what_to_check(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    settings = make_settings(fake, tmp_path, base_url=url, max_transport_retries=1)
    async with LLM(settings, sleep=RecordingSleep()) as llm:
        with pytest.raises(LLMTransportError) as caught:
            await llm.structured(Critique, ASK, stage="critic")

    assert "after 2 request(s)" in caught.value.message
    assert f"check that {url} is up and that --base-url is right" in caught.value.message
    assert "--timeout" not in caught.value.message  # refused, not timed out
    assert "Connection error." not in caught.value.message  # the HTTP layer's reason instead
    assert "--max-transport-retries" not in caught.value.message  # retrying more will not help


async def test_a_401_fails_at_once_and_marks_the_endpoint_refused(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", error(401, "bad key"))
    async with LLM(make_settings(fake, tmp_path), sleep=RecordingSleep()) as llm:
        with pytest.raises(LLMTransportError, match="OPENAI_API_KEY"):
            await llm.structured(Critique, ASK, stage="critic")

        assert len(fake.requests_for("critic")) == 1
        assert llm.fatal.is_set()


async def test_a_slow_answer_times_out_and_is_retried(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.route(
        "critic",
        chat_json({"rationale": "late", "rating": 1}, delay=3.0),
        chat_json({"rationale": "on time", "rating": 2}),
    )
    async with LLM(make_settings(fake, tmp_path, timeout=0.3), sleep=RecordingSleep()) as llm:
        critique = await llm.structured(Critique, ASK, stage="critic")

        assert critique.rationale == "on time"
        assert llm.usage.stage("critic").requests == 2


async def test_requests_in_flight_never_exceed_the_concurrency_limit(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", chat_json({"rationale": "ok", "rating": 4}, delay=0.05))
    async with LLM(make_settings(fake, tmp_path, concurrency=3)) as llm:
        async with anyio.create_task_group() as tg:
            for _ in range(12):
                tg.start_soon(_rate, llm)

        assert len(fake.requests_for("critic")) == 12
        assert fake.in_flight_max == 3


async def _rate(llm: LLM) -> None:
    await llm.structured(Critique, ASK, stage="critic")


async def test_output_cut_off_at_the_token_limit_is_an_output_error_not_a_crash(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route("critic", chat('{"rationale": "it goes on and on and on', finish_reason="length"))
    async with LLM(make_settings(fake, tmp_path)) as llm:
        with pytest.raises(LLMOutputError, match="token limit") as caught:
            await llm.structured(Critique, ASK, stage="critic")

        assert caught.value.attempts == 1
        assert caught.value.last_raw_output == '{"rationale": "it goes on and on and on'
        assert llm.usage.stage("critic").failed_calls == 1


def test_a_response_schema_is_built_once_and_handed_out_as_a_copy() -> None:
    fresh = pydantic_schema(Critique)  # what pydantic builds, uncached
    first = Critique.model_json_schema()
    assert first == fresh
    first["properties"]["rating"]["maximum"] = 99  # a caller that edits its copy
    assert Critique.model_json_schema() == fresh  # does not change what the next one gets
    serialized = Critique.model_json_schema(mode="serialization")
    assert serialized == pydantic_schema(Critique, mode="serialization")  # arguments still count
