"""Chunker: a submitted document becomes chunks ready for question generation, and their
count for the collector. With ``--question-types`` it also plans each chunk's question: its
type and, for a multi-chunk type, the related chunk (:mod:`ragjury.agents.question_plan`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

from ragjury.agents.question_plan import chunks_of
from ragjury.schemas import Chunk, ChunkReady, DocumentChunked, DocumentSubmitted, DraftPlan

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions


class Planner(Protocol):
    """Plans a chunk's question (the generation pipeline's
    :class:`~ragjury.pipelines.job_corpus.JobCorpus`)."""

    async def plan(self, chunk: Chunk) -> DraftPlan | None: ...


class Chunker:
    role: ClassVar[str] = "chunker"
    consumes: ClassVar[tuple[type[DocumentSubmitted]]] = (DocumentSubmitted,)

    def __init__(self, options: GenerationOptions, corpus: Planner | None = None) -> None:
        """``corpus``: the job's chunks, where question types other than factoid are drawn;
        None: every chunk gets a factoid question."""
        self._options, self._corpus = options, corpus

    async def handle(self, event: DocumentSubmitted) -> list[ChunkReady | DocumentChunked]:
        chunks = chunks_of(event.document, self._options)
        ids = tuple(chunk.id for chunk in chunks)
        counted = DocumentChunked(document_id=event.document.id, chunk_ids=ids)
        if self._corpus is None:
            return [counted, *(ChunkReady(chunk=chunk) for chunk in chunks)]
        ready = [ChunkReady(chunk=chunk, plan=await self._corpus.plan(chunk)) for chunk in chunks]
        return [counted, *ready]
