"""The three critics. Each is its own agent, with its own prompt and response model, and
judges one thing about a drafted pair: rationale first, then an integer rating 1..5."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ragjury.agents.base import failure_from
from ragjury.errors import LLMError
from ragjury.prompts import Prompt
from ragjury.schemas import Criterion, Critique, CritiqueIssued, CritiqueResult, PairDrafted, QAPair

if TYPE_CHECKING:
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
        return self._prompt.render(
            question=pair.question, answer=pair.answer, context=pair.context, **self._variables
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


class GroundednessCritic(_Critic):
    role = "groundedness_critic"
    criterion = "groundedness"
    response_model = GroundednessCritique


class RelevanceCritic(_Critic):
    role = "relevance_critic"
    criterion = "relevance"
    response_model = RelevanceCritique


class StandaloneCritic(_Critic):
    role = "standalone_critic"
    criterion = "standalone"
    response_model = StandaloneCritique
