"""The three critics. Each is its own agent, with its own prompt and response model, and
judges one thing about a drafted pair: rationale first, then an integer rating 1..5.

Two of them are also metrics of a sample's question (``question_groundedness``,
``question_standalone``): the same prompt and rating, asked of a question and its
contexts, so ``evaluate`` can judge them and ``calibrate`` can measure them against people."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ragjury.agents.base import Step, failure_from
from ragjury.errors import LLMError
from ragjury.metrics.declaration import RATING, BuildContext, EstimateContext, Metric
from ragjury.prompts import Prompt
from ragjury.schemas import (
    Criterion,
    Critique,
    CritiqueIssued,
    CritiqueResult,
    MetricResult,
    MetricScored,
    PairDrafted,
    QAPair,
    Sample,
    SampleSubmitted,
)
from ragjury.store.cache import fingerprint

if TYPE_CHECKING:
    from ragjury.config import EvaluationOptions
    from ragjury.llm import LLM


class GroundednessCritique(Critique):
    """Can the question be answered clearly and unambiguously from the text alone?"""


class RelevanceCritique(Critique):
    """Would the intended audience ask this question, and is its answer useful to them?"""


class StandaloneCritique(Critique):
    """Does the question make sense to someone who has not seen the source text?"""


class _Critic:
    role: ClassVar[str]
    criterion: ClassVar[Criterion]
    response_model: ClassVar[type[Critique]]
    consumes: ClassVar[tuple[type[PairDrafted]]] = (PairDrafted,)

    def __init__(self, llm: LLM, prompt: Prompt, **variables: Any) -> None:
        self._llm, self._prompt, self._variables = llm, prompt, variables

    def render(self, pair: QAPair) -> list[dict[str, str]]:
        """The prompt for ``pair``: a pair drafted from several chunks is judged against all
        of them (``context`` holds each, with its source; ``contexts`` lists their texts)."""
        return self._prompt.render(
            question=pair.question,
            answer=pair.answer,
            context=pair_context(pair),
            contexts=list(pair.contexts),
            **self._variables,
        )

    async def handle(self, event: PairDrafted) -> list[CritiqueIssued]:
        pair = event.pair
        try:
            critique = await self._llm.structured(
                self.response_model, self.render(pair), stage=self.role
            )
        except LLMError as exc:
            return [
                CritiqueIssued(
                    pair_id=pair.id, criterion=self.criterion, error=failure_from(self.role, exc)
                )
            ]
        result = CritiqueResult(rating=critique.rating, rationale=critique.rationale)
        return [CritiqueIssued(pair_id=pair.id, criterion=self.criterion, critique=result)]


def pair_context(pair: QAPair) -> str:
    """The text a critic judges ``pair`` against: its chunk's, or, for a pair drafted from
    several chunks, each one headed by its number and source."""
    if not pair.related:
        return pair.context
    sources = (pair.source, *(chunk.source for chunk in pair.related))
    return "\n\n".join(
        f"[{number}] (source: {source})\n{text}"
        for number, (source, text) in enumerate(zip(sources, pair.contexts, strict=True), 1)
    )


class GroundednessCritic(_Critic):
    role = "groundedness_critic"
    criterion = "groundedness"
    response_model = GroundednessCritique


class RelevanceCritic(_Critic):
    """Judges relevance for the pair's persona (the ``relevance_persona`` template) when it
    has one, else for ``audience``."""

    role = "relevance_critic"
    criterion = "relevance"
    response_model = RelevanceCritique

    def __init__(
        self, llm: LLM, prompt: Prompt, *, audience: str, persona_prompt: Prompt | None = None
    ) -> None:
        super().__init__(llm, prompt, audience=audience)
        self._persona_prompt = persona_prompt

    def render(self, pair: QAPair) -> list[dict[str, str]]:
        audience = str(self._variables["audience"])
        return relevance_messages(self._prompt, self._persona_prompt, pair, audience)


def relevance_messages(
    prompt: Prompt, persona_prompt: Prompt | None, pair: QAPair, audience: str
) -> list[dict[str, str]]:
    """The relevance critic's prompt for ``pair``: for its persona when it has one
    (``persona_prompt``, the ``relevance_persona`` template), else for ``audience``."""
    variables: dict[str, str | list[str]] = {
        "question": pair.question,
        "answer": pair.answer,
        "context": pair_context(pair),
        "contexts": list(pair.contexts),
        "audience": audience,
    }
    if pair.persona is None:
        return prompt.render(**variables)
    chosen = persona_prompt or Prompt.builtin("relevance_persona")
    return chosen.render(persona=pair.persona.model_dump(), **variables)


class StandaloneCritic(_Critic):
    role = "standalone_critic"
    criterion = "standalone"
    response_model = StandaloneCritique


class _QuestionCritic:
    """A critic judging a sample's question (and its contexts) instead of a drafted pair."""

    role: ClassVar[str]
    response_model: ClassVar[type[Critique]]
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, llm: LLM, prompt: Prompt, options: EvaluationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    @classmethod
    def metric(cls) -> Metric:
        raise NotImplementedError

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        metric = self.metric()
        if metric.name not in event.metrics:
            return []
        result = await self._judge(event.sample, metric)
        return [MetricScored(sample_id=event.sample.id, metric=metric.name, result=result)]

    async def _judge(self, sample: Sample, metric: Metric) -> MetricResult:
        context = _context(sample)
        if "contexts" in metric.inputs and not context:
            return MetricResult.not_applicable("the sample has no contexts to answer it from")
        messages = self._prompt.render(
            question=sample.question, answer=sample.answer or "", context=context
        )
        try:
            critique, stats = await self._llm.structured_call(
                self.response_model, messages, stage=self.role
            )
        except LLMError as exc:
            return MetricResult.failed(failure_from(self.role, exc), exc.attempts)
        return MetricResult(
            outcome="scored",
            score=critique.rating,
            passing=metric.passes(critique.rating, self._options),
            reason=critique.rationale,
            details={"rationale": critique.rationale},
            llm_calls=stats.requests,
        )


def _context(sample: Sample) -> str:
    """A sample's contexts as the critic's one text."""
    return "\n\n".join(c for c in sample.contexts if c.strip())


class QuestionGroundednessJudge(_QuestionCritic):
    role = "question_groundedness_judge"
    response_model = GroundednessCritique

    @classmethod
    def metric(cls) -> Metric:
        return QUESTION_GROUNDEDNESS


class QuestionStandaloneJudge(_QuestionCritic):
    role = "question_standalone_judge"
    response_model = StandaloneCritique

    @classmethod
    def metric(cls) -> Metric:
        return QUESTION_STANDALONE


_CRITIQUE_TOKENS = 80
"""Assumed completion tokens of a critique (a sentence or two, then the rating)."""


def _builder(
    judge: type[_QuestionCritic], prompt_name: str, name: str
) -> Callable[[BuildContext], Step]:
    def build(c: BuildContext) -> Step:
        prompt = c.prompt(prompt_name)
        return Step(
            judge(c.llm, prompt, c.options), fingerprint(c.model, prompt.version, c.threshold(name))
        )

    return build


def _estimator(judge: type[_QuestionCritic], prompt_name: str) -> Callable[[EstimateContext], None]:
    def estimate(e: EstimateContext) -> None:
        context = "\n\n".join(e.contexts)
        if "contexts" in judge.metric().inputs and not context:
            return
        messages = e.prompt(prompt_name).render(
            question=e.sample.question, answer=e.answer or "", context=context
        )
        e.call(judge.role, messages, judge.response_model, _CRITIQUE_TOKENS)

    return estimate


QUESTION_GROUNDEDNESS = Metric(
    name="question_groundedness",
    description="Can the question be answered clearly from its contexts alone? The dataset "
    "generator's groundedness critic, on a sample: rationale, then 1-5.",
    scale=RATING,
    threshold=4,
    inputs=("question", "contexts"),
    agents={
        QuestionGroundednessJudge.role: _builder(
            QuestionGroundednessJudge, "groundedness", "question_groundedness"
        )
    },
    llm=True,
    prompts=("groundedness",),
    calls="1",
    estimate=_estimator(QuestionGroundednessJudge, "groundedness"),
    order=200,
)

QUESTION_STANDALONE = Metric(
    name="question_standalone",
    description="Does the question make sense to someone who has not seen its source or "
    "the conversation before it? The dataset generator's standalone critic, on a sample: "
    "rationale, then 1-5.",
    scale=RATING,
    threshold=4,
    inputs=("question",),
    agents={
        QuestionStandaloneJudge.role: _builder(
            QuestionStandaloneJudge, "standalone", "question_standalone"
        )
    },
    llm=True,
    prompts=("standalone",),
    calls="1",
    estimate=_estimator(QuestionStandaloneJudge, "standalone"),
    order=210,
)
