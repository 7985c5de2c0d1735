"""Scorers that need no judging call: keyword tests, embedding similarity, confidence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from ragjury._json import JSONData
from ragjury.agents.base import Step, failure_from
from ragjury.errors import LLMError, LLMUnavailableError
from ragjury.evaluation.keywords import KeywordTally, keyword_outcomes
from ragjury.llm.logprobs import perplexity
from ragjury.llm.tokens import estimate_tokens
from ragjury.metrics.declaration import (
    COSINE,
    FRACTION,
    PERPLEXITY,
    BuildContext,
    EstimateContext,
    Metric,
)
from ragjury.schemas import KeywordCheck, MetricResult, MetricScored, SampleSubmitted
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM


class KeywordChecker:
    """must_contain / must_not_contain / must_not_start_with; no LLM."""

    role: ClassVar[str] = "keyword_checker"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, options: EvaluationOptions) -> None:
        self._case_sensitive = options.case_sensitive

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if KEYWORDS.name not in event.metrics:
            return []
        sample = event.sample
        rules = (sample.must_contain, sample.must_not_contain, sample.must_not_start_with)
        if not any(rules):
            result = MetricResult.not_applicable("the sample has no keyword expectations")
        elif sample.answer is None:
            result = MetricResult.not_applicable("the sample has no answer to check")
        else:
            checks = keyword_outcomes(
                sample.answer,
                must_contain=sample.must_contain,
                must_not_contain=sample.must_not_contain,
                must_not_start_with=sample.must_not_start_with,
                case_sensitive=self._case_sensitive,
            )
            failed = [f"{rule} {keyword!r}" for rule, keyword, passed in checks if not passed]
            result = MetricResult(
                outcome="scored",
                score=sum(passed for _, _, passed in checks) / len(checks),
                passing=not failed,
                reason=("failed: " + ", ".join(failed)) if failed else "every keyword check passed",
                # as KeywordCheck.model_dump() gives them
                details={
                    "checks": [
                        {"type": rule, "keyword": keyword, "passed": passed}
                        for rule, keyword, passed in checks
                    ]
                },
            )
        return [MetricScored(sample_id=sample.id, metric=KEYWORDS.name, result=result)]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    if norm == 0:
        raise ValueError("cosine similarity is undefined for a zero vector")
    value = sum(x * y for x, y in zip(a, b, strict=True)) / norm
    return max(-1.0, min(1.0, value))  # rounding can take it a hair past 1


class SimilarityScorer:
    """Cosine similarity of the answer's and the reference's embeddings."""

    role: ClassVar[str] = "similarity_scorer"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, options: EvaluationOptions) -> None:
        self._llm, self._options = llm, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if SIMILARITY.name not in event.metrics:
            return []
        sample = event.sample
        if not sample.reference:
            result = MetricResult.not_applicable("the sample has no reference answer")
        elif not sample.answer:
            result = MetricResult.not_applicable("the sample has no answer to compare")
        else:
            try:
                answer, reference = await self._llm.embed(
                    [sample.answer, sample.reference], stage=self.role
                )
                score = cosine(answer, reference)
            except LLMUnavailableError as exc:
                result = MetricResult.not_applicable(f"unavailable: {exc}")
            except LLMError as exc:
                result = MetricResult.failed(failure_from(self.role, exc), exc.attempts)
            except ValueError as exc:
                result = MetricResult.not_applicable(
                    f"the endpoint's embeddings are unusable: {exc}"
                )
            else:
                result = MetricResult(
                    outcome="scored",
                    score=score,
                    passing=SIMILARITY.passes(score, self._options),
                    reason=f"cosine similarity {score:.3f} to the reference "
                    f"(embeddings: {self._llm.embedding_model})",
                    details={"embedding_model": self._llm.embedding_model},
                    llm_calls=1,
                )
        return [MetricScored(sample_id=sample.id, metric=SIMILARITY.name, result=result)]


class ConfidenceScorer:
    """Perplexity of the answer from its token logprobs, where they are known.

    The judges' own confidence (the probability of the verdict or score they chose) is
    reported inside their metrics, because it belongs to their call.
    """

    role: ClassVar[str] = "confidence_scorer"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if CONFIDENCE.name not in event.metrics:
            return []
        sample = event.sample
        if not sample.answer_logprobs:
            result = MetricResult.not_applicable(
                "unavailable: the answer came without token logprobs (give answer_logprobs in "
                "the sample, or a --target that returns logprobs)"
            )
        else:
            value = perplexity(sample.answer_logprobs)
            result = MetricResult(
                outcome="scored",
                score=value,
                reason=f"answer perplexity {value:.3f} over {len(sample.answer_logprobs)} tokens",
                details={
                    "answer_perplexity": value,
                    "mean_token_probability": sum(math.exp(x) for x in sample.answer_logprobs)
                    / len(sample.answer_logprobs),
                },
            )
        return [MetricScored(sample_id=sample.id, metric=CONFIDENCE.name, result=result)]


class KeywordsResult(MetricResult):
    """``score`` = the share of checks passed; ``checks`` one per keyword rule."""

    checks: tuple[KeywordCheck, ...] = ()


class SimilarityResult(MetricResult):
    """``score`` = cosine similarity of the answer's and the reference's embeddings."""


class ConfidenceResult(MetricResult):
    """``score`` = the answer's perplexity; informational, it has no pass mark."""

    answer_perplexity: float | None = None
    mean_token_probability: float | None = None


class _KeywordFigures:
    """The failure rate of each keyword rule over a run (the summary's ``failure_rates``)."""

    def __init__(self) -> None:
        self._tally = KeywordTally()

    def add(self, result: MetricResult) -> None:
        if result.outcome == "scored":  # the checks as stored: plain values of KeywordCheck's
            for check in result.details["checks"]:
                self._tally.count(check["type"], check["passed"])

    def figures(self) -> dict[str, JSONData]:
        return {"failure_rates": self._tally.rates()}


_KEYWORD_FIELDS = ("must_contain", "must_not_contain", "must_not_start_with")


def _similarity_scorer(c: BuildContext) -> Step:
    return Step(
        SimilarityScorer(c.llm, c.options),
        fingerprint(c.settings.base_url, c.settings.embedding_model, c.threshold("similarity")),
    )


def _estimate_similarity(e: EstimateContext) -> None:
    if e.answer and e.sample.reference:
        tokens = estimate_tokens(e.answer) + estimate_tokens(e.sample.reference)
        e.add("similarity_scorer", e.embedding_model, tokens, 0, 1)


KEYWORDS = Metric(
    name="keywords",
    description="Hand-written tests of the answer: must contain, must not contain, must not "
    "start with (no LLM).",
    scale=FRACTION,
    threshold=None,
    inputs=("answer",),
    optional=_KEYWORD_FIELDS,
    agents={"keyword_checker": lambda c: Step(KeywordChecker(c.options))},
    llm=False,
    pass_rule="every check passes",
    result_type=KeywordsResult,
    tally=_KeywordFigures,
    by_default=lambda filled: bool(filled & set(_KEYWORD_FIELDS)),
    order=40,
)

SIMILARITY = Metric(
    name="similarity",
    description="Cosine similarity of the answer's and the reference's embeddings.",
    scale=COSINE,
    threshold=0.8,
    inputs=("answer", "reference"),
    agents={"similarity_scorer": _similarity_scorer},
    llm=True,
    embeddings=True,
    calls="1 embeddings request",
    estimate=_estimate_similarity,
    result_type=SimilarityResult,
    order=50,
)

CONFIDENCE = Metric(
    name="confidence",
    description="Perplexity of the answer from its token logprobs (1 is a certain model); "
    "informational. Also asks the judges for logprobs, to report the probability of each "
    "score and verdict they chose; unavailable, not an error, where there are none.",
    scale=PERPLEXITY,
    threshold=None,
    inputs=("answer_logprobs",),
    agents={"confidence_scorer": lambda c: Step(ConfidenceScorer())},
    llm=False,
    result_type=ConfidenceResult,
    logprobs=True,
    order=60,
)
