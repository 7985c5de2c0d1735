"""Running a batch as a job: what ``generate``, ``evaluate`` and the :class:`Jury` share.

A batch of documents or samples is submitted to the store's queue as a job (the same batch
with the same options and model finds the same job again), then a :class:`Daemon` limited to
that job works until nothing of it is left. A re-run of a finished job therefore costs no LLM
call, and a re-run after a crash picks up where the crash left off: finished items are kept,
and the finished steps of unfinished items come from the step cache.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from ragjury.config import Settings
from ragjury.daemon import Daemon, DaemonCounts
from ragjury.evaluation.targets import Target
from ragjury.generation import GenerationCounts
from ragjury.jobs import (
    EventListener,
    JobPipeline,
    evaluation_options,
    generation_options,
    sample_item,
)
from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.schemas import Document, MetricName, Sample, SampleScored
from ragjury.store import Store
from ragjury.store.cache import llm_fingerprint
from ragjury.store.queue import Item, Job, Queue


@dataclass(frozen=True)
class JobRun:
    """How running a job went in this process."""

    job: Job
    daemon: DaemonCounts
    unfinished: int
    """Items of the job still queued or processing (the run was stopped before the end)."""

    def summary(self) -> dict[str, Any]:
        """The job's lines in a command's ``--summary``."""
        return {
            "job": self.job.id,
            "resumed": not self.job.created,
            "items_done_now": self.daemon.done,
            "items_failed": self.daemon.failed,
            "items_unfinished": self.unfinished,
        }


async def submit_documents(
    store: Store,
    settings: Settings,
    documents: Sequence[Document] | Callable[[], Iterable[Document]],
    prompts: Mapping[str, Prompt] | None = None,
    *,
    pin_model: bool = True,
) -> Job:
    """Queue ``documents`` for generation with ``settings.generate``. ``documents`` may be a
    function returning a fresh lazy iterator (``ragjury.ingest.iter_documents``), so that a
    large input is never held in memory. With ``pin_model`` (the ``generate`` command) the
    model is part of the job, so another model is another job; without it (``submit``)
    whichever daemon serves the queue uses its own model."""
    options = _pinned(generation_options(settings, prompts or {}), settings, pin_model)
    make = documents if callable(documents) else (lambda: documents)

    def items() -> Iterator[tuple[str, Document]]:
        return ((document.id, document) for document in make())

    return await Queue(store).submit("generate", options, items)


async def submit_samples(
    store: Store,
    settings: Settings,
    samples: Sequence[Sample],
    metrics: tuple[MetricName, ...],
    prompts: Mapping[str, Prompt] | None = None,
    *,
    pin_model: bool = True,
) -> Job:
    """Queue ``samples`` for evaluation with ``settings.evaluate`` and ``metrics``."""
    options = _pinned(evaluation_options(settings, metrics, prompts or {}), settings, pin_model)
    return await Queue(store).submit("evaluate", options, [sample_item(s) for s in samples])


def _pinned(options: dict[str, Any], settings: Settings, pin_model: bool) -> dict[str, Any]:
    if pin_model:
        options["llm"] = llm_fingerprint(settings)
    if not settings.cache:
        # --no-cache: do the work again, so a new job rather than the finished one
        options["fresh"] = uuid.uuid4().hex
    return options


async def run_job(
    job: Job,
    *,
    settings: Settings,
    store: Store,
    llm: LLM,
    on_progress: EventListener | None = None,
    target: Target | None = None,
    stop: anyio.Event | None = None,
) -> JobRun:
    """Work on ``job`` until none of its items is left, or ``stop`` is set (then in-flight
    items get the grace period and the rest stays queued)."""
    daemon = Daemon(settings, store, llm, job_ids=[job.id], on_progress=on_progress, target=target)
    counts = await daemon.run(until_empty=True, stop=stop)
    return JobRun(job, counts, await daemon.queue.unfinished([job.id]))


async def generation_counts(store: Store, job_id: str) -> GenerationCounts:
    """What the store holds of a generation job: finished items' reports and pair outcomes."""
    queue = Queue(store)
    counts = GenerationCounts()
    for report in await queue.reports(job_id):
        counts.add_report(report)
    for state, n in await store.fetchall(
        "SELECT outcome, COUNT(*) FROM pairs WHERE job_id = ? GROUP BY outcome", (job_id,)
    ):
        setattr(counts, state, int(n))
    return counts


async def scored_samples(store: Store, job_id: str) -> list[SampleScored]:
    """A finished evaluation job's judged samples, in input order."""
    return [SampleScored.model_validate_json(text) for text in await Queue(store).scored(job_id)]


async def evaluate_in_memory(
    samples: Sequence[Sample],
    *,
    settings: Settings,
    llm: LLM,
    metrics: tuple[MetricName, ...],
    prompts: Mapping[str, Prompt] | None = None,
    target: Target | None = None,
) -> list[SampleScored]:
    """Judge ``samples`` without a store (``Jury.evaluate``); results in input order."""
    job = Job(
        id=uuid.uuid4().hex[:12],
        kind="evaluate",
        options=evaluation_options(settings, metrics, prompts or {}),
    )
    pipeline = JobPipeline(job, settings, llm, target=target)
    results: list[Any] = [None] * len(samples)
    limiter = anyio.CapacityLimiter(settings.items_in_flight or max(4, 2 * settings.concurrency))

    async def judge(position: int, sample: Sample) -> None:
        async with limiter:
            if llm.budget.exhausted:
                return  # --max-tokens / --max-cost: no new sample
            item = Item(
                id=position,
                job_id=job.id,
                key=sample.id,
                position=position,
                payload=sample.model_dump(mode="json"),
                attempts=1,
            )
            outcome = await pipeline.process(item)
            results[position] = SampleScored.model_validate_json(outcome.samples[0][1])

    async with anyio.create_task_group() as tg:
        await tg.start(pipeline.run)
        async with anyio.create_task_group() as judges:
            for position, sample in enumerate(samples):
                judges.start_soon(judge, position, sample)
        tg.cancel_scope.cancel()
    return [result for result in results if result is not None]
