"""StatementSplitter: an answer becomes atomic, self-contained statements, once per sample.

Answers that cannot be checked for faithfulness (no answer, no contexts) and answers that
state no fact (a refusal, "I don't know") end here as ``not_applicable``, with the reason.
"""

from __future__ import annotations

from typing import ClassVar

from ragjury.agents.base import failure_from
from ragjury.errors import LLMError
from ragjury.llm import LLM
from ragjury.prompts import Prompt
from ragjury.schemas import (
    MetricResult,
    MetricScored,
    SampleSubmitted,
    Statements,
    StatementsSplit,
)


class StatementSplitter:
    role: ClassVar[str] = "statement_splitter"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt) -> None:
        self._llm, self._prompt = llm, prompt

    async def handle(self, event: SampleSubmitted) -> list[StatementsSplit | MetricScored]:
        sample = event.sample
        if "faithfulness" not in event.metrics:
            return []

        def verdict(result: MetricResult) -> list[StatementsSplit | MetricScored]:
            return [MetricScored(sample_id=sample.id, metric="faithfulness", result=result)]

        if not sample.answer or not sample.answer.strip():
            return verdict(MetricResult.not_applicable("the sample has no answer to check"))
        if not any(c.strip() for c in sample.contexts):
            return verdict(
                MetricResult.not_applicable("the sample has no retrieved contexts to check against")
            )
        messages = self._prompt.render(question=sample.question, answer=sample.answer)
        try:
            split, stats = await self._llm.structured_call(Statements, messages, stage=self.role)
        except LLMError as exc:
            return verdict(MetricResult.failed(failure_from(self.role, exc), exc.attempts))
        if not split.statements:
            reason = (
                "the answer makes no factual statement (for example a refusal or "
                "'I don't know'), so there is nothing to check"
            )
            result = MetricResult.not_applicable(reason, statements=[])
            return verdict(result.model_copy(update={"llm_calls": stats.requests}))
        return [
            StatementsSplit(
                sample=sample, statements=tuple(split.statements), llm_calls=stats.requests
            )
        ]
