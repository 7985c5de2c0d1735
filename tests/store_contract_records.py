"""The store contract, continued: joins, results pages, the deduplicator's decisions, the
step cache and call records, jobs and runs, status, workers, pruning and rate buckets (the
queue and the bus are in ``store_contract.py``)."""

from __future__ import annotations

import anyio
import pytest
from store_contract import HELD, _job, _message

from ragjury._json import JSONObject
from ragjury.agents.question_index import QuestionIndex
from ragjury.llm.usage import CallStats
from ragjury.store._common import PAGE
from ragjury.store.base import ItemResults, QuestionDecision, Store


async def test_joins_keep_the_first_value_and_answer_by_prefix(store: Store) -> None:
    job_id = await _job(store, 1)
    assert await store.join(job_id, "s0", {"p:1:a": "x"}, "p:1:") == {"p:1:a": "x"}
    await store.join(job_id, "s0", {"p:2:a": "y"}, "p:2:")
    state = await store.join(job_id, "s0", {"p:1:a": "changed", "p:1:b": "z"}, "p:1:")
    assert state == {"p:1:a": "x", "p:1:b": "z"}
    await store.finish_item(job_id, "s0", ItemResults(report={}))
    assert await store.join(job_id, "s0", {}, "p:") == {}  # an ended item's state is gone


async def test_reports_come_in_item_order_a_page_at_a_time(store: Store) -> None:
    n = PAGE * 2 + 3
    job_id = await _job(store, n)
    for i in reversed(range(n)):  # ended in another order than submitted
        if i % 7 == 3:
            await store.fail_item(job_id, f"s{i}", "broken", results=None)  # no report
        else:
            await store.finish_item(job_id, f"s{i}", ItemResults(report={"i": i}))
    found = [r["i"] async for r in store.reports(job_id)]
    assert found == [i for i in range(n) if i % 7 != 3]


async def test_question_decisions_are_stored_once_and_replayed(store: Store) -> None:
    job_id = await _job(store, 1, "generate")
    index = QuestionIndex(0.9)
    first = await store.decide_questions(job_id, [("p1", "Which port does the server use?")], index)
    assert first == [QuestionDecision("p1", None, None)]
    assert await store.decide_questions(job_id, [("p1", "anything")], index) == first  # replayed
    drafted = [("p2", "Which port does the server use"), ("p3", "Which colour is the logo?")]
    again = await store.decide_questions(job_id, drafted, index)
    assert again == [QuestionDecision("p2", "p1", 1.0), QuestionDecision("p3", None, None)]
    other_job = (await store.submit("generate", {"y": 2}, lambda: [("d", {})])).id
    logo = [("p4", "Which colour is the logo?")]
    elsewhere = await store.decide_questions(other_job, logo, index)
    assert elsewhere == [QuestionDecision("p4", None, None)]  # jobs do not share questions


async def test_questions_indexed_at_another_threshold_are_indexed_again(store: Store) -> None:
    job_id = await _job(store, 1, "generate")
    kept = "alpha bravo charlie delta echo foxtrot golf hotel"
    await store.decide_questions(job_id, [("p1", kept)], QuestionIndex(1.0))  # one key only
    looser = QuestionIndex(0.5)
    drafted = "alpha bravo charlie delta india juliet kilo lima"  # half the words: 0.5
    assert not set(QuestionIndex(1.0).keys(kept)) & set(looser.keys(drafted))
    decisions = await store.decide_questions(job_id, [("p2", drafted)], looser)
    assert decisions == [QuestionDecision("p2", "p1", 0.5)]


async def test_the_step_cache_and_call_records(store: Store) -> None:
    assert await store.get_step("k") is None
    await store.put_step("k", "generator", "[]")
    assert await store.get_step("k") == "[]"
    run_id = await store.start_run("generate", {"model": "m"})
    stats = CallStats(stage="generator", requests=2, prompt_tokens=10, completion_tokens=5)
    await store.record_call(run_id, stats, None)
    totals = await store.call_totals(run_id=run_id)
    assert (totals["llm_calls"], totals["prompt_tokens"], totals["completion_tokens"]) == (2, 10, 5)
    assert (await store.call_totals(since=0.0))["prompt_tokens"] == 10
    await store.finish_run(run_id, {"ok": True})


async def test_jobs_are_listed_newest_first_with_their_sizes(store: Store) -> None:
    assert await store.jobs() == []
    first = await _job(store, 2)
    second = await _job(store, 1, kind="generate")

    jobs = await store.jobs()

    assert [(j.id, j.kind, j.size, j.options) for j in jobs] == [
        (second, "generate", 1, {"x": 1}),
        (first, "evaluate", 2, {"x": 1}),
    ]
    assert [j.id for j in await store.jobs(limit=1)] == [second]


async def test_a_jobs_latest_run_is_the_newest_finished_run_that_names_it(store: Store) -> None:
    job_id = await _job(store, 1)
    assert await store.latest_run(job_id) is None
    first = await store.start_run("evaluate", {"model": "m1"})
    await store.finish_run(first, {"job": job_id, "llm_calls": 3})
    second = await store.start_run("evaluate", {"model": "m2"})
    await store.finish_run(second, {"job": job_id, "llm_calls": 0})
    other = await store.start_run("evaluate", {"model": "m3"})
    await store.finish_run(
        other, {"job": "another", "mean": float("nan")}
    )  # JSON as Python writes it
    await store.start_run("evaluate", {"model": "m4"})  # still running: no summary yet

    run = await store.latest_run(job_id)

    assert run is not None
    assert (run.id, run.command, run.settings) == (second, "evaluate", {"model": "m2"})
    assert run.summary == {"job": job_id, "llm_calls": 0}
    assert run.started_at <= (run.finished_at or "")
    assert await store.latest_run("no-such-job") is None


async def test_status_counts_each_jobs_items_per_state_and_the_items_done_lately(
    store: Store,
) -> None:
    first, second = await _job(store, 3), await _job(store, 2, "generate")
    await store.finish_item(first, "s0", ItemResults(report={}))
    await store.finish_item(first, "s1", ItemResults(report={}))
    await store.fail_item(second, "s0", "broken")
    await store.claim_items("a", 1, lease_seconds=HELD)  # first's s2: processing

    status = await store.status()

    assert [(j["id"], j["kind"]) for j in status["jobs"]] == [
        (first, "evaluate"),
        (second, "generate"),
    ]
    jobs = status["jobs"]
    assert [(j["queued"], j["processing"], j["done"], j["failed"]) for j in jobs] == [
        (0, 1, 2, 0),
        (1, 0, 0, 1),
    ]
    assert (status["queued"], status["processing"], status["done"], status["failed"]) == (
        1,
        1,
        2,
        1,
    )
    assert status["throughput"]["items_done_last_minute"] == 2
    assert (
        status["throughput"]["items_per_minute"] is None
        or status["throughput"]["items_per_minute"] > 0
    )


async def test_workers_are_listed_and_a_dead_one_on_this_host_is_released(store: Store) -> None:
    job_id = await _job(store, 1)
    await store.register_worker("w1", ["generator"])
    await store.put_messages([_message(job_id, "s0", "generator")])
    await store.claim_messages("w1", ["generator"], 1, lease_seconds=HELD, max_attempts=5)
    status = await store.status()
    assert [w["owner"] for w in status["daemons"]] == ["w1"]
    assert status["agents"]["generator"] == {"messages_waiting": 1, "served": True}
    assert status["waiting_for_workers"] == []
    await store.unregister_worker("w1")
    assert (await store.status())["waiting_for_workers"] == ["generator"]


async def test_pruning_deletes_what_ended_before_the_cutoff_and_keeps_unfinished_jobs(
    store: Store,
) -> None:
    import time

    done = await store.submit("evaluate", {"j": "done"}, lambda: [("a", {}), ("b", {})])
    open_job = await store.submit("evaluate", {"j": "open"}, lambda: [("c", {}), ("d", {})])
    records: dict[str, JSONObject] = {
        key: {"id": key, "question": "q", "answer": "x", "metrics": {}} for key in "abc"
    }
    for job_id, key in ((done.id, "a"), (done.id, "b"), (open_job.id, "c")):
        results = ItemResults(samples=[(records[key], "{}")], report={})
        await store.finish_item(job_id, key, results)
    await store.put_step("k", "generator", "[]")
    run_id = await store.start_run("evaluate", {})
    await store.record_call(run_id, CallStats(stage="x", requests=1), None)
    await store.finish_run(run_id, {})

    assert await store.prune(time.time() - 3600) == dict.fromkeys(
        (
            "pairs",
            "samples",
            "questions",
            "joins",
            "messages",
            "items",
            "jobs",
            "steps",
            "llm_calls",
            "runs",
        ),
        0,
    )  # nothing is an hour old
    deleted = await store.prune(time.time() + 1)
    assert (deleted["jobs"], deleted["items"], deleted["samples"]) == (1, 2, 2)
    assert (deleted["steps"], deleted["llm_calls"], deleted["runs"]) == (1, 1, 1)
    assert [r async for r in store.samples()] == [records["c"]]  # the unfinished job's, kept
    assert await store.counts() == {"queued": 1, "processing": 0, "done": 1, "failed": 0}
    await store.compact()


async def test_a_rate_bucket_starts_full_and_answers_the_wait_for_what_is_taken_beyond_it(
    store: Store,
) -> None:
    # a slow refill (one unit a second): the milliseconds between calls hardly count
    assert await store.take_rate("e:requests", 10, per_second=1.0, capacity=10) == 0.0
    assert await store.take_rate("e:requests", 3, per_second=1.0, capacity=10) == pytest.approx(
        3.0, abs=0.2
    )
    assert await store.take_rate("e:requests", 1, per_second=1.0, capacity=10) == pytest.approx(
        4.0, abs=0.2
    )
    assert await store.take_rate("other", 10, per_second=1.0, capacity=10) == 0.0  # its own


async def test_a_rate_bucket_takes_back_up_to_its_capacity_and_is_lowered_by_at_most(
    store: Store,
) -> None:
    assert await store.take_rate("k", -5, per_second=1.0, capacity=10) == 0.0  # still 10
    assert await store.take_rate("k", 10, per_second=1.0, capacity=10) == 0.0
    assert await store.take_rate("k", -4, per_second=1.0, capacity=10) == 0.0  # back to 4
    wait = await store.take_rate("k", 0, per_second=1.0, capacity=10, at_most=100)
    assert wait == 0.0  # at_most never raises the level
    assert await store.take_rate("k", 4, per_second=1.0, capacity=10) == pytest.approx(0, abs=0.2)
    # the endpoint says 2 remain: the level drops to 2, and 3 more leave a debt of 1
    assert await store.take_rate("j", 3, per_second=1.0, capacity=10, at_most=2) == pytest.approx(
        1.0, abs=0.2
    )


async def test_a_rate_bucket_refills_on_the_database_clock(store: Store) -> None:
    assert await store.take_rate("fast", 20, per_second=1000.0, capacity=10) > 0  # a debt of 10
    await anyio.sleep(0.05)  # time itself: 50 units of refill, the debt and a full bucket
    assert await store.take_rate("fast", 10, per_second=1000.0, capacity=10) == 0.0
