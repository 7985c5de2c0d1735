"""The embedding API: judge answers from inside an async application.

::

    async with Jury(settings) as jury:
        result = await jury.evaluate_one(question=..., answer=..., contexts=[...])
        result.passing, result.score, result.feedback          # over every scored metric
        result["faithfulness"].passing, result["faithfulness"].score

It runs the same agents as ``ragjury evaluate``, in the caller's event loop (no
``asyncio.run`` inside), and shares one LLM client (one concurrency limit) across calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ragjury.config import Settings
from ragjury.errors import RagjuryError
from ragjury.evaluation.pipeline import choose_metrics, run_evaluation
from ragjury.llm import LLM
from ragjury.logs import configure_if_unset
from ragjury.prompts import Prompt
from ragjury.schemas import MetricName, MetricResult, Sample, SampleScored


@dataclass(frozen=True)
class EvaluationResult(Mapping[str, MetricResult]):
    """One sample's judgement: a mapping of metric name to result, plus overall figures."""

    sample: Sample
    metrics: Mapping[str, MetricResult]

    def __getitem__(self, name: str) -> MetricResult:
        return self.metrics[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.metrics)

    def __len__(self) -> int:
        return len(self.metrics)

    @property
    def passing(self) -> bool | None:
        """True if every scored metric passed; None if no metric could be scored."""
        verdicts = [m.passing for m in self.metrics.values() if m.passing is not None]
        return all(verdicts) if verdicts else None

    @property
    def score(self) -> float | None:
        """The faithfulness score if scored, else the first scored metric's score."""
        ordered = sorted(self.metrics.items(), key=lambda item: item[0] != "faithfulness")
        return next((m.score for _, m in ordered if m.outcome == "scored"), None)

    @property
    def feedback(self) -> str:
        """One line per metric: its outcome and the reason."""
        return "\n".join(
            f"{name}: {m.outcome}" + (f" ({m.reason})" if m.reason else "")
            for name, m in self.metrics.items()
        )


class Jury:
    """Judge samples from Python. Use as ``async with Jury(settings) as jury``."""

    def __init__(self, settings: Settings, *, prompts: dict[str, Prompt] | None = None) -> None:
        self.settings = settings
        self._prompts = prompts
        self._llm: LLM | None = None

    async def __aenter__(self) -> Jury:
        configure_if_unset(self.settings.log_level)
        self._llm = LLM(self.settings)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._llm is not None:
            await self._llm.aclose()
            self._llm = None

    @property
    def llm(self) -> LLM:
        if self._llm is None:
            raise RuntimeError("use the jury inside 'async with Jury(settings) as jury'")
        return self._llm

    async def evaluate_one(
        self,
        *,
        question: str,
        answer: str,
        contexts: Sequence[str] = (),
        reference: str | None = None,
        metrics: Sequence[MetricName] | None = None,
        **expectations: Any,
    ) -> EvaluationResult:
        """Judge one answer. ``expectations`` takes must_contain, must_not_contain, ..."""
        sample = Sample(
            id=uuid.uuid4().hex,
            question=question,
            answer=answer,
            contexts=tuple(contexts),
            reference=reference,
            **{k: tuple(v) for k, v in expectations.items()},
        )
        return (await self.evaluate([sample], metrics=metrics))[0]

    async def evaluate(
        self, samples: Sequence[Sample], *, metrics: Sequence[MetricName] | None = None
    ) -> list[EvaluationResult]:
        """Judge many samples concurrently; results in input order."""
        results: list[SampleScored] = []

        async def collect(scored: SampleScored) -> None:
            results.append(scored)

        chosen = choose_metrics(samples, metrics or self.settings.evaluate.metrics)
        await run_evaluation(
            samples,
            settings=self.settings,
            llm=self.llm,
            sink=collect,
            metrics=chosen,
            prompts=self._prompts,
        )
        if len(results) < len(samples):
            raise RagjuryError(
                f"budget reached: {self.llm.budget.reason}; {len(samples) - len(results)} of "
                f"{len(samples)} samples were not judged. Raise Settings.max_tokens / max_cost "
                "or use a new Jury"
            )
        return [
            EvaluationResult(sample=r.sample, metrics={str(k): v for k, v in r.metrics.items()})
            for r in results
        ]
