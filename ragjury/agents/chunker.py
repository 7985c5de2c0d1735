"""Chunker: a submitted document becomes chunks ready for question generation, and their
count for the collector."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ragjury.ingest import chunk_document
from ragjury.schemas import ChunkReady, DocumentChunked, DocumentSubmitted

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions


class Chunker:
    role: ClassVar[str] = "chunker"
    consumes: ClassVar[tuple[type[DocumentSubmitted]]] = (DocumentSubmitted,)

    def __init__(self, options: GenerationOptions) -> None:
        self._options = options

    async def handle(self, event: DocumentSubmitted) -> list[ChunkReady | DocumentChunked]:
        chunks = chunk_document(
            event.document,
            chunk_size=self._options.chunk_size,
            overlap=self._options.chunk_overlap,
            whole=self._options.whole_documents,
        )
        ids = tuple(chunk.id for chunk in chunks)
        counted = DocumentChunked(document_id=event.document.id, chunk_ids=ids)
        return [counted, *(ChunkReady(chunk=chunk) for chunk in chunks)]
