"""Answer evaluation: samples in, per-metric judgements out, in input order.

Samples without an answer are first put to the user's RAG system when a target is given.
Each sample is published with the metrics asked of it; every metric agent answers each
sample with exactly one MetricScored (scored, not_applicable or failed); the SampleAggregator
joins them into a SampleScored, which the collector writes in input order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import structlog

from ragjury.agents import (
    Agent,
    ConfidenceScorer,
    CorrectnessJudge,
    KeywordChecker,
    RubricJudge,
    SampleAggregator,
    SimilarityScorer,
    StatementSplitter,
    VerdictJudge,
)
from ragjury.bus import MemoryBus
from ragjury.config import Settings
from ragjury.evaluation.targets import Target, TargetError
from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.runtime import AgentSpec, Runtime, agent_specs, run_to_completion
from ragjury.schemas import (
    Envelope,
    Failure,
    MetricName,
    MetricResult,
    Sample,
    SampleScored,
    SampleSubmitted,
    StepFailed,
)

log = structlog.get_logger("ragjury.evaluation")

PROMPT_NAMES = ("splitter", "verdict", "correctness", "rubric")


def choose_metrics(
    samples: Sequence[Sample], requested: Sequence[MetricName] | None
) -> tuple[MetricName, ...]:
    """The metrics of a run: as requested, or faithfulness plus what the data allows."""
    if requested:
        return tuple(dict.fromkeys(requested))
    chosen: list[MetricName] = ["faithfulness"]
    if any(s.reference for s in samples):
        chosen.append("correctness")
    if any(s.must_contain or s.must_not_contain or s.must_not_start_with for s in samples):
        chosen.append("keywords")
    return tuple(chosen)


def result_record(scored: SampleScored) -> dict[str, Any]:
    """The exported form of a judged sample (the README documents these fields)."""
    metrics: dict[str, Any] = {}
    for name, result in scored.metrics.items():
        entry: dict[str, Any] = {
            "outcome": result.outcome,
            "score": result.score,
            "passing": result.passing,
            "reason": result.reason,
            **result.details,
            "llm_calls": result.llm_calls,
        }
        if result.error is not None:
            entry["error"] = result.error.model_dump()
        metrics[name] = entry
    sample = scored.sample
    return {
        "id": sample.id,
        "question": sample.question,
        "answer": sample.answer,
        "metrics": metrics,
    }


@dataclass
class EvaluationProgress:
    samples: int = 0
    submitted: int = 0
    answered_by_target: int = 0
    done: int = 0
    steps_failed: int = 0
    results: list[SampleScored] = field(default_factory=list)


Sink = Callable[[SampleScored], Awaitable[None]]


class _Collector:
    """Writes judged samples in input order, however they arrive."""

    role: ClassVar[str] = "collector"
    consumes: ClassVar[tuple[type[Any], ...]] = (SampleScored, StepFailed)
    max_workers: ClassVar[int] = 1

    def __init__(
        self,
        order: dict[str, int],
        sink: Sink,
        progress: EvaluationProgress,
        on_progress: Callable[[EvaluationProgress], None] | None,
    ) -> None:
        self._order, self._sink, self._progress = order, sink, progress
        self._on_progress = on_progress
        self._waiting: dict[int, SampleScored] = {}
        self._next = 0
        # The collector's worker and the target feeders (a target that failed) both accept.
        self._lock = anyio.Lock()

    async def handle(self, event: Any) -> list[Any]:
        if isinstance(event, StepFailed):
            self._progress.steps_failed += 1
            return []
        await self.accept(event)
        return []

    async def accept(self, scored: SampleScored) -> None:
        async with self._lock:
            self._waiting[self._order[scored.sample.id]] = scored
            while self._next in self._waiting:
                ready = self._waiting.pop(self._next)
                self._next += 1
                self._progress.results.append(ready)
                self._progress.done += 1
                await self._sink(ready)
        if self._on_progress is not None:
            self._on_progress(self._progress)


def build_agents(
    llm: LLM, settings: Settings, prompts: dict[str, Prompt] | None = None
) -> list[AgentSpec]:
    options = settings.evaluate
    prompts = prompts or {}

    def prompt(name: str) -> Prompt:
        return prompts.get(name) or Prompt.builtin(name)

    n = settings.concurrency
    agents: list[tuple[Agent, int]] = [
        (StatementSplitter(llm, prompt("splitter")), n),
        (VerdictJudge(llm, prompt("verdict"), options), n),
        (CorrectnessJudge(llm, prompt("correctness"), options), n),
        (RubricJudge(llm, prompt("rubric"), options), n),
        (KeywordChecker(options), 1),
        (SimilarityScorer(llm, options), n),
        (ConfidenceScorer(), 1),
        (SampleAggregator(), 1),
    ]
    return agent_specs(agents, settings.workers)


async def run_evaluation(
    samples: Sequence[Sample],
    *,
    settings: Settings,
    llm: LLM,
    sink: Sink,
    metrics: Sequence[MetricName],
    target: Target | None = None,
    prompts: dict[str, Prompt] | None = None,
    on_progress: Callable[[EvaluationProgress], None] | None = None,
) -> EvaluationProgress:
    """Judge ``samples``; hand each result to ``sink`` in input order; return the tallies."""
    progress = EvaluationProgress(samples=len(samples))
    order = {sample.id: index for index, sample in enumerate(samples)}
    bus = MemoryBus(settings.bus_buffer)
    specs = build_agents(llm, settings, prompts)
    collector = _Collector(order, sink, progress, on_progress)
    runtime = Runtime(bus, [*specs, AgentSpec(collector)])
    aggregator = next(s.agent for s in specs if isinstance(s.agent, SampleAggregator))
    assert isinstance(aggregator, SampleAggregator)
    limiter = anyio.CapacityLimiter(settings.concurrency)

    async def submit(sample: Sample) -> None:
        if sample.answer is None and target is not None:
            async with limiter:
                try:
                    reply = await target.answer(sample.question)
                except TargetError as exc:
                    await collector.accept(_target_failed(sample, metrics, str(exc)))
                    return
            progress.answered_by_target += 1
            sample = sample.model_copy(
                update={
                    "answer": reply.answer,
                    "contexts": sample.contexts or reply.contexts,
                    "answer_logprobs": reply.logprobs,
                }
            )
        event = SampleSubmitted(sample=sample, metrics=tuple(metrics))
        await bus.publish(Envelope(correlation_id=sample.id, payload=event))

    async def feed() -> None:
        async with anyio.create_task_group() as feeders:
            for sample in samples:
                if llm.budget.exhausted:
                    break  # --max-tokens / --max-cost: take no new sample; finish the rest
                progress.submitted += 1
                if target is not None and sample.answer is None:
                    feeders.start_soon(submit, sample)
                else:
                    await submit(sample)

    async def drain() -> None:
        for scored in aggregator.flush_incomplete():
            await collector.accept(scored)

    await run_to_completion(runtime, llm, feed=feed, drain=drain)
    return progress


def _target_failed(sample: Sample, metrics: Sequence[MetricName], message: str) -> SampleScored:
    error = Failure(stage="target", attempts=1, message=message)
    return SampleScored(sample=sample, metrics={m: MetricResult.failed(error) for m in metrics})
