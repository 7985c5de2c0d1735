"""The answerability critic: the fourth critic of a drafted pair, on unless
``--no-answer-check``. It answers the question itself from the pair's context(s) alone,
without seeing the drafted answer (the ``answerability`` prompt), then judges whether its
answer and the drafted one agree (the ``answer_agreement`` prompt): rationale first, then a
rating 1..5, the pair's ``answerability`` critique. A question it cannot answer from its
contexts rates 1 without the second call.

A multi-hop pair whose question it could answer is also tried from each of its chunks alone:
a chunk whose answer agrees with the drafted one (as well as ``--min-score`` asks) shows that
the question is not multi-hop (the aggregator retypes or rejects it, as
``--multi-hop-strict`` says). What it does depends on no option, so its steps are cached
across runs that change only the bar. Everything it wrote
is kept on the critique (:class:`~ragjury.schemas.AnswerCheck`) for audit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, model_validator

from ragjury.agents.base import failure_from
from ragjury.agents.critics import pair_context
from ragjury.errors import LLMError
from ragjury.prompts import Prompt
from ragjury.schemas import (
    ANSWERABILITY,
    AloneAttempt,
    AnswerCheck,
    Criterion,
    Critique,
    CritiqueIssued,
    CritiqueResult,
    PairDrafted,
    QAPair,
)
from ragjury.schemas.responses import _Response

if TYPE_CHECKING:
    from ragjury.llm import LLM

ANSWER_STAGE = "answerability_critic"
"""The stage of the critic's own answers (the calls that never see the drafted answer)."""
AGREEMENT_STAGE = "answer_agreement"
"""The stage of its comparisons of an answer with the drafted one."""


class OwnAnswer(_Response):
    """The critic's answer to a question from the given text alone."""

    answer: str = Field(
        description="The answer the text gives; when it gives none, what is missing."
    )
    answerable: bool = Field(description="True only when the text settles the question.")

    @model_validator(mode="after")
    def _an_answer_when_answerable(self) -> OwnAnswer:
        if self.answerable and not self.answer.strip():
            raise ValueError(
                "answerable is true but the answer is empty: write the answer the text gives, "
                "or set answerable to false"
            )
        return self


class AnswerAgreement(Critique):
    """Do the drafted answer and the critic's own answer agree on what the question asks?"""


class AnswerabilityCritic:
    role: ClassVar[str] = "answerability_critic"
    criterion: ClassVar[Criterion] = ANSWERABILITY
    response_model: ClassVar[type[Critique]] = AnswerAgreement
    consumes: ClassVar[tuple[type[PairDrafted]]] = (PairDrafted,)

    def __init__(self, llm: LLM, answering: Prompt, agreement: Prompt) -> None:
        self._llm, self._answering, self._agreement = llm, answering, agreement

    def answer_messages(self, question: str, context: str) -> list[dict[str, str]]:
        """The prompt of an own answer: the question and the text, never the drafted answer."""
        return self._answering.render(question=question, context=context)

    def agreement_messages(self, pair: QAPair, own_answer: str) -> list[dict[str, str]]:
        return self._agreement.render(
            question=pair.question, answer=pair.answer, own_answer=own_answer
        )

    async def handle(self, event: PairDrafted) -> list[CritiqueIssued]:
        pair = event.pair
        try:
            own, rating, rationale = await self._attempt(pair, pair_context(pair))
            alone: list[AloneAttempt] = []
            if pair.question_type == "multi_hop" and pair.related and own.answerable:
                for chunk_id, text in zip(pair.chunk_ids, pair.contexts, strict=True):
                    one, one_rating, one_rationale = await self._attempt(pair, text)
                    alone.append(
                        AloneAttempt(
                            chunk_id=chunk_id,
                            answerable=one.answerable,
                            answer=one.answer,
                            rating=one_rating if one.answerable else None,
                            rationale=one_rationale if one.answerable else None,
                        )
                    )
        except LLMError as exc:
            return [
                CritiqueIssued(
                    pair_id=pair.id, criterion=ANSWERABILITY, error=failure_from(self.role, exc)
                )
            ]
        check = AnswerCheck(answer=own.answer, answerable=own.answerable, alone=tuple(alone))
        return [
            CritiqueIssued(
                pair_id=pair.id,
                criterion=ANSWERABILITY,
                critique=CritiqueResult(rating=rating, rationale=rationale),
                answer_check=check,
            )
        ]

    async def _attempt(self, pair: QAPair, context: str) -> tuple[OwnAnswer, int, str]:
        """An own answer from ``context`` and how well it agrees with the drafted one (1,
        without asking, when the context gave no answer)."""
        own = await self._llm.structured(
            OwnAnswer, self.answer_messages(pair.question, context), stage=ANSWER_STAGE
        )
        if not own.answerable:
            return own, 1, f"The context alone gives no answer: {own.answer}"
        agreement = await self._llm.structured(
            AnswerAgreement, self.agreement_messages(pair, own.answer), stage=AGREEMENT_STAGE
        )
        return own, agreement.rating, agreement.rationale
