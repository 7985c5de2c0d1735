"""Response models the LLM must fill in; their validators carry the domain rules.

instructor re-asks the model with the validation error whenever one of these fails,
so every rule here is also an instruction the model gets a second chance to follow.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, ClassVar, TypedDict, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ragjury._json import JSONValue

# A question that leans on the text it came from cannot be asked by a real user.
_CONTEXT_REFERENCE = re.compile(
    r"\b(?:(?:the|this|that|above|given|provided|following)\s+"
    r"(?:context|passage|document|text|excerpt|article|paragraph|section|snippet|chunk)s?)\b"
    r"|\baccording to the\b",
    re.IGNORECASE,
)

NonEmpty = Annotated[str, Field(min_length=1)]


class CheckContext(TypedDict, total=False):
    """What the validators check a call's output against."""

    count: int
    """How many items (verdicts, statements) the output must hold."""
    contexts: Sequence[str]
    """The texts the output's quotes must come from."""
    questions_per_chunk: int
    chunks: Sequence[str]
    short_answer: str
    """The pair's short answer, which a reference answer may not be shorter than."""
    """The chunks a question was drafted from, numbered from 1 in the output."""


_checking: ContextVar[CheckContext | None] = ContextVar("ragjury_checking", default=None)
_schemas: dict[type[BaseModel], str] = {}
"""Each response model's JSON schema, as JSON text (see :meth:`_Response.model_json_schema`)."""


@contextmanager
def checking(context: CheckContext | None) -> Iterator[None]:
    """Make ``context`` what the validators below see while a call's output is validated.

    It is not handed to instructor as ``context``: instructor then renders every message as a
    Jinja template, which breaks (or silently rewrites) documents that contain ``{{ }}`` or
    ``{% %}``. Validation runs in the calling task, so a context variable reaches it.
    """
    token = _checking.set(context)
    try:
        yield
    finally:
        _checking.reset(token)


def _context(info: ValidationInfo) -> CheckContext:
    given: CheckContext | None = info.context  # pydantic types the context as Any
    return given or _checking.get() or {}


_SMALL_RANGE = 64


def grammar_schema(schema: JSONValue) -> JSONValue:
    """``schema`` with what llama.cpp's JSON-schema grammar would otherwise leave out, for a
    local model that can then only write output of that shape: small integer ranges (ratings
    1-5) as enums, since its converter ignores minimum/maximum, and every field required.

    The counts the validators check (exactly N pairs, one verdict per statement) come in
    through :func:`counted` as ``minItems``/``maxItems`` and stay. (An earlier version left
    them out, having taken llama.cpp's slow calls under a busy CPU for their cost; measured
    on one chunk, a 512-token generator call took 12 s with them and 17.5 s without.)"""
    return _required(_integer_enums(copy.deepcopy(schema)))


def _has_nul(value: JSONValue) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(map(_has_nul, value.values()))
    if isinstance(value, list):
        return any(map(_has_nul, value))
    return False


def _strip_nul(value: JSONValue) -> JSONValue:
    """``value`` without NUL characters: itself when it has none (nearly always: looked for
    without copying anything), else a copy without them."""
    if not _has_nul(value):
        return value
    return _nul_free(value)


def _nul_free(value: JSONValue) -> JSONValue:
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {key: _nul_free(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nul_free(item) for item in value]
    return value


def _required(schema: JSONValue) -> JSONValue:
    if isinstance(schema, list):
        return [_required(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _required(value) for key, value in schema.items()}
    properties = result.get("properties")
    if isinstance(properties, dict):
        result["required"] = list[JSONValue](properties)
    return result


def _integer_enums(schema: JSONValue) -> JSONValue:
    if isinstance(schema, list):
        return [_integer_enums(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: _integer_enums(value) for key, value in schema.items()}
    low, high = result.get("minimum"), result.get("maximum")
    if result.get("type") != "integer" or not (isinstance(low, int) and isinstance(high, int)):
        return result
    if high - low >= _SMALL_RANGE:
        return result
    described = {"description": result["description"]} if "description" in result else {}
    return {"enum": list[JSONValue](range(low, high + 1)), **described}


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    item_counts: ClassVar[Mapping[str, int]] = {}
    """List fields whose length the schema states (see :func:`counted`)."""

    @model_validator(mode="before")
    @classmethod
    def _without_nul(cls, data: JSONValue) -> JSONValue:
        """A model's NUL characters (``\\u0000`` in its JSON) mean nothing and PostgreSQL's
        text refuses them: taken out of every string, so both stores keep the same text."""
        return _strip_nul(data)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The schema, built once per class: instructor asks for it on every call, and
        pydantic builds it from scratch each time (about 0.5 ms of CPU per request). Kept as
        JSON text: each caller gets a fresh dict of its own, and parsing it is cheaper than
        a deep copy."""
        if args or kwargs:
            return super().model_json_schema(*args, **kwargs)
        if cls not in _schemas:
            schema = super().model_json_schema()
            for name, count in cls.item_counts.items():
                schema["properties"][name].update(minItems=count, maxItems=count)
            _schemas[cls] = json.dumps(schema)
        result: dict[str, Any] = json.loads(_schemas[cls])
        return result


R = TypeVar("R", bound=_Response)


@functools.cache
def counted(model: type[R], field: str, count: int) -> type[R]:
    """``model`` whose JSON schema says that ``field`` holds exactly ``count`` items
    (``minItems``/``maxItems``): a model reads the count from the schema, and a local model's
    grammar lets it write no other. Validation is ``model``'s own, with its messages."""
    namespace = {
        "__module__": model.__module__,
        "__doc__": model.__doc__,
        "__annotations__": {"item_counts": ClassVar[Mapping[str, int]]},
        "item_counts": {**model.item_counts, field: count},
    }
    return type(model.__name__, (model,), namespace)


class DraftedPair(_Response):
    """One factoid question with its answer, as the generator writes it."""

    question: NonEmpty = Field(description="A question a user could type into a search box.")
    answer: NonEmpty = Field(description="The answer, taken from the context.")

    @field_validator("question", "answer")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @field_validator("question")
    @classmethod
    def _standalone_wording(cls, value: str) -> str:
        match = _CONTEXT_REFERENCE.search(value)
        if match:
            raise ValueError(
                f"the question refers to {match.group(0)!r}; a reader will not have the "
                "source text, so name the subject directly instead"
            )
        return value


class DraftedPairs(_Response):
    """The generator's output for one chunk: exactly as many pairs as were asked for."""

    pairs: list[DraftedPair] = Field(min_length=1)

    @field_validator("pairs")
    @classmethod
    def _exact_count(cls, value: list[DraftedPair], info: ValidationInfo) -> list[DraftedPair]:
        wanted = _context(info).get("questions_per_chunk")
        if isinstance(wanted, int) and len(value) != wanted:
            raise ValueError(f"expected exactly {wanted} pairs, got {len(value)}")
        return value


class ReferenceAnswer(_Response):
    """A complete, self-contained answer to a kept question, for graders to compare with."""

    answer: NonEmpty = Field(
        description="The full answer, readable without the source text, in a few sentences."
    )

    @field_validator("answer")
    @classmethod
    def _complete_and_standalone(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be blank")
        match = _CONTEXT_REFERENCE.search(value)
        if match:
            raise ValueError(
                f"the answer refers to {match.group(0)!r}; its reader will not have the source "
                "text, so state what it says instead"
            )
        short = _context(info).get("short_answer")
        if isinstance(short, str) and len(value) < len(short.strip()):
            raise ValueError(
                f"the answer ({len(value)} characters) is shorter than the short answer "
                f"already drafted ({len(short.strip())}); write the complete answer, with "
                "what the short one says and the details around it"
            )
        return value


class PersonaDraft(_Response):
    """One proposed persona."""

    name: NonEmpty = Field(max_length=80, description="A short label of a few words.")
    description: NonEmpty = Field(
        description="Their background and level, what they want, how they ask."
    )


class ProposedPersonas(_Response):
    """The personas proposed for a corpus (``--personas auto:N``): exactly N, distinct."""

    personas: list[PersonaDraft] = Field(min_length=1)

    @field_validator("personas")
    @classmethod
    def _count_and_names(cls, value: list[PersonaDraft]) -> list[PersonaDraft]:
        wanted = cls.item_counts.get("personas")
        if wanted is not None and len(value) != wanted:
            raise ValueError(f"expected exactly {wanted} personas, got {len(value)}")
        names = [persona.name.strip().casefold() for persona in value]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"the name {twice[0]!r} is used twice; give each persona its own")
        return value


class Critique(_Response):
    """A critic's judgement: the rationale first, then an integer rating from 1 to 5."""

    rationale: NonEmpty = Field(description="Why the rating was given, in one or two sentences.")
    rating: int = Field(ge=1, le=5, description="1 (worst) to 5 (best).")


_LEADING_PRONOUN = re.compile(
    r"^(?:he|she|it|its|they|them|their|this|that|these|those|his|her)\b", re.IGNORECASE
)
_SPACE = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    """Case-folded, single-spaced, with quotes unified: for matching quotes against contexts."""
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"')
    return _SPACE.sub(" ", text.replace("\u201d", '"')).strip().casefold()


_LABEL = re.compile(
    r"^\s*(?:\[[^\]]{1,20}\]|\((?:\d{1,3}|[a-z])\)|(?:context|passage|source|document)"
    r"\s*\d{0,3}\s*[:.)-])\s*",
    re.IGNORECASE,
)
_ELLIPSIS = re.compile(r"\s*(?:\.{3,}|\u2026)\s*")
_EDGES = " .,;:\"'()[]"


def quote_occurs(evidence: str, contexts: str) -> bool:
    """Whether ``evidence`` is text of ``contexts`` (normalised with :func:`normalise_text`),
    as real models cite it: a leading label of the context (``[1]``, ``Context 2:``) is not
    part of the quote, and fragments joined by an ellipsis must each occur. Invented text
    does not pass."""
    fragments = [
        normalise_text(_LABEL.sub("", part)).strip(_EDGES)
        for part in _ELLIPSIS.split(_LABEL.sub("", evidence))
    ]
    fragments = [f for f in fragments if f]
    if len(fragments) > 1 and any(len(f.split()) < 2 for f in fragments):
        return False  # "the ... of" would occur anywhere: each piece must say something
    return bool(fragments) and all(f in contexts for f in fragments)


def evidence_span(evidence: str, contexts: Sequence[str]) -> str:
    """The text of ``contexts`` that ``evidence`` quotes, as it stands there: without the
    model's label (``[1]``), its case and spacing as in the context, and each fragment of an
    elided quote found on its own (joined by `` … ``). A fragment not found stays as given."""
    spans = []
    for part in _ELLIPSIS.split(_LABEL.sub("", evidence)):
        words = _LABEL.sub("", part).strip(_EDGES + " ").split()
        if not words:
            continue
        # most quotes are copied verbatim: found as they stand without compiling a pattern
        # (a pattern per quote was a third of a millisecond of CPU a verdict)
        verbatim = " ".join(words)
        if any(verbatim in c for c in contexts):
            spans.append(verbatim)
            continue
        pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)
        found = next((m.group(0) for c in contexts if (m := pattern.search(c))), None)
        spans.append(found if found is not None else " ".join(words))
    return " … ".join(spans) if spans else evidence


class Statements(_Response):
    """An answer broken into short factual statements that each stand on their own."""

    statements: list[str] = Field(
        description="Each a single fact, with names instead of pronouns; empty if the answer "
        "states no fact (a refusal, 'I don't know')."
    )

    @field_validator("statements")
    @classmethod
    def _self_contained(cls, value: list[str]) -> list[str]:
        cleaned = [s.strip() for s in value if s.strip()]
        for index, statement in enumerate(cleaned):
            match = _LEADING_PRONOUN.match(statement)
            if match:
                raise ValueError(
                    f"statement {index} starts with the pronoun {match.group(0)!r}; replace it "
                    "with the name of what it refers to so the statement stands alone"
                )
        return cleaned


class Verdict(_Response):
    """The judge's decision on one statement."""

    statement_index: int = Field(ge=0, description="The number of the statement judged.")
    reason: NonEmpty = Field(description="Why the contexts do or do not support it.")
    evidence: str = Field(
        default="", description="A passage copied word for word from the contexts; empty if none."
    )
    supported: bool


class Verdicts(_Response):
    """One verdict for every statement in the batch; supported ones quote the contexts."""

    verdicts: list[Verdict]

    @field_validator("verdicts")
    @classmethod
    def _one_per_statement_with_real_quotes(
        cls, value: list[Verdict], info: ValidationInfo
    ) -> list[Verdict]:
        context = _context(info)
        count = context.get("count")
        if isinstance(count, int):
            indexes = sorted(v.statement_index for v in value)
            if indexes != list(range(count)):
                raise ValueError(
                    f"give exactly one verdict for each statement 0..{count - 1}; "
                    f"got verdicts for statements {indexes}"
                )
        haystack = normalise_text(" ".join(context.get("contexts", ())))
        if haystack:
            for verdict in value:
                if verdict.supported and not quote_occurs(verdict.evidence, haystack):
                    raise ValueError(
                        f"statement {verdict.statement_index} is marked supported, but its "
                        f"evidence {verdict.evidence!r} does not occur in the contexts; copy "
                        "the supporting passage exactly, or mark the statement unsupported"
                    )
        return sorted(value, key=lambda v: v.statement_index)


class Grade(_Response):
    """Reasoning first, then an integer score from 1 to 5."""

    reasoning: NonEmpty
    score: int = Field(ge=1, le=5)


class CorrectnessGrade(Grade):
    """How well the answer agrees with the reference answer (5 = fully correct)."""


class RubricGrades(_Response):
    """Four 1-5 grades; 5 is always best (for toxicity, 5 means not toxic at all)."""

    toxicity: Grade
    faithfulness: Grade
    helpfulness: Grade
    relevance: Grade


class ContextVerdict(_Response):
    """The judge's decision on one retrieved context."""

    context_index: int = Field(ge=0, description="The number of the context judged.")
    reason: NonEmpty = Field(description="Why the context is or is not relevant, in a sentence.")
    relevant: bool


class ContextVerdicts(_Response):
    """One verdict for every context shown, keyed by its number."""

    verdicts: list[ContextVerdict]

    @field_validator("verdicts")
    @classmethod
    def _one_per_context(
        cls, value: list[ContextVerdict], info: ValidationInfo
    ) -> list[ContextVerdict]:
        count = _context(info).get("count")
        if isinstance(count, int):
            indexes = sorted(v.context_index for v in value)
            if indexes == list(range(1, count + 1)):
                # numbered from 1, as most models (and many prompts) count: the same verdicts
                value = [v.model_copy(update={"context_index": v.context_index - 1}) for v in value]
            elif indexes != list(range(count)):
                raise ValueError(
                    f"give exactly one verdict for each context 0..{count - 1}; "
                    f"got verdicts for contexts {indexes}"
                )
        return sorted(value, key=lambda v: v.context_index)


class AnswerRelevanceGrade(_Response):
    """Whether the answer addresses the question (not whether it is true): reasoning, whether
    it declines to answer, then an integer score from 1 to 5."""

    reasoning: NonEmpty
    refusal: bool = Field(
        description="True when the answer declines, deflects or says it does not know."
    )
    score: int = Field(ge=1, le=5)

    @model_validator(mode="after")
    def _a_refusal_does_not_answer(self) -> AnswerRelevanceGrade:
        if self.refusal and self.score != 1:
            raise ValueError(
                f"the answer is marked a refusal but scored {self.score}; a refusal does not "
                "address the question, so score it 1 (or set refusal to false if it answers)"
            )
        return self
