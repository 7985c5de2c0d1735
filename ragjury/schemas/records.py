"""Plain data records that travel inside events: documents, chunks, pairs, failures."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Criterion = Literal["groundedness", "relevance", "standalone", "answerability"]
CRITERIA: tuple[Criterion, ...] = ("groundedness", "relevance", "standalone")
"""The critics every generation job has (the answerability check is on by the job's options)."""
ANSWERABILITY: Criterion = "answerability"

QuestionType = Literal["factoid", "reasoning", "multi_hop", "comparative"]
QUESTION_TYPES: tuple[QuestionType, ...] = ("factoid", "reasoning", "multi_hop", "comparative")
"""The kinds of question the generator drafts, in the order a chunk's draw goes through them."""
MULTI_CHUNK_TYPES: frozenset[QuestionType] = frozenset({"multi_hop", "comparative"})
"""The types drafted from a chunk and the related chunk found for it."""

PairOutcome = Literal["kept", "rejected", "failed"]


class Record(BaseModel):
    """Base for every record: frozen, and strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Document(Record):
    """One source document: a file's text or one record of a JSON/JSONL file."""

    id: str = Field(description="Stable id: the file path, or the record id for JSON input.")
    source: str = Field(description="Where it came from, as shown to the user.")
    text: str


class Chunk(Record):
    """A piece of a document that questions are generated from."""

    id: str
    document_id: str
    source: str
    index: int = Field(ge=0)
    text: str


def without_defaults(
    record: BaseModel, handler: SerializerFunctionWrapHandler, names: tuple[str, ...]
) -> dict[str, object]:
    """``record`` serialised without the fields ``names`` that hold their default: fields
    added after the record was first stored, so that a record that does not use them dumps
    as it always did (the step cache and the job keys hash those dumps)."""
    data: dict[str, object] = handler(record)
    fields = type(record).model_fields
    for name in names:
        if getattr(record, name) == fields[name].get_default(call_default_factory=True):
            data.pop(name, None)
    return data


class Persona(Record):
    """Who asks a question: a short name and what they know, want and how they ask."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=80, description="A short label, e.g. 'new user'.")
    description: str = Field(
        min_length=1, description="What they know, what they need from the documents, their tone."
    )


class DraftPlan(Record):
    """What kind of question to draft from a chunk, and from which related chunks too."""

    question_type: QuestionType
    related: tuple[Chunk, ...] = Field(
        default=(), description="Chunks of the job related to this one (multi_hop, comparative)."
    )
    shared_terms: tuple[str, ...] = Field(
        default=(), description="The rare terms the chunks share: why they were related."
    )


class QAPair(Record):
    """A drafted question/answer pair with the chunk(s) it was drafted from."""

    id: str
    question: str
    answer: str
    context: str
    source: str
    chunk_id: str
    question_type: QuestionType = "factoid"
    related: tuple[Chunk, ...] = Field(
        default=(), description="The chunks drafted from besides the first (``chunk_id``)."
    )
    shared_terms: tuple[str, ...] = ()
    persona: Persona | None = Field(
        default=None, description="Who the question was drafted for (``--personas``)."
    )

    @model_serializer(mode="wrap")
    def _added_fields_when_used(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        return without_defaults(
            self, handler, ("question_type", "related", "shared_terms", "persona")
        )

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        """Every source chunk's id, the first one first."""
        return (self.chunk_id, *(chunk.id for chunk in self.related))

    @property
    def contexts(self) -> tuple[str, ...]:
        """Every source chunk's text, in the order of :attr:`chunk_ids`."""
        return (self.context, *(chunk.text for chunk in self.related))


class Failure(Record):
    """Why a step gave up: the stage, how many LLM attempts it made, the last raw output."""

    stage: str
    attempts: int = Field(ge=0)
    last_raw_output: str | None = None
    message: str
    transient: bool = Field(
        default=False,
        description="The endpoint failed (429s, 5xx, timeouts, no connection), not the model's "
        "output, or the step was refused unsent over --max-prompt-tokens: running the same "
        "command again tries the step again.",
    )


class CritiqueResult(Record):
    """One critic's finished judgement of a pair."""

    rating: int = Field(ge=1, le=5)
    rationale: str


class AloneAttempt(Record):
    """The answerability critic's try at a multi-hop question from one of its chunks alone."""

    chunk_id: str
    answerable: bool = Field(description="Whether the chunk alone held an answer.")
    answer: str
    rating: int | None = Field(
        default=None, ge=1, le=5, description="How well that answer agrees with the drafted one."
    )
    rationale: str | None = None


class AnswerCheck(Record):
    """What the answerability critic did to a pair: its own answer, written from the pair's
    contexts without seeing the drafted one, and (multi-hop) its tries from each chunk alone.
    Its rating and rationale are the pair's ``answerability`` critique."""

    answer: str = Field(description="The critic's own answer to the question.")
    answerable: bool = Field(description="Whether the critic found an answer in the contexts.")
    alone: tuple[AloneAttempt, ...] = ()
    answered_alone_by: str | None = Field(
        default=None,
        description="The chunk that answers a multi-hop question alone (so it is not one).",
    )
    retyped_from: QuestionType | None = Field(
        default=None, description="The drafted type, when the pair was retyped (to factoid)."
    )
    chunk_ids: tuple[str, ...] = Field(
        default=(), description="The drafted chunks of a retyped pair, before it was narrowed."
    )
    note: str | None = None


class Sample(Record):
    """One RAG interaction to judge: a question, the answer given, the contexts retrieved."""

    id: str = Field(
        default="",
        description="Unique in its batch; left empty, Jury gives it sample-{n} (n: its position).",
    )
    question: str
    answer: str | None = Field(default=None, description="None until a --target answers it.")
    contexts: tuple[str, ...] = ()
    context_ids: tuple[str | None, ...] = Field(
        default=(),
        description="The retrieved contexts' ids, in the order of ``contexts`` (None where a "
        "context has none); empty when none is known.",
    )
    reference: str | None = None
    reference_contexts: tuple[str, ...] = Field(
        default=(), description="The contexts that hold the answer (ground truth for retrieval)."
    )
    reference_context_ids: tuple[str, ...] = Field(
        default=(), description="The ids of the contexts that hold the answer."
    )
    must_contain: tuple[str, ...] = ()
    must_not_contain: tuple[str, ...] = ()
    must_not_start_with: tuple[str, ...] = ()
    answer_logprobs: tuple[float, ...] | None = Field(
        default=None, description="Token log-probabilities of the answer, when known."
    )

    @model_validator(mode="after")
    def _ids_follow_contexts(self) -> Sample:
        if self.context_ids and len(self.context_ids) != len(self.contexts):
            raise ValueError(
                f"context_ids has {len(self.context_ids)} ids for {len(self.contexts)} contexts; "
                "give one id per context (null for a context without one), or none at all"
            )
        return self


KeywordRule = Literal["must_contain", "must_not_contain", "must_not_start_with"]


class KeywordCheck(Record):
    """One keyword test on an answer and whether it passed."""

    type: KeywordRule
    keyword: str
    passed: bool
