"""Columnar sample files, read with pyarrow (the ``parquet`` extra): Parquet files and
Hugging Face ``datasets`` saved with ``save_to_disk`` (a folder of Arrow stream files).

Rows come out as dicts of plain Python values (lists stay lists), numbered from 1, and
are read one record batch at a time, so a large file never sits in memory whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Protocol

from ragjury._json import JSONData
from ragjury.errors import InputError
from ragjury.evaluation._rows import Numbered

__all__ = ["arrow_rows", "is_hf_dataset", "parquet_rows", "pyarrow_module"]

_BATCH = 500


class _RecordBatch(Protocol):
    """What is read of a ``pyarrow.RecordBatch`` (pyarrow ships no type hints)."""

    def to_pylist(self) -> list[dict[str, JSONData]]: ...


def pyarrow_module(what: str) -> ModuleType:
    """pyarrow, with its ipc and parquet modules; or InputError saying ``what`` needs the
    parquet extra."""
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError as exc:
        raise InputError(
            f"{what} needs pyarrow, which is not installed; install the parquet extra: "
            "pip install 'ragjury[parquet]'"
        ) from exc
    module: ModuleType = pyarrow
    return module


def _rows(batches: Iterator[_RecordBatch]) -> Iterator[Numbered]:
    line = 0
    for batch in batches:
        for row in batch.to_pylist():
            line += 1
            yield line, row


def parquet_rows(path: Path) -> Iterator[Numbered]:
    """Each row of a Parquet file as a dict, with its 1-based row number."""
    pa = pyarrow_module("reading Parquet")
    try:
        file = pa.parquet.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{str(path)!r} is not a readable Parquet file: {exc}") from exc
    yield from _rows(file.iter_batches(batch_size=_BATCH))


def is_hf_dataset(folder: Path) -> bool:
    """Whether ``folder`` is what ``datasets`` writes with ``save_to_disk``."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def arrow_rows(folder: Path) -> Iterator[Numbered]:
    """Each row of a Hugging Face dataset saved to disk, across its Arrow files in order."""
    if (folder / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in folder.iterdir() if (p / "state.json").is_file())
        raise InputError(
            f"{str(folder)!r} holds several splits ({', '.join(splits)}); pass the folder of "
            f"the one to judge, e.g. {str(folder / (splits[0] if splits else 'test'))!r}"
        )
    pa = pyarrow_module("reading a Hugging Face dataset")
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{str(folder / 'state.json')!r} does not list the dataset's files ({exc}); save "
            "the dataset again with save_to_disk, or as JSONL with to_json"
        ) from exc

    def batches() -> Iterator[_RecordBatch]:
        for name in names:
            try:
                with pa.memory_map(str(folder / name)) as source:
                    yield from pa.ipc.open_stream(source)
            except (OSError, pa.ArrowException) as exc:
                raise InputError(f"cannot read {str(folder / name)!r}: {exc}") from exc

    yield from _rows(batches())
