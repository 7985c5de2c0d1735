"""AnswerCompletenessJudge: does the answer take up every part of the question?

The judge splits the question into the things it asks for and marks each as covered or not
by the answer; the score is the share covered, and the metric passes when nothing asked for
is left out. (Whether the answer is *true* is faithfulness's and correctness's matter.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ragjury.agents.base import Step, failure_from
from ragjury.errors import LLMError
from ragjury.metrics.declaration import FRACTION, BuildContext, EstimateContext, Metric
from ragjury.schemas import MetricResult, MetricScored, SampleSubmitted
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM
    from ragjury.prompts import Prompt

_COMPLETION_TOKENS = 120


class QuestionPart(BaseModel):
    """One thing the question asks for, and whether the answer covers it."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    part: str = Field(min_length=1, description="What the question asks for, briefly.")
    covered: bool = Field(description="True when the answer responds to this part.")
    reason: str = Field(min_length=1, description="Why, in one sentence.")


class QuestionCoverage(BaseModel):
    """The parts of a question, each covered by the answer or not."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    parts: list[QuestionPart] = Field(min_length=1, max_length=12)


class AnswerCompletenessResult(MetricResult):
    """``score`` = the parts of the question the answer covers / its parts."""

    parts: tuple[QuestionPart, ...] = ()


class AnswerCompletenessJudge:
    role: ClassVar[str] = "answer_completeness_judge"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if ANSWER_COMPLETENESS.name not in event.metrics:
            return []
        sample = event.sample
        if not sample.answer or not sample.answer.strip():
            result = MetricResult.not_applicable("the sample has no answer to check")
        else:
            result = await self._judge(sample.question, sample.answer)
        return [MetricScored(sample_id=sample.id, metric=ANSWER_COMPLETENESS.name, result=result)]

    async def _judge(self, question: str, answer: str) -> MetricResult:
        messages = self._prompt.render(question=question, answer=answer)
        try:
            coverage, stats = await self._llm.structured_call(
                QuestionCoverage, messages, stage=self.role
            )
        except LLMError as exc:
            return MetricResult.failed(failure_from(self.role, exc), exc.attempts)
        parts = coverage.parts
        covered = sum(p.covered for p in parts)
        missing = [p.part for p in parts if not p.covered]
        score = covered / len(parts)
        return MetricResult(
            outcome="scored",
            score=score,
            passing=ANSWER_COMPLETENESS.passes(score, self._options),
            reason=f"covers {covered} of the {len(parts)} part(s) the question asks for"
            + (f"; missing: {'; '.join(missing)}" if missing else ""),
            details={"parts": [p.model_dump() for p in parts]},
            llm_calls=stats.requests,
        )


def _judge(c: BuildContext) -> Step:
    prompt = c.prompt("answer_completeness")
    return Step(
        AnswerCompletenessJudge(c.llm, prompt, c.options),
        fingerprint(c.model, prompt.version, c.threshold("answer_completeness")),
    )


def _estimate(e: EstimateContext) -> None:
    if e.answer:
        messages = e.prompt("answer_completeness").render(
            question=e.sample.question, answer=e.answer
        )
        e.call("answer_completeness_judge", messages, QuestionCoverage, _COMPLETION_TOKENS)


ANSWER_COMPLETENESS = Metric(
    name="answer_completeness",
    description="Share of the things the question asks for that the answer takes up (each "
    "part of a many-part question); passes when none is left out.",
    scale=FRACTION,
    threshold=1.0,
    inputs=("question", "answer"),
    agents={"answer_completeness_judge": _judge},
    llm=True,
    prompts=("answer_completeness",),
    calls="1",
    estimate=_estimate,
    result_type=AnswerCompletenessResult,
    order=120,
)
