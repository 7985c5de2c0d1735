"""Output records and the writers that stream them to disk: JSONL, CSV or Parquet.

JSONL holds each record as it is (nested). CSV and Parquet hold flat rows, one column per
field, described by a :class:`Table`: judged pairs (:func:`pair_table`), failed chunks
(:data:`FAILED_CHUNK_TABLE`) and judged samples (:func:`sample_table`, one group of columns
per metric). In CSV a list is a JSON array and a nested value its JSON; in Parquet a list is
a list column. Every format is written to a file beside the output and moved over it once
whole, so an interrupted run leaves the earlier output as it was (the records stay in the
store: the same command writes them again).
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, TYPE_CHECKING, Literal, TypeAlias

from ragjury._json import JSONData, JSONObject, json_object
from ragjury.config import GenerationOptions, OutputFormat
from ragjury.errors import ConfigurationError, InputError
from ragjury.evaluation.tables import pyarrow_module
from ragjury.schemas import ANSWERABILITY, CRITERIA, PairJudged

if TYPE_CHECKING:  # the parquet extra: it ships no type information, so these name the
    # types for the reader and mypy takes them as unchecked
    import pyarrow
    import pyarrow.parquet

__all__ = [
    "FAILED_CHUNK_TABLE",
    "PAIR_TABLE",
    "RecordWriter",
    "Table",
    "failed_chunk_record",
    "output_format",
    "pair_record",
    "pair_table",
    "sample_table",
]

_SUFFIXES: dict[str, OutputFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}


def output_format(path: Path, flag: OutputFormat | None, option: str = "--out") -> OutputFormat:
    """The format to write ``path`` in: ``--format`` if given, else the one its suffix names,
    else JSONL. A ``--format`` that its suffix contradicts is an error, as is Parquet without
    pyarrow (checked now, before any work)."""
    implied = _SUFFIXES.get(path.suffix.lower())
    if flag is not None and implied is not None and flag != implied:
        raise ConfigurationError(
            f"--format {flag} but {option} {str(path)!r} ends in {path.suffix}, which is "
            f"{implied}; drop --format to write {implied}, or name the file *.{flag}"
        )
    chosen = flag or implied or "jsonl"
    if chosen == "parquet":
        try:
            pyarrow_module(f"writing Parquet ({option} {str(path)!r})")
        except InputError as exc:
            raise ConfigurationError(str(exc)) from exc
    return chosen


def pair_record(judged: PairJudged, *, typed: bool = False) -> JSONObject:
    """The exported form of a judged pair (the README documents these fields). ``typed``
    (a job with ``--question-types``): it also says its ``question_type`` and lists every
    chunk it was drafted from (``chunk_ids``, ``contexts``, ``sources``), and a pair of
    several chunks the terms that related them (``shared_terms``). A pair drafted for a
    persona names it (``persona``, ``persona_description``); a pair with a reference answer
    (``--reference-answers``) has it as ``reference_answer``."""
    pair = judged.pair
    record: JSONObject = {
        "id": pair.id,
        "question": pair.question,
        "answer": pair.answer,
        "context": pair.context,
        "source": pair.source,
        "chunk_id": pair.chunk_id,
    }
    if typed or pair.question_type != "factoid" or pair.related:
        record["question_type"] = pair.question_type
        record["chunk_ids"] = list(pair.chunk_ids)
        record["contexts"] = list(pair.contexts)
        record["sources"] = [pair.source, *(chunk.source for chunk in pair.related)]
        if pair.related:
            record["shared_terms"] = list(pair.shared_terms)
    if pair.persona is not None:
        record["persona"] = pair.persona.name
        record["persona_description"] = pair.persona.description
    if judged.reference_answer is not None:
        record["reference_answer"] = judged.reference_answer
    record |= {
        "critiques": {
            criterion: critique.model_dump() for criterion, critique in judged.critiques.items()
        },
        "outcome": judged.outcome,
    }
    if judged.answer_check is not None:
        record["answer_check"] = judged.answer_check.model_dump()
    if judged.error is not None:
        record["error"] = judged.error.model_dump()
    return record


def failed_chunk_record(report: Mapping[str, JSONData]) -> dict[str, JSONData]:
    """The exported form of a chunk the generator gave up on (from a job's stored report)."""
    error = {k: v for k, v in report.items() if k not in ("chunk_id", "source")}
    return {
        "chunk_id": report.get("chunk_id"),
        "source": report.get("source"),
        "outcome": "failed",
        "error": error,
    }


Kind = Literal["str", "int", "float", "bool", "list"]
Row: TypeAlias = dict[str, JSONData]
"""A flat row: a value (or a list of them, in a ``list`` column) per column."""


@dataclass(frozen=True)
class Table:
    """Flat columns (name, kind) and how a record becomes a row of them."""

    columns: tuple[tuple[str, Kind], ...]
    row: Callable[[Mapping[str, JSONData]], Row]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.columns]


def _json(value: JSONData) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _pair_row(record: Mapping[str, JSONData], names: tuple[str, ...]) -> Row:
    """``record`` as a row of the columns ``names`` (see :func:`pair_table`)."""
    row: Row = {
        key: record.get(key)
        for key in ("id", "question", "answer", "context", "source", "chunk_id", "outcome")
    }
    row |= {name: record.get(name) for name, _ in _TYPED_COLUMNS}
    row |= {name: record.get(name) for name, _ in (*_PERSONA_COLUMNS, *_REFERENCE_COLUMNS)}
    for criterion in (*CRITERIA, ANSWERABILITY):
        critique = json_object(json_object(record["critiques"]).get(criterion))
        row[f"{criterion}_rating"] = critique.get("rating")
        row[f"{criterion}_rationale"] = critique.get("rationale")
    check = json_object(record.get("answer_check"))
    row |= {
        "check_answer": check.get("answer"),
        "check_answerable": check.get("answerable"),
        "check_alone": _json(check.get("alone")) if check.get("alone") else None,
        "answered_alone_by": check.get("answered_alone_by"),
        "retyped_from": check.get("retyped_from"),
        "check_note": check.get("note"),
    }
    row["error"] = _json(record.get("error"))
    return {name: row.get(name) for name in names}


_PAIR_COLUMNS: tuple[tuple[str, Kind], ...] = (
    *((name, "str") for name in ("id", "question", "answer", "context", "source")),
    ("chunk_id", "str"),
    ("outcome", "str"),
    *(column for c in CRITERIA for column in ((f"{c}_rating", "int"), (f"{c}_rationale", "str"))),
    ("error", "str"),
)

_TYPED_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("question_type", "str"),
    ("chunk_ids", "list"),
    ("contexts", "list"),
    ("sources", "list"),
    ("shared_terms", "list"),
)

_CHECK_COLUMNS: tuple[tuple[str, Kind], ...] = (
    (f"{ANSWERABILITY}_rating", "int"),
    (f"{ANSWERABILITY}_rationale", "str"),
    ("check_answer", "str"),
    ("check_answerable", "bool"),
    ("check_alone", "str"),
    ("answered_alone_by", "str"),
    ("retyped_from", "str"),
    ("check_note", "str"),
)


_PERSONA_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("persona", "str"),
    ("persona_description", "str"),
)
_REFERENCE_COLUMNS: tuple[tuple[str, Kind], ...] = (("reference_answer", "str"),)


def pair_table(jobs: Sequence[GenerationOptions], *, personas: bool = False) -> Table:
    """The flat columns of the pairs of ``jobs`` (one job's options, or every exported
    job's): :data:`PAIR_TABLE`'s; after ``outcome`` each pair's type and chunks when one job
    drafted types (``--question-types``), ``persona`` and ``persona_description`` when one
    had personas, ``reference_answer`` when one wrote reference answers; before ``error`` the
    answerability check's rating and rationale, the critic's own answer, its tries from each
    chunk alone (JSON) and any retyping, when one ran the check. ``personas``: the personas
    are yet to be proposed (``--personas auto``)."""
    added = [
        *(_TYPED_COLUMNS if any(o.typed for o in jobs) else ()),
        *(_PERSONA_COLUMNS if personas or any(o.personas for o in jobs) else ()),
        *(_REFERENCE_COLUMNS if any(o.reference_answers for o in jobs) else ()),
    ]
    columns = list(_PAIR_COLUMNS)
    if any(o.answer_check for o in jobs):
        columns[-1:-1] = _CHECK_COLUMNS
    columns[7:7] = added
    names = tuple(name for name, _ in columns)
    return Table(columns=tuple(columns), row=functools.partial(_pair_row, names=names))


PAIR_TABLE = pair_table([GenerationOptions(answer_check=False)])
"""The pairs of a job of factoids without the answerability check (``--no-answer-check``)."""


FAILED_CHUNK_TABLE = Table(
    columns=(("chunk_id", "str"), ("source", "str"), ("outcome", "str"), ("error", "str")),
    row=lambda record: {**record, "error": _json(record.get("error"))},
)

_METRIC_FIELDS = ("outcome", "score", "passing", "reason", "llm_calls", "error")


def sample_table(metrics: Sequence[str]) -> Table:
    """Judged samples: the inputs, the verdict, then for each metric ``{metric}_outcome``,
    ``_score``, ``_passing``, ``_reason``, ``_details`` (the JSON of its details, such as
    faithfulness's statements) and ``_error`` (the JSON of its failure)."""

    def row(record: Mapping[str, JSONData]) -> Row:
        flat: Row = {
            key: record.get(key)
            for key in ("id", "question", "answer", "contexts", "reference", "passing", "reason")
        }
        for name in metrics:
            result = json_object(json_object(record["metrics"]).get(name))
            details = {k: v for k, v in result.items() if k not in _METRIC_FIELDS}
            flat |= {
                f"{name}_outcome": result.get("outcome"),
                f"{name}_score": result.get("score"),
                f"{name}_passing": result.get("passing"),
                f"{name}_reason": result.get("reason"),
                f"{name}_details": _json(details) if details else None,
                f"{name}_error": _json(result.get("error")),
            }
        return flat

    per_metric: tuple[tuple[str, Kind], ...] = (
        ("outcome", "str"),
        ("score", "float"),
        ("passing", "bool"),
        ("reason", "str"),
        ("details", "str"),
        ("error", "str"),
    )
    return Table(
        columns=(
            ("id", "str"),
            ("question", "str"),
            ("answer", "str"),
            ("contexts", "list"),
            ("reference", "str"),
            ("passing", "bool"),
            ("reason", "str"),
            *((f"{name}_{part}", kind) for name in metrics for part, kind in per_metric),
        ),
        row=row,
    )


_PARQUET_ROW_GROUP = 1000


def _partial_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a file beside it, moved into place when complete."""
    partial = _partial_path(path)
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ConfigurationError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}; choose a writable path"
        ) from exc


class RecordWriter:
    """Writes records one at a time in ``fmt`` (buffered: the file is moved into place only
    when whole); CSV and Parquet as the flat rows of ``table``."""

    def __init__(self, path: Path, fmt: OutputFormat, table: Table = PAIR_TABLE) -> None:
        self.path, self.format, self.table = path, fmt, table
        # written beside the output, moved over it when complete: a crash midway leaves an
        # earlier output whole, never truncated
        self._partial = _partial_path(path)
        self.count = 0
        self._file: IO[str] | None = None
        self._csv: csv.DictWriter[str] | None = None
        self._parquet: pyarrow.parquet.ParquetWriter | None = None
        self._schema: pyarrow.Schema | None = None
        self._rows: list[Row] = []

    def __enter__(self) -> RecordWriter:
        try:
            if self.format == "parquet":
                pa = pyarrow_module("writing Parquet")
                self._schema = pa.schema(
                    [(name, _arrow_type(pa, kind)) for name, kind in self.table.columns]
                )
                self._parquet = pa.parquet.ParquetWriter(str(self._partial), self._schema)
                return self
            self._file = self._partial.open("w", encoding="utf-8", newline="")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot write {str(self.path)!r}: {exc.strerror or exc}; choose a writable path"
            ) from exc
        if self.format == "csv":
            self._csv = csv.DictWriter(self._file, fieldnames=self.table.names)
            self._csv.writeheader()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._file is not None:
                self._file.close()
            if self._parquet is not None:
                if exc_type is None:
                    self._write_row_group()
                self._parquet.close()
        finally:
            if exc_type is None:
                os.replace(self._partial, self.path)
            else:
                self._partial.unlink(missing_ok=True)

    def write(self, record: Mapping[str, JSONData]) -> None:
        if self._parquet is not None:
            self._rows.append(self.table.row(record))
            if len(self._rows) >= _PARQUET_ROW_GROUP:
                self._write_row_group()
        else:
            assert self._file is not None
            if self._csv is not None:
                row = self.table.row(record)
                self._csv.writerow(
                    {k: _json(v) if isinstance(v, list) else v for k, v in row.items()}
                )
            else:
                self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.count += 1

    def write_json(self, text: str) -> None:
        """A record given as JSON text (as the store keeps a judged sample's or a pair's
        record): JSONL copies it, the others parse it."""
        if self._file is not None and self._csv is None:
            self._file.write(text + "\n")
            self.count += 1
        else:
            self.write(json.loads(text))

    def _write_row_group(self) -> None:
        if self._rows:
            assert self._parquet is not None
            pa = pyarrow_module("writing Parquet")
            self._parquet.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
            self._rows = []


def _arrow_type(pa: ModuleType, kind: Kind) -> pyarrow.DataType:
    types = {
        "str": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "list": pa.list_(pa.string()),
    }
    return types[kind]
