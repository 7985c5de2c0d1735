"""Generator: drafts exactly N question/answer pairs per chunk in one validated call.

A chunk without a plan gets factoid questions (the ``generator`` prompt). A planned chunk
gets its type's prompt (``generator_reasoning``, ``generator_multi_hop``,
``generator_comparative``) and response model, whose validators hold the type's rule for a
good draft (:mod:`ragjury.schemas.drafts`); a multi-chunk draft is drafted from the chunk and
its related chunks, and its pairs name them all. A chunk given a persona (``--personas``)
has the ``generator_persona`` template's parts added to its type's prompt, and its pairs
carry the persona."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from ragjury.agents.base import failure_from
from ragjury.errors import LLMError
from ragjury.prompts import Prompt
from ragjury.schemas import (
    ChunkFailed,
    ChunkReady,
    DraftedPairs,
    QAPair,
    QuestionsDrafted,
    QuestionType,
)
from ragjury.schemas.drafts import DRAFT_MODELS
from ragjury.schemas.responses import counted

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions
    from ragjury.llm import LLM

TYPE_PROMPTS: Mapping[QuestionType, str] = {
    "factoid": "generator",
    "reasoning": "generator_reasoning",
    "multi_hop": "generator_multi_hop",
    "comparative": "generator_comparative",
}
"""The prompt each question type is drafted with."""


class Generator:
    role: ClassVar[str] = "generator"
    consumes: ClassVar[tuple[type[ChunkReady]]] = (ChunkReady,)

    def __init__(
        self,
        llm: LLM,
        prompt: Prompt,
        options: GenerationOptions,
        typed_prompts: Mapping[QuestionType, Prompt] | None = None,
        persona_prompt: Prompt | None = None,
    ) -> None:
        """``typed_prompts``: the prompts of the other question types, by type;
        ``persona_prompt``: what is added for a chunk given a persona."""
        self._llm, self._options = llm, options
        self._prompts: dict[QuestionType, Prompt] = {"factoid": prompt, **(typed_prompts or {})}
        self._persona = persona_prompt

    def render(self, event: ChunkReady) -> list[dict[str, str]]:
        return draft_messages(event, self._prompts, self._options, self._persona)

    async def handle(self, event: ChunkReady) -> list[QuestionsDrafted | ChunkFailed]:
        chunk, plan, wanted = event.chunk, event.plan, self._options.questions_per_chunk
        kind: QuestionType = "factoid" if plan is None else plan.question_type
        related = () if plan is None else plan.related
        try:
            drafted: DraftedPairs = await self._llm.structured(
                counted(DRAFT_MODELS[kind], "pairs", wanted),
                self.render(event),
                stage=self.role,
                context={
                    "questions_per_chunk": wanted,
                    **({} if plan is None else {"chunks": [c.text for c in (chunk, *related)]}),
                },
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
                question_type=kind,
                related=related,
                shared_terms=() if plan is None else plan.shared_terms,
                persona=event.persona,
            )
            for index, draft in enumerate(drafted.pairs)
        )
        return [QuestionsDrafted(chunk=chunk, pairs=pairs)]


def draft_messages(
    event: ChunkReady,
    prompts: Mapping[QuestionType, Prompt],
    options: GenerationOptions,
    persona_prompt: Prompt | None = None,
) -> list[dict[str, str]]:
    """The generator's prompt for a chunk: its type's template, given the chunk and, for a
    multi-chunk type, every chunk (``contexts``) and the terms that related them; for a
    chunk with a persona, ``persona_prompt``'s system part ends the system message and its
    user part starts the user message."""
    messages = _type_messages(event, prompts, options)
    if event.persona is None:
        return messages
    persona = (persona_prompt or Prompt.builtin("generator_persona")).render(
        persona=event.persona.model_dump(), questions_per_chunk=options.questions_per_chunk
    )
    added = {message["role"]: message["content"] for message in persona}
    joined = []
    for message in messages:
        content = message["content"]
        if message["role"] == "system" and added.get("system"):
            content = f"{content}\n\n{added['system']}"
        elif message["role"] == "user" and added.get("user"):
            content = f"{added['user']}\n\n{content}"
        joined.append({"role": message["role"], "content": content})
    return joined


def _type_messages(
    event: ChunkReady, prompts: Mapping[QuestionType, Prompt], options: GenerationOptions
) -> list[dict[str, str]]:
    chunk, plan = event.chunk, event.plan
    variables: dict[str, object] = {
        "context": chunk.text,
        "source": chunk.source,
        "questions_per_chunk": options.questions_per_chunk,
        "answer_style": options.answer_style,
    }
    if plan is None:
        return prompts["factoid"].render(**variables)
    parts = [chunk, *plan.related]
    variables["contexts"] = [{"source": c.source, "text": c.text} for c in parts]
    variables["shared_terms"] = list(plan.shared_terms)
    return prompts[plan.question_type].render(**variables)


def _pair_id(chunk_id: str, index: int, question: str) -> str:
    return hashlib.sha256(f"{chunk_id}\n{index}\n{question}".encode()).hexdigest()[:16]
