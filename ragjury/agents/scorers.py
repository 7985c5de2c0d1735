"""Scorers that need no judging call: keyword tests, embedding similarity, confidence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from ragjury.agents.base import failure_from
from ragjury.config import EvaluationOptions
from ragjury.errors import LLMError, LLMUnavailableError
from ragjury.evaluation.keywords import check_keywords
from ragjury.llm import LLM
from ragjury.llm.logprobs import perplexity
from ragjury.schemas import MetricResult, MetricScored, SampleSubmitted


class KeywordChecker:
    """must_contain / must_not_contain / must_not_start_with; no LLM."""

    role: ClassVar[str] = "keyword_checker"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, options: EvaluationOptions) -> None:
        self._case_sensitive = options.case_sensitive

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if "keywords" not in event.metrics:
            return []
        sample = event.sample
        rules = (sample.must_contain, sample.must_not_contain, sample.must_not_start_with)
        if not any(rules):
            result = MetricResult.not_applicable("the sample has no keyword expectations")
        elif sample.answer is None:
            result = MetricResult.not_applicable("the sample has no answer to check")
        else:
            checks = check_keywords(
                sample.answer,
                must_contain=sample.must_contain,
                must_not_contain=sample.must_not_contain,
                must_not_start_with=sample.must_not_start_with,
                case_sensitive=self._case_sensitive,
            )
            failed = [f"{c.type} {c.keyword!r}" for c in checks if not c.passed]
            result = MetricResult(
                outcome="scored",
                score=sum(c.passed for c in checks) / len(checks),
                passing=not failed,
                reason=("failed: " + ", ".join(failed)) if failed else "every keyword check passed",
                details={"checks": [c.model_dump() for c in checks]},
            )
        return [MetricScored(sample_id=sample.id, metric="keywords", result=result)]


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
        self._llm, self._threshold = llm, options.similarity_threshold

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if "similarity" not in event.metrics:
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
                    passing=score >= self._threshold,
                    reason=f"cosine similarity {score:.3f} to the reference "
                    f"(embeddings: {self._llm.embedding_model})",
                    details={"embedding_model": self._llm.embedding_model},
                    llm_calls=1,
                )
        return [MetricScored(sample_id=sample.id, metric="similarity", result=result)]


class ConfidenceScorer:
    """Perplexity of the answer from its token logprobs, where they are known.

    The judges' own confidence (the probability of the verdict or score they chose) is
    reported inside their metrics, because it belongs to their call.
    """

    role: ClassVar[str] = "confidence_scorer"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if "confidence" not in event.metrics:
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
        return [MetricScored(sample_id=sample.id, metric="confidence", result=result)]
