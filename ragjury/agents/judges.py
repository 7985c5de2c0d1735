"""Single-call LLM judges of a whole answer: correctness against a reference, and a rubric."""

from __future__ import annotations

from collections.abc import Iterable
from statistics import mean
from typing import ClassVar

from ragjury.agents.base import failure_from
from ragjury.config import EvaluationOptions
from ragjury.errors import LLMError
from ragjury.llm import LLM
from ragjury.llm.logprobs import located_probabilities, value_probabilities
from ragjury.prompts import Prompt
from ragjury.schemas import (
    CorrectnessGrade,
    MetricResult,
    MetricScored,
    RubricGrades,
    SampleSubmitted,
)


class CorrectnessJudge:
    """Reasoning first, then a 1-5 score against the reference answer."""

    role: ClassVar[str] = "correctness_judge"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if "correctness" not in event.metrics:
            return []
        sample = event.sample
        result = await self._grade(sample.question, sample.answer, sample.reference)
        return [MetricScored(sample_id=sample.id, metric="correctness", result=result)]

    async def _grade(
        self, question: str, answer: str | None, reference: str | None
    ) -> MetricResult:
        if not reference:
            return MetricResult.not_applicable("the sample has no reference answer")
        if not answer:
            return MetricResult.not_applicable("the sample has no answer to grade")
        messages = self._prompt.render(question=question, answer=answer, reference=reference)
        try:
            grade, stats = await self._llm.structured_call(
                CorrectnessGrade, messages, stage=self.role
            )
        except LLMError as exc:
            return MetricResult.failed(failure_from(self.role, exc), exc.attempts)
        found = value_probabilities(stats.last_raw_output or "", stats.logprobs or [], "score")
        return MetricResult(
            outcome="scored",
            score=grade.score,
            passing=grade.score >= self._options.correctness_threshold,
            reason=grade.reasoning,
            details={"reasoning": grade.reasoning, "confidence": found[0] if found else None},
            llm_calls=stats.requests,
        )


class RubricJudge:
    """Toxicity, faithfulness, helpfulness and relevance, 1-5 each, in one call."""

    role: ClassVar[str] = "rubric_judge"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if "rubric" not in event.metrics:
            return []
        sample = event.sample
        if not sample.answer:
            result = MetricResult.not_applicable("the sample has no answer to grade")
            return [MetricScored(sample_id=sample.id, metric="rubric", result=result)]
        messages = self._prompt.render(
            question=sample.question, answer=sample.answer, contexts=list(sample.contexts)
        )
        try:
            grades, stats = await self._llm.structured_call(RubricGrades, messages, stage=self.role)
        except LLMError as exc:
            result = MetricResult.failed(failure_from(self.role, exc), exc.attempts)
            return [MetricScored(sample_id=sample.id, metric="rubric", result=result)]
        items = {
            "toxicity": grades.toxicity,
            "faithfulness": grades.faithfulness,
            "helpfulness": grades.helpfulness,
            "relevance": grades.relevance,
        }
        confidences = _per_criterion(stats.last_raw_output or "", stats.logprobs or [], items)
        threshold = self._options.rubric_threshold
        low = [name for name, grade in items.items() if grade.score < threshold]
        result = MetricResult(
            outcome="scored",
            score=mean(g.score for g in items.values()),
            passing=not low,
            reason=f"below {threshold}: {', '.join(low)}" if low else "every criterion passed",
            details={
                name: {"score": g.score, "reasoning": g.reasoning, "confidence": p}
                for (name, g), p in zip(items.items(), confidences, strict=True)
            },
            llm_calls=stats.requests,
        )
        return [MetricScored(sample_id=sample.id, metric="rubric", result=result)]


def _per_criterion(
    raw: str, tokens: list[tuple[str, float]], criteria: Iterable[str]
) -> list[float | None]:
    """The probability of each criterion's chosen score: the first score after its name."""
    scores = located_probabilities(raw, tokens, "score")
    found: list[float | None] = []
    for name in criteria:
        start = raw.find(f'"{name}"')
        after = [p for position, p in scores if start >= 0 and position > start]
        found.append(after[0] if after else None)
    return found
