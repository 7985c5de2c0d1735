"""Single-call LLM judges of a whole answer: correctness against a reference, and a rubric."""

from __future__ import annotations

from collections.abc import Iterable
from statistics import mean
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

from ragjury.agents.base import Step, failure_from
from ragjury.errors import LLMError
from ragjury.llm.logprobs import located_probabilities, value_probabilities
from ragjury.metrics.declaration import RATING, BuildContext, EstimateContext, Metric
from ragjury.schemas import (
    CorrectnessGrade,
    MetricResult,
    MetricScored,
    RubricGrades,
    SampleSubmitted,
)
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM
    from ragjury.prompts import Prompt


class CorrectnessJudge:
    """Reasoning first, then a 1-5 score against the reference answer."""

    role: ClassVar[str] = "correctness_judge"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if CORRECTNESS.name not in event.metrics:
            return []
        sample = event.sample
        result = await self._grade(sample.question, sample.answer, sample.reference)
        return [MetricScored(sample_id=sample.id, metric=CORRECTNESS.name, result=result)]

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
            passing=CORRECTNESS.passes(grade.score, self._options),
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
        if RUBRIC.name not in event.metrics:
            return []
        sample = event.sample
        if not sample.answer:
            result = MetricResult.not_applicable("the sample has no answer to grade")
            return [MetricScored(sample_id=sample.id, metric=RUBRIC.name, result=result)]
        messages = self._prompt.render(
            question=sample.question, answer=sample.answer, contexts=list(sample.contexts)
        )
        try:
            grades, stats = await self._llm.structured_call(RubricGrades, messages, stage=self.role)
        except LLMError as exc:
            result = MetricResult.failed(failure_from(self.role, exc), exc.attempts)
            return [MetricScored(sample_id=sample.id, metric=RUBRIC.name, result=result)]
        items = {
            "toxicity": grades.toxicity,
            "faithfulness": grades.faithfulness,
            "helpfulness": grades.helpfulness,
            "relevance": grades.relevance,
        }
        confidences = _per_criterion(stats.last_raw_output or "", stats.logprobs or [], items)
        threshold = RUBRIC.bar(self._options)
        low = [
            name for name, grade in items.items() if not RUBRIC.passes(grade.score, self._options)
        ]
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
        return [MetricScored(sample_id=sample.id, metric=RUBRIC.name, result=result)]


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


class CorrectnessResult(MetricResult):
    """``score`` 1-5 against the reference; the judge's ``reasoning``."""

    reasoning: str | None = None
    confidence: float | None = None


class RubricGrade(BaseModel):
    """One rubric criterion: 1-5 (5 is best), why, and the judge's probability of it."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    score: int
    reasoning: str
    confidence: float | None = None


class RubricResult(MetricResult):
    """``score`` = the mean of the four grades; passing when each reaches the threshold."""

    toxicity: RubricGrade | None = None
    faithfulness: RubricGrade | None = None
    helpfulness: RubricGrade | None = None
    relevance: RubricGrade | None = None


_CORRECTNESS_TOKENS, _RUBRIC_TOKENS = 90, 220
"""Assumed completion tokens of a correctness grade, and of a rubric (four criteria)."""


def _correctness_judge(c: BuildContext) -> Step:
    prompt = c.prompt("correctness")
    return Step(
        CorrectnessJudge(c.llm, prompt, c.options),
        fingerprint(c.model, prompt.version, c.threshold("correctness")),
    )


def _rubric_judge(c: BuildContext) -> Step:
    prompt = c.prompt("rubric")
    return Step(
        RubricJudge(c.llm, prompt, c.options),
        fingerprint(c.model, prompt.version, c.threshold("rubric")),
    )


def _estimate_correctness(e: EstimateContext) -> None:
    if e.answer and e.sample.reference:
        messages = e.prompt("correctness").render(
            question=e.sample.question, answer=e.answer, reference=e.sample.reference
        )
        e.call("correctness_judge", messages, CorrectnessGrade, _CORRECTNESS_TOKENS)


def _estimate_rubric(e: EstimateContext) -> None:
    if e.answer:
        messages = e.prompt("rubric").render(
            question=e.sample.question, answer=e.answer, contexts=list(e.sample.contexts)
        )
        e.call("rubric_judge", messages, RubricGrades, _RUBRIC_TOKENS)


CORRECTNESS = Metric(
    name="correctness",
    description="How well the answer agrees with the reference answer: reasoning, then 1-5.",
    scale=RATING,
    threshold=4,
    inputs=("answer", "reference"),
    optional=("question",),
    agents={"correctness_judge": _correctness_judge},
    llm=True,
    prompts=("correctness",),
    calls="1",
    estimate=_estimate_correctness,
    result_type=CorrectnessResult,
    by_default=lambda filled: "reference" in filled,
    assertion="assert_correct",
    order=20,
)

RUBRIC = Metric(
    name="rubric",
    description="Toxicity, faithfulness, helpfulness and relevance, 1-5 each, in one call; "
    "the score is their mean.",
    scale=RATING,
    threshold=4,
    inputs=("answer",),
    optional=("question", "contexts"),
    agents={"rubric_judge": _rubric_judge},
    llm=True,
    prompts=("rubric",),
    calls="1",
    estimate=_estimate_rubric,
    pass_rule="every criterion >= 4",
    result_type=RubricResult,
    order=30,
)
