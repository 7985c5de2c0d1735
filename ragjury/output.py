"""Output records and the JSONL / CSV writers that stream them to disk as they arrive."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ragjury.config import OutputFormat
from ragjury.errors import ConfigurationError
from ragjury.schemas import CRITERIA, PairJudged


def pair_record(judged: PairJudged) -> dict[str, Any]:
    """The exported form of a judged pair (the README documents these fields)."""
    pair = judged.pair
    record: dict[str, Any] = {
        "id": pair.id,
        "question": pair.question,
        "answer": pair.answer,
        "context": pair.context,
        "source": pair.source,
        "chunk_id": pair.chunk_id,
        "critiques": {
            criterion: critique.model_dump() for criterion, critique in judged.critiques.items()
        },
        "outcome": judged.outcome,
    }
    if judged.error is not None:
        record["error"] = judged.error.model_dump()
    return record


_CSV_FIELDS = [
    "id",
    "question",
    "answer",
    "context",
    "source",
    "chunk_id",
    "outcome",
    *(f"{c}_{part}" for c in CRITERIA for part in ("rating", "rationale")),
    "error",
]


def _csv_row(record: dict[str, Any]) -> dict[str, Any]:
    row = {key: record.get(key, "") for key in _CSV_FIELDS[:7]}
    for criterion in CRITERIA:
        critique = record["critiques"].get(criterion) or {}
        row[f"{criterion}_rating"] = critique.get("rating", "")
        row[f"{criterion}_rationale"] = critique.get("rationale", "")
    row["error"] = json.dumps(record["error"]) if "error" in record else ""
    return row


class RecordWriter:
    """Writes records one at a time, flushed, so an interrupted run keeps what it wrote."""

    def __init__(self, path: Path, fmt: OutputFormat) -> None:
        self.path, self.format = path, fmt
        self.count = 0
        self._file: IO[str] | None = None
        self._csv: csv.DictWriter[str] | None = None

    def __enter__(self) -> RecordWriter:
        try:
            self._file = self.path.open("w", encoding="utf-8", newline="")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot write {str(self.path)!r}: {exc.strerror}; choose a writable path"
            ) from exc
        if self.format == "csv":
            self._csv = csv.DictWriter(self._file, fieldnames=_CSV_FIELDS)
            self._csv.writeheader()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._file is not None:
            self._file.close()

    def write(self, record: dict[str, Any]) -> None:
        assert self._file is not None
        if self._csv is not None:
            self._csv.writerow(_csv_row(record))
        else:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        self.count += 1
