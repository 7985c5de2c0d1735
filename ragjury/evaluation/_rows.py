"""The records of a sample file, read from the open file a record at a time.

Each reader yields ``(line, record)``: the 1-based line (the record index in a JSON list) and
the parsed record, or :class:`Unreadable` when the line cannot even be parsed. JSONL is read
line by line and CSV row by row, so a file of any size costs the memory of one record; a
``.json`` file is one document, parsed whole (JSONL is the format for large sets). Text is
UTF-8 (a BOM is dropped) or UTF-16 with a BOM.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from pydantic_core import from_json

from ragjury._json import JSONData, JSONValue
from ragjury.errors import InputError

__all__ = [
    "Unreadable",
    "csv_rows",
    "json_rows",
    "jsonl_rows",
    "keys_text",
    "type_name",
]

_MAX_KEYS_SHOWN = 12
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Unreadable:
    """A row that could not even be parsed (a JSONL line that is not JSON)."""

    reason: str


Numbered: TypeAlias = "tuple[int, JSONData | Unreadable]"
"""A record of a file (or why it cannot be read), with its line (or row, or index)."""


def _encoding(file: Path) -> str:
    try:
        with file.open("rb") as raw:
            head = raw.read(2)
    except OSError as exc:
        raise InputError(f"cannot read {str(file)!r}: {exc.strerror or exc}") from exc
    return "utf-16" if head in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) else "utf-8-sig"


@contextlib.contextmanager
def _text(file: Path, *, newline: str) -> Iterator[io.TextIOWrapper]:
    """The file opened as text; a byte that cannot be decoded raises InputError."""
    encoding = _encoding(file)
    try:
        with file.open("r", encoding=encoding, newline=newline) as text:
            yield text
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{str(file)!r} is not UTF-8 text (byte {_bad_byte(file, encoding)} cannot be "
            "decoded); save the file as UTF-8"
        ) from exc


def _bad_byte(file: Path, encoding: str) -> int:
    """The offset in the file of the first byte that cannot be decoded (-1 if none is)."""
    if encoding == "utf-8-sig":
        encoding = "utf-8"  # a BOM decodes as U+FEFF; offsets then count from the file's start
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = 0
    with file.open("rb") as raw:
        while True:
            chunk = raw.read(_CHUNK)
            held = len(decoder.getstate()[0])
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                return offset - held + exc.start
            if not chunk:
                return -1
            offset += len(chunk)


def jsonl_rows(file: Path) -> Iterator[Numbered]:
    """Each line of a JSONL file, parsed; blank lines are skipped but counted. In UTF-8 a
    line that does not decode costs only that line (named by its number), not the file."""
    if _encoding(file) != "utf-8-sig":
        with _text(file, newline="\n") as text:
            yield from _lines_parsed(enumerate(text, start=1))
        return
    try:
        with file.open("rb", buffering=_CHUNK) as raw:  # lines of kilobytes: big reads
            yield from _lines_parsed(_decoded(raw))
    except OSError as exc:
        raise InputError(f"cannot read {str(file)!r}: {exc.strerror or exc}") from exc


def _decoded(raw: Iterable[bytes]) -> Iterator[tuple[int, str | UnicodeDecodeError]]:
    for number, line in enumerate(raw, start=1):
        if number == 1:
            line = line.removeprefix(codecs.BOM_UTF8)
        try:
            yield number, line.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, exc


def _lines_parsed(
    lines: Iterable[tuple[int, str | UnicodeDecodeError]],
) -> Iterator[Numbered]:
    for number, line in lines:
        if isinstance(line, UnicodeDecodeError):
            yield (
                number,
                Unreadable(
                    f"line is not UTF-8 (byte {line.start + 1} of the line cannot be decoded); "
                    "save the file as UTF-8"
                ),
            )
            continue
        if not line or line.isspace():  # (strip would copy every line)
            continue
        try:
            # pydantic-core's parser: about half the time of json's on kilobytes of text; what
            # it refuses (a lone surrogate's escape, which the sample's cleaning repairs; a
            # line that is not JSON) is parsed by json, which also says what is wrong
            record = from_json(line)
        except ValueError:
            pass
        else:
            yield number, record
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            yield (
                number,
                Unreadable(
                    f"line is not JSON (column {exc.colno}: {exc.msg}); "
                    "write one JSON object per line"
                ),
            )


def json_rows(file: Path) -> Iterator[Numbered]:
    """The records of a JSON document (read whole), or of JSONL saved as ``.json``."""
    with _text(file, newline="\n") as handle:
        text = handle.read()
    try:
        data: JSONValue = json.loads(text)
    except json.JSONDecodeError as exc:
        first = next((line for line in text.split("\n") if line.strip()), "")
        if exc.msg == "Extra data" and _is_json_object(first):  # JSONL saved as .json
            del text
            yield from jsonl_rows(file)
            return
        raise InputError(
            f"{str(file)!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}; fix the JSON there, or save one object per line as .jsonl"
        ) from exc
    del text
    yield from enumerate(_records_in(data, str(file)), start=1)


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _records_in(data: JSONValue, path: str) -> list[JSONValue]:
    """The records of a JSON document: the list itself, or an object's one list of records."""
    if isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise InputError(
            f"{path!r} holds {type_name(data)}; expected a list of sample objects "
            'or an object with one list of them, such as {"samples": [...]}'
        )
    listed = {key: value for key, value in data.items() if isinstance(value, list)}
    lists = list(listed)
    if len(lists) != 1:
        lists = [
            key
            for key in lists
            if listed[key] and all(isinstance(item, dict) for item in listed[key])
        ]
    if len(lists) == 1:
        return listed[lists[0]]
    if not lists:
        raise InputError(
            f"{path!r} holds an object without a list of records (fields: {keys_text(data)}); "
            "give a list of sample objects, or an object with one list of them"
        )
    raise InputError(
        f"{path!r} holds several lists of records ({', '.join(map(repr, lists))}); "
        "keep only the list of samples, or save it as its own file"
    )


def csv_rows(file: Path) -> Iterator[Numbered]:
    """Each data row as a dict (empty cells are None), with the line the row starts on.

    A quote that is never closed makes the rows after it one row: read strictly, one whose
    closing quote is followed by more text, or that runs to the end of the file, is a CSV
    error there; one whose quote happens to close where a cell ends is found because every
    line it spans holds exactly as many cells as the header (quotes aside). Such a row is
    :class:`Unreadable`, named by the lines it spans, and the rows after it are read on.
    """
    with _text(file, newline="") as text:
        spanned: list[str] = []  # the physical lines of the row being read

        def lines() -> Iterator[str]:
            for line in text:
                spanned.append(line)
                yield line

        reader = csv.reader(lines(), strict=True)
        header: list[str] | None = None
        start = 1
        while True:
            line = start
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                start = reader.line_num + 1
                if header is None:
                    raise InputError(
                        f"{str(file)!r} is not valid CSV in its header (line {line}): {exc}; "
                        "fix the quoting there"
                    ) from exc
                yield line, Unreadable(_unclosed_quote(line, reader.line_num, str(exc)))
                continue
            finally:
                lines_read, spanned[:] = list(spanned), []
            start = reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [name.strip() for name in row]
                continue
            if len(lines_read) > 1 and all(
                len(physical.rstrip("\r\n").split(",")) == len(header) for physical in lines_read
            ):
                yield line, Unreadable(_unclosed_quote(line, reader.line_num, None))
                continue
            if len(row) > len(header):
                yield (
                    line,
                    Unreadable(
                        f"row has {len(row)} cells but the header has {len(header)} "
                        "columns; quote cells that contain commas"
                    ),
                )
                continue
            yield line, {name: cell or None for name, cell in zip(header, row, strict=False)}


def _unclosed_quote(first: int, last: int, error: str | None) -> str:
    """Why a row that a quote left open is not read (``error``: the CSV reader's words)."""
    said = f" (the CSV reader says: {error})" if error else ""
    if last == first:
        return (
            f"the quoting on line {first} is not valid CSV{said}; a quoted cell ends with a "
            'quote just before the comma or the line\'s end, and a quote inside it is doubled ("")'
        )
    return (
        f"a quote opened on line {first} is not closed where its cell ends, so lines "
        f"{first}-{last} run together as one row{said}; close the quote on line {first}, or "
        'double a quote that is part of the text ("")'
    )


def type_name(value: JSONData) -> str:
    """What ``value`` is, as an error message names it."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        kinds = sorted({type_name(item).split(" (")[0] for item in value})
        return "a list holding " + " and ".join(kinds) if kinds else "an empty list"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    return "null"


def keys_text(record: Collection[str]) -> str:
    """The fields of ``record``, as an error message lists them."""
    if not record:
        return "no fields"
    keys = [repr(key) for key in record]
    shown = ", ".join(keys[:_MAX_KEYS_SHOWN])
    return "fields " + shown + (", ..." if len(keys) > _MAX_KEYS_SHOWN else "")
