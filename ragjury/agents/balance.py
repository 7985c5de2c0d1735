"""``--max-pairs`` and ``--personas``: which chunks of a job are drafted, spread over its
documents, question types and personas, instead of the first chunks read, and the persona
each is drafted for.

The choice is made from the job's stored items alone (every process chunks them the same
way), so a resumed run, another ``serve`` process and ``--dry-run`` choose the same chunks.

Chunks are taken one at a time. Each pick:

1. takes the question type furthest behind its share: its weight, over the weights of the
   types some unpicked chunk was drawn for, times the picks not taken by types already used
   up (so a type with too few chunks leaves its shortfall to the others in proportion to
   their weights);
2. among the documents with an unpicked chunk of that type, takes the one with the fewest
   picks so far (ties: an order drawn from the seed);
3. takes that document's next chunk of the type, in an order drawn from the seed;

So every document gets a chunk before any gets a second, and each type gets its share as
long as chunks of it remain.

Then :func:`deal_personas` deals the personas out, type after type, over each type's chunks
in the order they were picked, each type starting where the last one stopped: each persona
gets an even share of every type (within one) and of the whole selection (within one).

Without ``--max-pairs`` every chunk is drafted, and the personas are dealt the same way over
each type's chunks in an order drawn from the seed (so, over many chunks, each persona also
gets about an even share of every document).
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
    picked: dict[QuestionType, list[str]] = {}
    per_document: Counter[str] = Counter()
    per_type: Counter[str] = Counter()
    for picks in range(1, count + 1):
        if not pools:
            break
        kind = _behind_most(pools, per_type, weights, picks)
        by_document = pools[kind]
        document_id = min(by_document, key=lambda d: (per_document[d], document_order[d], d))
        chunk_ids = by_document[document_id]
        picked.setdefault(kind, []).append(chunk_ids.pop())
        if not chunk_ids:
            del by_document[document_id]
            if not by_document:
                del pools[kind]
        per_document[document_id] += 1
        per_type[kind] += 1
    return deal_personas(picked, personas, seed)


def assign_personas(
    candidates: Iterable[Candidate], personas: int, seed: int
) -> dict[str, int | None]:
    """Every chunk, with the index of its persona (None when there are no personas)."""
    by_type: dict[QuestionType, list[str]] = {}
    for c in candidates:
        by_type.setdefault(c.question_type, []).append(c.chunk_id)
    for chunk_ids in by_type.values():
        chunk_ids.sort(key=lambda chunk_id: (_draw(seed, "chunk", chunk_id), chunk_id))
    return deal_personas(by_type, personas, seed)


def deal_personas(
    by_type: Mapping[QuestionType, Sequence[str]], personas: int, seed: int
) -> dict[str, int | None]:
    """Each chunk with the index of its persona (None without personas): dealt in turn over
    each type's chunks in their order, the types in a fixed order, each type starting at
    the persona after the last one dealt. Every type's and the whole selection's counts per
    persona then differ by at most one."""
    if not personas:
        return {chunk_id: None for chunk_ids in by_type.values() for chunk_id in chunk_ids}
    order = sorted(range(personas), key=lambda i: _draw(seed, "persona", str(i)))
    turn = int.from_bytes(_draw(seed, "personas")[:4], "big")
    chosen: dict[str, int | None] = {}
    for kind in [kind for kind in QUESTION_TYPES if kind in by_type]:
        for chunk_id in by_type[kind]:
            chosen[chunk_id] = order[turn % personas]
            turn += 1
    return chosen


def _behind_most(
    pools: Mapping[QuestionType, object],
    taken: Counter[str],
    weights: Mapping[str, float],
    picks: int,
) -> QuestionType:
    """The type (with chunks left) whose share of ``picks`` is furthest ahead of what it
    has. The share is of the picks not taken by used-up types, in proportion to the
    weights of the types left; a type no weight asks for (none is drawn) comes last."""
    order: Sequence[QuestionType] = [kind for kind in QUESTION_TYPES if kind in pools]
    total_weight = sum(weights.get(kind, 0.0) for kind in order) or 1.0
    open_picks = picks - sum(n for kind, n in taken.items() if kind not in pools)
    return max(
        order,
        key=lambda kind: (
            open_picks * weights.get(kind, 0.0) / total_weight - taken[kind],
            -order.index(kind),
        ),
    )
