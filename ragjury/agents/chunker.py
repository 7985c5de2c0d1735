"""Chunker: a submitted document becomes chunks ready for question generation, and their
count for the collector. With ``--question-types`` it also plans each chunk's question: its
type and, for a multi-chunk type, the related chunk (:mod:`ragjury.agents.question_plan`);
with ``--personas`` it gives each chunk the persona its questions are drafted for, and with
``--max-pairs`` it hands on only the chunks the job's balanced selection chose (both from
:mod:`ragjury.agents.balance`, over every chunk of the job)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

from ragjury.agents.question_plan import chunks_of
from ragjury.schemas import (
    Chunk,
    ChunkReady,
    DocumentChunked,
    DocumentSubmitted,
    DraftPlan,
    Persona,
)

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions


class Planner(Protocol):
    """Plans a chunk's question and chooses the chunks to draft (the generation pipeline's
    :class:`~ragjury.pipelines.job_corpus.JobCorpus`)."""

    async def plan(self, chunk: Chunk) -> DraftPlan | None: ...

    async def selection(self) -> dict[str, int | None]: ...


class Chunker:
    role: ClassVar[str] = "chunker"
    consumes: ClassVar[tuple[type[DocumentSubmitted]]] = (DocumentSubmitted,)

    def __init__(self, options: GenerationOptions, corpus: Planner | None = None) -> None:
        """``corpus``: the job's chunks, where question types other than factoid are drawn,
        personas given out or ``--max-pairs`` chooses chunks; None: every chunk gets a
        factoid question for no persona."""
        self._options, self._corpus = options, corpus

    async def handle(self, event: DocumentSubmitted) -> list[ChunkReady | DocumentChunked]:
        options = self._options
        chunks = chunks_of(event.document, options)
        personas: dict[str, Persona | None] = {chunk.id: None for chunk in chunks}
        drafted = chunks
        if (options.max_pairs is not None or options.personas) and self._corpus is not None:
            chosen = await self._corpus.selection()
            drafted = [chunk for chunk in chunks if chunk.id in chosen]
            personas = {chunk.id: _persona(options, chosen[chunk.id]) for chunk in drafted}
        counted = DocumentChunked(
            document_id=event.document.id,
            chunk_ids=tuple(chunk.id for chunk in drafted),
            not_drafted=len(chunks) - len(drafted),
        )
        ready = []
        for chunk in drafted:
            plan = None
            if options.typed and self._corpus is not None:
                plan = await self._corpus.plan(chunk)
            ready.append(ChunkReady(chunk=chunk, plan=plan, persona=personas[chunk.id]))
        return [counted, *ready]


def _persona(options: GenerationOptions, index: int | None) -> Persona | None:
    return None if index is None else options.personas[index]
