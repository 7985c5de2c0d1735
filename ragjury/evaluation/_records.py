"""One record (a parsed JSON object, CSV row or table row) turned into a :class:`Sample`.

The field names read, and how list fields are read from CSV cells, are described in
:mod:`ragjury.evaluation.inputs`.
"""

from __future__ import annotations

import ast
import io
import json
import tokenize
from collections.abc import Mapping
from typing import TypedDict

import structlog
from pydantic import ValidationError

from ragjury._json import JSONData, JSONValue, Record
from ragjury.evaluation._rows import Unreadable, keys_text, type_name
from ragjury.evaluation.targets import context_id
from ragjury.schemas.records import Sample
from ragjury.text import clean_value

__all__ = ["SAMPLE_FIELDS", "SampleBuilder"]

QUESTION_FIELDS = ("question", "user_input", "input", "query")
ANSWER_FIELDS = ("answer", "response", "actual_output")
CONTEXTS_FIELDS = ("contexts", "retrieved_contexts", "retrieval_context", "context")
CONTEXT_IDS_FIELDS = ("context_ids", "retrieved_context_ids")
REFERENCE_CONTEXTS_FIELDS = ("reference_contexts",)
REFERENCE_CONTEXT_IDS_FIELDS = ("reference_context_ids", "correct_chunks")
REFERENCE_FIELDS = (
    "reference",
    "expected_output",
    "ground_truth",
    "correct_answer",
    "reference_answer",
)
KEYWORD_FIELDS = ("must_contain", "must_not_contain", "must_not_start_with")
SAMPLE_FIELDS = (
    "id",
    "question",
    "answer",
    "contexts",
    "context_ids",
    "reference",
    "reference_contexts",
    "reference_context_ids",
    *KEYWORD_FIELDS,
    "answer_logprobs",
)

log = structlog.get_logger("ragjury.input")


class _SampleFields(TypedDict, total=False):
    """The fields of a :class:`Sample` as a record gives them."""

    id: str
    question: str
    answer: str | None
    contexts: tuple[str, ...]
    context_ids: tuple[str | None, ...]
    reference: str | None
    reference_contexts: tuple[str, ...]
    reference_context_ids: tuple[str, ...]
    must_contain: tuple[str, ...]
    must_not_contain: tuple[str, ...]
    must_not_start_with: tuple[str, ...]
    answer_logprobs: tuple[float, ...] | None


class _Invalid(Exception):
    """Raised while reading one record to skip it with a reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SampleBuilder:
    """Turns one record into a sample, or into the reason it cannot be one."""

    def __init__(
        self, *, stem: str, from_csv: bool, fields: Mapping[str, str] | None = None
    ) -> None:
        self.stem, self.from_csv = stem, from_csv
        self.mapped = {name: (source,) for name, source in (fields or {}).items()}

    def build(
        self, line: int, record: JSONData | Unreadable, *, log_repairs: bool = True
    ) -> Sample | str:
        """The sample of the record on ``line``, or why it was skipped. Bad text is repaired
        (and logged, with ``log_repairs``); ids are not checked against other records'."""
        record, repairs = clean_value(record)
        if repairs and log_repairs:
            log.warning(
                "input_repaired",
                line=line,
                repairs="; ".join(repairs),
                say=f"line {line}: {'; '.join(repairs)}, so the text can be stored and sent",
            )
        try:
            if isinstance(record, Unreadable):
                raise _Invalid(record.reason)
            return self._sample(line, record)
        except _Invalid as invalid:
            return invalid.reason

    def _sample(self, line: int, record: JSONData) -> Sample:
        if not isinstance(record, dict):
            raise _Invalid(f"record is {type_name(record)}, not an object; give a JSON object")
        names = self.mapped.get
        fields: _SampleFields = {
            "id": _record_id(record, f"{self.stem}-{line}", names("id", ("id",))[0]),
            "question": _question(record, names("question", QUESTION_FIELDS)),
        }
        generated = "critiques" in record or ("outcome" in record and "chunk_id" in record)
        if generated and not self.mapped:
            # the complete reference answer (--reference-answers) when it has one
            fields["reference"] = _text(record, ("reference_answer", "answer"))
            # every chunk a question was drafted from (``--question-types``), else its one
            several = _pick(record, ("chunk_ids",)) is not None
            split = self.from_csv and several
            texts, chunk_ids = ("contexts", "chunk_ids") if several else ("context", "chunk_id")
            fields["reference_contexts"] = _texts(record, (texts,), split=split)
            fields["reference_context_ids"] = _ids(record, (chunk_ids,), split=split)
        else:
            fields["answer"] = _text(record, names("answer", ANSWER_FIELDS))
            contexts = names("contexts", CONTEXTS_FIELDS)
            fields["contexts"], ids = _contexts(record, contexts, split=self.from_csv)
            listed = _ids(record, names("context_ids", CONTEXT_IDS_FIELDS), split=self.from_csv)
            fields["context_ids"] = listed or ids
            fields["reference"] = _text(record, names("reference", REFERENCE_FIELDS))
            fields["reference_contexts"] = _texts(
                record,
                names("reference_contexts", REFERENCE_CONTEXTS_FIELDS),
                split=self.from_csv,
            )
            fields["reference_context_ids"] = _ids(
                record,
                names("reference_context_ids", REFERENCE_CONTEXT_IDS_FIELDS),
                split=self.from_csv,
            )
        keywords = {
            name: _texts(record, names(name, (name,)), split=self.from_csv, keywords=True)
            for name in KEYWORD_FIELDS
        }
        fields["must_contain"] = keywords["must_contain"]
        fields["must_not_contain"] = keywords["must_not_contain"]
        fields["must_not_start_with"] = keywords["must_not_start_with"]
        fields["answer_logprobs"] = _logprobs(
            record, names("answer_logprobs", ("answer_logprobs",))[0]
        )
        ids = fields.get("context_ids", ())
        given = fields.get("contexts", ())
        if ids and len(ids) != len(given):
            raise _Invalid(
                f"the record has {len(ids)} context ids for {len(given)} contexts; give one "
                "id per context, in the same order"
            )
        try:
            return Sample(**fields)
        except ValidationError as exc:  # not expected: the fields above are already checked
            raise _Invalid(f"record does not fit a sample: {exc}") from exc


def _pick(record: Record, names: tuple[str, ...]) -> tuple[str, JSONData] | None:
    """The first of ``names`` the record has a value for (null counts as absent)."""
    for name in names:
        if record.get(name) is not None:
            return name, record[name]
    return None


def _record_id(record: Record, default: str, name: str = "id") -> str:
    value = record.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Invalid(
            f"field {name!r} is {type_name(value)}; give a string or integer id, or leave it out"
        )
    if not str(value).strip():
        raise _Invalid(f"field {name!r} is empty; give a non-empty id, or leave it out")
    return str(value)


def _question(record: Record, names: tuple[str, ...]) -> str:
    picked = _pick(record, names)
    if picked is None:
        present = [name for name in names if name in record]
        if present:
            raise _Invalid(f"field {present[0]!r} is empty; write the question there")
        looked_for = ", ".join(repr(name) for name in names)
        raise _Invalid(
            f"record has no question (looked for {looked_for}; the record has "
            f"{keys_text(record)}); "
            "rename the question field to 'question', or name it with --field question=FIELD"
        )
    name, value = picked
    if not isinstance(value, str):
        raise _Invalid(f"field {name!r} is {type_name(value)}; the question must be a string")
    if not value.strip():
        raise _Invalid(f"field {name!r} is empty; write the question there")
    return value


def _text(record: Record, names: tuple[str, ...]) -> str | None:
    picked = _pick(record, names)
    if picked is None:
        return None
    name, value = picked
    if not isinstance(value, str):
        raise _Invalid(
            f"field {name!r} is {type_name(value)}; give a string, or leave the field out"
        )
    return value


def _texts(
    record: Record, names: tuple[str, ...], *, split: bool, keywords: bool = False
) -> tuple[str, ...]:
    """A list-of-strings field; a string is one item, or (CSV) a JSON array or ``a|b`` text."""
    picked = _pick(record, names)
    if picked is None:
        return ()
    name, value = picked
    if isinstance(value, str):
        if split:
            value = _split_cell(value)
        else:
            return (value,) if value.strip() else ()
    if isinstance(value, tuple):
        value = list(value)
    strings = [item for item in value if isinstance(item, str)] if isinstance(value, list) else []
    if not isinstance(value, list) or len(strings) != len(value):
        raise _Invalid(
            f"field {name!r} is {type_name(value)}; give a list of strings (or one string)"
        )
    if keywords and not all(item.strip() for item in strings):
        raise _Invalid(f"field {name!r} holds an empty keyword; remove it")
    return tuple(strings)


def _contexts(
    record: Record, names: tuple[str, ...], *, split: bool
) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """The retrieved contexts, strings or objects with a ``text`` (or ``page_content``) and
    an ``id``; their ids, ``()`` when none has one."""
    name, value = _pick(record, names) or ("", None)
    if not isinstance(value, list | tuple):
        return _texts(record, names, split=split), ()
    texts: list[str] = []
    ids: list[str | None] = []
    for index, item in enumerate(value):
        if isinstance(item, dict):
            text = next(
                (item[k] for k in ("text", "page_content") if isinstance(item.get(k), str)), None
            )
            if text is None:
                raise _Invalid(
                    f"field {name!r} item {index} is an object without a 'text' string; give "
                    'strings, or objects such as {"id": "doc-1", "text": "..."}'
                )
            texts.append(text)
            ids.append(context_id(item))
        elif isinstance(item, str):
            texts.append(item)
            ids.append(None)
        else:
            raise _Invalid(
                f"field {name!r} item {index} is {type_name(item)}; give strings, or objects "
                "with a 'text' string and an 'id'"
            )
    return tuple(texts), tuple(ids) if any(i is not None for i in ids) else ()


def _ids(record: Record, names: tuple[str, ...], *, split: bool) -> tuple[str, ...]:
    """A list of ids (strings or integers), or one id."""
    picked = _pick(record, names)
    if picked is None:
        return ()
    name, value = picked
    if isinstance(value, str) and split:
        value = _split_cell(value)
    if isinstance(value, str | int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, str | int) and not isinstance(item, bool) for item in value
    ):
        raise _Invalid(
            f"field {name!r} is {type_name(value)}; give a list of ids (strings), or one id"
        )
    return tuple(str(item) for item in value if str(item).strip())


def _split_cell(cell: str) -> JSONData:
    """A CSV cell holding a list: a JSON array, a Python or numpy list of strings (as pandas
    writes a list column), else ``|``-separated text."""
    if cell.lstrip().startswith("["):
        try:
            parsed: JSONValue = json.loads(cell)
            return parsed
        except json.JSONDecodeError:
            pass
        listed = _repr_list(cell)
        if listed is not None:
            return listed
    return [part.strip() for part in cell.split("|") if part.strip()]


_LAYOUT = frozenset({tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT})


def _repr_list(cell: str) -> list[str] | None:
    """``['a', 'b']`` (Python's repr) or ``['a' 'b']`` (numpy's): the strings, each literal
    read on its own (so numpy's missing commas never join two contexts); None otherwise."""
    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(cell.strip()).readline)
            if t.type not in _LAYOUT
        ]
    except (tokenize.TokenError, SyntaxError):
        return None
    if len(tokens) < 2 or (tokens[0].string, tokens[-1].string) != ("[", "]"):
        return None
    items: list[str] = []
    for token in tokens[1:-1]:
        if token.type == tokenize.STRING:
            value = ast.literal_eval(token.string)
            if not isinstance(value, str):
                return None
            items.append(value)
        elif token.string != ",":
            return None
    return items


def _logprobs(record: Record, name: str = "answer_logprobs") -> tuple[float, ...] | None:
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = _split_cell(value)
            if isinstance(value, list):
                value = [float(item) if isinstance(item, str) else item for item in value]
        except ValueError:
            pass
    numbers = [
        float(item)
        for item in (value if isinstance(value, list) else ())
        if isinstance(item, int | float) and not isinstance(item, bool)
    ]
    if not isinstance(value, list) or len(numbers) != len(value):
        raise _Invalid(
            f"field 'answer_logprobs' is {type_name(value)}; give a list of numbers, "
            "or leave the field out"
        )
    return tuple(numbers)
