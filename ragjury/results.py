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
from typing import Any

from ragjury.agents.answer_relevance import AnswerRelevanceResult
from ragjury.agents.context_judges import (
    ContextPrecisionResult,
    ContextRelevanceResult,
    ContextVerdictRecord,
)
from ragjury.agents.judges import CorrectnessResult, RubricGrade, RubricResult
from ragjury.agents.retrieval import RetrievalResult
from ragjury.agents.scorers import ConfidenceResult, KeywordsResult, SimilarityResult
from ragjury.agents.verdict_judge import ContextRecallResult, FaithfulnessResult
from ragjury.errors import MetricNotRequested
from ragjury.metrics import registry
from ragjury.schemas import (
    DocumentJudged,
    ItemFailed,
    MetricResult,
    PairJudged,
    Sample,
    SampleScored,
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


def typed_result(metric: str, result: MetricResult) -> MetricResult:
    """``result`` as the metric's declared result type, its documented details as typed
    fields (a metric not installed here keeps the plain :class:`MetricResult`)."""
    declared = registry().get(metric)
    cls = declared.result_type if declared is not None else MetricResult
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
    did not pass or any judgement failed, and None when a metric was not applicable and none
    failed (``reason`` says which); a scored metric without a pass mark (confidence) does
    not count.
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
            raise MetricNotRequested(self._missing(name)) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._typed)

    def __len__(self) -> int:
        return len(self._typed)

    def _missing(self, name: str) -> str:
        return (
            f"{name} was not requested for sample {self.sample.id!r}; it has "
            f"{', '.join(self._typed) or 'no metrics'}. Pass metrics=[..., {name!r}] to ask for it"
        )

    def __getattr__(self, name: str) -> Any:
        """``result.faithfulness``: a metric's typed result, by its name (any metric the
        sample was judged on, built-in, plugin or judge file)."""
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._typed[name]
        except KeyError:
            raise MetricNotRequested(self._missing(name)) from None

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
