"""Turn user files into documents, and documents into chunks to draft questions from."""

from __future__ import annotations

from ragjury.ingest.chunking import chunk_document, split_text
from ragjury.ingest.loaders import (
    DEFAULT_GLOBS,
    DocumentReader,
    LoadResult,
    Skipped,
    iter_documents,
    load_documents,
)

__all__ = [
    "DEFAULT_GLOBS",
    "DocumentReader",
    "LoadResult",
    "Skipped",
    "chunk_document",
    "iter_documents",
    "load_documents",
    "split_text",
]
