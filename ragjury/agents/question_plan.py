"""Which question type a chunk gets, and the related chunk a multi-chunk type is drafted with.

Both are decided from stored state alone, so a resumed run, a redelivered message or another
process decides the same:

- the type is a draw seeded by the job's ``seed`` and the chunk's id
  (:func:`choose_type`), weighted by ``--question-types``;
- the related chunk comes from the BM25 index of every chunk of the job
  (:class:`~ragjury.ingest.related.RelatedChunks`), built from the documents the job was
  submitted with (the store's items, chunked with the job's options) the first time a
  process needs it, and kept by that process's pipeline for the job.

A chunk drawn for ``multi_hop`` or ``comparative`` that shares no rare terms with any other
chunk of the job gets a factoid question instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ragjury.ingest import chunk_document
from ragjury.ingest.related import Relation
from ragjury.schemas import (
    MULTI_CHUNK_TYPES,
    QUESTION_TYPES,
    Chunk,
    Document,
    DraftPlan,
    QuestionType,
)

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions


def choose_type(chunk_id: str, seed: int, weights: Mapping[str, float]) -> QuestionType:
    """The chunk's question type: a uniform draw from a hash of ``seed`` and ``chunk_id``,
    placed on the weights laid end to end in the order of :data:`QUESTION_TYPES`."""
    digest = hashlib.sha256(f"{seed}\n{chunk_id}".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    total = sum(weights.get(name, 0.0) for name in QUESTION_TYPES)
    reached, chosen = 0.0, QUESTION_TYPES[0]
    for name in QUESTION_TYPES:
        weight = weights.get(name, 0.0)
        if weight <= 0:
            continue
        chosen, reached = name, reached + weight / total
        if draw < reached:
            return name
    return chosen  # the draw fell on the rounding error past the last weight


def chunks_of(document: Document, options: GenerationOptions) -> list[Chunk]:
    return chunk_document(
        document,
        chunk_size=options.chunk_size,
        overlap=options.chunk_overlap,
        whole=options.whole_documents,
    )


def drawn_type(chunk: Chunk, options: GenerationOptions) -> QuestionType:
    """The type drawn for ``chunk`` (before a multi-chunk type finds its related chunk)."""
    return choose_type(chunk.id, options.seed, options.question_types)


def draft_plan(
    kind: QuestionType, relation: Relation | None, related: Chunk | None
) -> DraftPlan | None:
    """The plan of a chunk drawn ``kind``; None (a factoid) when a multi-chunk type found
    no related chunk."""
    if kind == "factoid":
        return None
    if kind not in MULTI_CHUNK_TYPES:
        return DraftPlan(question_type=kind)
    if relation is None or related is None:
        return None
    return DraftPlan(question_type=kind, related=(related,), shared_terms=relation.shared_terms)
