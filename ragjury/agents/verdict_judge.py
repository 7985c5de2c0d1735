"""VerdictJudge: decides, in batches, whether the contexts support each statement.

Contexts longer than the window budget are split into windows; a statement is supported if
any window supports it, and only statements still unsupported are sent to the next window.
Faithfulness = supported statements of the answer / its statements; context_recall = supported
statements of the reference answer / its statements (what the reference needs that the
retrieved contexts hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ragjury.agents.base import failure_from
from ragjury.config import EvaluationOptions
from ragjury.errors import LLMError
from ragjury.llm import LLM
from ragjury.llm.logprobs import value_probabilities
from ragjury.prompts import Prompt
from ragjury.schemas import (
    MetricResult,
    MetricScored,
    StatementsSplit,
    StatementVerdict,
    Verdict,
    Verdicts,
)
from ragjury.schemas.responses import counted


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
        if metric == "faithfulness":
            threshold = self._options.faithfulness_threshold
            reason = f"{supported} of {len(ordered)} statements are supported by the contexts"
        else:
            threshold = self._options.context_recall_threshold
            reason = (
                f"{supported} of {len(ordered)} statements of the reference answer are "
                "supported by the retrieved contexts"
            )
        result = MetricResult(
            outcome="scored",
            score=score,
            passing=score >= threshold,
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
            v.statement_index: _record(statements[v.statement_index], v, confidences)
            for v in output.verdicts
        }, stats.requests


def _supported(verdict: StatementVerdict | None) -> bool:
    return verdict is not None and verdict.supported


def _record(text: str, verdict: Verdict, confidences: list[float] | None) -> StatementVerdict:
    return StatementVerdict(
        text=text,
        supported=verdict.supported,
        reason=verdict.reason,
        evidence=verdict.evidence or None,
        confidence=confidences[verdict.statement_index] if confidences else None,
    )


def _confidences(
    raw: str | None, logprobs: list[tuple[str, float]] | None, count: int
) -> list[float] | None:
    if not raw or not logprobs:
        return None
    found = value_probabilities(raw, logprobs, "supported")
    return found if len(found) == count else None
