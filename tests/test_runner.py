"""The runner's workers: workers per role, and a record whose handling raises (a poison message)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from ragjury import Jury
from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.pipelines import all_roles
from ragjury.prompts import Prompt
from ragjury.runner import select_roles, workers_for
from ragjury.runner.progress import Progress
from ragjury.runner.workers import Workers
from ragjury.schemas import Document, Sample, SampleScored, SampleSubmitted
from ragjury.store import SQLiteStore

from conftest import make_settings
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

pytestmark = pytest.mark.anyio

# A user's splitter template with a bug that only one record triggers.
FRAGILE_SPLITTER = (
    "{{ '' if 1 / (0 if 'poison' in answer else 1) else '' }}" + Prompt.builtin("splitter").source
)


def test_each_role_gets_its_workers() -> None:
    settings = Settings(concurrency=6, workers={"generator": 3})
    assert workers_for("generator", settings) == 3  # --workers
    assert workers_for("verdict_judge", settings) == 6  # an LLM agent: --concurrency
    assert workers_for("collector", settings) == 1  # the others: only for old messages


def test_unknown_agents_are_refused_naming_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown agent.*judge_dredd.*verdict_judge"):
        select_roles(["verdict_judge", "judge_dredd"])
    assert select_roles(["verdict_judge", "chunker"]) == ("chunker", "verdict_judge")
    assert select_roles(None) == all_roles()


async def test_workers_for_an_unknown_agent_are_refused(tmp_path: Path) -> None:
    from ragjury.bus import MemoryBus
    from ragjury.llm import LLM

    settings = Settings(workers={"genrator": 2}, base_url="http://127.0.0.1:9/v1")
    async with SQLiteStore(":memory:") as store, LLM(settings) as llm:
        with pytest.raises(ConfigurationError, match=r"--workers names unknown agent.*genrator"):
            Workers(store, MemoryBus(), settings, llm, progress=Progress())


async def test_a_record_that_makes_an_agent_raise_fails_alone_after_bounded_deliveries(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    settings = make_settings(fake, tmp_path, max_deliveries=3)
    splitter = Prompt(name="splitter", source=FRAGILE_SPLITTER, origin="test")
    samples = [
        Sample(id=f"s{i}", question="Capital?", answer=answer, contexts=("Tokyo is the capital.",))
        for i, answer in enumerate(["Tokyo is the capital.", "poison", "Tokyo is the capital."])
    ]
    async with Jury(settings, prompts={"splitter": splitter}) as jury:
        results = await jury.evaluate(samples, metrics=["faithfulness", "keywords"])

    by_id = {r.sample.id: r for r in results}
    assert [by_id[s].metrics["faithfulness"].outcome for s in ("s0", "s2")] == ["scored"] * 2
    poisoned = by_id["s1"]["faithfulness"]
    assert poisoned.outcome == "failed"
    assert poisoned.reason is not None
    assert "statement_splitter: ZeroDivisionError" in poisoned.reason
    assert "given up after 3 deliveries" in poisoned.reason
    assert by_id["s1"]["keywords"].outcome == "failed"  # the whole sample ended failed


async def test_a_budget_counts_the_calls_other_processes_record_in_the_database(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    from ragjury.llm import LLM
    from ragjury.llm.usage import CallStats
    from ragjury.runner import Runner, submit_samples

    script_judges(fake)
    settings = make_settings(fake, tmp_path, max_tokens=1000)
    samples = [Sample(id=f"s{i}", question="Q?", answer="A.", contexts=("A.",)) for i in range(3)]
    async with SQLiteStore(tmp_path / "shared.db") as store, LLM(settings) as llm:
        job = await submit_samples(store, settings, samples, ["faithfulness"])
        runner = Runner(settings, store, llm, job_ids=[job.id])
        # another daemon on the same database spends 1,200 tokens after this one started
        other = await store.start_run("serve", {})
        await store.record_call(other, CallStats(stage="x", requests=1, prompt_tokens=1000), None)
        await store.record_call(
            other, CallStats(stage="x", requests=1, completion_tokens=200), None
        )
        await runner.run(until_done=True)

        assert runner.budget_stopped
        assert llm.budget.reason is not None
        assert "--max-tokens 1000 reached (1200 tokens used)" in llm.budget.reason
        assert await store.counts([job.id]) == {
            "queued": 3,
            "processing": 0,
            "done": 0,
            "failed": 0,
        }
        assert fake.requests == []  # this process asked nothing: the shared budget was spent


async def test_a_job_that_calls_no_llm_keeps_more_items_in_flight(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    from ragjury.llm import LLM
    from ragjury.runner import INLINE_ITEMS_IN_FLIGHT, Runner, intake_capacity, submit_samples

    settings = make_settings(fake, tmp_path)
    samples = [
        Sample(id=f"s{i}", question="Q?", answer="A.", contexts=("A.",), must_contain=("A",))
        for i in range(3)
    ]
    async with SQLiteStore(tmp_path / "shared.db") as store, LLM(settings) as llm:
        keywords = await submit_samples(store, settings, samples, ["keywords"])
        judged = await submit_samples(store, settings, samples, ["faithfulness", "keywords"])
        # keyword tests end where they start: many at once share each group commit
        only_keywords = Runner(settings, store, llm, job_ids=[keywords.id])
        assert await only_keywords.capacity() == INLINE_ITEMS_IN_FLIGHT > intake_capacity(settings)
        # an LLM in the job (or a serve of any job, or --items-in-flight): 2 x concurrency
        default = intake_capacity(settings)
        assert default == 8
        both = Runner(settings, store, llm, job_ids=[keywords.id, judged.id])
        assert await both.capacity() == default
        assert await Runner(settings, store, llm).capacity() == default
        pinned = settings.model_copy(update={"items_in_flight": 5})
        assert await Runner(pinned, store, llm, job_ids=[keywords.id]).capacity() == 5


async def test_queued_keyword_items_end_each_once_and_one_that_cannot_start_fails_alone(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    import sqlite3

    from ragjury.llm import LLM
    from ragjury.runner import run_job, submit_samples
    from ragjury.schemas import ItemFailed, JuryEvent

    # queued (as `submit` queues them for `serve`), 4 in flight: 7 samples take several claims
    settings = make_settings(fake, tmp_path, items_in_flight=4)
    samples = [
        Sample(id=f"s{i}", question="Q?", answer=f"A{i}.", must_contain=("A1",)) for i in range(7)
    ]
    path = tmp_path / "lanes.db"
    async with SQLiteStore(path) as store:
        job = await submit_samples(store, settings, samples, ["keywords"])
    with sqlite3.connect(path) as conn:  # a stored record no sample can be read from
        conn.execute("UPDATE items SET payload = '{\"id\": \"s3\"}' WHERE key = 's3'")
    seen: list[JuryEvent] = []

    async def on_event(job_id: str, event: JuryEvent) -> None:
        seen.append(event)

    async with SQLiteStore(path) as store, LLM(settings) as llm:
        run = await run_job(job, settings=settings, store=store, llm=llm, on_event=on_event)
        assert (run.counts.done, run.counts.failed, run.counts.started, run.unfinished) == (
            6,
            1,
            7,
            0,
        )
        scored = [e for e in seen if isinstance(e, SampleScored)]
        assert sorted(e.sample.id for e in scored) == ["s0", "s1", "s2", "s4", "s5", "s6"]
        assert [e.item for e in seen if isinstance(e, ItemFailed)] == ["s3"]
        assert [r["id"] async for r in store.samples([job.id])] == [
            "s0", "s1", "s2", "s4", "s5", "s6"
        ]  # fmt: skip
        passing = {e.sample.id: e.passing for e in scored}
        assert passing == {f"s{i}": i == 1 for i in (0, 1, 2, 4, 5, 6)}
        # run again: nothing is left to start, nothing is stored twice
        again = await run_job(job, settings=settings, store=store, llm=llm)
        assert (again.counts.started, again.counts.done) == (0, 0)
        assert len([r async for r in store.samples([job.id])]) == 6


async def test_a_job_that_calls_no_llm_is_judged_as_it_is_stored_and_a_bad_sample_fails_alone(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    import math
    import sqlite3

    from ragjury.llm import LLM
    from ragjury.runner import run_job, submit_samples
    from ragjury.runner.at_once import JudgeNow

    settings = make_settings(fake, tmp_path)
    samples = [
        Sample(id=f"s{i}", question="Q?", answer=f"A{i}.", must_contain=("A1",)) for i in range(5)
    ]
    # a log-probability JSON cannot hold: its stored sample cannot be read back, so it
    # cannot start (in the store's transaction or anywhere)
    samples[2] = samples[2].model_copy(update={"answer_logprobs": (math.nan,)})
    path = tmp_path / "at-once.db"
    async with SQLiteStore(path) as store, LLM(settings) as llm:
        job = await submit_samples(store, settings, samples, ["keywords"], judge_now=JudgeNow(llm))
        assert (job.created, job.size, job.ended) == (True, 5, 4)
        counts = await store.counts([job.id])
        assert counts == {"queued": 1, "processing": 0, "done": 4, "failed": 0}
        run = await run_job(job, settings=settings, store=store, llm=llm)
        assert (run.counts.started, run.counts.done, run.counts.failed) == (1, 0, 1)
        assert run.summary()["items_done_now"] == 4  # ended as they were stored, by this run
        assert [r["id"] async for r in store.samples([job.id])] == ["s0", "s1", "s3", "s4"]
        [failed] = await store.failed_items(job.id)
        assert failed["item"] == "s2"
        assert failed["error"].startswith("ValidationError: ")
        assert "answer_logprobs" in failed["error"]
        # the same samples again: the job is found, nothing is judged or stored twice
        again = await submit_samples(
            store, settings, samples, ["keywords"], judge_now=JudgeNow(llm)
        )
        assert (again.id, again.created, again.ended) == (job.id, False, 0)
        # a job with an LLM metric is queued, for the workers
        judged = await submit_samples(
            store, settings, samples[:2], ["faithfulness", "keywords"], judge_now=JudgeNow(llm)
        )
        assert (judged.created, judged.ended) == (True, 0)
        assert (await store.counts([judged.id]))["queued"] == 2
    with sqlite3.connect(path) as conn:
        claims = dict(conn.execute("SELECT key, attempts FROM items").fetchall())
    assert claims == {"s0": 0, "s1": 0, "s2": 1, "s3": 0, "s4": 0}  # only s2 was claimed
    # a stop asked for while it is stored (a signal): the rest stored queued, unjudged
    asked: list[bool] = []

    def stopped() -> bool:
        asked.append(True)
        return len(asked) > 3

    async with SQLiteStore(tmp_path / "stopped.db") as store, LLM(settings) as llm:
        now = JudgeNow(llm, stopped=stopped)
        job = await submit_samples(store, settings, samples[3:], ["keywords"], judge_now=now)
        assert (job.size, job.ended) == (2, 2)
        job = await submit_samples(store, settings, samples[:2], ["keywords"], judge_now=now)
        assert (job.size, job.ended) == (2, 1)
        assert (await store.counts([job.id]))["queued"] == 1


async def test_a_step_refuses_an_event_its_agent_does_not_consume() -> None:
    from ragjury.agents.base import Step
    from ragjury.agents.sample_aggregator import SampleAggregator
    from ragjury.schemas import DocumentSubmitted

    class Recorder(SampleAggregator):
        def __init__(self) -> None:
            self.seen: list[object] = []

        async def handle(self, event: object) -> list[SampleScored]:
            self.seen.append(event)
            return []

    agent = Recorder()
    step = Step(agent)
    assert {t.__name__ for t in step.consumes} == {"SampleSubmitted", "MetricScored"}
    sample = SampleSubmitted(sample=Sample(id="s", question="Q?", answer="A."), metrics=())
    assert await step.handle(sample) == []
    with pytest.raises(ConfigurationError, match=r"sample_aggregator was sent a document_"):
        await step.handle(DocumentSubmitted(document=Document(id="d", text="x", source="x")))
    assert agent.seen == [sample]  # the wrong event never reached the agent


async def test_joins_held_stay_in_memory_and_keep_each_parts_first_value(tmp_path: Path) -> None:
    from ragjury.agents.joins import JoinState, current_item, joins_held

    async with SQLiteStore(tmp_path / "joins.db") as store:
        joins = JoinState(store, "job")
        token = current_item.set("s0")
        try:
            with joins_held() as held:
                assert await joins.add({"s:a": "1"}, "s:") == {"s:a": "1"}
                # as in the store: a part already there keeps its first value
                second = await joins.add({"s:a": "2", "s:b": "3", "x:c": "4"}, "s:")
                assert second == {"s:a": "1", "s:b": "3"}
            assert held == {("job", "s0"): {"s:a": "1", "s:b": "3", "x:c": "4"}}
            assert await store.join("job", "s0", {}, "s:") == {}  # nothing was stored
            # outside, joins are the store's again
            assert await joins.add({"s:a": "9"}, "s:") == {"s:a": "9"}
            assert await store.join("job", "s0", {}, "s:") == {"s:a": "9"}
        finally:
            current_item.reset(token)


async def test_a_join_completed_by_the_state_seen_with_its_message_stores_nothing(
    tmp_path: Path,
) -> None:
    from ragjury.agents.joins import JoinState, current_item, seen_joins

    def has_b(state: Mapping[str, object]) -> bool:
        return "s:b" in state and "s:a" in state

    part_a = Sample(id="a", question="Q?", answer="A.")
    part_b = Sample(id="b", question="Q2?", answer="B.")
    async with SQLiteStore(tmp_path / "joins.db") as store:
        joins = JoinState(store, "job")
        item = current_item.set("s0")
        try:
            stored_a = await joins.add_models({"s:a": part_a}, "s:", has_b)
            assert stored_a == {"s:a": part_a}  # incomplete: stored, as without a seen state
            a_text = part_a.model_dump_json()
            # the state seen with the message completes the join: returned as seen with the
            # new part (a part seen keeps its value), and nothing is stored
            seen = seen_joins.set(("job", "s0", json.dumps({"s:a": a_text, "x:c": "1"})))
            try:
                done = await joins.add_models({"s:b": part_b, "s:a": part_b}, "s:", has_b)
            finally:
                seen_joins.reset(seen)
            assert done == {"s:a": a_text, "s:b": part_b}
            assert await store.join("job", "s0", {}, "s:") == {"s:a": a_text}
            # a state seen for another item, or one the new parts do not complete, is not
            # trusted: the join goes to the store, whose state is the whole truth
            for other in (("job", "s9", "{}"), ("other", "s0", "{}"), ("job", "s0", "{}")):
                seen = seen_joins.set((other[0], other[1], json.dumps({"s:z": "1"})))
                try:
                    state = await joins.add_models({"s:b": part_b}, "s:", has_b)
                finally:
                    seen_joins.reset(seen)
                assert state == {"s:a": a_text, "s:b": part_b}
            assert set(await store.join("job", "s0", {}, "s:")) == {"s:a", "s:b"}
        finally:
            current_item.reset(item)
