"""What ``Jury.evaluate`` returns: a sample's verdict and its metrics, with typed details.

Each metric's result is a :class:`~ragjury.schemas.MetricResult` (outcome, score, passing,
reason, error) of a subclass that names the metric's details as typed fields, so
``result.faithfulness.statements`` is a tuple of
:class:`~ragjury.schemas.StatementVerdict` rather than ``details["statements"]``. When the
metric did not score (``failed`` or ``not_applicable``) the fields are empty (``()`` or
``None``) and ``reason`` says why; ``details`` keeps the raw dict as it was exported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ragjury.schemas import (
    DocumentJudged,
    ItemFailed,
    KeywordCheck,
    MetricResult,
    PairJudged,
    Sample,
    SampleScored,
    StatementVerdict,
    sample_verdict,
)

__all__ = [
    "AnswerRelevanceResult",
    "ConfidenceResult",
    "ContextPrecisionResult",
    "ContextRecallResult",
    "ContextRelevanceResult",
    "ContextVerdictRecord",
    "CorrectnessResult",
    "EvaluationResult",
    "FaithfulnessResult",
    "KeywordsResult",
    "RetrievalResult",
    "RubricGrade",
    "RubricResult",
    "SimilarityResult",
    "is_result_event",
    "typed_result",
]

RESULT_EVENTS = (PairJudged, DocumentJudged, SampleScored, ItemFailed)


def is_result_event(event: object) -> bool:
    """Whether ``Jury.events()`` yields ``event`` by default: a pair's or a sample's result,
    or a failure; not the pipeline's internal steps (ChunkReady, PairDrafted, ...)."""
    return isinstance(event, RESULT_EVENTS)


class FaithfulnessResult(MetricResult):
    """``score`` = supported / statements; ``statements`` each with its verdict."""

    statements: tuple[StatementVerdict, ...] = ()


class CorrectnessResult(MetricResult):
    """``score`` 1-5 against the reference; the judge's ``reasoning``."""

    reasoning: str | None = None
    confidence: float | None = None


class RubricGrade(BaseModel):
    """One rubric criterion: 1-5 (5 is best), why, and the judge's probability of it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: int
    reasoning: str
    confidence: float | None = None


class RubricResult(MetricResult):
    """``score`` = the mean of the four grades; passing when each reaches the threshold."""

    toxicity: RubricGrade | None = None
    faithfulness: RubricGrade | None = None
    helpfulness: RubricGrade | None = None
    relevance: RubricGrade | None = None


class KeywordsResult(MetricResult):
    """``score`` = the share of checks passed; ``checks`` one per keyword rule."""

    checks: tuple[KeywordCheck, ...] = ()


class SimilarityResult(MetricResult):
    """``score`` = cosine similarity of the answer's and the reference's embeddings."""


class ConfidenceResult(MetricResult):
    """``score`` = the answer's perplexity; informational, it has no pass mark."""

    answer_perplexity: float | None = None
    mean_token_probability: float | None = None


class RetrievalResult(MetricResult):
    """``score`` = the reciprocal rank of the first relevant context; ``at_k`` the figures
    (hit, mrr, recall, precision, ndcg) at each k; ``references`` and ``retrieved`` the
    ranks (see :mod:`ragjury.evaluation.retrieval`)."""

    mrr: float | None = None
    first_relevant_rank: int | None = None
    at_k: dict[str, dict[str, float]] = Field(default_factory=dict)
    references: tuple[dict[str, Any], ...] = ()
    retrieved: tuple[dict[str, Any], ...] = ()


class ContextVerdictRecord(BaseModel):
    """One retrieved context's verdict: its index, its id when known, relevant or not, why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    id: str | None = None
    relevant: bool
    reason: str


class ContextRelevanceResult(MetricResult):
    """``score`` = relevant contexts / retrieved contexts."""

    contexts: tuple[ContextVerdictRecord, ...] = ()


class ContextPrecisionResult(MetricResult):
    """``score`` = average precision of the useful contexts; ``against`` says whether they
    were judged for the reference answer or the answer given."""

    against: str | None = None
    contexts: tuple[ContextVerdictRecord, ...] = ()


class ContextRecallResult(MetricResult):
    """``score`` = the reference answer's statements the contexts support / its statements."""

    statements: tuple[StatementVerdict, ...] = ()


class AnswerRelevanceResult(MetricResult):
    """``score`` 1-5: does the answer address the question; a refusal is 1."""

    reasoning: str | None = None
    refusal: bool | None = None


_TYPES: dict[str, type[MetricResult]] = {
    "faithfulness": FaithfulnessResult,
    "correctness": CorrectnessResult,
    "rubric": RubricResult,
    "keywords": KeywordsResult,
    "similarity": SimilarityResult,
    "confidence": ConfidenceResult,
    "retrieval": RetrievalResult,
    "context_relevance": ContextRelevanceResult,
    "context_precision": ContextPrecisionResult,
    "context_recall": ContextRecallResult,
    "answer_relevance": AnswerRelevanceResult,
}

_R = TypeVar("_R", bound=MetricResult)


def typed_result(metric: str, result: MetricResult) -> MetricResult:
    """``result`` as the metric's own subclass, its documented details as typed fields."""
    cls = _TYPES.get(metric, MetricResult)
    if type(result) is cls:
        return result
    typed = set(cls.model_fields) - set(MetricResult.model_fields)
    extra = {k: v for k, v in result.details.items() if k in typed and v is not None}
    return cls.model_validate({**dict(result), **extra})


# Order of feedback lines: what did not pass, then what could not be judged, then the rest.
_RANK = {"did not pass": 0, "failed": 1, "not applicable": 2, "passed": 3, "scored": 4}


def _status(result: MetricResult) -> str:
    if result.outcome == "failed":
        return "failed"
    if result.outcome == "not_applicable":
        return "not applicable"
    if result.passing is None:
        return "scored"
    return "passed" if result.passing else "did not pass"


@dataclass(frozen=True)
class EvaluationResult(Mapping[str, MetricResult]):
    """One sample's judgement: a mapping of metric name to typed result, and the verdict.

    ``passing`` is True only if every requested metric passed, False if any scored metric
    did not pass, and None when a metric failed or was not applicable (``reason`` says
    which); a scored metric without a pass mark (confidence) does not count.
    """

    sample: Sample
    metrics: Mapping[str, MetricResult]
    _typed: dict[str, MetricResult] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        typed = {name: typed_result(name, m) for name, m in self.metrics.items()}
        object.__setattr__(self, "_typed", typed)

    @classmethod
    def from_scored(cls, scored: SampleScored) -> EvaluationResult:
        return cls(sample=scored.sample, metrics={str(k): m for k, m in scored.metrics.items()})

    def __getitem__(self, name: str) -> MetricResult:
        try:
            return self._typed[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._typed)

    def __len__(self) -> int:
        return len(self._typed)

    def _missing(self, name: str) -> str:
        return (
            f"{name} was not requested for sample {self.sample.id!r}; it has "
            f"{', '.join(self._typed) or 'no metrics'}. Pass metrics=[..., {name!r}] to ask for it"
        )

    def _get(self, name: str, cls: type[_R]) -> _R:
        result = self[name]
        assert isinstance(result, cls)
        return result

    @property
    def faithfulness(self) -> FaithfulnessResult:
        return self._get("faithfulness", FaithfulnessResult)

    @property
    def correctness(self) -> CorrectnessResult:
        return self._get("correctness", CorrectnessResult)

    @property
    def rubric(self) -> RubricResult:
        return self._get("rubric", RubricResult)

    @property
    def keywords(self) -> KeywordsResult:
        return self._get("keywords", KeywordsResult)

    @property
    def similarity(self) -> SimilarityResult:
        return self._get("similarity", SimilarityResult)

    @property
    def confidence(self) -> ConfidenceResult:
        return self._get("confidence", ConfidenceResult)

    @property
    def retrieval(self) -> RetrievalResult:
        return self._get("retrieval", RetrievalResult)

    @property
    def context_relevance(self) -> ContextRelevanceResult:
        return self._get("context_relevance", ContextRelevanceResult)

    @property
    def context_precision(self) -> ContextPrecisionResult:
        return self._get("context_precision", ContextPrecisionResult)

    @property
    def context_recall(self) -> ContextRecallResult:
        return self._get("context_recall", ContextRecallResult)

    @property
    def answer_relevance(self) -> AnswerRelevanceResult:
        return self._get("answer_relevance", AnswerRelevanceResult)

    @property
    def passing(self) -> bool | None:
        """True only if every requested metric passed; see the class docstring."""
        return sample_verdict(self._typed)[0]

    @property
    def reason(self) -> str:
        """Why ``passing`` is what it is."""
        return sample_verdict(self._typed)[1]

    @property
    def feedback(self) -> str:
        """One line per metric, those that did not pass or failed first."""
        lines = sorted(
            ((_status(m), name, m) for name, m in self._typed.items()),
            key=lambda line: _RANK[line[0]],
        )
        return "\n".join(
            f"{name}: {status}"
            + (f", score {m.score:g}" if m.score is not None else "")
            + (f" ({m.reason})" if m.reason else "")
            for status, name, m in lines
        )
