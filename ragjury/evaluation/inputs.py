"""Load the samples that ``ragjury evaluate FILE`` judges, from JSONL, JSON, CSV, Parquet
or a Hugging Face dataset saved to disk.

Records are read in the field names of ragjury, RAGAS, DeepEval and LlamaIndex
(``rag_dataset.json``) without any mapping, and the records ``ragjury generate`` writes are
read as questions with reference answers. For each field the first name present wins, unless
``fields`` (``--field NAME=SOURCE``) names the one to read:

=============  ===============================================================
question       ``question``, ``user_input`` (RAGAS), ``input`` (DeepEval), ``query``
answer         ``answer``, ``response`` (RAGAS), ``actual_output`` (DeepEval)
contexts       ``contexts``, ``retrieved_contexts``, ``retrieval_context``, ``context``
               (strings, or objects with ``text``/``page_content`` and an ``id``)
context_ids    ``context_ids``, ``retrieved_context_ids`` (RAGAS)
reference      ``reference``, ``expected_output`` (DeepEval), ``ground_truth``,
               ``correct_answer``, ``reference_answer`` (LlamaIndex)
reference_contexts     ``reference_contexts`` (RAGAS, LlamaIndex)
reference_context_ids  ``reference_context_ids`` (RAGAS), ``correct_chunks``
keywords       ``must_contain``, ``must_not_contain``, ``must_not_start_with``
logprobs       ``answer_logprobs``
=============  ===============================================================

In CSV a list field may be a JSON array, a Python or numpy list as pandas writes it
(``['a', 'b']``), or ``a|b`` text.

A record with ``critiques``, or with both ``outcome`` and ``chunk_id``, was written by
``ragjury generate``: its ``answer`` is the reference answer, its ``context`` and ``chunk_id``
the reference context the question came from, and it has no answer or retrieved contexts yet
(a ``--target`` gives them).

The file itself must be usable (it exists, has a known suffix and, for JSON, parses), or
:class:`~ragjury.errors.InputError` is raised. Inside it nothing raises: a record that cannot
be used is reported as an :class:`InvalidRecord` with its line number and the reason, and the
other records still load. A missing answer is not an error; the caller decides.
"""

from __future__ import annotations

import ast
import codecs
import csv
import io
import json
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from ragjury.errors import InputError
from ragjury.evaluation.tables import arrow_rows, is_hf_dataset, parquet_rows
from ragjury.evaluation.targets import context_id
from ragjury.schemas.records import Sample
from ragjury.text import clean_value

__all__ = [
    "SAMPLE_FIELDS",
    "InvalidRecord",
    "SampleSet",
    "field_map",
    "load_samples",
    "parse_fields",
    "samples_from_records",
]

_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
}

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

_MAX_KEYS_SHOWN = 12


log = structlog.get_logger("ragjury.input")


@dataclass(frozen=True)
class InvalidRecord:
    """A record that was skipped: where it is and what to fix.

    ``line`` is the 1-based line number in JSONL and CSV files (the CSV header is line 1) and
    the 1-based record index in a JSON list.
    """

    line: int
    reason: str


@dataclass(frozen=True)
class SampleSet:
    """The samples loaded from ``path``, in file order, and the records skipped."""

    samples: list[Sample]
    invalid: list[InvalidRecord]
    path: str


def parse_fields(values: Iterable[str]) -> dict[str, str]:
    """``--field NAME=SOURCE`` flags as a mapping, checked by :func:`field_map`."""
    pairs: dict[str, str] = {}
    for value in values:
        name, sep, source = value.partition("=")
        if not sep or not name.strip() or not source.strip():
            raise InputError(
                f"--field expects NAME=SOURCE, got {value!r}; e.g. --field question=query"
            )
        pairs[name.strip()] = source.strip()
    return field_map(pairs)


def field_map(pairs: Mapping[str, str]) -> dict[str, str]:
    """``--field NAME=SOURCE`` pairs, checked: NAME must be a sample field."""
    unknown = sorted(set(pairs) - set(SAMPLE_FIELDS))
    if unknown:
        raise InputError(
            f"--field {unknown[0]}=... names no sample field; use one of "
            f"{', '.join(SAMPLE_FIELDS)}, e.g. --field question=query"
        )
    return dict(pairs)


def load_samples(path: str | Path, fields: Mapping[str, str] | None = None) -> SampleSet:
    """Read every sample in a ``.jsonl``/``.ndjson``, ``.json``, ``.csv`` or ``.parquet``
    file, or a folder a Hugging Face dataset was saved to (``save_to_disk``).

    ``fields`` maps a sample field to the record field that holds it (see
    :func:`field_map`). Records without an ``id`` get ``{file stem}-{n}``, n being the line
    number (record index for JSON, row for Parquet and Arrow). Raises InputError when the
    file is missing, has another suffix, cannot be decoded, or (JSON) does not parse or hold
    a list of records.
    """
    file = Path(path)
    if not file.exists():
        where = "" if file.is_absolute() else f" (relative to {Path.cwd()})"
        raise InputError(
            f"sample file {str(path)!r} does not exist{where}; check the path for typos"
        )
    mapping = field_map(fields or {})
    if file.is_dir() and is_hf_dataset(file):
        return _load_rows(arrow_rows(file), file, mapping, from_csv=False)
    fmt = _FORMATS.get(file.suffix.lower())
    if fmt is None:
        accepted = ", ".join(_FORMATS)
        raise InputError(
            f"cannot read samples from {str(path)!r}: unknown suffix {file.suffix!r}; "
            f"save the samples as one of {accepted}"
        )
    if not file.is_file():
        raise InputError(f"sample path {str(path)!r} is not a file; pass a {fmt} file")
    if fmt == "parquet":
        return _load_rows(parquet_rows(file), file, mapping, from_csv=False)
    text = _read_text(file)
    if fmt == "jsonl":
        rows = _jsonl_rows(text)
    elif fmt == "csv":
        rows = _csv_rows(text, str(path))
    else:
        rows = _json_rows(text, str(path))
    return _load_rows(rows, file, mapping, from_csv=fmt == "csv")


def _load_rows(
    rows: Iterable[tuple[int, Any]], file: Path, fields: Mapping[str, str], *, from_csv: bool
) -> SampleSet:
    builder = _SampleBuilder(stem=file.stem, from_csv=from_csv, fields=fields)
    for line, record in rows:
        builder.add(line, record)
    return SampleSet(samples=builder.samples, invalid=builder.invalid, path=str(file))


def samples_from_records(records: Iterable[Any], *, stem: str) -> SampleSet:
    """Samples from records already in memory (dicts), read as the lines of a JSONL file:
    the same field names, and ``{stem}-{n}`` for a record without an ``id`` (n from 1)."""
    builder = _SampleBuilder(stem=stem, from_csv=False)
    for line, record in enumerate(records, start=1):
        builder.add(line, record)
    return SampleSet(samples=builder.samples, invalid=builder.invalid, path="<records>")


class _Invalid(Exception):
    """Raised while reading one record to skip it with a reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Unreadable:
    """A row that could not even be parsed (a JSONL line that is not JSON)."""

    reason: str


def _read_text(file: Path) -> str:
    """The file decoded as UTF-8 (a BOM is dropped) or UTF-16 with a BOM."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {str(file)!r}: {exc.strerror or exc}") from exc
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else None
    try:
        return data.decode(encoding or "utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{str(file)!r} is not UTF-8 text (byte {exc.start} cannot be decoded); "
            "save the file as UTF-8"
        ) from exc


def _jsonl_rows(text: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield (
                number,
                _Unreadable(
                    f"line is not JSON (column {exc.colno}: {exc.msg}); "
                    "write one JSON object per line"
                ),
            )


def _json_rows(text: str, path: str) -> Iterator[tuple[int, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        first = next((line for line in text.split("\n") if line.strip()), "")
        if exc.msg == "Extra data" and _is_json_object(first):  # JSONL saved as .json
            yield from _jsonl_rows(text)
            return
        raise InputError(
            f"{path!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; "
            "fix the JSON there, or save one object per line as .jsonl"
        ) from exc
    yield from enumerate(_records_in(data, path), start=1)


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _records_in(data: Any, path: str) -> list[Any]:
    """The records of a JSON document: the list itself, or an object's one list of records."""
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise InputError(
            f"{path!r} holds {_type_name(data)}; expected a list of sample objects "
            'or an object with one list of them, such as {"samples": [...]}'
        )
    lists = [key for key, value in data.items() if isinstance(value, list)]
    if len(lists) != 1:
        lists = [
            key for key in lists if data[key] and all(isinstance(item, dict) for item in data[key])
        ]
    if len(lists) == 1:
        records: list[Any] = data[lists[0]]
        return records
    if not lists:
        raise InputError(
            f"{path!r} holds an object without a list of records (fields: {_keys(data)}); "
            "give a list of sample objects, or an object with one list of them"
        )
    raise InputError(
        f"{path!r} holds several lists of records ({', '.join(map(repr, lists))}); "
        "keep only the list of samples, or save it as its own file"
    )


def _csv_rows(text: str, path: str) -> Iterator[tuple[int, Any]]:
    """Each data row as a dict (empty cells are None), with the line the row starts on."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    start = 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [name.strip() for name in row]
                continue
            if len(row) > len(header):
                yield (
                    line,
                    _Unreadable(
                        f"row has {len(row)} cells but the header has {len(header)} columns; "
                        "quote cells that contain commas"
                    ),
                )
                continue
            yield line, {name: cell or None for name, cell in zip(header, row, strict=False)}
    except csv.Error as exc:
        raise InputError(
            f"{path!r} is not valid CSV at line {reader.line_num}: {exc}; fix the quoting there"
        ) from exc


class _SampleBuilder:
    """Turns records into samples; keeps the invalid ones and the ids seen so far."""

    def __init__(
        self, *, stem: str, from_csv: bool, fields: Mapping[str, str] | None = None
    ) -> None:
        self.stem, self.from_csv = stem, from_csv
        self.mapped = {name: (source,) for name, source in (fields or {}).items()}
        self.samples: list[Sample] = []
        self.invalid: list[InvalidRecord] = []
        self._first_use: dict[str, int] = {}

    def add(self, line: int, record: Any) -> None:
        record, repairs = clean_value(record)
        if repairs:
            log.warning("input_repaired", line=line, repairs="; ".join(repairs))
        try:
            if isinstance(record, _Unreadable):
                raise _Invalid(record.reason)
            sample = self._sample(line, record)
            if sample.id in self._first_use:
                raise _Invalid(
                    f"duplicate id {sample.id!r} (first used on line "
                    f"{self._first_use[sample.id]}); give every record a unique id"
                )
        except _Invalid as invalid:
            self.invalid.append(InvalidRecord(line=line, reason=invalid.reason))
            return
        self._first_use[sample.id] = line
        self.samples.append(sample)

    def _sample(self, line: int, record: Any) -> Sample:
        if not isinstance(record, dict):
            raise _Invalid(f"record is {_type_name(record)}, not an object; give a JSON object")
        names = self.mapped.get
        fields: dict[str, Any] = {
            "id": _record_id(record, f"{self.stem}-{line}", names("id", ("id",))[0]),
            "question": _question(record, names("question", QUESTION_FIELDS)),
        }
        generated = "critiques" in record or ("outcome" in record and "chunk_id" in record)
        if generated and not self.mapped:
            fields["reference"] = _text(record, ("answer",))
            fields["reference_contexts"] = _texts(record, ("context",), split=False)
            fields["reference_context_ids"] = _ids(record, ("chunk_id",), split=False)
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
        for name in KEYWORD_FIELDS:
            source = names(name, (name,))
            fields[name] = _texts(record, source, split=self.from_csv, keywords=True)
        fields["answer_logprobs"] = _logprobs(
            record, names("answer_logprobs", ("answer_logprobs",))[0]
        )
        ids, contexts = fields.get("context_ids", ()), fields.get("contexts", ())
        if ids and len(ids) != len(contexts):
            raise _Invalid(
                f"the record has {len(ids)} context ids for {len(contexts)} contexts; give one "
                "id per context, in the same order"
            )
        try:
            return Sample(**fields)
        except ValidationError as exc:  # not expected: the fields above are already checked
            raise _Invalid(f"record does not fit a sample: {exc}") from exc


def _pick(record: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any] | None:
    """The first of ``names`` the record has a value for (null counts as absent)."""
    for name in names:
        if record.get(name) is not None:
            return name, record[name]
    return None


def _record_id(record: Mapping[str, Any], default: str, name: str = "id") -> str:
    value = record.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Invalid(
            f"field {name!r} is {_type_name(value)}; give a string or integer id, or leave it out"
        )
    if not str(value).strip():
        raise _Invalid(f"field {name!r} is empty; give a non-empty id, or leave it out")
    return str(value)


def _question(record: Mapping[str, Any], names: tuple[str, ...]) -> str:
    picked = _pick(record, names)
    if picked is None:
        present = [name for name in names if name in record]
        if present:
            raise _Invalid(f"field {present[0]!r} is empty; write the question there")
        looked_for = ", ".join(repr(name) for name in names)
        raise _Invalid(
            f"record has no question (looked for {looked_for}; the record has {_keys(record)}); "
            "rename the question field to 'question', or name it with --field question=FIELD"
        )
    name, value = picked
    if not isinstance(value, str):
        raise _Invalid(f"field {name!r} is {_type_name(value)}; the question must be a string")
    if not value.strip():
        raise _Invalid(f"field {name!r} is empty; write the question there")
    return value


def _text(record: Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    picked = _pick(record, names)
    if picked is None:
        return None
    name, value = picked
    if not isinstance(value, str):
        raise _Invalid(
            f"field {name!r} is {_type_name(value)}; give a string, or leave the field out"
        )
    return value


def _texts(
    record: Mapping[str, Any], names: tuple[str, ...], *, split: bool, keywords: bool = False
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
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _Invalid(
            f"field {name!r} is {_type_name(value)}; give a list of strings (or one string)"
        )
    if keywords and not all(item.strip() for item in value):
        raise _Invalid(f"field {name!r} holds an empty keyword; remove it")
    return tuple(value)


def _contexts(
    record: Mapping[str, Any], names: tuple[str, ...], *, split: bool
) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """The retrieved contexts, strings or objects with a ``text`` (or ``page_content``) and
    an ``id``; their ids, ``()`` when none has one."""
    picked = _pick(record, names)
    if picked is None or not isinstance(picked[1], list | tuple):
        return _texts(record, names, split=split), ()
    name, value = picked
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
                f"field {name!r} item {index} is {_type_name(item)}; give strings, or objects "
                "with a 'text' string and an 'id'"
            )
    return tuple(texts), tuple(ids) if any(i is not None for i in ids) else ()


def _ids(record: Mapping[str, Any], names: tuple[str, ...], *, split: bool) -> tuple[str, ...]:
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
            f"field {name!r} is {_type_name(value)}; give a list of ids (strings), or one id"
        )
    return tuple(str(item) for item in value if str(item).strip())


def _split_cell(cell: str) -> Any:
    """A CSV cell holding a list: a JSON array, a Python or numpy list of strings (as pandas
    writes a list column), else ``|``-separated text."""
    if cell.lstrip().startswith("["):
        try:
            return json.loads(cell)
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


def _logprobs(record: Mapping[str, Any], name: str = "answer_logprobs") -> tuple[float, ...] | None:
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = _split_cell(value)
            value = [float(item) if isinstance(item, str) else item for item in value]
        except ValueError:
            pass
    if not isinstance(value, list) or not all(
        isinstance(item, int | float) and not isinstance(item, bool) for item in value
    ):
        raise _Invalid(
            f"field 'answer_logprobs' is {_type_name(value)}; give a list of numbers, "
            "or leave the field out"
        )
    return tuple(float(item) for item in value)


def _type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        kinds = sorted({_type_name(item).split(" (")[0] for item in value})
        return "a list holding " + " and ".join(kinds) if kinds else "an empty list"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    return "null"


def _keys(record: Mapping[str, Any]) -> str:
    if not record:
        return "no fields"
    keys = [repr(key) for key in record]
    shown = ", ".join(keys[:_MAX_KEYS_SHOWN])
    return "fields " + shown + (", ..." if len(keys) > _MAX_KEYS_SHOWN else "")
