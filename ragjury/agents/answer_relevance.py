"""AnswerRelevanceJudge: does the answer address the question (not: is it true)?"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.base import Step, failure_from
from ragjury.errors import LLMError
from ragjury.metrics.declaration import RATING, BuildContext, EstimateContext, Metric
from ragjury.schemas import (
    AnswerRelevanceGrade,
    MetricResult,
    MetricScored,
    Sample,
    SampleSubmitted,
)
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM
    from ragjury.prompts import Prompt

_ANSWER_RELEVANCE_TOKENS = 90
"""Assumed completion tokens of a grade."""


class AnswerRelevanceJudge:
    """Does the answer address the question (not: is it true)? Reasoning, then 1-5; a refusal
    is scored 1, as not answering."""

    role: ClassVar[str] = "answer_relevance_judge"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if ANSWER_RELEVANCE.name not in event.metrics:
            return []
        sample = event.sample
        result = await self._grade(sample)
        return [MetricScored(sample_id=sample.id, metric=ANSWER_RELEVANCE.name, result=result)]

    async def _grade(self, sample: Sample) -> MetricResult:
        if not sample.answer or not sample.answer.strip():
            return MetricResult.not_applicable("the sample has no answer to grade")
        messages = self._prompt.render(question=sample.question, answer=sample.answer)
        try:
            grade, stats = await self._llm.structured_call(
                AnswerRelevanceGrade, messages, stage=self.role
            )
        except LLMError as exc:
            return MetricResult.failed(failure_from(self.role, exc), exc.attempts)
        return MetricResult(
            outcome="scored",
            score=grade.score,
            passing=ANSWER_RELEVANCE.passes(grade.score, self._options),
            reason=grade.reasoning,
            details={"reasoning": grade.reasoning, "refusal": grade.refusal},
            llm_calls=stats.requests,
        )


class AnswerRelevanceResult(MetricResult):
    """``score`` 1-5: does the answer address the question; a refusal is 1."""

    reasoning: str | None = None
    refusal: bool | None = None


def _answer_relevance_judge(c: BuildContext) -> Step:
    prompt = c.prompt("answer_relevance")
    return Step(
        AnswerRelevanceJudge(c.llm, prompt, c.options),
        fingerprint(c.model, prompt.version, c.threshold("answer_relevance")),
    )


def _estimate_answer_relevance(e: EstimateContext) -> None:
    if e.answer:
        messages = e.prompt("answer_relevance").render(question=e.sample.question, answer=e.answer)
        e.call("answer_relevance_judge", messages, AnswerRelevanceGrade, _ANSWER_RELEVANCE_TOKENS)


ANSWER_RELEVANCE = Metric(
    name="answer_relevance",
    description="Does the answer address the question (not: is it true)? Reasoning, then 1-5; "
    "a refusal is 1.",
    scale=RATING,
    threshold=4,
    inputs=("question", "answer"),
    agents={"answer_relevance_judge": _answer_relevance_judge},
    llm=True,
    prompts=("answer_relevance",),
    calls="1",
    estimate=_estimate_answer_relevance,
    result_type=AnswerRelevanceResult,
    groups=("rag_triad",),
    order=110,
)
