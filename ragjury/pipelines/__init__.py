"""The pipelines, one per job kind, and the one place that builds a job's pipeline."""

from __future__ import annotations

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
ROLES: tuple[str, ...] = (*GenerationPipeline.roles, *EvaluationPipeline.roles)
"""Every agent role, in pipeline order: the consumer groups of the bus."""
LLM_ROLES: frozenset[str] = GenerationPipeline.llm_roles | EvaluationPipeline.llm_roles


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
    "LLM_ROLES",
    "PIPELINES",
    "ROLES",
    "EvaluationPipeline",
    "GenerationPipeline",
    "Pipeline",
    "Step",
    "build_pipeline",
    "check_workers",
]
