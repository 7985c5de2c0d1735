"""The pipelines, one per job kind, and the one place that builds a job's pipeline."""

from __future__ import annotations

import functools

import anyio

from ragjury.config import Settings
from ragjury.evaluation.targets import Target
from ragjury.llm import LLM
from ragjury.pipelines.base import Pipeline, Step, check_workers
from ragjury.pipelines.evaluation import EvaluationPipeline
from ragjury.pipelines.generation import GenerationPipeline
from ragjury.store.base import Job, Store

PIPELINES: dict[str, type[GenerationPipeline] | type[EvaluationPipeline]] = {
    "generate": GenerationPipeline,
    "evaluate": EvaluationPipeline,
}


@functools.cache
def all_roles() -> tuple[str, ...]:
    """Every agent role, in pipeline order: the consumer groups of the bus (the metrics'
    agents included, those of installed plugins too)."""
    return (*GenerationPipeline.known_roles(), *EvaluationPipeline.known_roles())


@functools.cache
def llm_roles() -> frozenset[str]:
    return GenerationPipeline.llm_roles() | EvaluationPipeline.llm_roles()


def build_pipeline(
    job: Job,
    settings: Settings,
    llm: LLM,
    store: Store,
    *,
    target: Target | None = None,
    target_limiter: anyio.CapacityLimiter | None = None,
) -> Pipeline:
    """The pipeline of ``job``, built from its stored options (a RAG target, when given, is
    what an evaluation asks for a sample's answer first)."""
    if PIPELINES[job.kind] is EvaluationPipeline:
        return EvaluationPipeline(
            job, settings, llm, store, target=target, target_limiter=target_limiter
        )
    return PIPELINES[job.kind](job, settings, llm, store)


__all__ = [
    "PIPELINES",
    "EvaluationPipeline",
    "GenerationPipeline",
    "Pipeline",
    "Step",
    "all_roles",
    "build_pipeline",
    "check_workers",
    "llm_roles",
]
