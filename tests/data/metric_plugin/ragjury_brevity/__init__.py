"""A metric plugin, as a third-party package ships one: a no-LLM ``brevity`` metric (words in
the answer, passing at 60 or fewer) named under the entry-point group ``ragjury.metrics``."""

from __future__ import annotations

from typing import ClassVar

from ragjury.agents.base import Step
from ragjury.config import EvaluationOptions
from ragjury.metrics.declaration import BuildContext, Metric, Scale
from ragjury.schemas import MetricResult, MetricScored, SampleSubmitted


class BrevityChecker:
    role: ClassVar[str] = "brevity_checker"
    consumes: ClassVar[tuple[type[SampleSubmitted]]] = (SampleSubmitted,)

    def __init__(self, options: EvaluationOptions) -> None:
        self._options = options

    async def handle(self, event: SampleSubmitted) -> list[MetricScored]:
        if BREVITY.name not in event.metrics:
            return []
        answer = event.sample.answer
        if not answer:
            result = MetricResult.not_applicable("the sample has no answer")
        else:
            words = len(answer.split())
            result = MetricResult(
                outcome="scored",
                score=words,
                passing=BREVITY.passes(words, self._options),
                reason=f"{words} words",
            )
        return [MetricScored(sample_id=event.sample.id, metric=BREVITY.name, result=result)]


def _checker(c: BuildContext) -> Step:
    return Step(BrevityChecker(c.options))


BREVITY = Metric(
    name="brevity",
    description="Words in the answer; passes at 60 or fewer.",
    scale=Scale("count", 0, None, higher_is_better=False),
    threshold=60,
    inputs=("answer",),
    agents={"brevity_checker": _checker},
    llm=False,
)
