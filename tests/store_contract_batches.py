"""The store contract, batch mode's part: queued requests, submissions, parked messages
(``tests/test_store.py`` runs it on SQLite and PostgreSQL)."""

from __future__ import annotations

from store_contract import HELD, _message

from ragjury.llm.batch_types import Answer
from ragjury.store.base import Store


async def _parked_message(store: Store) -> int:
    job = await store.submit("evaluate", {}, lambda: [("s0", {})])
    await store.put_messages([_message(job.id, "s0", "judge")])
    (message,) = (
        await store.claim_messages("w", ["judge"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    await store.queue_batch_request("k1", job.id, "judge", '{"model": "m"}')
    await store.park_message(message.id, "k1")
    return message.id


async def test_a_parked_message_is_offered_again_once_its_request_is_answered(
    store: Store,
) -> None:
    message_id = await _parked_message(store)
    assert (await store.claim_messages("w", ["judge"], 1, lease_seconds=HELD,
                                       max_attempts=5)).messages == []  # fmt: skip
    submission = await store.claim_submission("p", "e", size=10, wait=0, lease=60)
    assert submission is not None
    assert [line[0] for line in submission.lines] == ["k1"]
    assert await store.claim_submission("p", "e", size=10, wait=0, lease=60) is None
    await store.batch_created(submission.id, "batch_1", 0)
    (due,) = await store.due_batches("p", 5, 60)
    assert due.provider_id == "batch_1"
    await store.end_batch(due.id, "completed", [Answer("k1", response="{}")], max_tries=2)

    (again,) = (
        await store.claim_messages("w", ["judge"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    assert again.id == message_id
    assert again.attempts == 1  # waiting for a batch is not a failed delivery
    found = await store.batch_request("k1")
    assert found is not None
    assert (found.state, found.response) == ("done", "{}")
    assert await store.book_batch_request("k1")
    assert not await store.book_batch_request("k1")  # its tokens count once
    assert await store.batches_in_flight() == []


async def test_an_unanswered_request_is_queued_again_then_failed_after_its_tries(
    store: Store,
) -> None:
    await _parked_message(store)
    for status, state in (("expired", "queued"), ("expired", "failed")):
        submission = await store.claim_submission("p", "e", size=10, wait=0, lease=60)
        assert submission is not None
        await store.batch_created(submission.id, f"b_{state}", 0)
        (due,) = await store.due_batches("p", 5, 60)
        await store.end_batch(due.id, status, [], max_tries=2)
        found = await store.batch_request("k1")
        assert found is not None
        assert found.state == state
    final = await store.batch_request("k1")
    assert final is not None
    assert final.error == "the batch ended expired without answering it"


async def test_cancelling_a_jobs_batches_wakes_its_parked_messages_and_sends_its_calls_direct(
    store: Store,
) -> None:
    message_id = await _parked_message(store)
    submission = await store.claim_submission("p", "e", size=10, wait=0, lease=60)
    assert submission is not None
    assert await store.batch_created(submission.id, "batch_1", 0)
    job_id = submission.job_id

    cancelled = await store.cancel_batches(job_id)

    assert list(cancelled.provider) == [("batch_1", "e")]
    assert cancelled.requests == 1
    assert await store.batches_in_flight() == []
    assert await store.due_batches("p", 5, 60) == []
    assert await store.batch_request("k1") is None
    (again,) = (
        await store.claim_messages("w", ["judge"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    assert again.id == message_id
    assert not await store.queue_batch_request("k2", job_id, "judge", "{}")  # direct now
    assert await store.claim_submission("p", "e", size=10, wait=0, lease=60) is None
    # the batch's answers, should they come, change nothing
    await store.end_batch(submission.id, "completed", [Answer("k1", response="{}")], max_tries=2)
    assert await store.batch_request("k1") is None


async def test_a_submission_cancelled_while_being_created_is_not_opened(store: Store) -> None:
    await _parked_message(store)
    submission = await store.claim_submission("p", "e", size=10, wait=0, lease=60)
    assert submission is not None

    cancelled = await store.cancel_batches(submission.job_id)

    assert (list(cancelled.provider), cancelled.submitting) == ([], 1)
    assert not await store.batch_created(submission.id, "batch_late", 0)
    assert await store.due_batches("p", 5, 60) == []
