"""What a job is: one typed object per kind (a spec), validated once where an entry point builds it,
stored with the job's items, and read back as the same type by whichever process runs it.

A spec is everything that changes what a job's agents do (the options of its kind, its
metrics and judge files, custom prompts, the model when it is pinned), so it is also what
makes two submissions the same job: the store keys a job by its stored spec and its items.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from ragjury._json import JSONObject
from ragjury.config import EvaluationOptions, GenerationOptions
from ragjury.prompts import Prompt
from ragjury.schemas.panel import Panel
from ragjury.store.base import Job


class JobSpec(BaseModel):
    """What every kind of job keeps."""

    # what a newer ragjury added is ignored by an older one reading its jobs
    model_config = ConfigDict(frozen=True, extra="ignore")

    prompts: dict[str, str] = Field(default_factory=dict)
    """Custom prompts by name (``--prompt NAME=PATH``): their sources."""
    llm: str | None = None
    """The model's fingerprint when the job is pinned to it (``generate``, ``evaluate``);
    None for a job any worker serves with its own model (``submit``)."""
    fresh: str | None = None
    """A random token that makes the job new (``--no-cache``: do the work again)."""

    def stored(self) -> JSONObject:
        """The spec as the store keeps it (and keys the job by): what earlier versions
        stored, so their jobs are found again (a field that is None is left out, as they
        left it out; the options keep theirs)."""
        dumped = self.model_dump(mode="json")
        return {name: value for name, value in dumped.items() if value is not None}

    def custom_prompts(self, job_id: str) -> dict[str, Prompt]:
        return {
            name: Prompt(name=name, source=source, origin=f"job {job_id}")
            for name, source in self.prompts.items()
        }


def _stored_before_the_check() -> GenerationOptions:
    return GenerationOptions(answer_check=False)


class GenerationSpec(JobSpec):
    generate: GenerationOptions = Field(default_factory=_stored_before_the_check)
    """A job stored before the answerability check has no ``answer_check`` in its options
    (ragjury 0.1's none at all): it runs as it was submitted, without the check, since its
    drafted pairs in flight were never sent to that critic and waiting for its critique would
    never end. A job built now always stores it (see ``GenerationOptions``)."""

    @field_validator("generate", mode="before")
    @classmethod
    def _stored_without_the_check(
        cls, value: GenerationOptions | dict[str, JsonValue]
    ) -> GenerationOptions | dict[str, JsonValue]:
        if isinstance(value, dict) and "answer_check" not in value:
            return {**value, "answer_check": False}
        return value


class EvaluationSpec(JobSpec):
    evaluate: EvaluationOptions = Field(default_factory=EvaluationOptions)
    metrics: tuple[str, ...] = ()
    judges: tuple[dict[str, Any], ...] | None = None
    """The judge files its metrics come from, whole, so a worker needs no file
    (``ragjury.agents.custom_judge.from_stored`` makes them metrics again)."""
    panel: Panel | None = None
    """The judges each LLM-judged metric is asked of, and how many times (``--judges``,
    ``--repeats``, ``--combine``); None: the run's one model, once."""
    target: str | None = None
    """The RAG system that answers the samples without an answer (``--target``: its URL
    without a password, or ``module:function``, and the reply fields it reads when they are
    not the defaults), so another target is another job."""
    embedding: str | None = None
    """The embedding model (``--embedding-model``) when a metric asks for embeddings and it
    is not the default one, so another one is another job."""


def prompt_sources(prompts: Mapping[str, Prompt]) -> dict[str, str]:
    return {name: prompt.source for name, prompt in sorted(prompts.items())}


def spec_of(job: Job) -> GenerationSpec | EvaluationSpec:
    """The spec ``job`` was stored with, as its type."""
    if job.kind == "generate":
        return GenerationSpec.model_validate(job.options)
    return EvaluationSpec.model_validate(job.options)
