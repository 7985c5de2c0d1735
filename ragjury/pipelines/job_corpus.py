"""A job's chunks as the chunker's planner needs them: the BM25 index of every chunk of the
job, and (``--max-pairs``) which chunks are drafted, each built from the documents the job was
submitted with (the store's items, chunked with the job's options) the first time this
process needs it (see :mod:`ragjury.agents.question_plan` and :mod:`ragjury.agents.balance`)."""

from __future__ import annotations

import anyio
import anyio.lowlevel

from ragjury.agents.balance import Candidate, drafted_chunks
from ragjury.agents.question_plan import chunks_of, draft_plan, drawn_type
from ragjury.config import GenerationOptions
from ragjury.ingest.related import RelatedChunks
from ragjury.schemas import MULTI_CHUNK_TYPES, Chunk, Document, DraftPlan
from ragjury.store.base import Queue


class JobCorpus:
    """A job's chunks as the planner needs them, read from the store's items."""

    def __init__(self, store: Queue, job_id: str, options: GenerationOptions) -> None:
        self._store, self._job_id, self._options = store, job_id, options
        self._index: RelatedChunks | None = None
        self._selection: dict[str, int | None] | None = None
        self._building = anyio.Lock()

    async def selection(self) -> dict[str, int | None]:
        """The chunks to draft (``--max-pairs``; else all), by id, each with its persona's
        index (``--personas``; else None)."""
        async with self._building:
            if self._selection is None:
                options = self._options
                candidates = []
                async for _, payload in self._store.item_payloads(self._job_id):
                    for chunk in chunks_of(Document.model_validate(payload), options):
                        candidates.append(
                            Candidate(chunk.id, chunk.document_id, drawn_type(chunk, options))
                        )
                    await anyio.lowlevel.checkpoint()
                self._selection = drafted_chunks(candidates, options)
            return self._selection

    async def index(self) -> RelatedChunks:
        async with self._building:
            if self._index is None:
                index = RelatedChunks()
                async for _, payload in self._store.item_payloads(self._job_id):
                    for chunk in chunks_of(Document.model_validate(payload), self._options):
                        index.add(chunk)
                    await anyio.lowlevel.checkpoint()
                self._index = index
            return self._index

    async def chunk(self, document_id: str, index: int) -> Chunk | None:
        payload = await self._store.item_payload(self._job_id, document_id)
        if payload is None:
            return None
        chunks = chunks_of(Document.model_validate(payload), self._options)
        return chunks[index] if index < len(chunks) else None

    async def plan(self, chunk: Chunk) -> DraftPlan | None:
        kind = drawn_type(chunk, self._options)
        if kind not in MULTI_CHUNK_TYPES:
            return draft_plan(kind, None, None)
        index = await self.index()
        relation = index.related(chunk.id) if chunk.id in index else None
        related = None
        if relation is not None:
            related = await self.chunk(relation.document_id, relation.index)
        return draft_plan(kind, relation, related)
