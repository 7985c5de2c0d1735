"""The store contract: what every :class:`~ragjury.store.base.Store` must do.

``tests/test_store.py`` runs these (the queue and the bus; the other roles are in
``store_contract_*.py``) against SQLite; a PostgreSQL store adds itself to the ``store``
fixture there and must pass the same tests. Leases are on the database's clock,
so "a lease ran out" is a lease of 0 seconds, and "held" is one of a minute.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from ragjury._json import JSONObject
from ragjury.errors import InputError
from ragjury.llm.usage import CallStats
from ragjury.store.base import ItemResults, Lease, OutgoingMessage, StepWrites, Store
from ragjury.store.sql import SQLStore
from ragjury.store.sql.queue import INTAKE_CHUNK

HELD, RAN_OUT = 60.0, 0.0


async def _job(store: Store, n: int, kind: str = "evaluate") -> str:
    job = await store.submit(kind, {"x": 1}, lambda: [(f"s{i}", {"i": i}) for i in range(n)])  # type: ignore[arg-type]  # a literal kind
    return job.id


def _message(job_id: str, key: str, group: str = "g", body: str = "{}") -> OutgoingMessage:
    return OutgoingMessage(group=group, kind="k", job_id=job_id, item_key=key, body=body)


async def test_submitting_the_same_batch_twice_finds_the_same_job(store: Store) -> None:
    first = await store.submit("generate", {"a": 1}, lambda: [("d1", {"t": "x"})])
    second = await store.submit("generate", {"a": 1}, lambda: [("d1", {"t": "x"})])
    other = await store.submit("generate", {"a": 2}, lambda: [("d1", {"t": "x"})])
    assert [first.created, second.created, other.created] == [True, False, True]
    assert first.id == second.id != other.id
    assert (await store.counts())["queued"] == 2
    assert (await store.job(first.id)).options == {"a": 1}
    with pytest.raises(InputError, match="repeated: d1"):
        await store.submit("generate", {}, lambda: [("d1", {}), ("d1", {})])


async def test_a_new_job_reads_its_items_once_and_a_known_one_is_keyed_first(
    store: Store,
) -> None:
    reads = []

    def items() -> list[tuple[str, dict[str, str]]]:
        reads.append(1)
        return [("d1", {"t": "x"}), ("d2", {"t": "y"})]

    first = await store.submit("generate", {"a": 1}, items)
    assert (first.created, first.size, len(reads)) == (True, 2, 1)  # stored as it was keyed
    again = await store.submit("generate", {"a": 1}, items)
    assert (again.id, again.created, len(reads)) == (first.id, False, 2)  # keyed, not stored
    other = await store.submit("generate", {"a": 1}, lambda: [("d3", {"t": "z"})])
    assert (other.created, other.size) == (True, 1)
    assert other.id != first.id
    assert (await store.counts())["queued"] == 3
    # a new job that turns out to have no items leaves nothing behind
    empty = await store.submit("generate", {"a": 9}, lambda: [])
    assert (empty.id, empty.size) == ("", 0)
    assert len(await store.jobs()) == 2


async def test_submitting_large_documents_holds_a_few_mib_not_the_whole_batch(
    store: Store,
) -> None:
    def documents() -> Iterator[tuple[str, dict[str, str]]]:
        for n in range(40):  # 40 documents of 1 MiB, made fresh on each pass
            yield f"d{n}", {"text": f"{n} " + "x" * (1024 * 1024)}

    tracemalloc.start()
    try:
        job = await store.submit("generate", {}, documents)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert job.size == 40
    assert peak < 16 * 1024 * 1024  # about 4 MiB of rows at once, not 40 MiB
    items = await store.claim_items("a", 40, lease_seconds=HELD)
    assert [(i.key, i.position) for i in items] == [(f"d{n}", n) for n in range(40)]


async def test_an_item_lease_that_runs_out_lets_another_intake_take_it(store: Store) -> None:
    await _job(store, 3)
    assert [i.key for i in await store.claim_items("a", 2, lease_seconds=HELD)] == ["s0", "s1"]
    (late,) = await store.claim_items("b", 5, lease_seconds=RAN_OUT)
    assert late.key == "s2"
    assert await store.claim_items("b", 5, lease_seconds=HELD) == []  # never its own again
    (taken,) = await store.claim_items("a", 5, lease_seconds=HELD)
    assert (taken.key, taken.attempts) == ("s2", 2)


async def test_an_item_taken_too_often_without_starting_is_failed_with_the_reason(
    store: Store,
) -> None:
    job_id = await _job(store, 1)
    for n in range(3):
        assert len(await store.claim_items(f"a{n}", 1, lease_seconds=RAN_OUT, max_attempts=3)) == 1
    assert await store.claim_items("z", 1, lease_seconds=HELD, max_attempts=3) == []
    assert (await store.counts())["failed"] == 1
    [failed] = await store.failed_items(job_id)
    assert "3 process(es) took this item" in failed["error"]


async def test_released_and_started_items_leave_the_intake_queue(store: Store) -> None:
    await _job(store, 3)
    items = await store.claim_items("a", 3, lease_seconds=HELD)
    assert await store.unfinished_items("a") == 3
    assert await store.release_items("a", [items[0].id]) == 1
    await store.items_started([items[1].id])
    again = await store.claim_items("b", 5, lease_seconds=HELD)
    assert [(i.key, i.attempts) for i in again] == [("s0", 1)]  # a release uses no attempt
    assert await store.claim_items("c", 5, lease_seconds=HELD) == []  # started: not claimable
    assert await store.unfinished_items("a") == 2
    assert (await store.counts())["processing"] == 3


async def test_an_item_is_finished_once_whoever_finishes_it(store: Store) -> None:
    job_id = await _job(store, 2)
    record: JSONObject = {"id": "s0", "question": "q", "answer": "a", "metrics": {}}
    results = ItemResults(samples=[(record, '{"x": 1}')], report={"r": 1})
    assert await store.finish_item(job_id, "s0", results) is True
    assert await store.finish_item(job_id, "s0", results) is False  # a late duplicate
    assert await store.fail_item(job_id, "s0", "too late") is False
    assert await store.fail_item(job_id, "s1", "broken", results=None) is True
    assert [r async for r in store.samples([job_id])] == [record]
    # as a JSONL output writes the record, unparsed: one line of compact JSON
    assert [t async for t in store.sample_texts(job_id)] == [
        '{"id":"s0","question":"q","answer":"a","metrics":{}}'
    ]
    assert [s async for s in store.scored(job_id)] == ['{"x": 1}']
    assert [r async for r in store.reports(job_id)] == [{"r": 1}]
    assert await store.failed_items(job_id) == [{"item": "s1", "error": "broken"}]
    assert await store.counts([job_id]) == {"queued": 0, "processing": 0, "done": 1, "failed": 1}
    assert await store.unfinished([job_id]) == 0


async def test_items_that_end_as_they_are_taken_in_are_stored_ended_in_order(
    store: Store,
) -> None:
    """``submit(..., ends=...)``: each item of a new job that ``ends`` gives results is stored
    ``done`` with them, never claimed; one it gives none is queued. Their records read back
    in submission order (row ids follow positions, ended or not), and a second submission of
    the same job finds it without asking ``ends`` again."""
    asked: list[tuple[str, str]] = []

    def ends(key: str, stored: str) -> ItemResults | None:
        asked.append((key, stored))
        if key in ("s2", "s5"):  # a start that needs more than the item: left for the runner
            return None
        record: JSONObject = {"id": key, "question": "q", "answer": None}
        pairs = [{"id": f"{key}-p", "outcome": "kept", "question": "q", "source": key}]
        return ItemResults(pairs=pairs, samples=[(record, f'{{"k": "{key}"}}')], report={"r": key})

    def items() -> list[tuple[str, JSONObject]]:
        return [(f"s{i}", {"i": i}) for i in range(7)]

    job = await store.submit("evaluate", {"e": 1}, items, batch=3, ends=ends)
    assert (job.created, job.size, job.ended) == (True, 7, 5)
    assert asked == [(f"s{i}", f'{{"i": {i}}}') for i in range(7)]  # the payloads as stored
    assert await store.counts([job.id]) == {"queued": 2, "processing": 0, "done": 5, "failed": 0}
    ended = ["s0", "s1", "s3", "s4", "s6"]
    assert [r["id"] async for r in store.samples([job.id])] == ended
    assert [s async for s in store.scored(job.id)] == [f'{{"k": "{k}"}}' for k in ended]
    assert [p["id"] async for p in store.pairs([job.id])] == [f"{k}-p" for k in ended]
    assert [r async for r in store.reports(job.id)] == [{"r": k} for k in ended]
    claimed = await store.claim_items("w", 10, lease_seconds=HELD, job_ids=[job.id])
    assert [(i.key, i.position, i.payload) for i in claimed] == [
        ("s2", 2, {"i": 2}), ("s5", 5, {"i": 5})
    ]  # fmt: skip
    assert await store.unfinished_items("w") == 2  # only the two the runner started
    again = await store.submit("evaluate", {"e": 1}, items, ends=ends)
    assert (again.id, again.created, again.ended, len(asked)) == (job.id, False, 0, 7)
    # another job with the same options (keyed before it is stored): its items end too
    other = await store.submit("evaluate", {"e": 1}, lambda: [("t0", {"i": 0})], ends=ends)
    assert (other.created, other.ended, len(asked)) == (True, 1, 8)
    assert [r["id"] async for r in store.samples([other.id])] == ["t0"]


class _Killed(BaseException):
    """What a kill -9 does to an intake: it stops where it is, and nothing is cleaned up."""


async def test_an_intake_cut_off_keeps_its_committed_chunks_and_the_same_one_goes_on(
    store: Store,
) -> None:
    """A job judged as it is stored is committed a chunk at a time
    (:data:`~ragjury.store.sql.queue.INTAKE_CHUNK` items): cut off after its first chunk,
    the job keeps that chunk ended; the same submission again stores and ends only the rest,
    in the same job; another input with the same options is another job, and one with a
    repeated id is refused, leaving nothing of it."""
    n = 3 * INTAKE_CHUNK + 10
    asked: list[str] = []
    cut_at: int | None = INTAKE_CHUNK + INTAKE_CHUNK // 2

    def ends(key: str, stored: str) -> ItemResults | None:
        if cut_at is not None and key == f"s{cut_at}":
            raise _Killed
        asked.append(key)
        return ItemResults(samples=[({"id": key}, f'{{"k": "{key}"}}')], report={})

    def items() -> list[tuple[str, JSONObject]]:
        return [(f"s{i}", {"i": i}) for i in range(n)]

    with pytest.raises(_Killed):
        await store.submit("evaluate", {"c": 1}, items, ends=ends)
    assert len(asked) == INTAKE_CHUNK + INTAKE_CHUNK // 2
    counts = await store.counts()
    assert counts["done"] == INTAKE_CHUNK  # the second chunk was never committed
    # another input with the same options does not take the unfinished job's place
    other = await store.submit("evaluate", {"c": 1}, lambda: items()[1:30], ends=ends)
    assert (other.created, other.size, other.ended) == (True, 29, 29)
    asked.clear()
    cut_at = None
    job = await store.submit("evaluate", {"c": 1}, items, ends=ends)
    assert (job.created, job.size, job.ended) == (False, n, n - INTAKE_CHUNK)
    assert asked == [f"s{i}" for i in range(INTAKE_CHUNK, n)]  # the first chunk not again
    assert await store.counts([job.id]) == {"queued": 0, "processing": 0, "done": n, "failed": 0}
    assert [r["id"] async for r in store.samples([job.id])] == [f"s{i}" for i in range(n)]
    again = await store.submit("evaluate", {"c": 1}, items, ends=ends)
    assert (again.id, again.created, again.ended) == (job.id, False, 0)
    assert len(await store.jobs()) == 2
    repeated: list[tuple[str, JSONObject]] = [*items()[: INTAKE_CHUNK + 5], ("s3", {"i": 3})]
    with pytest.raises(InputError, match="repeated: s3"):
        await store.submit("evaluate", {"c": 2}, lambda: repeated, ends=ends)
    assert len(await store.jobs()) == 2


async def test_the_queued_items_of_a_job_found_again_end_as_they_would_be_taken_in(
    store: Store,
) -> None:
    """A job stored queued (by a run stopped while it judged them, or by ``submit``), then
    submitted again with ``ends``: its queued items end there, a chunk at a time, those
    ``ends`` gives nothing stay queued, and one claimed by a runner is left to it."""
    n = INTAKE_CHUNK + 10

    def items() -> list[tuple[str, JSONObject]]:
        return [(f"s{i}", {"i": i}) for i in range(n)]

    first = await store.submit("evaluate", {"q": 1}, items)
    claimed = await store.claim_items("w", 1, lease_seconds=HELD, job_ids=[first.id])
    asked: list[str] = []

    def ends(key: str, stored: str) -> ItemResults | None:
        asked.append(key)
        assert stored == f'{{"i": {key[1:]}}}'  # the payload as stored
        if key == "s7":
            return None
        return ItemResults(samples=[({"id": key}, f'{{"k": "{key}"}}')], report={})

    job = await store.submit("evaluate", {"q": 1}, items, ends=ends)
    assert (job.id, job.created, job.ended) == (first.id, False, n - 2)
    assert asked == [f"s{i}" for i in range(1, n)]  # s0 claimed
    assert claimed[0].key == "s0"
    counts = await store.counts([job.id])
    assert counts == {"queued": 1, "processing": 1, "done": n - 2, "failed": 0}
    ended = [f"s{i}" for i in range(1, n) if i != 7]
    assert [r["id"] async for r in store.samples([job.id])] == ended


async def test_records_stream_in_submission_order_across_pages(store: Store) -> None:
    job = await store.submit("generate", {}, lambda: [(f"d{i:03}", {}) for i in range(450)])
    for i in reversed(range(450)):  # finished in reverse: still read in submission order
        pair = {"id": f"p{i}", "outcome": "kept", "question": "q", "source": "s"}
        await store.finish_item(job.id, f"d{i:03}", ItemResults(pairs=[pair], report={}))
    ids = [r["id"] async for r in store.pairs([job.id])]
    assert ids == [f"p{i}" for i in range(450)]
    assert await store.pair_outcomes(job.id) == {"kept": 450}


async def test_messages_are_claimed_by_group_under_a_lease(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a", "1"), _message(job_id, "s0", "b", "2")])
    claim = await store.claim_messages("w1", ["a"], 5, lease_seconds=HELD, max_attempts=5)
    assert [(m.group, m.body, m.attempts, m.item_key) for m in claim.messages] == [
        ("a", "1", 1, "s0")
    ]
    held = await store.claim_messages("w2", ["a", "b"], 5, lease_seconds=HELD, max_attempts=5)
    assert [m.body for m in held.messages] == ["2"]  # "1" is w1's while its lease runs
    assert await store.waiting_messages() == {"a": 1, "b": 1}


async def test_an_acknowledged_message_is_replaced_by_its_replies_at_once(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a")])
    (message,) = (
        await store.claim_messages("w", ["a"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    await store.ack_message(message.id, [_message(job_id, "s0", "b", "r1")])
    assert await store.waiting_messages() == {"b": 1}
    claim = await store.claim_messages("w", ["a", "b"], 5, lease_seconds=HELD, max_attempts=5)
    assert [m.body for m in claim.messages] == ["r1"]


async def test_an_acknowledgement_stores_its_steps_cache_row_and_closes_its_calls(
    store: Store,
) -> None:
    job_id = await _job(store, 1)
    run_id = await store.start_run("evaluate", {})
    stats = CallStats(stage="judge", requests=1, prompt_tokens=7, completion_tokens=3)
    stats.record = await store.open_call(run_id, stats)
    await store.put_messages([_message(job_id, "s0", "a")])
    (message,) = (
        await store.claim_messages("w", ["a"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    writes = StepWrites(("k1", "a", "[]"), [(stats, None)])
    await store.ack_message(message.id, [_message(job_id, "s0", "b", "r1")], writes)
    assert await store.get_step("k1") == "[]"
    totals = await store.call_totals(run_id=run_id)
    assert (totals["llm_calls"], totals["prompt_tokens"], totals["completion_tokens"]) == (1, 7, 3)
    assert isinstance(store, SQLStore)
    rows = await store.read("SELECT error FROM llm_calls WHERE id = ?", (stats.record,))
    assert rows == [(None,)]  # no longer in flight
    assert await store.waiting_messages() == {"b": 1}
    # acknowledged again (a lost connection's retry, a second worker): the writes are
    # stored again alike, the replies not put twice
    await store.ack_message(message.id, [_message(job_id, "s0", "b", "r1")], writes)
    assert await store.waiting_messages() == {"b": 1}
    assert (await store.call_totals(run_id=run_id))["llm_calls"] == 1


async def test_an_acknowledgement_that_ends_the_item_stores_its_results_once(
    store: Store,
) -> None:
    job_id = await _job(store, 2)
    await store.put_messages([_message(job_id, "s0", "a", "1"), _message(job_id, "s0", "c", "2")])
    claim = await store.claim_messages("w", ["a", "c"], 2, lease_seconds=HELD, max_attempts=5)
    first, second = claim.messages
    results = ItemResults(samples=[({"id": "s0", "score": 1}, "{}")], report={"n": 1})
    ending = StepWrites(("k2", "a", "[]"), (), (job_id, "s0", results))
    acked = await store.ack_message(first.id, [_message(job_id, "s0", "b")], ending)
    assert acked.ended is True
    assert await store.get_step("k2") == "[]"
    assert await store.waiting_messages() == {}  # no reply; the item's other message gone
    assert [r async for r in store.samples()] == [{"id": "s0", "score": 1}]
    again = await store.ack_message(second.id, [], ending)
    assert again.ended is False  # ended once: its results stored once
    assert [r async for r in store.samples()] == [{"id": "s0", "score": 1}]
    assert (await store.ack_message(second.id, [])).ended is None


async def test_claimed_messages_steps_are_read_together_and_their_calls_opened(
    store: Store,
) -> None:
    await store.put_step("k1", "a", '["one"]')
    await store.put_step("k2", "b", "[]")
    claimed = [("b", "k2"), ("a", "missing"), ("a", "k1"), ("c", "missing")]
    assert await store.claimed_steps(claimed) == [
        ("[]", None), (None, None), ('["one"]', None), (None, None)
    ]  # fmt: skip
    assert await store.claimed_steps([]) == []
    # under a run, each whose step is not cached comes with its first call's record opened
    found = await store.claimed_steps(claimed, run_id="r1")
    assert [output for output, _ in found] == ["[]", None, '["one"]', None]
    assert found[0][1] is None
    assert found[2][1] is None
    calls = [call for _, call in found if call is not None]
    assert len(set(calls)) == 2
    assert isinstance(store, SQLStore)
    opened = await store.read(
        "SELECT id, stage, error FROM llm_calls WHERE run_id = ? ORDER BY id", ("r1",)
    )
    assert [(i, stage) for i, stage, _ in opened] == [(found[1][1], "a"), (found[3][1], "c")]
    assert all(str(error).startswith("in flight") for _, _, error in opened)
    await store.release_messages("w", [], calls=calls)  # a claimed message given back unstarted
    assert await store.read("SELECT id FROM llm_calls WHERE run_id = ?", ("r1",)) == []


async def test_messages_put_leased_come_back_with_their_cached_step_and_are_no_one_elses(
    store: Store,
) -> None:
    job_id = await _job(store, 2)
    await store.put_step("cached-key", "b", '["done"]')
    lease = Lease("w", HELD)
    leased = [
        OutgoingMessage("b", "k", job_id, "s0", "1", leased=True, step_key="cached-key"),
        OutgoingMessage("b", "k", job_id, "s0", "2", leased=True, step_key="other-key"),
        OutgoingMessage("b", "k", job_id, "s0", "3", leased=True),
        _message(job_id, "s0", "b", "4"),
    ]
    [item] = await store.claim_items("w", 1, lease_seconds=HELD)
    taken = await store.put_messages(leased, lease=lease, started=[item.id])
    assert [(m.body, m.attempts, m.step, m.step_key, m.item_key) for m in taken] == [
        ("1", 1, '["done"]', "cached-key", "s0"),
        ("2", 1, None, "other-key", "s0"),
        ("3", 1, None, "", "s0"),
    ]
    assert isinstance(store, SQLStore)
    assert await store.read("SELECT state FROM items WHERE id = ?", (item.id,)) == [("running",)]
    other = await store.claim_messages("x", ["b"], 9, lease_seconds=HELD, max_attempts=5)
    assert [m.body for m in other.messages] == ["4"]  # the leased ones are w's
    await store.release_messages("w", [m.id for m in taken])
    again = await store.claim_messages("x", ["b"], 9, lease_seconds=HELD, max_attempts=5)
    assert sorted((m.body, m.attempts) for m in again.messages) == [("1", 1), ("2", 1), ("3", 1)]
    # an acknowledgement's replies leased to the acknowledging process likewise
    reply = OutgoingMessage("c", "k", job_id, "s0", "5", leased=True, step_key="cached-key")
    [back] = (await store.ack_message(again.messages[0].id, [reply], lease=lease)).leased
    assert (back.group, back.body, back.step) == ("c", "5", '["done"]')
    assert (
        await store.claim_messages("x", ["c"], 9, lease_seconds=HELD, max_attempts=5)
    ).messages == []


async def test_replies_to_a_finished_item_are_dropped(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a"), _message(job_id, "s0", "c")])
    (message,) = (
        await store.claim_messages("w", ["a"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages
    await store.finish_item(job_id, "s0", ItemResults(report={}))
    await store.ack_message(message.id, [_message(job_id, "s0", "b")])
    assert await store.waiting_messages() == {}  # its leftovers went with it


async def test_a_dead_workers_message_comes_back_after_its_lease(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a")])
    await store.claim_messages("dead", ["a"], 1, lease_seconds=RAN_OUT, max_attempts=5)
    claim = await store.claim_messages("alive", ["a"], 1, lease_seconds=HELD, max_attempts=5)
    assert [m.attempts for m in claim.messages] == [2]


async def test_renewed_messages_stay_with_their_worker(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a")])
    claim = await store.claim_messages("w", ["a"], 1, lease_seconds=RAN_OUT, max_attempts=5)
    await store.renew_messages("w", [m.id for m in claim.messages], HELD)
    assert (
        await store.claim_messages("x", ["a"], 1, lease_seconds=HELD, max_attempts=5)
    ).messages == []
    await store.release_messages("w", [m.id for m in claim.messages])
    again = await store.claim_messages("x", ["a"], 1, lease_seconds=HELD, max_attempts=5)
    assert [m.attempts for m in again.messages] == [1]  # a release gives the attempt back


async def test_a_message_released_after_its_handler_started_keeps_its_attempt(
    store: Store,
) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a")])
    for owner in ("w1", "w2", "w3"):  # each worker took it, started, and was stopped cleanly
        claim = await store.claim_messages(owner, ["a"], 1, lease_seconds=HELD, max_attempts=3)
        assert [m.attempts for m in claim.messages] == [int(owner[1])]
        await store.release_messages(owner, [m.id for m in claim.messages], started=True)

    last = await store.claim_messages("w4", ["a"], 1, lease_seconds=HELD, max_attempts=3)

    assert (last.messages, last.dead) == ([], 1)  # the limit is reached however they ended
    [failed] = await store.failed_items(job_id)
    assert "poison message" in failed["error"]


async def test_a_message_that_keeps_killing_workers_is_taken_out_and_its_item_failed(
    store: Store,
) -> None:
    job_id = await _job(store, 2)
    await store.put_messages([_message(job_id, "s0", "a"), _message(job_id, "s1", "a")])
    for _ in range(3):
        await store.claim_messages("w", ["a"], 1, lease_seconds=RAN_OUT, max_attempts=3)
    claim = await store.claim_messages("w", ["a"], 5, lease_seconds=HELD, max_attempts=3)
    assert claim.dead == 1
    assert [m.item_key for m in claim.messages] == ["s1"]  # the queue goes on
    [failed] = await store.failed_items(job_id)
    assert failed["item"] == "s0"
    assert "poison message" in failed["error"]


async def test_a_failed_handler_gets_the_message_again_then_it_is_taken_out(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a")])
    for attempt in (1, 2):
        (m,) = (
            await store.claim_messages("w", ["a"], 1, lease_seconds=HELD, max_attempts=2)
        ).messages
        assert m.attempts == attempt
        dead = await store.nack_message(m.id, "boom", max_attempts=2, retry_after=0)
        assert dead is (attempt == 2)
    assert await store.waiting_messages() == {}


async def test_a_leased_messages_opened_call_record_is_taken_dropped_or_given_back(
    store: Store,
) -> None:
    """Each store opens the first call's in-flight record of each leased message whose step
    is not cached as it puts it (a call then needs no write of its own); whatever no call
    takes is dropped, so no record stays in flight. An item's first joins go with its first
    messages."""
    job_id = await _job(store, 1)
    run_id = await store.start_run("evaluate", {})
    await store.put_step("cached", "b", "[]")
    lease = Lease("w", HELD, run_id)
    [item] = await store.claim_items("w", 1, lease_seconds=HELD)
    put = [
        OutgoingMessage("b", "k", job_id, "s0", str(n), leased=True, step_key=f"key{n}")
        for n in range(3)
    ] + [OutgoingMessage("b", "k", job_id, "s0", "3", leased=True, step_key="cached")]
    joins = [(job_id, "s0", {"s:x": "1"})]
    taken = await store.put_messages(put, lease=lease, started=[item.id], joins=joins)
    assert await store.join(job_id, "s0", {"s:y": "2"}, "s:") == {"s:x": "1", "s:y": "2"}
    assert taken[3].call is None  # its step is cached: no call to make
    opened = [m.call for m in taken[:3] if m.call is not None]
    assert len(opened) == 3
    assert isinstance(store, SQLStore)
    in_flight = "SELECT COUNT(*) FROM llm_calls WHERE run_id = ? AND error LIKE 'in flight%'"
    assert (await store.read(in_flight, (run_id,)))[0][0] == 3
    # the first message's call takes its record and closes it with the ack
    stats = CallStats(stage="b", requests=1, prompt_tokens=7, completion_tokens=3)
    stats.record = opened[0]
    await store.ack_message(taken[0].id, [], StepWrites(calls=[(stats, None)]))
    # the second's handler made no call: its record goes with the ack
    await store.ack_message(taken[1].id, [], StepWrites(unused_calls=opened[1:2]))
    # the third was never handled (a clean stop): its record goes with the release
    await store.release_messages("w", [taken[2].id, taken[3].id], calls=opened[2:3])
    assert (await store.read(in_flight, (run_id,)))[0][0] == 0
    assert (await store.call_totals(run_id=run_id))["llm_calls"] == 1


async def test_an_acknowledgement_closes_each_of_its_calls_with_its_own_figures(
    store: Store,
) -> None:
    job_id = await _job(store, 1)
    run_id = await store.start_run("evaluate", {})
    await store.put_messages([_message(job_id, "s0", "b", str(n)) for n in range(2)])
    taken = (await store.claim_messages("w", ["b"], 2, lease_seconds=HELD, max_attempts=5)).messages
    priced = CallStats("b", "m1", 2, 11, 5, 1.25, 0.5)
    unpriced = CallStats("b", "m2", 1, 7, 3, 0.125, None)
    alone = CallStats("b", "m3", 3, 2, 1, 2.5, 1e-06)
    for stats in (priced, unpriced, alone):
        stats.record = await store.open_call(run_id, stats)
    assert isinstance(store, SQLStore)
    opened = "SELECT id, created_at FROM llm_calls WHERE run_id = ? ORDER BY id"
    when_opened = await store.read(opened, (run_id,))
    # two calls closed by one acknowledgement, then one by another
    await store.ack_message(taken[0].id, [], StepWrites(calls=[(priced, None), (unpriced, "bad")]))
    await store.ack_message(taken[1].id, [], StepWrites(calls=[(alone, None)]))
    assert await store.read(opened, (run_id,)) == when_opened  # dated when they were opened
    rows = await store.read(
        "SELECT model, requests, prompt_tokens, completion_tokens, latency_ms, error, cost_usd "
        "FROM llm_calls WHERE run_id = ? ORDER BY id",
        (run_id,),
    )
    assert [tuple(row) for row in rows] == [
        ("m1", 2, 11, 5, 1250.0, None, 0.5),
        ("m2", 1, 7, 3, 125.0, "bad", None),
        ("m3", 3, 2, 1, 2500.0, None, 1e-06),
    ]


async def test_the_groups_a_claim_would_find_messages_for_are_told_in_one_query(
    store: Store,
) -> None:
    job_id = await _job(store, 1)
    await store.put_messages([_message(job_id, "s0", "a"), _message(job_id, "s0", "b")])
    await store.claim_messages("w", ["b"], 1, lease_seconds=HELD, max_attempts=5)
    assert await store.claimable_groups(["a", "b", "c"]) == {"a"}  # b's is leased
    assert await store.claimable_groups(["a"], [job_id]) == {"a"}
    assert await store.claimable_groups(["a"], ["another-job"]) == set()
    assert await store.claimable_groups([]) == set()
