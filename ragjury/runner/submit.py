"""Submitting a batch as a job: what every entry point shares.

A batch of documents or samples is submitted to the store as a job, keyed by its typed spec
(:mod:`ragjury.job_spec`) and its items, so the same batch with the same options and model
finds the same job again; then a :class:`~ragjury.runner.Runner` limited to that job works
until nothing of it is left. A re-run of a finished job therefore costs no LLM call, and a
re-run after a crash picks up where the crash left off: finished items are kept, messages in
flight come back, and finished steps come from the step cache.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from ragjury.config import Settings
from ragjury.evaluation.inputs import SampleFile
from ragjury.job_spec import JobSpec
from ragjury.metrics import Metric, registry
from ragjury.pipelines import EvaluationPipeline, GenerationPipeline, build_pipeline
from ragjury.prompts import Prompt
from ragjury.runner.at_once import JudgeNow, ends_at_once
from ragjury.schemas import Document, Sample, SampleScored
from ragjury.schemas.panel import Panel
from ragjury.store import Store
from ragjury.store.base import ItemsFactory, Job
from ragjury.store.cache import llm_fingerprint

SpecT = TypeVar("SpecT", bound=JobSpec)


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
    whichever worker serves the queue uses its own model."""
    spec = _pinned(GenerationPipeline.spec(settings, prompts or {}), settings, pin_model)
    make = documents if callable(documents) else (lambda: documents)

    def items() -> Iterator[tuple[str, Document]]:
        return (GenerationPipeline.item(document) for document in make())

    return await store.submit("generate", spec.stored(), items)


async def submit_samples(
    store: Store,
    settings: Settings,
    samples: Iterable[Sample],
    metrics: Sequence[str],
    prompts: Mapping[str, Prompt] | None = None,
    *,
    pin_model: bool = True,
    judges: Sequence[Metric] = (),
    target: str | None = None,
    panel: Panel | None = None,
    judge_now: JudgeNow | None = None,
) -> Job:
    """Queue ``samples`` for evaluation with ``settings.evaluate`` and ``metrics``. They may
    be read more than once (to key the job, then to store it): a :class:`~ragjury.evaluation.
    inputs.SampleFile` gives its samples' JSON as its first pass kept it, or reads its file
    again each time, so a large input is never held in memory; a one-shot iterator is taken
    into a list first. ``target`` names the RAG system that
    answers the samples without an answer: part of the job, so another one is another job.

    ``judge_now``: given by the run that works the job in this process at once
    (``evaluate``, ``Jury.evaluate``; never with a RAG target). Then a new job that calls no
    LLM is judged as it is stored: each sample ends there (:mod:`ragjury.runner.at_once`),
    and :attr:`Job.ended` counts them."""
    spec = _pinned(
        EvaluationPipeline.spec(settings, metrics, prompts or {}, judges, target, panel),
        settings,
        pin_model,
    )
    options = spec.stored()
    now = None
    if judge_now is not None and panel is None and not registry(judges).needs_llm(metrics):
        job = Job(id="", kind="evaluate", options=options)
        now = ends_at_once(build_pipeline(job, settings, judge_now.llm, store), judge_now)
    again = list(samples) if isinstance(samples, Iterator) else samples
    items: ItemsFactory = (
        again.encoded  # the samples' JSON as the file's first pass made it
        if isinstance(again, SampleFile)
        else lambda: (EvaluationPipeline.item(s) for s in again)
    )
    return await store.submit(
        "evaluate",
        options,
        items,
        ends=None if now is None else now.end,
        told=None if now is None else now.told,
    )


def _pinned(spec: SpecT, settings: Settings, pin_model: bool) -> SpecT:
    return spec.model_copy(
        update={
            "llm": llm_fingerprint(settings) if pin_model else None,
            # --no-cache: do the work again, so a new job rather than the finished one
            "fresh": None if settings.cache else uuid.uuid4().hex,
        }
    )


async def scored_samples(store: Store, job_id: str) -> list[SampleScored]:
    """A finished evaluation job's judged samples, in input order."""
    return [SampleScored.model_validate_json(text) async for text in store.scored(job_id)]
