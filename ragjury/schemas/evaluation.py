"""Events and records of the answer-evaluation pipeline."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ragjury.schemas.records import Failure, Sample

MetricName = Literal[
    "faithfulness", "correctness", "rubric", "keywords", "similarity", "confidence"
]
METRICS: tuple[MetricName, ...] = (
    "faithfulness",
    "correctness",
    "rubric",
    "keywords",
    "similarity",
    "confidence",
)
MetricOutcome = Literal["scored", "not_applicable", "failed"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MetricResult(_Frozen):
    """One metric's judgement of one sample. A failure is never a number."""

    outcome: MetricOutcome
    score: float | None = None
    passing: bool | None = None
    reason: str | None = Field(default=None, description="Why, in a sentence, for people.")
    details: dict[str, Any] = Field(default_factory=dict)
    error: Failure | None = None
    llm_calls: int = 0

    @classmethod
    def not_applicable(cls, reason: str, **details: Any) -> MetricResult:
        return cls(outcome="not_applicable", reason=reason, details=details)

    @classmethod
    def failed(cls, error: Failure, llm_calls: int = 0) -> MetricResult:
        return cls(outcome="failed", reason=error.message, error=error, llm_calls=llm_calls)


class StatementVerdict(_Frozen):
    """Whether the contexts support one statement of an answer, and why."""

    text: str
    supported: bool
    reason: str
    evidence: str | None = None
    confidence: float | None = None


class SampleSubmitted(_Frozen):
    """A sample entered the evaluation pipeline, with the metrics asked of it."""

    kind: Literal["sample_submitted"] = "sample_submitted"
    sample: Sample
    metrics: tuple[MetricName, ...]
    answered_by_target: bool = False


class StatementsSplit(_Frozen):
    """The answer of a sample, split once into atomic statements (or why it could not be)."""

    kind: Literal["statements_split"] = "statements_split"
    sample: Sample
    statements: tuple[str, ...] = ()
    llm_calls: int = 0
    error: Failure | None = None


class MetricScored(_Frozen):
    """One metric's result for one sample."""

    kind: Literal["metric_scored"] = "metric_scored"
    sample_id: str
    metric: MetricName
    result: MetricResult


class SampleScored(_Frozen):
    """Every requested metric of a sample has a result."""

    kind: Literal["sample_scored"] = "sample_scored"
    sample: Sample
    metrics: dict[MetricName, MetricResult]
    answered_by_target: bool = False
