"""Answer evaluation: samples in, one judgement per requested metric out.

``SampleSubmitted`` goes to the agents of the requested metrics and to the sample
aggregator; each metric ends in exactly one ``MetricScored`` (scored, not_applicable or
failed); the aggregator's ``SampleScored`` is the terminal event. A sample without an answer
is first sent to the user's RAG target, when there is one.

The agents are those the requested metrics declare (:mod:`ragjury.metrics`): adding a metric
means a new module in :mod:`ragjury.agents`, and nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import ClassVar

import anyio
from pydantic import BaseModel

from ragjury._json import JSONData, JSONObject
from ragjury.agents import custom_judge
from ragjury.agents.joins import JoinState
from ragjury.agents.sample_aggregator import SampleAggregator
from ragjury.config import EvaluationOptions, Settings
from ragjury.errors import ConfigurationError
from ragjury.evaluation.inputs import filled_fields
from ragjury.evaluation.panel import panel_metrics
from ragjury.evaluation.targets import Target, TargetError
from ragjury.job_spec import EvaluationSpec, prompt_sources
from ragjury.llm import LLM
from ragjury.metrics import Metric, Registry, registry
from ragjury.pipelines.base import Step, Steps, transient_failures
from ragjury.pipelines.panel_steps import PanelAggregator, lane_events, panel_steps
from ragjury.prompts import Prompt
from ragjury.schemas import BusEvent, Failure, MetricResult, Sample, SampleScored, SampleSubmitted
from ragjury.schemas.panel import Panel
from ragjury.store.base import Item, ItemResults, Job, JobKind, Store
from ragjury.store.cache import llm_fingerprint
from ragjury.urls import redact_text


@dataclass(frozen=True)
class _Context:
    """What a job's metrics build their agents from (:class:`ragjury.metrics.BuildContext`)."""

    llm: LLM
    settings: Settings
    options: EvaluationOptions
    prompts: Mapping[str, Prompt]
    metrics: Registry
    judges: Sequence[Metric]

    def prompt(self, name: str) -> Prompt:
        return self.prompts.get(name) or Prompt.builtin(name)

    def threshold(self, metric: str) -> float | None:
        return self.metrics[metric].bar(self.options)

    @property
    def model(self) -> str:
        return llm_fingerprint(self.settings)


@dataclass(frozen=True)
class MetricPlan:
    """The metrics of a run, checked before anything runs: their registry (with the run's
    judge files), the names chosen, and the judge files' declarations."""

    metrics: Registry
    names: tuple[str, ...]
    judges: tuple[Metric, ...]

    @property
    def chosen(self) -> list[Metric]:
        return [self.metrics[name] for name in self.names]

    def needs_llm(self) -> bool:
        return self.metrics.needs_llm(self.names)

    def needs_logprobs(self) -> bool:
        return any(metric.logprobs for metric in self.chosen)

    def prompt_names(self) -> tuple[str, ...]:
        """What ``--prompt NAME=PATH`` may replace: the built-in metrics' templates."""
        return tuple(name for m in self.metrics if m.own_prompt is None for name in m.prompts)


def plan_metrics(
    settings: Settings,
    filled: AbstractSet[str] | Iterable[Sample],
    judges: Sequence[str | Metric] = (),
    requested: Sequence[str] | None = None,
) -> MetricPlan:
    """Load the judge files (``settings.judges`` and ``judges``), check the pass marks
    against the metrics' scales, and choose the metrics: as requested (``requested``, else
    ``settings.evaluate.metrics``), or each declaration's default for the fields filled."""
    loaded = [
        j if isinstance(j, Metric) else custom_judge.load_judge(j)
        for j in (*settings.judges, *judges)
    ]
    for judge in loaded:
        if not custom_judge.is_judge_file(judge):
            raise ConfigurationError(
                f"metric {judge.name!r} ({judge.origin}) brings agents of its own "
                f"({', '.join(judge.agents)}), which a worker elsewhere could not build: ship "
                "it as a plugin (entry-point group ragjury.metrics), or pass a judge file"
            )
    metrics = registry(loaded)
    metrics.check_thresholds(settings.evaluate.thresholds)
    fields = filled if isinstance(filled, AbstractSet) else filled_fields(filled)
    names = metrics.choose(fields, requested or settings.evaluate.metrics)
    return MetricPlan(metrics, names, tuple(loaded))


def result_record(scored: SampleScored) -> dict[str, JSONData]:
    """The exported form of a judged sample (the README documents these fields)."""
    metrics: dict[str, dict[str, JSONData]] = {}
    for name, result in scored.metrics.items():
        entry: dict[str, JSONData] = {
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
    record: dict[str, JSONData] = {
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


def all_failed(sample: Sample, metrics: Sequence[str], error: Failure) -> SampleScored:
    return SampleScored(sample=sample, metrics={m: MetricResult.failed(error) for m in metrics})


class EvaluationPipeline(Steps):
    kind: ClassVar[JobKind] = "evaluate"
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
        spec = EvaluationSpec.model_validate(job.options)
        judges = custom_judge.from_stored(spec.judges or ())
        metrics = registry(judges)
        self.metrics: tuple[str, ...] = spec.metrics
        prompts = spec.custom_prompts(job.id)

        def context_for(client: LLM, given: Settings) -> _Context:
            return _Context(client, given, spec.evaluate, prompts, metrics, judges)

        self._panel = spec.panel
        self._judged = panel_metrics([metrics[name] for name in self.metrics])
        steps: dict[str, Step] = {}
        if self._panel is not None:
            steps = panel_steps(
                metrics, self.metrics, self._judged, self._panel, llm, settings, context_for
            )
            aggregator = PanelAggregator(
                JoinState(store, job.id),
                metrics,
                self.metrics,
                self._judged,
                self._panel,
                spec.evaluate,
            )
            steps["sample_aggregator"] = Step(aggregator)
        else:
            context = context_for(llm, settings)
            for name in self.metrics:
                for role, build in metrics[name].agents.items():
                    if role not in steps:  # several metrics may share an agent
                        steps[role] = build(context)
            steps["sample_aggregator"] = Step(SampleAggregator(JoinState(store, job.id)))
        super().__init__(steps)
        self._target = target
        self._target_limiter = target_limiter or anyio.CapacityLimiter(settings.concurrency)

    @classmethod
    def known_roles(cls) -> tuple[str, ...]:
        """Every agent role an evaluation job may have, in pipeline order."""
        return (*registry().roles(), custom_judge.ROLE, "sample_aggregator")

    @classmethod
    def llm_roles(cls) -> frozenset[str]:
        return registry().llm_roles() | {custom_judge.ROLE}

    @staticmethod
    def spec(
        settings: Settings,
        metrics: Sequence[str],
        prompts: Mapping[str, Prompt],
        judges: Sequence[Metric] = (),
        target: str | None = None,
        panel: Panel | None = None,
    ) -> EvaluationSpec:
        """What an evaluation job is: options, metrics, custom prompts, the judge files its
        metrics come from, the target that answers its unanswered samples, and its judge
        panel and repeats."""
        used = [judge for judge in judges if judge.name in metrics]
        known = registry(judges)
        embeds = any(known[name].embeddings for name in metrics if name in known)
        default = Settings.model_fields["embedding_model"].default
        options = settings.evaluate
        if not any("retrieval_scorer" in known[name].agents for name in metrics if name in known):
            # --k cuts only the retrieval figures: without them it is not part of the job
            options = options.model_copy(update={"k": EvaluationOptions().k})
        return EvaluationSpec(
            evaluate=options,
            metrics=tuple(metrics),
            prompts=prompt_sources(prompts),
            judges=tuple(custom_judge.stored(used)) or None,
            target=target,
            panel=panel,
            # the default is left out, so a job from before this field keeps its key
            embedding=settings.embedding_model
            if embeds and settings.embedding_model != default
            else None,
        )

    @staticmethod
    def item(sample: Sample) -> tuple[str, Sample]:
        return sample.id, sample

    async def first_events(self, item: Item) -> list[BusEvent]:
        """The sample, answered first by the RAG target when it has no answer and there is
        one; a target that fails ends the sample at once, every metric failed."""
        try:  # the stored text parsed as the model in one pass
            sample = Sample.model_validate_json(item.stored)
        except ValueError:  # (json reads what pydantic-core's parser refuses)
            sample = Sample.model_validate(item.payload)
        if sample.answer is None and self._target is not None:
            async with self._target_limiter:
                try:
                    reply = await self._target.answer(sample.question)
                except TargetError as exc:
                    error = Failure(stage="target", attempts=1, message=redact_text(str(exc)))
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
            return self._submitted(sample, True)
        return self._submitted(sample, False)

    def _submitted(self, sample: Sample, by_target: bool) -> list[BusEvent]:
        if self._panel is not None:
            return lane_events(sample, self.metrics, self._judged, self._panel, by_target)
        return [SampleSubmitted(sample=sample, metrics=self.metrics, answered_by_target=by_target)]

    def results(self, terminal: SampleScored) -> ItemResults:
        return ItemResults(
            samples=[(result_record(terminal), terminal.model_dump_json())],
            report={"answered_by_target": terminal.answered_by_target},
            # only the metrics' results carry failures (the sample is the user's text)
            transient_failures=transient_failures(list(terminal.metrics.values())),
        )

    def failed(self, item_key: str, payload: JSONObject | None, reason: str) -> ItemResults | None:
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

    def public(self, terminal: SampleScored) -> list[BusEvent]:
        return [terminal]
