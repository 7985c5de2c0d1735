"""ReferenceWriter (``--reference-answers``): a complete, self-contained reference answer for
each kept pair, written from the pair's context(s) in one validated call. The pair's short
``answer`` stays; the reference goes beside it (``reference_answer``), and ``ragjury
evaluate`` grades against it. A rejected or failed pair is not answered. A kept pair whose
reference could not be written ends ``failed`` at this stage (its critiques kept), so a set
asked for reference answers never holds a kept pair without one."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.base import failure_from
from ragjury.agents.critics import pair_context
from ragjury.errors import LLMError
from ragjury.prompts import Prompt
from ragjury.schemas import PairJudged, QAPair, ReferenceWritten
from ragjury.schemas.responses import ReferenceAnswer

if TYPE_CHECKING:
    from ragjury.llm import LLM


class ReferenceWriter:
    role: ClassVar[str] = "reference_writer"
    consumes: ClassVar[tuple[type[PairJudged]]] = (PairJudged,)

    def __init__(self, llm: LLM, prompt: Prompt) -> None:
        self._llm, self._prompt = llm, prompt

    def render(self, pair: QAPair) -> list[dict[str, str]]:
        return reference_messages(self._prompt, pair)

    async def handle(self, event: PairJudged) -> list[ReferenceWritten]:
        if event.outcome != "kept":
            return []
        pair = event.pair
        try:
            written = await self._llm.structured(
                ReferenceAnswer,
                self.render(pair),
                stage=self.role,
                context={"short_answer": pair.answer},
            )
        except LLMError as exc:
            failed = event.model_copy(
                update={"outcome": "failed", "error": failure_from(self.role, exc)}
            )
            return [ReferenceWritten(judged=failed)]
        answered = event.model_copy(update={"reference_answer": written.answer})
        return [ReferenceWritten(judged=answered)]


def reference_messages(prompt: Prompt, pair: QAPair) -> list[dict[str, str]]:
    """The reference writer's prompt for ``pair``: the question, its short answer and every
    chunk it was drafted from."""
    return prompt.render(
        question=pair.question,
        answer=pair.answer,
        context=pair_context(pair),
        contexts=list(pair.contexts),
        source=pair.source,
    )
