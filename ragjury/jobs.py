"""One job's pipeline: its agents on their own bus, processing one item at a time per call.

A job is a batch of documents (``generate``) or samples (``evaluate``) with its options. A
:class:`JobPipeline` builds that job's agents with those options, runs them on a bounded
:class:`MemoryBus`, and processes items on request: :meth:`JobPipeline.process` publishes an
item, waits until every message it caused is handled (``bus.wait_settled``), and returns the
item's results. Many items are in flight at once; each is finished on its own, so a daemon can
store each item's results the moment they are complete.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel

from ragjury.agents import Aggregator, Deduplicator, SampleAggregator
from ragjury.bus import MemoryBus, Subscription
from ragjury.config import EvaluationOptions, GenerationOptions, Settings
from ragjury.evaluation.pipeline import build_agents as evaluation_agents
from ragjury.evaluation.pipeline import result_record
from ragjury.evaluation.targets import Target, TargetError
from ragjury.generation import build_agents as generation_agents
from ragjury.llm import LLM
from ragjury.output import pair_record
from ragjury.prompts import Prompt
from ragjury.runtime import AgentSpec, Runtime
from ragjury.schemas import (
    ChunkFailed,
    ChunkReady,
    Document,
    DocumentSubmitted,
    DuplicateDropped,
    Envelope,
    Failure,
    MetricName,
    MetricResult,
    PairDrafted,
    PairJudged,
    QuestionsDrafted,
    Sample,
    SampleScored,
    SampleSubmitted,
    StepFailed,
    kind_of,
)
from ragjury.store.cache import StepCache
from ragjury.store.queue import Item, ItemResults, Job, JobKind

EventListener = Callable[[str, Any], Awaitable[None]]
"""Called with (job id, event) for result events: as they happen (progress displays), or once
the item's results are stored (:class:`~ragjury.daemon.Daemon`'s ``on_event``)."""

_GENERATION_RESULTS: tuple[type[Any], ...] = (
    ChunkReady,
    ChunkFailed,
    QuestionsDrafted,
    DuplicateDropped,
    PairDrafted,
    PairJudged,
    StepFailed,
)
_EVALUATION_RESULTS: tuple[type[Any], ...] = (SampleScored, StepFailed)


def generation_options(settings: Settings, prompts: Mapping[str, Prompt]) -> dict[str, Any]:
    """What a generation job stores with its items: the options and any custom prompts."""
    return {
        "generate": settings.generate.model_dump(mode="json"),
        "prompts": {name: prompt.source for name, prompt in sorted(prompts.items())},
    }


def evaluation_options(
    settings: Settings, metrics: tuple[MetricName, ...], prompts: Mapping[str, Prompt]
) -> dict[str, Any]:
    """What an evaluation job stores with its items: options, metrics and custom prompts."""
    return {
        "evaluate": settings.evaluate.model_dump(mode="json"),
        "metrics": list(metrics),
        "prompts": {name: prompt.source for name, prompt in sorted(prompts.items())},
    }


def document_item(document: Document) -> tuple[str, dict[str, Any]]:
    return document.id, document.model_dump(mode="json")


def sample_item(sample: Sample) -> tuple[str, dict[str, Any]]:
    return sample.id, sample.model_dump(mode="json")


@dataclass
class _Tracked:
    events: list[Any] = field(default_factory=list)


class JobPipeline:
    """The agents of one job, ready to process its items concurrently."""

    role: ClassVar[str] = "collector"

    def __init__(
        self,
        job: Job,
        settings: Settings,
        llm: LLM,
        *,
        cache: StepCache | None = None,
        on_event: EventListener | None = None,
        target: Target | None = None,
        target_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        self.job = job
        self.kind: JobKind = job.kind
        prompts = {
            name: Prompt(name=name, source=source, origin=f"job {job.id}")
            for name, source in job.options.get("prompts", {}).items()
        }
        self.metrics: tuple[MetricName, ...] = tuple(job.options.get("metrics", ()))
        self._on_event = on_event
        self._target = target
        self._target_limiter = target_limiter or anyio.CapacityLimiter(settings.concurrency)
        if self.kind == "generate":
            options = GenerationOptions.model_validate(job.options["generate"])
            self.settings = settings.model_copy(update={"generate": options})
            specs = generation_agents(llm, self.settings, prompts)
            results = _GENERATION_RESULTS
        else:
            evaluation = EvaluationOptions.model_validate(job.options["evaluate"])
            self.settings = settings.model_copy(update={"evaluate": evaluation})
            specs = evaluation_agents(llm, self.settings, prompts)
            results = _EVALUATION_RESULTS
        self.bus = MemoryBus(self.settings.bus_buffer)
        self.runtime = Runtime(self.bus, specs, cache=cache)
        self._subscriptions: list[Subscription] = [
            self.bus.subscribe(kind_of(kind), self.role) for kind in results
        ]
        self._tracked: dict[str, _Tracked] = {}
        self.deduplicator = _agent(specs, Deduplicator)
        self._aggregator = _agent(specs, Aggregator)
        self._sample_aggregator = _agent(specs, SampleAggregator)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the agents and the result collector until cancelled."""
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.runtime.run)
                for subscription in self._subscriptions:
                    tg.start_soon(self._collect, subscription)
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await self.bus.aclose()

    async def process(self, item: Item) -> ItemResults:
        """Push one item through the pipeline and return its results once all are in."""
        results = await self._process(item)
        return dataclasses.replace(results, transient_failures=transient_failures(results.events))

    async def _process(self, item: Item) -> ItemResults:
        correlation = item.key
        tracked = self._tracked[correlation] = _Tracked()
        try:
            if self.kind == "generate":
                document = Document.model_validate(item.payload)
                submitted = DocumentSubmitted(document=document)
                await self.bus.publish(Envelope(correlation_id=correlation, payload=submitted))
                await self.bus.wait_settled(correlation)
                return await self._generation_results(tracked)
            sample = Sample.model_validate(item.payload)
            scored, answered = await self._submit_sample(sample, correlation)
            if scored is None:
                await self.bus.wait_settled(correlation)
                scored = self._sample_result(tracked, sample.id)
            return ItemResults(
                samples=[(result_record(scored), scored.model_dump_json())],
                events=(scored,),
                report={
                    "steps_failed": _count(tracked, StepFailed),
                    "answered_by_target": answered,
                },
            )
        finally:
            self._tracked.pop(correlation, None)

    async def _submit_sample(
        self, sample: Sample, correlation: str
    ) -> tuple[SampleScored | None, bool]:
        """Publish the sample (after asking the RAG target, if it has no answer). Returns the
        result at once when the target failed, and whether the target answered."""
        answered = False
        if sample.answer is None and self._target is not None:
            async with self._target_limiter:
                try:
                    reply = await self._target.answer(sample.question)
                except TargetError as exc:
                    error = Failure(stage="target", attempts=1, message=str(exc))
                    scored = SampleScored(
                        sample=sample, metrics={m: MetricResult.failed(error) for m in self.metrics}
                    )
                    await self._emit(scored)
                    return scored, False
            answered = True
            sample = sample.model_copy(
                update={
                    "answer": reply.answer,
                    "contexts": sample.contexts or reply.contexts,
                    "answer_logprobs": reply.logprobs,
                }
            )
        event = SampleSubmitted(sample=sample, metrics=self.metrics)
        await self.bus.publish(Envelope(correlation_id=correlation, payload=event))
        return None, answered

    def _sample_result(self, tracked: _Tracked, sample_id: str) -> SampleScored:
        for event in tracked.events:
            if isinstance(event, SampleScored):
                return event
        assert self._sample_aggregator is not None
        flushed: list[SampleScored] = self._sample_aggregator.flush_incomplete({sample_id})
        if flushed:
            return flushed[0]
        raise RuntimeError(f"sample {sample_id!r} produced no result (an agent crashed early)")

    async def _generation_results(self, tracked: _Tracked) -> ItemResults:
        chunks: dict[str, int] = {}
        order: dict[str, tuple[int, int]] = {}
        judged: list[PairJudged] = []
        drafted: set[str] = set()
        report: dict[str, Any] = {
            "chunks": 0,
            "chunks_failed": 0,
            "pairs_drafted": 0,
            "duplicates_dropped": 0,
            "steps_failed": 0,
            "failed_chunks": [],
        }
        for event in tracked.events:
            if isinstance(event, ChunkReady):
                report["chunks"] += 1
                chunks[event.chunk.id] = event.chunk.index
            elif isinstance(event, QuestionsDrafted):
                report["pairs_drafted"] += len(event.pairs)
                for index, pair in enumerate(event.pairs):
                    order[pair.id] = (event.chunk.index, index)
            elif isinstance(event, ChunkFailed):
                report["chunks_failed"] += 1
                report["failed_chunks"].append(
                    {"chunk_id": event.chunk.id, "source": event.chunk.source}
                    | event.error.model_dump()
                )
            elif isinstance(event, DuplicateDropped):
                report["duplicates_dropped"] += 1
            elif isinstance(event, PairDrafted):
                drafted.add(event.pair.id)
            elif isinstance(event, PairJudged):
                judged.append(event)
            elif isinstance(event, StepFailed):
                report["steps_failed"] += 1
        if self._aggregator is not None:
            for flushed in self._aggregator.flush_incomplete(drafted):
                judged.append(flushed)
                await self._emit(flushed)
        judged.sort(key=lambda j: order.get(j.pair.id, (len(chunks), 0)))
        events = tuple(e for e in tracked.events if not isinstance(e, PairJudged))
        return ItemResults(
            pairs=[pair_record(j) for j in judged], report=report, events=(*events, *judged)
        )

    async def _collect(self, subscription: Subscription) -> None:
        async for delivery in subscription.deliveries():
            try:
                tracked = self._tracked.get(delivery.envelope.correlation_id)
                if tracked is not None:
                    tracked.events.append(delivery.envelope.payload)
                await self._emit(delivery.envelope.payload)
            finally:
                await self.bus.ack(delivery)

    async def _emit(self, event: Any) -> None:
        if self._on_event is not None:
            await self._on_event(self.job.id, event)


def _agent(specs: list[AgentSpec], kind: type[Any]) -> Any:
    return next((spec.agent for spec in specs if isinstance(spec.agent, kind)), None)


def transient_failures(events: Iterable[Any]) -> int:
    """How many :class:`Failure` records with ``transient`` set the events carry."""
    count, stack = 0, list(events)
    while stack:
        value = stack.pop()
        if isinstance(value, Failure):
            count += value.transient
        elif isinstance(value, BaseModel):
            stack.extend(getattr(value, name) for name in type(value).model_fields)
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
    return count


def _count(tracked: _Tracked, kind: type[Any]) -> int:
    return sum(isinstance(event, kind) for event in tracked.events)


def new_owner() -> str:
    """A daemon's name in the leases it holds."""
    return uuid.uuid4().hex[:12]
