"""Generator: drafts exactly N factoid question/answer pairs per chunk in one validated call."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.base import failure_from
from ragjury.errors import LLMError
from ragjury.prompts import Prompt
from ragjury.schemas import ChunkFailed, ChunkReady, DraftedPairs, QAPair, QuestionsDrafted
from ragjury.schemas.responses import counted

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions
    from ragjury.llm import LLM


class Generator:
    role: ClassVar[str] = "generator"
    consumes: ClassVar[tuple[type[ChunkReady]]] = (ChunkReady,)

    def __init__(self, llm: LLM, prompt: Prompt, options: GenerationOptions) -> None:
        self._llm, self._prompt, self._options = llm, prompt, options

    async def handle(self, event: ChunkReady) -> list[QuestionsDrafted | ChunkFailed]:
        chunk, wanted = event.chunk, self._options.questions_per_chunk
        messages = self._prompt.render(
            context=chunk.text,
            source=chunk.source,
            questions_per_chunk=wanted,
            answer_style=self._options.answer_style,
        )
        try:
            drafted = await self._llm.structured(
                counted(DraftedPairs, "pairs", wanted),
                messages,
                stage=self.role,
                context={"questions_per_chunk": wanted},
            )
        except LLMError as exc:
            return [ChunkFailed(chunk=chunk, error=failure_from(self.role, exc))]
        pairs = tuple(
            QAPair(
                id=_pair_id(chunk.id, index, draft.question),
                question=draft.question,
                answer=draft.answer,
                context=chunk.text,
                source=chunk.source,
                chunk_id=chunk.id,
            )
            for index, draft in enumerate(drafted.pairs)
        )
        return [QuestionsDrafted(chunk=chunk, pairs=pairs)]


def _pair_id(chunk_id: str, index: int, question: str) -> str:
    return hashlib.sha256(f"{chunk_id}\n{index}\n{question}".encode()).hexdigest()[:16]
