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
``ragjury generate``: its ``reference_answer`` (``--reference-answers``), else its ``answer``,
is the reference answer, its ``context`` and ``chunk_id``
the reference context the question came from (``contexts`` and ``chunk_ids`` when it lists
several, as a question drafted with ``--question-types`` does), and it has no answer or
retrieved contexts yet (a ``--target`` gives them).

The file itself must be usable (it exists, has a known suffix and, for JSON, parses), or
:class:`~ragjury.errors.InputError` is raised. Inside it nothing raises: a record that cannot
be used is reported as an :class:`InvalidRecord` with its line number and the reason, and the
other records still load. A missing answer is not an error; the caller decides.

A file is never held in memory: :func:`load_samples` reads it once, a record at a time, to
count and check its samples (a :class:`SampleFile`), and each pass over the result reads it
again. Only a ``.json`` file holding one array is parsed whole; use JSONL for large sets.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ragjury._id_hashes import Repeats, id_hash
from ragjury._json import JSONData
from ragjury.errors import InputError
from ragjury.evaluation._records import SAMPLE_FIELDS, SampleBuilder
from ragjury.evaluation._rows import Numbered, csv_rows, json_rows, jsonl_rows
from ragjury.evaluation.tables import arrow_rows, is_hf_dataset, parquet_rows
from ragjury.schemas.records import Sample

__all__ = [
    "SAMPLE_FIELDS",
    "InvalidRecord",
    "SampleFile",
    "SampleSet",
    "field_map",
    "filled_fields",
    "load_samples",
    "parse_fields",
    "read_records",
    "samples_from_records",
]

_FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
}
_READERS: dict[str, Callable[[Path], Iterator[Numbered]]] = {
    "jsonl": jsonl_rows,
    "json": json_rows,
    "csv": csv_rows,
    "parquet": parquet_rows,
}

Rows = Callable[[], Iterator[Numbered]]
"""A function that reads a file's records afresh: ``(line, record)`` in file order."""


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
    """Samples already in memory (:func:`samples_from_records`), and the records skipped."""

    samples: list[Sample]
    invalid: list[InvalidRecord]
    path: str


def filled_fields(samples: Iterable[Sample]) -> frozenset[str]:
    """The sample fields at least one of ``samples`` has a value for (one pass)."""
    filled: set[str] = set()
    for sample in samples:
        _fill(filled, sample)
    return frozenset(filled)


def _fill(filled: set[str], sample: Sample) -> None:
    if len(filled) < len(SAMPLE_FIELDS):
        filled.update(name for name in SAMPLE_FIELDS if getattr(sample, name))


class SampleFile:
    """The valid samples of a file, read from it afresh on each pass, a record at a time.

    What every later step needs to know before the first sample is judged was gathered by
    one first pass: ``count``, ``unanswered`` (samples without an answer), ``filled`` (the
    fields some sample has a value for, see :func:`filled_fields`) and ``invalid`` (the
    records skipped, in file order). Iterating yields the other records' samples in file
    order; ``samples`` is every one in a list, for small files.
    """

    def __init__(
        self,
        path: str,
        rows: Rows,
        builder: SampleBuilder,
        *,
        keep_encoded: bool = False,
        keep_in: Path | None = None,
    ) -> None:
        self.path = path
        self._rows, self._builder = rows, builder
        self._stamp = _stamp(Path(path))
        self.count = self.unanswered = 0
        self.filled: frozenset[str] = frozenset()
        self.invalid: list[InvalidRecord] = []
        # unlinked at once: gone with the process, however it ends
        self._encoded: IO[bytes] | None = (
            tempfile.TemporaryFile(dir=keep_in)  # noqa: SIM115  # lives as long as self
            if keep_encoded
            else None
        )
        self._reading = False
        suspects = self._scan(None)
        if suspects:  # some ids may repeat: check those exactly
            self._scan(suspects)
        self._skipped = frozenset(record.line for record in self.invalid)

    def _scan(self, suspects: frozenset[int] | None) -> frozenset[int]:
        """Count and check every record. Without ``suspects`` the ids' hashes are kept and
        the repeated ones returned (and each sample's JSON kept, if asked for); with them, a
        repeat of a suspect id is invalid."""
        repeats = Repeats() if suspects is None else None
        keep = self._encoded if suspects is None else None
        first_use: dict[str, int] = {}
        count = unanswered = 0
        filled: set[str] = set()
        invalid: list[InvalidRecord] = []
        for line, record in self._rows():
            sample = self._builder.build(line, record, log_repairs=suspects is None)
            if isinstance(sample, str):
                invalid.append(InvalidRecord(line=line, reason=sample))
                continue
            if repeats is not None:
                repeats.add(sample.id)
            elif suspects and id_hash(sample.id) in suspects:
                if sample.id in first_use:
                    invalid.append(InvalidRecord(line, _repeated(sample.id, first_use)))
                    continue
                first_use[sample.id] = line
            count += 1
            unanswered += sample.answer is None
            _fill(filled, sample)
            if keep is not None:  # the line, the id (JSON: no tab, no newline), the sample
                head = f"{line}\t{json.dumps(sample.id)}\t".encode()
                keep.write(head + sample.model_dump_json().encode() + b"\n")
        self.count, self.unanswered = count, unanswered
        self.filled, self.invalid = frozenset(filled), invalid
        return frozenset() if repeats is None else repeats.suspects()

    def __iter__(self) -> Iterator[Sample]:
        if _stamp(Path(self.path)) != self._stamp:
            raise InputError(
                f"{self.path!r} changed while it was being read; run again once it is "
                "written in full"
            )
        for line, record in self._rows():
            if line in self._skipped:
                continue
            sample = self._builder.build(line, record, log_repairs=False)
            if isinstance(sample, str):  # the first pass found it valid: the file changed
                raise InputError(
                    f"{self.path}:{line} changed while the file was being read; run again"
                )
            yield sample

    def encoded(self) -> Iterator[tuple[str, str]]:
        """(id, the sample's JSON as ``Sample.model_dump_json`` makes it) for each valid
        sample, in file order: what the first pass made, read back, when it was asked to
        keep it (``load_samples(..., keep_encoded=True)``: the file is not read and checked
        a second time), else made afresh from the file."""
        if self._encoded is None or self._reading:  # (one reader of the kept copy at a time)
            yield from ((sample.id, sample.model_dump_json()) for sample in self)
            return
        self._reading = True
        try:
            self._encoded.flush()
            self._encoded.seek(0)
            for kept in self._encoded:
                line, sample_id, text = kept.split(b"\t", 2)
                if int(line) not in self._skipped:
                    yield json.loads(sample_id), text[:-1].decode()
        finally:
            self._reading = False

    def __len__(self) -> int:
        return self.count

    @property
    def samples(self) -> list[Sample]:
        """Every valid sample, in file order, in memory: for small files (iterate a large
        one)."""
        return list(self)


def _repeated(sample_id: str, first_use: Mapping[str, int]) -> str:
    return (
        f"duplicate id {sample_id!r} (first used on line {first_use[sample_id]}); "
        "give every record a unique id"
    )


def _stamp(path: Path) -> tuple[int, int]:
    """What tells a file that changed since it was first read (nothing for a folder)."""
    if not path.is_file():
        return (0, 0)
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


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


def load_samples(
    path: str | Path,
    fields: Mapping[str, str] | None = None,
    *,
    keep_encoded: bool = False,
    keep_in: Path | None = None,
) -> SampleFile:
    """The samples of a ``.jsonl``/``.ndjson``, ``.json``, ``.csv`` or ``.parquet`` file, or
    of a folder a Hugging Face dataset was saved to (``save_to_disk``), checked in one pass
    (see :class:`SampleFile`).

    ``fields`` maps a sample field to the record field that holds it (see
    :func:`field_map`). Records without an ``id`` get ``{file stem}-{n}``, n being the line
    number (record index for JSON, row for Parquet and Arrow). Raises InputError when the
    file is missing, has another suffix, cannot be decoded, or (JSON) does not parse or hold
    a list of records. ``keep_encoded``: each valid sample's JSON is kept in a temporary
    file (in the folder ``keep_in``, else the system's; about the input's size) as the file
    is checked, for :meth:`SampleFile.encoded` (a job's intake).
    """
    file, rows, from_csv = _rows_of(path)
    builder = SampleBuilder(stem=file.stem, from_csv=from_csv, fields=field_map(fields or {}))
    return SampleFile(str(file), rows, builder, keep_encoded=keep_encoded, keep_in=keep_in)


def read_records(
    path: str | Path, fields: Mapping[str, str] | None = None
) -> Iterator[tuple[int, object, Sample | str]]:
    """Each record of a samples file (as :func:`load_samples` reads it) with its line and
    its sample, or the reason it cannot be one: for callers that read fields of their own
    beside the sample's (``ragjury calibrate``'s human labels). Ids are not checked against
    each other here."""
    file, rows, from_csv = _rows_of(path)
    builder = SampleBuilder(stem=file.stem, from_csv=from_csv, fields=field_map(fields or {}))
    for line, record in rows():
        yield line, record, builder.build(line, record)


def _rows_of(path: str | Path) -> tuple[Path, Rows, bool]:
    """The file, a function that reads its records afresh, and whether it is CSV."""
    file = Path(path)
    if not file.exists():
        where = "" if file.is_absolute() else f" (relative to {Path.cwd()})"
        raise InputError(
            f"sample file {str(path)!r} does not exist{where}; check the path for typos"
        )
    if file.is_dir() and is_hf_dataset(file):
        return file, lambda: arrow_rows(file), False
    fmt = _FORMATS.get(file.suffix.lower())
    if fmt is None:
        accepted = ", ".join(_FORMATS)
        raise InputError(
            f"cannot read samples from {str(path)!r}: unknown suffix {file.suffix!r}; "
            f"save the samples as one of {accepted}"
        )
    if not file.is_file():
        raise InputError(f"sample path {str(path)!r} is not a file; pass a {fmt} file")
    read = _READERS[fmt]
    return file, lambda: read(file), fmt == "csv"


def samples_from_records(records: Iterable[JSONData], *, stem: str) -> SampleSet:
    """Samples from records already in memory (dicts), read as the lines of a JSONL file:
    the same field names, and ``{stem}-{n}`` for a record without an ``id`` (n from 1)."""
    builder = SampleBuilder(stem=stem, from_csv=False)
    samples: list[Sample] = []
    invalid: list[InvalidRecord] = []
    first_use: dict[str, int] = {}
    for line, record in enumerate(records, start=1):
        sample = builder.build(line, record)
        if not isinstance(sample, str) and sample.id in first_use:
            sample = _repeated(sample.id, first_use)
        if isinstance(sample, str):
            invalid.append(InvalidRecord(line=line, reason=sample))
            continue
        first_use[sample.id] = line
        samples.append(sample)
    return SampleSet(samples=samples, invalid=invalid, path="<records>")
