"""Load documents from files and folders: text, Markdown, source code, PDF, JSON and JSONL.

Every path given must exist, or :class:`~ragjury.errors.InputError` is raised before anything
is read. Inside those paths nothing raises: a file or record that cannot be used (empty,
binary, not UTF-8, a corrupt PDF, a record without the text field, ...) is reported as a
:class:`Skipped` with the reason, and loading goes on.

Glob patterns are matched case-insensitively against each file's path relative to the folder
given. A pattern without ``/`` matches the file name at any depth (``*.md``); a pattern with
``/`` matches the whole relative path, where ``**/`` stands for any number of folders
(``guides/**/*.md``). Hidden files and folders, ``__pycache__`` and ``node_modules`` are never
walked into. A file named directly is always loaded, whatever the globs say.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from ragjury._id_hashes import Seen
from ragjury._json import JSONValue
from ragjury.errors import InputError
from ragjury.schemas.records import Document
from ragjury.text import clean_value

_TEXT_SUFFIXES = (
    "md", "markdown", "mdx", "txt", "text", "rst", "adoc", "org", "tex",
    "py", "pyi", "js", "jsx", "mjs", "ts", "tsx", "java", "kt", "scala", "go", "rs",
    "c", "h", "cc", "cpp", "hpp", "cs", "rb", "php", "swift", "sh", "sql", "r", "jl", "lua",
    "html", "htm", "xml",
)  # fmt: skip

DEFAULT_GLOBS: tuple[str, ...] = tuple(
    f"**/*.{suffix}" for suffix in (*_TEXT_SUFFIXES, "pdf", "json", "jsonl", "ndjson")
)
"""Patterns used when no ``--glob`` is given: prose, source code, PDF, JSON and JSONL."""

_IGNORED_DIRS = frozenset({"__pycache__", "node_modules"})
_MAX_KEYS_SHOWN = 12


log = structlog.get_logger("ragjury.input")


@dataclass(frozen=True)
class Skipped:
    """A file or record that was not loaded, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class LoadResult:
    """Documents loaded, in a stable order, and everything skipped on the way."""

    documents: list[Document]
    skipped: list[Skipped]


def load_documents(
    paths: Sequence[str | Path],
    *,
    globs: Sequence[str] | None = None,
    text_field: str = "text",
    id_field: str | None = None,
) -> LoadResult:
    """Load every document under ``paths``.

    Folders are walked recursively for files matching any of ``globs`` (``DEFAULT_GLOBS`` when
    None or empty), in sorted order; files are loaded by suffix. Records of JSON and JSONL files
    take their text from ``text_field`` and their id from ``id_field`` (or ``FILE#N``: the
    0-based index for JSON, the 1-based line number for JSONL). A file reached twice is loaded
    once. Raises InputError if a path does not exist or a glob is empty.
    """
    skipped: list[Skipped] = []
    documents = list(
        iter_documents(
            paths, globs=globs, text_field=text_field, id_field=id_field, skipped=skipped
        )
    )
    return LoadResult(documents=documents, skipped=skipped)


class DocumentReader:
    """The documents under ``paths``, read again a file at a time on each call (to key a job,
    then to queue it): a run over a large folder holds none of them. ``skipped`` is what the
    last pass skipped."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        *,
        globs: Sequence[str] | None = None,
        text_field: str = "text",
        id_field: str | None = None,
    ) -> None:
        self._paths, self._globs = paths, globs
        self._text_field, self._id_field = text_field, id_field
        self.skipped: list[Skipped] = []

    def __call__(self) -> Iterator[Document]:
        self.skipped = []
        return iter_documents(
            self._paths,
            globs=self._globs,
            text_field=self._text_field,
            id_field=self._id_field,
            skipped=self.skipped,
        )


def iter_documents(
    paths: Sequence[str | Path],
    *,
    globs: Sequence[str] | None = None,
    text_field: str = "text",
    id_field: str | None = None,
    skipped: list[Skipped] | None = None,
) -> Iterator[Document]:
    """The documents of :func:`load_documents`, in the same order, read one file at a time.

    Only the file being read is held (a whole JSON file is parsed at once), so a run over a
    large folder keeps memory flat. What is skipped is appended to ``skipped`` as it is met.
    Raises InputError at once (before the first document is asked for) if a path does not
    exist or a glob is empty.
    """
    _check_paths_exist(paths)
    matchers = [_compile_glob(pattern) for pattern in (globs or DEFAULT_GLOBS)]
    loader = _Loader(text_field=text_field, id_field=id_field)
    if skipped is not None:
        loader.skipped = skipped
    return _documents(paths, matchers, loader)


def _documents(
    paths: Sequence[str | Path], matchers: Sequence[re.Pattern[str]], loader: _Loader
) -> Iterator[Document]:
    for raw in paths:
        path = Path(raw)
        files = _walk(path, matchers, loader.skipped) if path.is_dir() else [path]
        for file in files:
            loader.load_file(file)
            yield from loader.documents
            loader.documents.clear()


class _Skip(Exception):
    """Raised inside the loader to skip the current file or record with a reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _check_paths_exist(paths: Iterable[str | Path]) -> None:
    for raw in paths:
        if str(raw) == "":
            raise InputError("an input path is empty; pass a file or folder to read documents from")
        path = Path(raw)
        if not path.exists():
            where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
            raise InputError(
                f"input path {str(raw)!r} does not exist{where}; "
                "check the path for typos, or pass an existing file or folder"
            )


def _compile_glob(pattern: str) -> re.Pattern[str]:
    """Translate a glob into a regex over ``/``-separated relative paths."""
    if not pattern.strip():
        raise InputError("a --glob pattern is empty; give a pattern such as '*.md' or 'docs/**'")
    pattern = pattern.strip().removeprefix("./")
    if "/" not in pattern:
        pattern = "**/" + pattern
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif char == "*":
            parts.append("[^/]*")
            i += 1
        elif char == "?":
            parts.append("[^/]")
            i += 1
        elif char == "[" and (close := _class_end(pattern, i)) > 0:
            body = pattern[i + 1 : close].replace("\\", "\\\\")
            parts.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = close + 1
        else:
            parts.append(re.escape(char))
            i += 1
    return re.compile("".join(parts), re.IGNORECASE)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the character class opened at ``start``, or -1."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "!":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    return pattern.find("]", i)


def _walk(
    directory: Path, matchers: Sequence[re.Pattern[str]], skipped: list[Skipped], relative: str = ""
) -> Iterator[Path]:
    """Files under ``directory`` matching any pattern, in the order of their relative paths'
    parts, found as they are read: only one folder's names are held at a time (a folder's
    files and sub-folders are sorted together and each sub-folder is walked in its place,
    which is the same order as sorting every path). Symbolic links to folders are not
    followed; a folder that cannot be listed is skipped with the reason."""
    try:
        names = sorted(name for name in os.listdir(directory) if not name.startswith("."))
    except OSError as error:
        skipped.append(Skipped(str(directory), f"cannot list folder: {error.strerror}"))
        return
    for name in names:  # only the names are held (not entries or paths): ~70 bytes a file
        path = directory / name
        if path.is_dir():
            if name not in _IGNORED_DIRS and not path.is_symlink():
                yield from _walk(path, matchers, skipped, f"{relative}{name}/")
        elif any(m.fullmatch(relative + name) for m in matchers):
            yield path


@dataclass
class _Loader:
    """Collects the documents of the file being read and every skip; knows which files and
    ids were already seen."""

    text_field: str
    id_field: str | None
    documents: list[Document] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    _seen_files: Seen = field(default_factory=Seen)  # 8 bytes a file, not its path
    _seen_ids: Seen = field(default_factory=Seen)

    def load_file(self, path: Path) -> None:
        if not self._seen_files.add(os.path.realpath(path)):
            return
        name = str(path)
        suffix = path.suffix.lower()
        try:
            if not path.is_file():
                raise _Skip("not a regular file")
            if suffix == ".pdf":
                self._add(name, _read_pdf(path))
            elif suffix == ".json":
                self._add_json(name, _read_text(path))
            elif suffix in {".jsonl", ".ndjson"}:
                self._add_jsonl(name, _read_text(path))
            else:
                self._add(name, _read_text(path))
        except _Skip as skip:
            self.skipped.append(Skipped(name, skip.reason))

    def _add(self, doc_id: str, text: str) -> None:
        (doc_id, text), repairs = clean_value((doc_id, text))
        if repairs:
            log.warning(
                "input_repaired",
                document=doc_id,
                repairs="; ".join(repairs),
                say=f"document {doc_id}: {'; '.join(repairs)}, so the text can be stored and sent",
            )
        if not text.strip():
            raise _Skip("empty")
        if not self._seen_ids.add(doc_id):
            raise _Skip(f"duplicate document id {doc_id!r}; an earlier document has the same id")
        self.documents.append(Document(id=doc_id, source=doc_id, text=text))

    def _add_json(self, name: str, text: str) -> None:
        if not text.strip():
            raise _Skip("empty")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":  # one object per line in a .json file: read it as JSONL
                self._add_jsonl(name, text)
                return
            raise _Skip(
                f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        records = _json_records(data, self.text_field)
        if not records:
            raise _Skip("no records (the JSON list is empty)")
        for index, record in enumerate(records):
            self._add_record(record, default_id=f"{name}#{index}", where=f"{name}:{index}")

    def _add_jsonl(self, name: str, text: str) -> None:
        if not text.strip():
            raise _Skip("empty")
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                reason = f"invalid JSON on line {number}, column {exc.colno}: {exc.msg}"
                self.skipped.append(Skipped(where, reason))
                continue
            self._add_record(record, default_id=f"{name}#{number}", where=where)

    def _add_record(self, record: JSONValue, *, default_id: str, where: str) -> None:
        try:
            doc_id, text = self._record_fields(record, default_id)
            self._add(doc_id, text)
        except _Skip as skip:
            self.skipped.append(Skipped(where, skip.reason))

    def _record_fields(self, record: JSONValue, default_id: str) -> tuple[str, str]:
        """The id and text of one JSON record; raises _Skip when it has no usable ones."""
        if not isinstance(record, dict):
            raise _Skip(f"record is {_json_type(record)}, not an object")
        if self.text_field not in record:
            raise _Skip(
                f"record has no {self.text_field!r} field (fields: {_keys(record)}); "
                "name the field that holds the text with --text-field"
            )
        text = record[self.text_field]
        if not isinstance(text, str):
            raise _Skip(
                f"field {self.text_field!r} is {_json_type(text)}, not a string; "
                "name a field that holds text with --text-field"
            )
        if self.id_field is None:
            return default_id, text
        if self.id_field not in record:
            raise _Skip(
                f"record has no {self.id_field!r} field (fields: {_keys(record)}); name a field "
                "every record has with --id-field, or leave --id-field out to number records"
            )
        raw_id = record[self.id_field]
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or not str(raw_id).strip():
            raise _Skip(
                f"field {self.id_field!r} holds {raw_id!r}, not a usable id; ids must be "
                "non-empty strings or integers: name another field with --id-field"
            )
        return str(raw_id), text


def _json_records(data: JSONValue, text_field: str) -> list[JSONValue]:
    """The records in parsed JSON: a list, the first list of objects in an object, or itself."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        if text_field not in data:
            for value in data.values():
                if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                    return value
        return [data]
    raise _Skip(f"top level is {_json_type(data)}; expected an object or a list of objects")


def _json_type(value: JSONValue) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"


def _keys(record: dict[str, JSONValue]) -> str:
    if not record:
        return "none"
    keys = list(record)
    shown = ", ".join(keys[:_MAX_KEYS_SHOWN])
    return shown + (", ..." if len(keys) > _MAX_KEYS_SHOWN else "")


def _read_text(path: Path) -> str:
    """Decode a file as UTF-8 (or UTF-16 with a BOM), with ``\\n`` line ends."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _Skip(f"cannot read file: {exc.strerror or exc}") from exc
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif b"\x00" in data:
        raise _Skip("binary file (contains NUL bytes); only text, PDF, JSON and JSONL are read")
    else:
        encoding = "utf-8-sig"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise _Skip(
            f"not valid {encoding.removesuffix('-sig').upper()} (bad byte at offset {exc.start}); "
            "re-save the file as UTF-8"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_pdf(path: Path) -> str:
    """The text of every page, pages separated by a blank line."""
    from pypdf import PdfReader  # only when a PDF is read: it costs tens of ms to import
    from pypdf.errors import FileNotDecryptedError

    try:
        reader = PdfReader(path)
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
    except FileNotDecryptedError as exc:
        raise _Skip("password-protected PDF; save a copy without a password") from exc
    except Exception as exc:  # pypdf raises many kinds of errors for broken files
        raise _Skip(f"unreadable PDF: {type(exc).__name__}: {exc}") from exc
    text = "\n\n".join(page for page in pages if page)
    if not text:
        raise _Skip("no extractable text (scanned PDF?); run OCR on it or supply a text version")
    return text
