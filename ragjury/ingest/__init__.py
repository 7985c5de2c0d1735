"""Turn user files into documents, and documents into chunks to draft questions from.

The names are imported when first used, so that chunking (which the generator's declaration
needs) does not load the file readers and logging."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragjury._lazy import lazy_names

if TYPE_CHECKING:
    from ragjury.ingest.chunking import chunk_document as chunk_document
    from ragjury.ingest.chunking import split_text as split_text
    from ragjury.ingest.loaders import DEFAULT_GLOBS as DEFAULT_GLOBS
    from ragjury.ingest.loaders import DocumentReader as DocumentReader
    from ragjury.ingest.loaders import LoadResult as LoadResult
    from ragjury.ingest.loaders import Skipped as Skipped
    from ragjury.ingest.loaders import iter_documents as iter_documents
    from ragjury.ingest.loaders import load_documents as load_documents

_WHERE = {
    "DEFAULT_GLOBS": "ragjury.ingest.loaders",
    "DocumentReader": "ragjury.ingest.loaders",
    "LoadResult": "ragjury.ingest.loaders",
    "Skipped": "ragjury.ingest.loaders",
    "chunk_document": "ragjury.ingest.chunking",
    "iter_documents": "ragjury.ingest.loaders",
    "load_documents": "ragjury.ingest.loaders",
    "split_text": "ragjury.ingest.chunking",
}

__getattr__ = lazy_names(__name__, _WHERE)

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
