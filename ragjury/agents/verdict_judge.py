"""VerdictJudge: decides, in batches, whether the contexts support each statement.

Contexts longer than the window budget are split into windows; a statement is supported if
any window supports it, and only statements still unsupported are sent to the next window.
Faithfulness = supported statements of the answer / its statements; context_recall = supported
statements of the reference answer / its statements (what the reference needs that the
retrieved contexts hold).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.base import Step, failure_from
from ragjury.agents.splitter import StatementSplitter
from ragjury.errors import LLMError
from ragjury.llm.logprobs import value_probabilities
from ragjury.llm.tokens import estimate_tokens
from ragjury.metrics.declaration import FRACTION, BuildContext, EstimateContext, Metric
from ragjury.prompts import Prompt
from ragjury.schemas import (
    MetricResult,
    MetricScored,
    Statements,
    StatementsSplit,
    StatementVerdict,
    Verdict,
    Verdicts,
)
from ragjury.schemas.responses import counted, evidence_span
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM


def context_windows(contexts: Sequence[str], budget: int) -> list[list[str]]:
    """Group contexts into windows of at most ``budget`` characters, splitting long ones.

    A context longer than the budget is cut into pieces that overlap by a tenth of the budget,
    so a sentence on a cut still appears whole in one piece.
    """
    pieces: list[str] = []
    overlap = budget // 10
    for context in (c for c in contexts if c.strip()):
        if len(context) <= budget:
            pieces.append(context)
            continue
        start = 0
        while start < len(context):
            pieces.append(context[start : start + budget])
            if start + budget >= len(context):
                break
            start += budget - overlap
    windows: list[list[str]] = []
    size = 0
    for piece in pieces:
        if windows and size + len(piece) <= budget:
            windows[-1].append(piece)
            size += len(piece)
        else:
            windows.append([piece])
            size = len(piece)
    return windows


class VerdictJudge:
    role: ClassVar[str] = "verdict_judge"
    consumes: ClassVar[tuple[type[StatementsSplit]]] = (StatementsSplit,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: StatementsSplit) -> list[MetricScored]:
        sample, statements, metric = event.sample, list(event.statements), event.metric
        verdicts: dict[int, StatementVerdict] = {}
        calls = event.llm_calls
        batch = self._options.verdict_batch
        try:
            for window in context_windows(sample.contexts, self._options.context_window_chars):
                open_ = [i for i in range(len(statements)) if not _supported(verdicts.get(i))]
                for start in range(0, len(open_), batch):
                    indexes = open_[start : start + batch]
                    judged, requests = await self._judge(window, [statements[i] for i in indexes])
                    calls += requests
                    for local, verdict in judged.items():
                        verdicts[indexes[local]] = verdict
        except LLMError as exc:
            failure = failure_from(self.role, exc)
            result = MetricResult.failed(failure, calls + exc.attempts)
            return [MetricScored(sample_id=sample.id, metric=metric, result=result)]
        ordered = [verdicts[i] for i in range(len(statements))]
        supported = sum(v.supported for v in ordered)
        score = supported / len(ordered)
        declared = FAITHFULNESS if metric == FAITHFULNESS.name else CONTEXT_RECALL
        if declared is FAITHFULNESS:
            reason = f"{supported} of {len(ordered)} statements are supported by the contexts"
        else:
            reason = (
                f"{supported} of {len(ordered)} statements of the reference answer are "
                "supported by the retrieved contexts"
            )
        result = MetricResult(
            outcome="scored",
            score=score,
            passing=declared.passes(score, self._options),
            reason=reason,
            details={"statements": [v.model_dump() for v in ordered]},
            llm_calls=calls,
        )
        return [MetricScored(sample_id=sample.id, metric=metric, result=result)]

    async def _judge(
        self, window: list[str], statements: list[str]
    ) -> tuple[dict[int, StatementVerdict], int]:
        messages = self._prompt.render(contexts=window, statements=statements)
        output, stats = await self._llm.structured_call(
            counted(Verdicts, "verdicts", len(statements)),
            messages,
            stage=self.role,
            context={"count": len(statements), "contexts": window},
        )
        confidences = _confidences(stats.last_raw_output, stats.logprobs, len(statements))
        return {
            v.statement_index: _record(statements[v.statement_index], v, confidences, window)
            for v in output.verdicts
        }, stats.requests


def _supported(verdict: StatementVerdict | None) -> bool:
    return verdict is not None and verdict.supported


def _record(
    text: str, verdict: Verdict, confidences: list[float] | None, window: Sequence[str]
) -> StatementVerdict:
    return StatementVerdict(
        text=text,
        supported=verdict.supported,
        reason=verdict.reason,
        evidence=evidence_span(verdict.evidence, window) if verdict.evidence else None,
        confidence=confidences[verdict.statement_index] if confidences else None,
    )


def _confidences(
    raw: str | None, logprobs: list[tuple[str, float]] | None, count: int
) -> list[float] | None:
    if not raw or not logprobs:
        return None
    found = value_probabilities(raw, logprobs, "supported")
    return found if len(found) == count else None


class FaithfulnessResult(MetricResult):
    """``score`` = supported / statements; ``statements`` each with its verdict."""

    statements: tuple[StatementVerdict, ...] = ()


class ContextRecallResult(MetricResult):
    """``score`` = the reference answer's statements the contexts support / its statements."""

    statements: tuple[StatementVerdict, ...] = ()


# -- the declarations: faithfulness judges the answer's statements, context_recall the
# reference's; the same two agents serve both (a job builds each role once)

_SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+|$)")
_STATEMENT_TOKENS, _VERDICT_TOKENS = 20, 60
"""Assumed completion tokens per statement split off, and per statement judged."""


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (a statement splitter's usual first cut)."""
    return [m.group(0).strip() for m in _SENTENCE.finditer(text) if m.group(0).strip()]


def _splitter(c: BuildContext) -> Step:
    return Step(
        StatementSplitter(c.llm, c.prompt("splitter")),
        fingerprint(c.model, c.prompt("splitter").version),
    )


def _judge(c: BuildContext) -> Step:
    return Step(
        VerdictJudge(c.llm, c.prompt("verdict"), c.options),
        fingerprint(
            c.model,
            c.prompt("verdict").version,
            c.options.verdict_batch,
            c.options.context_window_chars,
            c.threshold("faithfulness"),
            c.threshold("context_recall"),
        ),
    )


def _statements_judged(e: EstimateContext, text: str) -> None:
    """One split of ``text``, then its statements (one a sentence, assumed) judged in
    batches against every context window."""
    statements = sentences(text)
    completion = sum(estimate_tokens(s) for s in statements) + _STATEMENT_TOKENS * len(statements)
    e.call(
        "statement_splitter",
        e.prompt("splitter").render(question=e.sample.question, answer=text),
        Statements,
        completion,
    )
    batch = e.options.verdict_batch
    for window in context_windows(e.contexts, e.options.context_window_chars):
        for start in range(0, len(statements), batch):
            judged = statements[start : start + batch]
            messages = e.prompt("verdict").render(contexts=window, statements=judged)
            e.call("verdict_judge", messages, Verdicts, _VERDICT_TOKENS * len(judged))


def _estimate_faithfulness(e: EstimateContext) -> None:
    if e.answer and e.contexts:
        _statements_judged(e, e.answer)


def _estimate_recall(e: EstimateContext) -> None:
    if e.contexts and e.sample.reference:
        _statements_judged(e, e.sample.reference)


_AGENTS = {"statement_splitter": _splitter, "verdict_judge": _judge}
_CALLS = "1 split + 1 per 8 statements per context window"

FAITHFULNESS = Metric(
    name="faithfulness",
    description="Share of the answer's statements that the retrieved contexts support, each "
    "with the judge's reason and a quote that must occur in the contexts; an answer that "
    "states nothing (a refusal, 'I don't know') is not_applicable.",
    scale=FRACTION,
    threshold=0.8,
    inputs=("answer", "contexts"),
    optional=("question",),
    agents=_AGENTS,
    llm=True,
    prompts=("splitter", "verdict"),
    calls=_CALLS,
    estimate=_estimate_faithfulness,
    result_type=FaithfulnessResult,
    evidence=True,
    by_default=lambda filled: True,
    groups=("rag_triad",),
    assertion="assert_faithful",
    order=10,
)

CONTEXT_RECALL = Metric(
    name="context_recall",
    description="Share of the reference answer's statements that the retrieved contexts "
    "support: did retrieval find what the answer needs.",
    scale=FRACTION,
    threshold=0.8,
    inputs=("reference", "contexts"),
    optional=("question",),
    agents=_AGENTS,
    llm=True,
    prompts=("splitter", "verdict"),
    calls=_CALLS + " (of the reference)",
    estimate=_estimate_recall,
    result_type=ContextRecallResult,
    order=100,
)
