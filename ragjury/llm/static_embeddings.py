"""Embeddings with no server and no download: WordLlama's static token embeddings, whose
16 MB of weights ship inside its wheel (MIT; the ``local`` extra installs it).

A static model averages learned token vectors: far below a transformer encoder, but it tells
a paraphrase (cosine ~1) from an unrelated sentence (~0), which is what the ``similarity``
metric needs offline. The figure says which model gave it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, SupportsFloat

from openai.types import CreateEmbeddingResponse, Embedding
from openai.types.create_embedding_response import Usage

from ragjury.llm.tokens import estimate_tokens

MODEL_NAME = "wordllama-l2-supercat-256"
_lock = threading.Lock()


class _Model(Protocol):
    """What is used of a ``wordllama.WordLlama`` (wordllama ships no type hints)."""

    def embed(self, texts: list[str]) -> Iterable[Iterable[SupportsFloat]]: ...


_model: _Model | None = None


def available() -> str | None:
    """None when the model can be used; else why not and how to fix it."""
    try:
        import wordllama  # noqa: F401 - only whether it is installed
    except ImportError:
        return (
            "no embeddings endpoint, and the offline embedding model is not installed; "
            "pip install 'ragjury[local]' for it, or use --base-url with an endpoint that "
            "serves embeddings"
        )
    return None


def _load() -> _Model:
    global _model
    with _lock:
        if _model is None:
            import wordllama

            # its files are in the wheel: point it there, and never let it download
            folder = Path(wordllama.__file__).parent
            _model = wordllama.WordLlama.load(cache_dir=folder, disable_download=True)
        return _model


def embed(texts: Sequence[str]) -> CreateEmbeddingResponse:
    """Vectors of ``texts`` in OpenAI's response shape (call from a worker thread)."""
    vectors = _load().embed(list(texts))
    tokens = sum(estimate_tokens(t) for t in texts)
    return CreateEmbeddingResponse(
        data=[
            Embedding(embedding=[float(x) for x in vector], index=i, object="embedding")
            for i, vector in enumerate(vectors)
        ],
        model=MODEL_NAME,
        object="list",
        usage=Usage(prompt_tokens=tokens, total_tokens=tokens),
    )
