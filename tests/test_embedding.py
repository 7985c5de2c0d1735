"""The embedding API inside a running application: submit, events(), serve in a task group."""

from __future__ import annotations

import sqlite3
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_daemon import script_slowly
from test_generate import corpus

from ragjury import Jury
from ragjury.schemas import PairJudged, Sample, SampleScored

from conftest import make_settings, script_happy_path
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

pytestmark = pytest.mark.anyio


def _states(db: str | Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT state, COUNT(*) FROM items GROUP BY state").fetchall())


async def test_events_follow_submitted_documents_while_the_app_does_other_work(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_slowly(fake, 0.05)
    settings = make_settings(fake, tmp_path)
    ticks = 0
    seen: list[Any] = []

    async def other_work() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    async with Jury(settings) as jury, anyio.create_task_group() as app:
        app.start_soon(other_work)
        await jury.submit_documents([corpus(tmp_path)])
        async for event in jury.events():
            seen.append(event)
        app.cancel_scope.cancel()

    judged = [e for e in seen if isinstance(e, PairJudged)]
    assert len(judged) == 3
    assert {e.outcome for e in judged} == {"kept"}
    assert ticks > 10  # the application's own task kept running throughout
    assert _states(settings.db) == {"done": 3}


async def test_serve_runs_inside_the_apps_task_group_and_picks_up_new_work(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    settings = make_settings(fake, tmp_path)
    samples = [
        Sample(
            id=f"s{i}",
            question="Capital of Japan?",
            answer="Tokyo is the capital of Japan.",
            contexts=("Tokyo is the capital of Japan.",),
        )
        for i in range(4)
    ]
    scored: list[SampleScored] = []
    async with Jury(settings) as jury, anyio.create_task_group() as app:
        await app.start(jury.serve)
        await jury.submit_samples(samples[:2])
        async with aclosing(jury.events()) as events:
            async for event in events:
                if isinstance(event, SampleScored):
                    scored.append(event)
                    if len(scored) == 2:
                        await jury.submit_samples(samples[2:])  # submitted while serving
                    if len(scored) == 4:
                        break
        app.cancel_scope.cancel()

    assert sorted(s.sample.id for s in scored) == ["s0", "s1", "s2", "s3"]
    assert all(s.metrics["faithfulness"].outcome == "scored" for s in scored)
    assert _states(settings.db) == {"done": 4}


async def test_cancelling_the_callers_scope_stops_serving_and_requeues_the_work(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_slowly(fake, 30.0)
    settings = make_settings(fake, tmp_path)
    async with Jury(settings) as jury:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as app:
                await app.start(jury.serve)
                await jury.submit_documents([corpus(tmp_path)])
                while fake.in_flight < 1:  # noqa: ASYNC110 - the fake's state, in its thread
                    await anyio.sleep(0.02)
                scope.cancel()
        assert scope.cancelled_caught

    # nothing lost, nothing left claimed: the started items' messages are back on the bus
    assert sum(_states(settings.db).values()) == 3
    assert "done" not in _states(settings.db)
    with sqlite3.connect(settings.db) as conn:
        (held,) = conn.execute("SELECT COUNT(*) FROM messages WHERE lease_owner IS NOT NULL")
        (items,) = conn.execute("SELECT COUNT(*) FROM items WHERE lease_owner IS NOT NULL")
    assert held == items == (0,)


async def test_jury_evaluate_still_works_without_a_database(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    script_judges(fake)
    settings = make_settings(fake, tmp_path)
    async with Jury(settings) as jury:
        result = await jury.evaluate_one(
            question="Capital of Japan?",
            answer="Tokyo is the capital of Japan.",
            contexts=["Tokyo is the capital of Japan."],
        )
    assert result["faithfulness"].outcome == "scored"
    assert not await anyio.Path(settings.db).exists()
