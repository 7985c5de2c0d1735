"""Answer evaluation: samples in, one judgement per requested metric out.

``SampleSubmitted`` goes to the agents of the requested metrics and to the sample
aggregator; each metric ends in exactly one ``MetricScored`` (scored, not_applicable or
failed); the aggregator's ``SampleScored`` is the terminal event. A sample without an answer
is first sent to the user's RAG target, when there is one.

Adding a metric means writing its agent(s) and one entry in :data:`METRICS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel

from ragjury.agents import (
    AnswerRelevanceJudge,
    ConfidenceScorer,
    ContextPrecisionJudge,
    ContextRelevanceJudge,
    CorrectnessJudge,
    KeywordChecker,
    RetrievalScorer,
    RubricJudge,
    SampleAggregator,
    SimilarityScorer,
    StatementSplitter,
    VerdictJudge,
)
from ragjury.agents.joins import JoinState
from ragjury.config import EvaluationOptions, Settings
from ragjury.evaluation.inputs import filled_fields
from ragjury.evaluation.targets import Target, TargetError
from ragjury.llm import LLM
from ragjury.pipelines.base import Step, Steps, job_prompts, transient_failures
from ragjury.prompts import Prompt
from ragjury.schemas import (
    RAG_TRIAD,
    Failure,
    MetricChoice,
    MetricName,
    MetricResult,
    Sample,
    SampleScored,
    SampleSubmitted,
)
from ragjury.store.base import Item, ItemResults, Job, JobKind, Store
from ragjury.store.cache import fingerprint, llm_fingerprint

PROMPT_NAMES = (
    "splitter",
    "verdict",
    "correctness",
    "rubric",
    "context_relevance",
    "context_precision",
    "answer_relevance",
)


@dataclass(frozen=True)
class _Context:
    llm: LLM
    settings: Settings
    options: EvaluationOptions
    prompts: Mapping[str, Prompt]

    def prompt(self, name: str) -> Prompt:
        return self.prompts.get(name) or Prompt.builtin(name)

    @property
    def model(self) -> str:
        return llm_fingerprint(self.settings)


@dataclass(frozen=True)
class Metric:
    """A metric's agents (role -> how to build it) and whether it calls the judge LLM."""

    agents: Mapping[str, Callable[[_Context], Step]]
    needs_llm: bool


def _statement_splitter(c: _Context) -> Step:
    return Step(
        StatementSplitter(c.llm, c.prompt("splitter")),
        fingerprint(c.model, c.prompt("splitter").version),
    )


def _verdict_judge(c: _Context) -> Step:
    return Step(
        VerdictJudge(c.llm, c.prompt("verdict"), c.options),
        fingerprint(
            c.model,
            c.prompt("verdict").version,
            c.options.verdict_batch,
            c.options.context_window_chars,
            c.options.faithfulness_threshold,
            c.options.context_recall_threshold,
        ),
    )


# faithfulness judges the answer's statements, context_recall the reference's: the same two
# agents serve both (a job builds each role once)
_STATEMENT_AGENTS = {"statement_splitter": _statement_splitter, "verdict_judge": _verdict_judge}

METRICS: dict[MetricName, Metric] = {
    "faithfulness": Metric(_STATEMENT_AGENTS, needs_llm=True),
    "correctness": Metric(
        {
            "correctness_judge": lambda c: Step(
                CorrectnessJudge(c.llm, c.prompt("correctness"), c.options),
                fingerprint(
                    c.model, c.prompt("correctness").version, c.options.correctness_threshold
                ),
            )
        },
        needs_llm=True,
    ),
    "rubric": Metric(
        {
            "rubric_judge": lambda c: Step(
                RubricJudge(c.llm, c.prompt("rubric"), c.options),
                fingerprint(c.model, c.prompt("rubric").version, c.options.rubric_threshold),
            )
        },
        needs_llm=True,
    ),
    "keywords": Metric({"keyword_checker": lambda c: Step(KeywordChecker(c.options))}, False),
    "similarity": Metric(
        {
            "similarity_scorer": lambda c: Step(
                SimilarityScorer(c.llm, c.options),
                fingerprint(
                    c.settings.base_url,
                    c.settings.embedding_model,
                    c.options.similarity_threshold,
                ),
            )
        },
        needs_llm=True,
    ),
    "confidence": Metric({"confidence_scorer": lambda c: Step(ConfidenceScorer())}, False),
    "retrieval": Metric({"retrieval_scorer": lambda c: Step(RetrievalScorer(c.options))}, False),
    "context_relevance": Metric(
        {
            "context_relevance_judge": lambda c: Step(
                ContextRelevanceJudge(c.llm, c.prompt("context_relevance"), c.options),
                fingerprint(
                    c.model,
                    c.prompt("context_relevance").version,
                    c.options.context_window_chars,
                    c.options.context_relevance_threshold,
                ),
            )
        },
        needs_llm=True,
    ),
    "context_precision": Metric(
        {
            "context_precision_judge": lambda c: Step(
                ContextPrecisionJudge(c.llm, c.prompt("context_precision"), c.options),
                fingerprint(
                    c.model,
                    c.prompt("context_precision").version,
                    c.options.context_window_chars,
                    c.options.context_precision_threshold,
                ),
            )
        },
        needs_llm=True,
    ),
    "context_recall": Metric(_STATEMENT_AGENTS, needs_llm=True),
    "answer_relevance": Metric(
        {
            "answer_relevance_judge": lambda c: Step(
                AnswerRelevanceJudge(c.llm, c.prompt("answer_relevance"), c.options),
                fingerprint(
                    c.model,
                    c.prompt("answer_relevance").version,
                    c.options.answer_relevance_threshold,
                ),
            )
        },
        needs_llm=True,
    ),
}


def choose_metrics(
    samples: Iterable[Sample] | AbstractSet[str], requested: Sequence[MetricChoice] | None
) -> tuple[MetricName, ...]:
    """The metrics of a run: as requested (``rag_triad`` standing for its three), or
    faithfulness plus what the data allows. ``samples`` may instead be the names of the
    fields some sample fills (:func:`~ragjury.evaluation.inputs.filled_fields`, or a
    :class:`~ragjury.evaluation.inputs.SampleFile`'s ``filled``), so a file is not read again."""
    if requested:
        expanded: list[MetricName] = []
        for name in requested:
            expanded.extend(RAG_TRIAD if name == "rag_triad" else (name,))
        return tuple(dict.fromkeys(expanded))
    filled = samples if isinstance(samples, AbstractSet) else filled_fields(samples)
    chosen: list[MetricName] = ["faithfulness"]
    if "reference" in filled:
        chosen.append("correctness")
    if filled & {"must_contain", "must_not_contain", "must_not_start_with"}:
        chosen.append("keywords")
    if filled & {"reference_contexts", "reference_context_ids"}:
        chosen.append("retrieval")
    return tuple(chosen)


def needs_llm(metrics: Sequence[MetricName]) -> bool:
    return any(METRICS[m].needs_llm for m in metrics)


def result_record(scored: SampleScored) -> dict[str, Any]:
    """The exported form of a judged sample (the README documents these fields)."""
    metrics: dict[str, Any] = {}
    for name, result in scored.metrics.items():
        entry: dict[str, Any] = {
            "outcome": result.outcome,
            "score": result.score,
            "passing": result.passing,
            "reason": result.reason,
            **result.details,
            "llm_calls": result.llm_calls,
        }
        if result.error is not None:
            entry["error"] = result.error.model_dump()
        metrics[name] = entry
    sample = scored.sample
    record: dict[str, Any] = {
        "id": sample.id,
        "question": sample.question,
        "answer": sample.answer,
        "contexts": list(sample.contexts),
        "reference": sample.reference,
        "passing": scored.passing,
        "reason": scored.reason,
        "metrics": metrics,
    }
    # what retrieval is judged by, where the sample has it (records without it stay as before)
    for field in ("context_ids", "reference_contexts", "reference_context_ids"):
        if getattr(sample, field):
            record[field] = list(getattr(sample, field))
    return record


def all_failed(sample: Sample, metrics: Sequence[MetricName], error: Failure) -> SampleScored:
    return SampleScored(sample=sample, metrics={m: MetricResult.failed(error) for m in metrics})


class EvaluationPipeline(Steps):
    kind: ClassVar[JobKind] = "evaluate"
    roles: ClassVar[tuple[str, ...]] = (
        *dict.fromkeys(role for metric in METRICS.values() for role in metric.agents),
        "sample_aggregator",
    )
    llm_roles: ClassVar[frozenset[str]] = frozenset(
        role for metric in METRICS.values() if metric.needs_llm for role in metric.agents
    )
    terminal: ClassVar[type[BaseModel]] = SampleScored

    def __init__(
        self,
        job: Job,
        settings: Settings,
        llm: LLM,
        store: Store,
        *,
        target: Target | None = None,
        target_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        options = EvaluationOptions.model_validate(job.options["evaluate"])
        prompts = job_prompts(job)
        self.metrics: tuple[MetricName, ...] = tuple(job.options.get("metrics", ()))
        context = _Context(llm, settings, options, prompts)
        steps = {
            role: build(context) for m in self.metrics for role, build in METRICS[m].agents.items()
        }
        steps["sample_aggregator"] = Step(SampleAggregator(JoinState(store, job.id)))
        super().__init__(steps)
        self._target = target
        self._target_limiter = target_limiter or anyio.CapacityLimiter(settings.concurrency)

    @staticmethod
    def options(
        settings: Settings, metrics: Sequence[MetricName], prompts: Mapping[str, Prompt]
    ) -> dict[str, Any]:
        """What an evaluation job stores with its items: options, metrics and custom prompts."""
        return {
            "evaluate": settings.evaluate.model_dump(mode="json"),
            "metrics": list(metrics),
            "prompts": {name: prompt.source for name, prompt in sorted(prompts.items())},
        }

    @staticmethod
    def item(sample: Sample) -> tuple[str, Sample]:
        return sample.id, sample

    async def first_events(self, item: Item) -> list[BaseModel]:
        """The sample, answered first by the RAG target when it has no answer and there is
        one; a target that fails ends the sample at once, every metric failed."""
        sample = Sample.model_validate(item.payload)
        if sample.answer is None and self._target is not None:
            async with self._target_limiter:
                try:
                    reply = await self._target.answer(sample.question)
                except TargetError as exc:
                    error = Failure(stage="target", attempts=1, message=str(exc))
                    return [all_failed(sample, self.metrics, error)]
            retrieved = not sample.contexts
            sample = sample.model_copy(
                update={
                    "answer": reply.answer,
                    "contexts": reply.contexts if retrieved else sample.contexts,
                    "context_ids": reply.context_ids if retrieved else sample.context_ids,
                    "answer_logprobs": reply.logprobs,
                }
            )
            return [SampleSubmitted(sample=sample, metrics=self.metrics, answered_by_target=True)]
        return [SampleSubmitted(sample=sample, metrics=self.metrics)]

    def results(self, terminal: SampleScored) -> ItemResults:
        return ItemResults(
            samples=[(result_record(terminal), terminal.model_dump_json())],
            report={"answered_by_target": terminal.answered_by_target},
            transient_failures=transient_failures([terminal]),
        )

    def failed(
        self, item_key: str, payload: Mapping[str, Any] | None, reason: str
    ) -> ItemResults | None:
        if payload is None:
            return None
        try:
            sample = Sample.model_validate(payload)
        except ValueError:
            return None
        error = Failure(stage="worker", attempts=0, message=reason)
        scored = all_failed(sample, self.metrics, error)
        return ItemResults(
            samples=[(result_record(scored), scored.model_dump_json())],
            report={"answered_by_target": False},
        )

    def public(self, terminal: SampleScored) -> list[BaseModel]:
        return [terminal]
