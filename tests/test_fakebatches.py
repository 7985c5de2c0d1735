"""The fake server's Files and Batch APIs, driven by the real ``openai`` client."""

from __future__ import annotations

import json

import pytest
from fakebatches import FakeBatches
from openai import AsyncOpenAI, NotFoundError

from fakeopenai import FakeOpenAI, chat

pytestmark = pytest.mark.anyio


def _jsonl(*custom_ids: str) -> bytes:
    lines = [
        json.dumps(
            {
                "custom_id": custom_id,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
            }
        )
        for custom_id in custom_ids
    ]
    return ("\n".join(lines) + "\n").encode()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _submit(client: AsyncOpenAI, content: bytes) -> str:
    upload = await client.files.create(file=("in.jsonl", content), purpose="batch")
    batch = await client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"ragjury_submission": "s1"},
    )
    return batch.id


async def test_a_batch_completes_after_its_delay_with_the_scripted_answers(
    fake: FakeOpenAI,
) -> None:
    clock = _Clock()
    batches = FakeBatches(fake, delay=60, clock=clock)
    fake.route("judge", chat("yes"))
    async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        batch_id = await _submit(client, _jsonl("judge:a", "judge:b"))
        assert (await client.batches.retrieve(batch_id)).status == "in_progress"
        clock.now = 61
        done = await client.batches.retrieve(batch_id)
        assert done.status == "completed"
        assert done.output_file_id is not None
        assert done.request_counts is not None
        assert done.request_counts.completed == 2
        text = (await client.files.content(done.output_file_id)).text
        listed = await client.batches.list()
    answers = [json.loads(line) for line in text.splitlines()]
    assert [a["custom_id"] for a in answers] == ["judge:a", "judge:b"]
    assert answers[0]["response"]["body"]["choices"][0]["message"]["content"] == "yes"
    assert [b.metadata for b in listed.data] == [{"ragjury_submission": "s1"}]
    assert batches.created == [batch_id]


async def test_failed_malformed_and_expired_lines_are_scripted(fake: FakeOpenAI) -> None:
    batches = FakeBatches(fake)
    batches.fail = lambda custom_id: "boom" if custom_id == "judge:b" else None
    batches.malformed = lambda custom_id: custom_id == "judge:c"
    batches.expire_after = 3
    fake.route("judge", chat("yes"))
    async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        batch_id = await _submit(client, _jsonl("judge:a", "judge:b", "judge:c", "judge:d"))
        done = await client.batches.retrieve(batch_id)
        assert done.status == "expired"
        assert done.output_file_id is not None
        assert done.error_file_id is not None
        output = (await client.files.content(done.output_file_id)).text.splitlines()
        errors = (await client.files.content(done.error_file_id)).text.splitlines()
    assert json.loads(output[0])["custom_id"] == "judge:a"
    with pytest.raises(json.JSONDecodeError, match="Unterminated string"):
        json.loads(output[1])
    assert len(output) == 2  # judge:d was never answered: the batch expired first
    assert json.loads(errors[0])["response"]["body"]["error"]["message"] == "boom"


async def test_a_cancelled_batch_is_not_run(fake: FakeOpenAI) -> None:
    batches = FakeBatches(fake, delay=60, clock=_Clock())
    async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        batch_id = await _submit(client, _jsonl("judge:a"))
        assert (await client.batches.cancel(batch_id)).status == "cancelled"
        assert (await client.batches.retrieve(batch_id)).status == "cancelled"
    assert batches.lines_answered == 0


async def test_an_endpoint_without_batches_answers_404(fake: FakeOpenAI) -> None:
    async with AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(NotFoundError):
            await client.files.create(file=("in.jsonl", _jsonl("judge:a")), purpose="batch")
