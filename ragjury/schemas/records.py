"""Plain data records that travel inside events: documents, chunks, pairs, failures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Criterion = Literal["groundedness", "relevance", "standalone"]
CRITERIA: tuple[Criterion, ...] = ("groundedness", "relevance", "standalone")

PairOutcome = Literal["kept", "rejected", "failed"]


class Record(BaseModel):
    """Base for every record: frozen, and strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


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


class QAPair(Record):
    """A drafted question/answer pair with the chunk it was drafted from."""

    id: str
    question: str
    answer: str
    context: str
    source: str
    chunk_id: str


class Failure(Record):
    """Why a step gave up: the stage, how many LLM attempts it made, the last raw output."""

    stage: str
    attempts: int = Field(ge=0)
    last_raw_output: str | None = None
    message: str
    transient: bool = Field(
        default=False,
        description="The endpoint failed (429s, 5xx, timeouts, no connection), not the model's "
        "output: running the same command again tries the step again.",
    )


class CritiqueResult(Record):
    """One critic's finished judgement of a pair."""

    rating: int = Field(ge=1, le=5)
    rationale: str


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
