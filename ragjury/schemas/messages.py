"""The envelope and the events agents exchange on the bus.

Events are frozen pydantic models named in the past tense. Each has a literal ``kind`` that
discriminates the :data:`Event` union, so every envelope round-trips through JSON unchanged
(a broker-backed bus will serialise them).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Annotated, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from ragjury.schemas.evaluation import (
    MetricScored,
    SampleScored,
    SampleSubmitted,
    StatementsSplit,
)
from ragjury.schemas.records import (
    AnswerCheck,
    Chunk,
    Criterion,
    CritiqueResult,
    Document,
    DraftPlan,
    Failure,
    PairOutcome,
    Persona,
    QAPair,
    without_defaults,
)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class DocumentSubmitted(_Event):
    """A document entered the generation pipeline."""

    kind: Literal["document_submitted"] = "document_submitted"
    document: Document


class ChunkReady(_Event):
    """A chunk of a document is ready for question generation."""

    kind: Literal["chunk_ready"] = "chunk_ready"
    chunk: Chunk
    plan: DraftPlan | None = Field(
        default=None, description="None: a factoid question from this chunk alone."
    )
    persona: Persona | None = Field(
        default=None, description="Who to draft the questions for (``--personas``)."
    )

    @model_serializer(mode="wrap")
    def _plan_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return without_defaults(self, handler, ("plan", "persona"))


class QuestionsDrafted(_Event):
    """The generator drafted pairs for one chunk (before de-duplication)."""

    kind: Literal["questions_drafted"] = "questions_drafted"
    chunk: Chunk
    pairs: tuple[QAPair, ...]


class ChunkFailed(_Event):
    """The generator gave up on a chunk; the run goes on without it."""

    kind: Literal["chunk_failed"] = "chunk_failed"
    chunk: Chunk
    error: Failure


class DuplicateDropped(_Event):
    """A drafted pair was dropped because a near-identical question was already drafted."""

    kind: Literal["duplicate_dropped"] = "duplicate_dropped"
    pair: QAPair
    duplicate_of: str
    similarity: float


class PairDrafted(_Event):
    """A unique drafted pair, ready for the three critics."""

    kind: Literal["pair_drafted"] = "pair_drafted"
    pair: QAPair


class CritiqueIssued(_Event):
    """One critic's judgement of one pair, or why it could not give one."""

    kind: Literal["critique_issued"] = "critique_issued"
    pair_id: str
    criterion: Criterion
    critique: CritiqueResult | None = None
    error: Failure | None = None
    answer_check: AnswerCheck | None = Field(
        default=None, description="The answerability critic's own answer (its criterion only)."
    )

    @model_serializer(mode="wrap")
    def _check_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return without_defaults(self, handler, ("answer_check",))


class PairJudged(_Event):
    """The aggregator's final word on a pair: kept, rejected, or failed."""

    kind: Literal["pair_judged"] = "pair_judged"
    pair: QAPair
    outcome: PairOutcome
    critiques: dict[Criterion, CritiqueResult]
    error: Failure | None = None
    reference_answer: str | None = Field(
        default=None,
        description="A complete, self-contained answer written for a kept pair "
        "(``--reference-answers``).",
    )
    answer_check: AnswerCheck | None = Field(
        default=None, description="What the answerability check did (None: it was off)."
    )

    @model_serializer(mode="wrap")
    def _added_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return without_defaults(self, handler, ("reference_answer", "answer_check"))


class ReferenceWritten(_Event):
    """A kept pair with its reference answer written (``--reference-answers``), or the pair
    failed at the reference writer: what the collector waits for instead of its kept
    :class:`PairJudged`."""

    kind: Literal["reference_written"] = "reference_written"
    judged: PairJudged


class DocumentChunked(_Event):
    """The chunker's count of a document's chunks: what the collector waits for."""

    kind: Literal["document_chunked"] = "document_chunked"
    document_id: str
    chunk_ids: tuple[str, ...]
    not_drafted: int = Field(
        default=0,
        ge=0,
        description="Chunks of the document left out by ``--max-pairs`` (not in chunk_ids).",
    )

    @model_serializer(mode="wrap")
    def _skipped_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return without_defaults(self, handler, ("not_drafted",))


class DocumentJudged(_Event):
    """Every chunk of a document drafted (or failed) and every pair judged (or dropped as a
    duplicate): the generation pipeline's terminal event, one per document."""

    kind: Literal["document_judged"] = "document_judged"
    document_id: str
    pairs: tuple[PairJudged, ...]
    chunks: int
    chunks_failed: int
    pairs_drafted: int
    duplicates_dropped: int
    failed_chunks: tuple[dict[str, JsonValue], ...] = ()
    chunks_not_drafted: int = Field(
        default=0, ge=0, description="Chunks left out by ``--max-pairs``."
    )

    @model_serializer(mode="wrap")
    def _skipped_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return without_defaults(self, handler, ("chunks_not_drafted",))


class ItemFailed(_Event):
    """A document or sample that failed as a whole (its message kept failing or killing its
    worker, or it could not start): told to ``Jury.events()`` listeners, not a bus event."""

    kind: Literal["item_failed"] = "item_failed"
    item: str
    reason: str


BusEvent: TypeAlias = (
    DocumentSubmitted
    | ChunkReady
    | QuestionsDrafted
    | ChunkFailed
    | DuplicateDropped
    | PairDrafted
    | CritiqueIssued
    | PairJudged
    | ReferenceWritten
    | DocumentChunked
    | DocumentJudged
    | SampleSubmitted
    | StatementsSplit
    | MetricScored
    | SampleScored
)
"""Every event an agent consumes or emits: what the runner carries between them."""

JuryEvent: TypeAlias = BusEvent | ItemFailed
"""What ``Jury.events()`` yields: the runner's events, and an item that failed as a whole."""

Event = Annotated[BusEvent, Field(discriminator="kind")]

EVENT_TYPES: tuple[type[BaseModel], ...] = (
    DocumentSubmitted,
    ChunkReady,
    QuestionsDrafted,
    ChunkFailed,
    DuplicateDropped,
    PairDrafted,
    CritiqueIssued,
    PairJudged,
    ReferenceWritten,
    DocumentChunked,
    DocumentJudged,
    SampleSubmitted,
    StatementsSplit,
    MetricScored,
    SampleScored,
)


def _new_id() -> str:
    """A message id: 128 random bits as 32 hex digits, as ``uuid4().hex`` gives them (less
    the version bits), without building a UUID object (several times the cost of the random
    bytes; an envelope is made for every message)."""
    return os.urandom(16).hex()


def _now() -> datetime:
    return datetime.now(UTC)


class Envelope(BaseModel):
    """What travels on the bus: an event plus the ids that tie it to its run and its cause."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    id: str = Field(default_factory=_new_id)
    correlation_id: str = Field(description="The document or sample this message belongs to.")
    causation_id: str | None = Field(default=None, description="The message this one answers.")
    created_at: datetime = Field(default_factory=_now)
    attempt: int = Field(default=1, ge=1)
    job_id: str | None = Field(default=None, description="The job the item belongs to.")
    payload: Event

    @property
    def kind(self) -> str:
        return self.payload.kind

    def reply(self, payload: Event) -> Envelope:
        """A new envelope caused by this one, in the same correlation."""
        return Envelope(
            correlation_id=self.correlation_id,
            causation_id=self.id,
            job_id=self.job_id,
            payload=payload,
        )


ENVELOPE_ADAPTER: TypeAdapter[Envelope] = TypeAdapter(Envelope)


def kind_of(event_type: type[BaseModel]) -> str:
    """The ``kind`` string of an event class."""
    default = event_type.model_fields["kind"].default
    assert isinstance(default, str)
    return default
