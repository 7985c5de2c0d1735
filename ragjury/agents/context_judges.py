"""LLM judges of the retrieval half: is each retrieved context relevant to the question
(context_relevance), and useful for the answer (context_precision).

The contexts of a sample are judged together, one verdict per context keyed by its index (the
count is validated and re-asked like the verdict judge's), so a sample costs one call; only
contexts longer than ``--context-window-chars`` together are split over several calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypedDict

from pydantic import BaseModel, ConfigDict

from ragjury.agents.base import Step, failure_from
from ragjury.errors import LLMError
from ragjury.metrics.declaration import FRACTION, BuildContext, EstimateContext, Metric
from ragjury.schemas import (
    ContextVerdicts,
    MetricResult,
    MetricScored,
    Sample,
    SampleSubmitted,
)
from ragjury.schemas.responses import counted
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM
    from ragjury.prompts import Prompt


def context_groups(contexts: Sequence[str], budget: int) -> list[list[int]]:
    """Indexes of the non-blank contexts, grouped so each group's text fits ``budget``
    characters (a context longer than the budget is shown cut to it, alone)."""
    groups: list[list[int]] = []
    size = 0
    for index, context in enumerate(contexts):
        if not context.strip():
            continue
        length = min(len(context), budget)
        if groups and size + length <= budget:
            groups[-1].append(index)
            size += length
        else:
            groups.append([index])
            size = length
    return groups


class _GaveUp(Exception):
    """A call gave up: the metric's failed result, its calls so far counted."""

    def __init__(self, result: MetricResult) -> None:
        super().__init__(result.reason)
        self.result = result


class _ContextJudge:
    """Shared by the relevance and precision judges: one verdict per retrieved context."""

    role: ClassVar[str]
    metric: ClassVar[str]
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if self.metric not in event.metrics:
            return []
        result = await self._result(event.sample)
        return [MetricScored(sample_id=event.sample.id, metric=self.metric, result=result)]

    async def _result(self, sample: Sample) -> MetricResult:
        raise NotImplementedError

    async def _verdicts(self, sample: Sample, **variables: str) -> tuple[list[ContextVerdict], int]:
        """Each context's verdict (index, id, relevant, reason) and the calls made; raises
        _GaveUp with the failed result when a call gives up."""
        contexts, budget = sample.contexts, self._options.context_window_chars
        verdicts: dict[int, _Said] = {
            i: {"relevant": False, "reason": "the context is empty"}
            for i, c in enumerate(contexts)
            if not c.strip()
        }
        calls = 0
        for group in context_groups(contexts, budget):
            shown = [contexts[i][:budget] for i in group]
            messages = self._prompt.render(question=sample.question, contexts=shown, **variables)
            try:
                output, stats = await self._llm.structured_call(
                    counted(ContextVerdicts, "verdicts", len(group)),
                    messages,
                    stage=self.role,
                    context={"count": len(group)},
                )
            except LLMError as exc:
                failure = failure_from(self.role, exc)
                raise _GaveUp(MetricResult.failed(failure, calls + exc.attempts)) from exc
            calls += stats.requests
            for verdict in output.verdicts:
                verdicts[group[verdict.context_index]] = {
                    "relevant": verdict.relevant,
                    "reason": verdict.reason,
                }
        ids = sample.context_ids or (None,) * len(contexts)
        judged: list[ContextVerdict] = [
            {
                "index": i,
                "id": ids[i],
                "relevant": verdicts[i]["relevant"],
                "reason": verdicts[i]["reason"],
            }
            for i in range(len(contexts))
        ]
        return judged, calls


class _Said(TypedDict):
    relevant: bool
    reason: str


class ContextVerdict(_Said):
    """A context's verdict, as a result's details keep it."""

    index: int
    id: str | None


class ContextRelevanceJudge(_ContextJudge):
    """Score = relevant contexts / retrieved contexts."""

    role: ClassVar[str] = "context_relevance_judge"
    metric: ClassVar[str] = "context_relevance"

    async def _result(self, sample: Sample) -> MetricResult:
        if not sample.contexts:
            return MetricResult.not_applicable("no contexts were retrieved to judge")
        try:
            verdicts, calls = await self._verdicts(sample)
        except _GaveUp as gave_up:
            return gave_up.result
        relevant = sum(v["relevant"] for v in verdicts)
        score = relevant / len(verdicts)
        return MetricResult(
            outcome="scored",
            score=score,
            passing=CONTEXT_RELEVANCE.passes(score, self._options),
            reason=f"{relevant} of {len(verdicts)} retrieved contexts are relevant to the question",
            details={"contexts": verdicts},
            llm_calls=calls,
        )


def average_precision(relevant: Sequence[bool]) -> float:
    """Mean of the precision at the rank of each relevant item; 0 when none is relevant."""
    hits, total = 0, 0.0
    for rank, is_relevant in enumerate(relevant, start=1):
        if is_relevant:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


class ContextPrecisionJudge(_ContextJudge):
    """Score = average precision of the useful contexts over the ranked list, judged against
    the reference answer (else the answer given): useful contexts ranked low cost more."""

    role: ClassVar[str] = "context_precision_judge"
    metric: ClassVar[str] = "context_precision"

    async def _result(self, sample: Sample) -> MetricResult:
        if not sample.contexts:
            return MetricResult.not_applicable("no contexts were retrieved to judge")
        against, answer = (
            ("reference", sample.reference) if sample.reference else ("answer", sample.answer)
        )
        if not answer or not answer.strip():
            return MetricResult.not_applicable(
                "the sample has neither a reference answer nor an answer to judge usefulness for"
            )
        try:
            verdicts, calls = await self._verdicts(sample, answer=answer, against=against)
        except _GaveUp as gave_up:
            return gave_up.result
        score = average_precision([v["relevant"] for v in verdicts])
        useful = sum(v["relevant"] for v in verdicts)
        return MetricResult(
            outcome="scored",
            score=score,
            passing=CONTEXT_PRECISION.passes(score, self._options),
            reason=f"{useful} of {len(verdicts)} retrieved contexts are useful for the "
            f"{against}; average precision {score:.3f}",
            details={"against": against, "contexts": verdicts},
            llm_calls=calls,
        )


class ContextVerdictRecord(BaseModel):
    """One retrieved context's verdict: its index, its id when known, relevant or not, why."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

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


_CONTEXT_VERDICT_TOKENS = 40
"""Assumed completion tokens per context judged."""


def _context_judge(cls: type[_ContextJudge], name: str) -> Callable[[BuildContext], Step]:
    def build(c: BuildContext) -> Step:
        prompt = c.prompt(name)
        return Step(
            cls(c.llm, prompt, c.options),
            fingerprint(c.model, prompt.version, c.options.context_window_chars, c.threshold(name)),
        )

    return build


def _contexts_judged(e: EstimateContext, name: str, **variables: str) -> None:
    budget = e.options.context_window_chars
    for group in context_groups(e.contexts, budget):
        messages = e.prompt(name).render(
            question=e.sample.question,
            contexts=[e.contexts[i][:budget] for i in group],
            **variables,
        )
        e.call(f"{name}_judge", messages, ContextVerdicts, _CONTEXT_VERDICT_TOKENS * len(group))


def _estimate_relevance(e: EstimateContext) -> None:
    if e.contexts:
        _contexts_judged(e, "context_relevance")


def _estimate_precision(e: EstimateContext) -> None:
    against = e.sample.reference or e.answer
    if e.contexts and against:
        which = "reference" if e.sample.reference else "answer"
        _contexts_judged(e, "context_precision", answer=against, against=which)


_PER_WINDOW = "1 per context window"

CONTEXT_RELEVANCE = Metric(
    name="context_relevance",
    description="Share of the retrieved contexts that are relevant to the question.",
    scale=FRACTION,
    threshold=0.5,
    inputs=("question", "contexts"),
    agents={"context_relevance_judge": _context_judge(ContextRelevanceJudge, "context_relevance")},
    llm=True,
    prompts=("context_relevance",),
    calls=_PER_WINDOW,
    estimate=_estimate_relevance,
    result_type=ContextRelevanceResult,
    groups=("rag_triad",),
    order=80,
)

CONTEXT_PRECISION = Metric(
    name="context_precision",
    description="Average precision of the contexts useful for the reference answer (else the "
    "answer given): useful contexts ranked low cost more.",
    scale=FRACTION,
    threshold=0.5,
    inputs=("question", "contexts"),
    optional=("reference", "answer"),
    agents={"context_precision_judge": _context_judge(ContextPrecisionJudge, "context_precision")},
    llm=True,
    prompts=("context_precision",),
    calls=_PER_WINDOW,
    estimate=_estimate_precision,
    result_type=ContextPrecisionResult,
    order=90,
)
