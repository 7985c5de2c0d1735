"""Events and records of the answer-evaluation pipeline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, computed_field, model_validator

from ragjury._json import JSONData
from ragjury.schemas.records import Failure, Sample

MetricName = str
"""A metric's name: one a declaration gives (``ragjury metrics`` lists them)."""
MetricChoice = str
"""What ``--metrics`` takes: a metric's name, or a group's (``rag_triad``)."""
MetricOutcome = Literal["scored", "not_applicable", "failed"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


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
    def not_applicable(cls, reason: str, **details: JSONData) -> MetricResult:
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
    metrics: tuple[str, ...]
    answered_by_target: bool = False


class StatementsSplit(_Frozen):
    """The answer of a sample (for faithfulness) or its reference (for context_recall), split
    once into atomic statements to judge against the contexts."""

    kind: Literal["statements_split"] = "statements_split"
    sample: Sample
    metric: str = "faithfulness"
    """The metric the statements are judged for (messages queued by versions that had only
    faithfulness carry none)."""
    statements: tuple[str, ...] = ()
    llm_calls: int = 0
    error: Failure | None = None


class MetricScored(_Frozen):
    """One metric's result for one sample."""

    kind: Literal["metric_scored"] = "metric_scored"
    sample_id: str
    metric: str
    result: MetricResult


def sample_verdict(metrics: Mapping[str, MetricResult]) -> tuple[bool | None, str]:
    """Whether a sample passed every requested metric, and why (a pure function of them).

    ``False`` when any scored metric did not pass or any judgement failed (a sample is never
    passed on the metrics that happened to work); else ``None`` when a metric was not
    applicable (it could not be judged, so the sample is neither passed nor failed); else
    ``True`` when every metric with a pass mark passed. A scored metric without a pass mark
    (``confidence``) is informational and does not count; with only such metrics the
    verdict is ``None``.
    """
    below = [name for name, m in metrics.items() if m.outcome == "scored" and m.passing is False]
    failed = [
        f"{name} failed" + (f" ({m.reason})" if m.reason else "")
        for name, m in metrics.items()
        if m.outcome == "failed"
    ]
    if below or failed:
        parts = (["did not pass: " + ", ".join(below)] if below else []) + (
            ["not judged: " + "; ".join(failed)] if failed else []
        )
        return False, "; ".join(parts)
    unjudged = [
        f"{name} {m.outcome}" + (f" ({m.reason})" if m.reason else "")
        for name, m in metrics.items()
        if m.outcome != "scored"
    ]
    if unjudged:
        return None, "not judged: " + "; ".join(unjudged)
    if not any(m.passing for m in metrics.values()):
        return None, "no requested metric has a pass mark (" + ", ".join(metrics) + ")"
    return True, "every requested metric passed"


class SampleScored(_Frozen):
    """Every requested metric of a sample has a result; ``passing`` is the verdict over them."""

    kind: Literal["sample_scored"] = "sample_scored"
    sample: Sample
    metrics: dict[str, MetricResult]
    answered_by_target: bool = False

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        """``passing`` and ``reason`` are serialised but always derived from the metrics."""
        if isinstance(data, dict) and ("passing" in data or "reason" in data):
            return {k: v for k, v in data.items() if k not in ("passing", "reason")}
        return data

    _verdict: tuple[bool | None, str] | None = PrivateAttr(default=None)
    """:func:`sample_verdict` of the metrics, worked out once: a sample's record and its
    stored JSON each read ``passing`` and ``reason``."""

    @model_validator(mode="after")
    def _judged(self) -> Self:
        self._verdict = sample_verdict(self.metrics)
        return self

    def model_copy(
        self, *, update: Mapping[str, JSONData | BaseModel] | None = None, deep: bool = False
    ) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        copied._verdict = sample_verdict(copied.metrics)  # new metrics, a new verdict
        return copied

    def _verdict_now(self) -> tuple[bool | None, str]:
        """The verdict (worked out here for a model made without validation). Read from the
        model's private values directly: ``self._verdict`` is found only after the usual
        attribute look-up fails, a few microseconds each of the four reads a sample has."""
        private = self.__pydantic_private__
        verdict = None if private is None else private.get("_verdict")
        return sample_verdict(self.metrics) if verdict is None else verdict

    @computed_field  # type: ignore[prop-decorator]  # mypy does not know stacked properties
    @property
    def passing(self) -> bool | None:
        """True only if every requested metric passed (see :func:`sample_verdict`)."""
        return self._verdict_now()[0]

    @computed_field  # type: ignore[prop-decorator]  # mypy does not know stacked properties
    @property
    def reason(self) -> str:
        """Why ``passing`` is what it is: the metrics that did not pass or were not judged."""
        return self._verdict_now()[1]


class _Identified(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    id: str


class ScoredFigures(BaseModel):
    """What a run's summary tallies of a stored :class:`SampleScored`: its metrics' results
    and its sample's id. Read from the stored JSON without the sample's texts (its answer
    and contexts are skipped by the parser, not built), at a summary's end over every
    sample of the job."""

    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    sample: _Identified
    metrics: dict[str, MetricResult]
    answered_by_target: bool = False
