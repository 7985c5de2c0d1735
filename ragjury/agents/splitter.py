"""StatementSplitter: a text becomes atomic, self-contained statements, once per sample and
metric: the answer for faithfulness, the reference answer for context_recall.

Texts that cannot be checked (no answer, no contexts for faithfulness; no reference for
context_recall) and answers that state no fact (a refusal, "I don't know") end here as
``not_applicable``, with the reason. A reference with no retrieved context to find it in scores
0 for context_recall without a call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.base import failure_from
from ragjury.errors import LLMError

if TYPE_CHECKING:
    from ragjury.llm import LLM
    from ragjury.prompts import Prompt
from ragjury.schemas import (
    MetricResult,
    MetricScored,
    Sample,
    SampleSubmitted,
    Statements,
    StatementsSplit,
)

_METRICS = ("faithfulness", "context_recall")
"""The metrics judged statement by statement: the answer's, or the reference's (declared
beside the verdict judge)."""


class StatementSplitter:
    role: ClassVar[str] = "statement_splitter"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt) -> None:
        self._llm, self._prompt = llm, prompt

    async def handle(self, event: SampleSubmitted) -> list[StatementsSplit | MetricScored]:
        outputs: list[StatementsSplit | MetricScored] = []
        for metric in _METRICS:
            if metric in event.metrics:
                outputs.append(await self._split(event.sample, metric))
        return outputs

    async def _split(self, sample: Sample, metric: str) -> StatementsSplit | MetricScored:
        def verdict(result: MetricResult) -> MetricScored:
            return MetricScored(sample_id=sample.id, metric=metric, result=result)

        has_contexts = any(c.strip() for c in sample.contexts)
        if metric == "faithfulness":
            text, what = sample.answer, "answer"
            if not text or not text.strip():
                return verdict(MetricResult.not_applicable("the sample has no answer to check"))
            if not has_contexts:
                return verdict(
                    MetricResult.not_applicable(
                        "the sample has no retrieved contexts to check against"
                    )
                )
        else:
            text, what = sample.reference, "reference answer"
            if not text or not text.strip():
                return verdict(MetricResult.not_applicable("the sample has no reference answer"))
            if not has_contexts:
                return verdict(
                    MetricResult(
                        outcome="scored",
                        score=0.0,
                        passing=False,
                        reason="no contexts were retrieved, so none of the reference answer "
                        "is supported by them",
                        details={"statements": []},
                    )
                )
        messages = self._prompt.render(question=sample.question, answer=text)
        try:
            split, stats = await self._llm.structured_call(Statements, messages, stage=self.role)
        except LLMError as exc:
            return verdict(MetricResult.failed(failure_from(self.role, exc), exc.attempts))
        if not split.statements:
            reason = (
                f"the {what} makes no factual statement (for example a refusal or "
                "'I don't know'), so there is nothing to check"
            )
            result = MetricResult.not_applicable(reason, statements=[])
            return verdict(result.model_copy(update={"llm_calls": stats.requests}))
        return StatementsSplit(
            sample=sample,
            metric=metric,
            statements=tuple(split.statements),
            llm_calls=stats.requests,
        )
