"""Collector: the generation pipeline's terminal join, one per document.

It learns the document's chunks from the chunker (:class:`DocumentChunked`), each chunk's
drafted pairs or failure from the generator, each pair's end from the deduplicator (dropped)
or the aggregator (judged); with ``--reference-answers`` a kept pair ends when the reference
writer has written its answer (:class:`ReferenceWritten`). When every chunk has ended and
every drafted pair has been dropped or judged, it emits :class:`DocumentJudged` with the pairs
in drafting order and the document's counts: the one place those counts are made.
"""

from __future__ import annotations

import json
from typing import ClassVar

from ragjury.agents.joins import JoinState
from ragjury.schemas import (
    ChunkFailed,
    DocumentChunked,
    DocumentJudged,
    DuplicateDropped,
    PairJudged,
    QuestionsDrafted,
    ReferenceWritten,
)

_Consumed = (
    DocumentChunked
    | ChunkFailed
    | QuestionsDrafted
    | DuplicateDropped
    | PairJudged
    | ReferenceWritten
)


class Collector:
    role: ClassVar[str] = "collector"
    consumes: ClassVar[tuple[type[_Consumed], ...]] = (
        DocumentChunked,
        ChunkFailed,
        QuestionsDrafted,
        DuplicateDropped,
        PairJudged,
        ReferenceWritten,
    )

    def __init__(self, joins: JoinState, *, references: bool = False) -> None:
        """``references``: a kept pair waits for its reference answer."""
        self._joins, self._references = joins, references

    async def handle(self, event: _Consumed) -> list[DocumentJudged]:
        # "d:" holds small markers; the judged pairs themselves are under "r:", read once.
        if isinstance(event, DocumentChunked):
            chunked = [event.document_id, list(event.chunk_ids), event.not_drafted]
            parts = {"d:chunks": json.dumps(chunked)}
        elif isinstance(event, ChunkFailed):
            failure = {"chunk_id": event.chunk.id, "source": event.chunk.source}
            failure |= event.error.model_dump()
            value = {"index": event.chunk.index, "pairs": [], "failed": failure}
            parts = {f"d:c:{event.chunk.id}": json.dumps(value)}
        elif isinstance(event, QuestionsDrafted):
            value = {"index": event.chunk.index, "pairs": [p.id for p in event.pairs]}
            parts = {f"d:c:{event.chunk.id}": json.dumps(value)}
        elif isinstance(event, DuplicateDropped):
            parts = {f"d:x:{event.pair.id}": ""}
        elif isinstance(event, ReferenceWritten):
            pair_id = event.judged.pair.id
            parts = {f"d:j:{pair_id}": "", f"r:{pair_id}": event.judged.model_dump_json()}
        elif self._references and event.outcome == "kept":
            return []  # it ends with its reference answer
        else:
            parts = {f"d:j:{event.pair.id}": "", f"r:{event.pair.id}": event.model_dump_json()}
        state = await self._joins.add(parts, "d:")
        if "d:chunks" not in state:
            return []
        document_id, chunk_ids, *rest = json.loads(state["d:chunks"])
        chunks = []
        for chunk_id in chunk_ids:
            if f"d:c:{chunk_id}" not in state:
                return []
            chunks.append(json.loads(state[f"d:c:{chunk_id}"]))
        ended = {name[4:] for name in state if name.startswith(("d:x:", "d:j:"))}
        drafted = [pair_id for chunk in chunks for pair_id in chunk["pairs"]]
        if not ended.issuperset(drafted):
            return []
        judged = await self._joins.add({}, "r:")
        pairs = tuple(
            PairJudged.model_validate_json(judged[f"r:{pair_id}"])
            for chunk in sorted(chunks, key=lambda c: c["index"])
            for pair_id in chunk["pairs"]
            if f"r:{pair_id}" in judged
        )
        failed = [chunk["failed"] for chunk in chunks if chunk.get("failed")]
        return [
            DocumentJudged(
                document_id=document_id,
                pairs=pairs,
                chunks=len(chunks),
                chunks_failed=len(failed),
                pairs_drafted=len(drafted),
                duplicates_dropped=sum(name.startswith("d:x:") for name in state),
                failed_chunks=tuple(failed),
                chunks_not_drafted=rest[0] if rest else 0,
            )
        ]
