"""The runtime: N concurrent workers per agent, an agent that raises, and stopping cleanly."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from ragjury.agents import Aggregator, SampleAggregator
from ragjury.bus import MemoryBus
from ragjury.errors import ConfigurationError
from ragjury.runtime import AgentSpec, Runtime, agent_specs
from ragjury.schemas import (
    CritiqueIssued,
    CritiqueResult,
    Document,
    DocumentSubmitted,
    Envelope,
    MetricResult,
    MetricScored,
    PairDrafted,
    QAPair,
    Sample,
    SampleSubmitted,
    StepFailed,
)

pytestmark = pytest.mark.anyio


def submitted(n: int) -> Envelope:
    doc = Document(id=f"d{n}", source=f"d{n}", text="x" if n != 2 else "boom")
    return Envelope(correlation_id=doc.id, payload=DocumentSubmitted(document=doc))


class Gate:
    """An agent whose handlers wait until ``width`` of them are inside at once."""

    role: ClassVar[str] = "gate"
    consumes: ClassVar[tuple[type[Any], ...]] = (DocumentSubmitted,)

    def __init__(self, width: int) -> None:
        self.inside = self.most = self.handled = 0
        self._width = width
        self._full = anyio.Event()

    async def handle(self, event: DocumentSubmitted) -> list[Any]:
        self.inside += 1
        self.most = max(self.most, self.inside)
        if self.inside == self._width:
            self._full.set()
        await self._full.wait()
        self.inside -= 1
        self.handled += 1
        return []


class Fragile:
    """Raises on the document whose text is 'boom'."""

    role: ClassVar[str] = "fragile"
    consumes: ClassVar[tuple[type[Any], ...]] = (DocumentSubmitted,)

    def __init__(self) -> None:
        self.handled: list[str] = []

    async def handle(self, event: DocumentSubmitted) -> list[Any]:
        if event.document.text == "boom":
            raise RuntimeError("bad input")
        self.handled.append(event.document.id)
        return []


class Sink:
    role: ClassVar[str] = "sink"
    consumes: ClassVar[tuple[type[Any], ...]] = (StepFailed,)

    def __init__(self) -> None:
        self.failures: list[StepFailed] = []

    async def handle(self, event: StepFailed) -> list[Any]:
        self.failures.append(event)
        return []


async def test_an_agent_gets_as_many_concurrent_workers_as_asked() -> None:
    bus = MemoryBus()
    gate = Gate(width=3)
    runtime = Runtime(bus, [AgentSpec(gate, workers=3)])

    with anyio.fail_after(5):  # three handlers must be inside together, or this hangs
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            for n in (0, 1, 3):
                await bus.publish(submitted(n))
            await bus.wait_idle()
            await bus.aclose()

    assert gate.most == 3
    assert gate.handled == 3


async def test_an_agent_that_raises_becomes_step_failed_and_the_run_goes_on() -> None:
    bus = MemoryBus()
    fragile, sink = Fragile(), Sink()
    runtime = Runtime(bus, [AgentSpec(fragile), AgentSpec(sink)])

    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        for n in range(5):
            await bus.publish(submitted(n))
        await bus.wait_idle()
        await bus.aclose()

    assert fragile.handled == ["d0", "d1", "d3", "d4"]
    [failure] = sink.failures
    assert failure.agent == "fragile"
    assert failure.input_kind == "document_submitted"
    assert "RuntimeError: bad input" in failure.error.message


async def test_cancelling_the_caller_stops_the_workers_cleanly() -> None:
    bus = MemoryBus()
    gate = Gate(width=99)  # never opens: the handler is stuck mid-step
    runtime = Runtime(bus, [AgentSpec(gate, workers=2)])

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            await bus.publish(submitted(0))
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()

    assert gate.handled == 0
    assert bus.pending == 0  # the interrupted delivery was released, not left pending


def test_stateful_agents_refuse_more_than_one_worker() -> None:
    with pytest.raises(ConfigurationError, match="at most 1 worker"):
        AgentSpec(Aggregator(min_score=4), workers=2)


def test_workers_for_an_unknown_agent_are_rejected_naming_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown agent.*generatr.*known agents: gate"):
        agent_specs([(Gate(1), 1)], {"generatr": 4})


PAIR = QAPair(id="p", question="q", answer="a", context="c", source="s", chunk_id="s::0")


async def test_a_pair_missing_a_critique_is_flushed_as_failed_not_lost() -> None:
    aggregator = Aggregator(min_score=4)
    await aggregator.handle(PairDrafted(pair=PAIR))
    critique = CritiqueResult(rating=5, rationale="ok")
    await aggregator.handle(
        CritiqueIssued(pair_id="p", criterion="groundedness", critique=critique)
    )

    [judged] = aggregator.flush_incomplete()

    assert judged.outcome == "failed"
    assert judged.critiques == {"groundedness": critique}
    assert judged.error is not None
    assert "relevance critic never answered" in judged.error.message
    assert aggregator.flush_incomplete() == []


async def test_a_sample_missing_a_metric_is_flushed_with_that_metric_failed() -> None:
    aggregator = SampleAggregator()
    sample = Sample(id="s", question="q", answer="a")
    await aggregator.handle(SampleSubmitted(sample=sample, metrics=("faithfulness", "keywords")))
    done = MetricResult.not_applicable("no keyword expectations")
    await aggregator.handle(MetricScored(sample_id="s", metric="keywords", result=done))

    [scored] = aggregator.flush_incomplete()

    assert scored.metrics["keywords"] == done
    assert scored.metrics["faithfulness"].outcome == "failed"
    assert "no faithfulness result arrived" in (scored.metrics["faithfulness"].reason or "")
