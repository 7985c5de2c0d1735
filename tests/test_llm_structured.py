"""The structured call prepares each response model once (ragjury/llm/_structured.py) and
otherwise does what ``instructor.patch`` does: the same requests, the same re-asks, the same
validated result, for every mode, against the real openai client and the fake server."""

from __future__ import annotations

import json
import re

import instructor
import pytest
from instructor.core import InstructorRetryException
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from ragjury._json import JSONData
from ragjury.llm._structured import FAST, VERIFIED, StructuredCreate
from ragjury.schemas import Critique

from fakeopenai import FakeOpenAI, chat, chat_json, error, tool_call

pytestmark = pytest.mark.anyio
# the two paths compared: there is one only with the instructor the prepared one was checked on
both_paths = pytest.mark.skipif(not FAST, reason=f"instructor {instructor.__version__}: one path")
ASK: list[JSONData] = [
    {"role": "system", "content": "You rate."},
    {"role": "user", "content": "Rate."},
]


def test_the_prepared_path_is_taken_exactly_with_the_instructor_it_was_checked_against() -> None:
    """The path the throughput benchmark measures: taken with instructor 1.17, whose modules
    _structured.py uses; any other instructor gets instructor.patch (slower, the same
    requests), so an upgrade never breaks a run; re-check the fast path against it."""

    async def send(**_: JSONData) -> object:
        raise AssertionError("not called")

    verified = tuple(int(part) for part in instructor.__version__.split(".")[:2]) == VERIFIED
    assert StructuredCreate(send, instructor.Mode.JSON).fast is verified


@both_paths
@pytest.mark.parametrize("mode", [instructor.Mode.JSON, instructor.Mode.TOOLS])
@pytest.mark.parametrize("ask", [ASK, ASK[1:]], ids=["system first", "no system message"])
async def test_prepared_and_patched_paths_send_the_same_requests_and_reasks(
    fake: FakeOpenAI, mode: instructor.Mode, ask: list[JSONData]
) -> None:
    bodies: dict[bool, list[JSONData]] = {}
    for fast in (True, False):
        agent = f"critic-{fast}"
        if mode is instructor.Mode.TOOLS:
            fake.route(
                agent,
                tool_call("Critique", "{not json"),
                tool_call("Critique", {"rationale": "ok", "rating": 9}),
                tool_call("Critique", {"rationale": "ok", "rating": 4}),
            )
        else:
            fake.route(
                agent,
                chat("{not json"),
                chat_json({"rationale": "ok", "rating": 9}),
                chat_json({"rationale": "ok", "rating": 4}),
            )
        async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:

            async def send(
                client: AsyncOpenAI = client, agent: str = agent, **request: JSONData
            ) -> ChatCompletion:
                response: ChatCompletion = await client.post(
                    "/chat/completions",
                    body=request,
                    cast_to=ChatCompletion,
                    options={"headers": {"x-ragjury-agent": agent}},
                )
                return response

            create = StructuredCreate(send, mode, fast=fast)
            assert create.fast is fast
            critique = await create(
                instructor.openai_schema(Critique), model="m", messages=ask, max_retries=3
            )
        assert isinstance(critique, Critique)
        assert critique.rating == 4
        # the fake numbers its tool calls across the run: the ids differ, nothing else may
        bodies[fast] = [
            json.loads(re.sub(r"call_fake\d+", "call", json.dumps(r.body)))
            for r in fake.requests_for(agent)
        ]
    assert len(bodies[True]) == 3  # malformed, out of range, valid: two re-asks
    assert bodies[True] == bodies[False]
    assert "less than or equal to 5" in str(bodies[True][2])


@both_paths
@pytest.mark.parametrize("failure", ["never valid", "http 400"])
async def test_prepared_and_patched_paths_fail_alike(fake: FakeOpenAI, failure: str) -> None:
    """Output that never validates, and a request the endpoint refuses: the same
    InstructorRetryException from the same cause, after the same requests."""
    seen: dict[bool, tuple[int, str, list[JSONData]]] = {}
    for fast in (True, False):
        agent = f"critic-{failure}-{fast}"
        if failure == "never valid":
            fake.route(agent, chat_json({"rationale": "ok", "rating": 9}))
        else:
            fake.route(agent, error(400, "bad request"))
        async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:

            async def send(
                client: AsyncOpenAI = client, agent: str = agent, **request: JSONData
            ) -> ChatCompletion:
                response: ChatCompletion = await client.post(
                    "/chat/completions",
                    body=request,
                    cast_to=ChatCompletion,
                    options={"headers": {"x-ragjury-agent": agent}},
                )
                return response

            create = StructuredCreate(send, instructor.Mode.JSON, fast=fast)
            with pytest.raises(InstructorRetryException) as caught:
                await create(
                    instructor.openai_schema(Critique), model="m", messages=ASK, max_retries=2
                )
        cause = caught.value.__cause__
        seen[fast] = (
            caught.value.n_attempts,
            type(cause).__name__,
            [r.body for r in fake.requests_for(agent)],
        )
    assert seen[True] == seen[False]
    assert seen[True][0] == (3 if failure == "never valid" else 1)
