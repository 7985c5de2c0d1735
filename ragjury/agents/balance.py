"""``--max-pairs`` and ``--personas``: which chunks of a job are drafted, spread over its
documents, question types and personas, instead of the first chunks read, and the persona
each is drafted for.

The choice is made from the job's stored items alone (every process chunks them the same
way), so a resumed run, another ``serve`` process and ``--dry-run`` choose the same chunks.

Chunks are taken one at a time. Each pick:

1. takes the question type furthest behind its share (its weight times the picks so far,
   among the types some unpicked chunk was drawn for);
2. among the documents with an unpicked chunk of that type, takes the one with the fewest
   picks so far (ties: an order drawn from the seed);
3. takes that document's next chunk of the type, in an order drawn from the seed;
4. gives it the persona used least for that type so far, then least overall.

So every document gets a chunk before any gets a second, each type gets its share as long
as chunks of it remain, and each persona gets an even share of every type.

Without ``--max-pairs`` every chunk is drafted, and :func:`assign_personas` deals the personas
out over each type's chunks in an order drawn from the seed, so each persona again gets an
even share of every type (and, over many chunks, of every document).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragjury.schemas.records import QUESTION_TYPES, QuestionType

if TYPE_CHECKING:
    from ragjury.config import GenerationOptions


@dataclass(frozen=True)
class Candidate:
    """A chunk of the job, as the selection sees it."""

    chunk_id: str
    document_id: str
    question_type: QuestionType


def _draw(seed: int, *parts: str) -> bytes:
    return hashlib.sha256("\n".join((str(seed), *parts)).encode()).digest()


def drafted_chunks(
    candidates: Iterable[Candidate], options: GenerationOptions
) -> dict[str, int | None]:
    """The chunks to draft (``--max-pairs``; else all of them), each with the index of its
    persona in ``options.personas`` (None without personas)."""
    personas = len(options.personas)
    if options.max_pairs is None:
        return assign_personas(candidates, personas, options.seed)
    count = chunks_to_draft(options.max_pairs, options.questions_per_chunk)
    return select_chunks(candidates, count, options.question_types, personas, options.seed)


def chunks_to_draft(max_pairs: int, questions_per_chunk: int) -> int:
    """How many chunks ``--max-pairs`` drafts: as many as fit (each drafts its questions)."""
    return max(1, max_pairs // questions_per_chunk)


def select_chunks(
    candidates: Iterable[Candidate],
    count: int,
    weights: Mapping[str, float],
    personas: int,
    seed: int,
) -> dict[str, int | None]:
    """The ``count`` chunks to draft (all of them if there are fewer), each with the index
    of its persona (None when there are no personas)."""
    # type -> document -> its chunks of that type, last to be taken first
    pools: dict[QuestionType, dict[str, list[str]]] = {}
    documents: set[str] = set()
    for c in sorted(candidates, key=lambda c: c.chunk_id):
        pools.setdefault(c.question_type, {}).setdefault(c.document_id, []).append(c.chunk_id)
        documents.add(c.document_id)
    for by_document in pools.values():
        for chunk_ids in by_document.values():
            chunk_ids.sort(key=lambda chunk_id: _draw(seed, "chunk", chunk_id), reverse=True)
    document_order = {d: _draw(seed, "document", d) for d in documents}
    persona_order = sorted(range(personas), key=lambda i: _draw(seed, "persona", str(i)))
    total_weight = sum(weights.get(kind, 0.0) for kind in pools) or 1.0
    picked: dict[str, int | None] = {}
    per_document: Counter[str] = Counter()
    per_type: Counter[str] = Counter()
    per_persona: Counter[int] = Counter()
    per_type_persona: Counter[tuple[str, int]] = Counter()
    while len(picked) < count and pools:
        kind = _behind_most(pools, per_type, weights, total_weight, len(picked) + 1)
        by_document = pools[kind]
        document_id = min(by_document, key=lambda d: (per_document[d], document_order[d], d))
        chunk_ids = by_document[document_id]
        chunk_id = chunk_ids.pop()
        if not chunk_ids:
            del by_document[document_id]
            if not by_document:
                del pools[kind]
        persona = None
        if personas:
            persona = min(
                persona_order,
                key=lambda i: (per_type_persona[kind, i], per_persona[i], persona_order.index(i)),
            )
            per_persona[persona] += 1
            per_type_persona[kind, persona] += 1
        picked[chunk_id] = persona
        per_document[document_id] += 1
        per_type[kind] += 1
    return picked


def assign_personas(
    candidates: Iterable[Candidate], personas: int, seed: int
) -> dict[str, int | None]:
    """Every chunk, with the index of its persona (None when there are no personas)."""
    by_type: dict[str, list[str]] = {}
    for c in candidates:
        by_type.setdefault(c.question_type, []).append(c.chunk_id)
    chosen: dict[str, int | None] = {}
    for kind, chunk_ids in by_type.items():
        chunk_ids.sort(key=lambda chunk_id: (_draw(seed, "chunk", chunk_id), chunk_id))
        start = int.from_bytes(_draw(seed, "type", kind)[:4], "big")
        for position, chunk_id in enumerate(chunk_ids):
            chosen[chunk_id] = (start + position) % personas if personas else None
    return chosen


def _behind_most(
    pools: Mapping[QuestionType, object],
    taken: Counter[str],
    weights: Mapping[str, float],
    total_weight: float,
    picks: int,
) -> QuestionType:
    """The type (with chunks left) whose share of ``picks`` is furthest ahead of what it
    has; a type no weight asks for (none is drawn) comes last."""
    order: Sequence[QuestionType] = [kind for kind in QUESTION_TYPES if kind in pools]
    return max(
        order,
        key=lambda kind: (
            picks * weights.get(kind, 0.0) / total_weight - taken[kind],
            -order.index(kind),
        ),
    )
