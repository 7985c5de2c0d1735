"""What ``ragjury audit`` reads: the records of a generated set, and the corpus it came from.

A record needs a ``question`` and the ids of the chunks it was drafted from: ``chunk_ids``
(a list) or ``chunk_id``, as ``ragjury generate`` writes them; ``reference_context_ids`` or
``correct_chunks`` (the fields ``ragjury evaluate`` reads as the reference chunks) are taken
too, so a hand-written set can be audited. Everything else is optional: ``context`` or
``contexts`` (the chunks' text, for leakage), ``source``, ``outcome`` (default ``kept``),
``question_type`` (default ``factoid``) and ``persona``.

The corpus is read and chunked as ``generate`` reads and chunks it (the same loaders, the
same ``--chunk-size``, ``--chunk-overlap`` and ``--whole-documents``), so its chunk ids are
the records' chunk ids. A record may also name a document of one chunk by the document's
own id (a pre-chunked corpus, such as a JSON list of passages read with ``--id-field``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragjury.config import GenerationOptions
from ragjury.errors import InputError
from ragjury.evaluation._rows import Unreadable, csv_rows, json_rows, jsonl_rows, keys_text
from ragjury.ingest import Skipped, chunk_document, iter_documents

__all__ = ["AuditRecord", "Corpus", "audit_record", "load_corpus", "read_dataset"]

CHUNK_ID_FIELDS = ("chunk_ids", "chunk_id", "reference_context_ids", "correct_chunks")
_READERS = {".jsonl": jsonl_rows, ".ndjson": jsonl_rows, ".json": json_rows, ".csv": csv_rows}
_MAX_PROBLEMS = 5
_NEEDS = (
    "each record needs a 'question' and the ids of its source chunks ('chunk_id' or "
    "'chunk_ids'), as `ragjury generate --out` writes them"
)


@dataclass(frozen=True)
class AuditRecord:
    """One question of the set, with what the audit reads of it."""

    id: str
    where: str
    question: str
    chunk_ids: tuple[str, ...]
    contexts: tuple[str, ...] = ()
    source: str | None = None
    outcome: str = "kept"
    question_type: str = "factoid"
    persona: str | None = None


@dataclass
class Corpus:
    """The documents (id -> characters, in reading order) and their chunks."""

    documents: dict[str, int] = field(default_factory=dict)
    chunks: dict[str, str] = field(default_factory=dict)  # chunk id -> its text
    chunk_document: dict[str, str] = field(default_factory=dict)  # chunk id -> document id
    document_chunks: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)

    def resolve(self, source_id: str) -> str | None:
        """The chunk a record's source id names: a chunk id, or the id of a document that
        is one chunk; None when the corpus has neither."""
        if source_id in self.chunks:
            return source_id
        chunks = self.document_chunks.get(source_id)
        return chunks[0] if chunks is not None and len(chunks) == 1 else None


def load_corpus(paths: Sequence[Path], options: GenerationOptions) -> Corpus:
    """The documents under ``paths`` chunked as ``generate`` would chunk them."""
    corpus = Corpus()
    for document in iter_documents(
        paths,
        globs=options.globs,
        text_field=options.text_field,
        id_field=options.id_field,
        skipped=corpus.skipped,
    ):
        corpus.documents[document.id] = len(document.text)
        chunks = chunk_document(
            document,
            chunk_size=options.chunk_size,
            overlap=options.chunk_overlap,
            whole=options.whole_documents,
        )
        corpus.document_chunks[document.id] = [chunk.id for chunk in chunks]
        for chunk in chunks:
            corpus.chunks[chunk.id] = chunk.text
            corpus.chunk_document[chunk.id] = document.id
    if not corpus.documents:
        where = ", ".join(str(p) for p in paths)
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in corpus.skipped[:5])
        raise InputError(
            f"--corpus {where}: no readable documents"
            + (f" (skipped: {reasons})" if reasons else "")
            + "; give the files or folders the set was generated from"
        )
    return corpus


def read_dataset(paths: Sequence[Path]) -> list[AuditRecord]:
    """Every record of the files (JSONL, JSON or CSV), checked; every bad line is named
    (the first few) in one InputError."""
    records: list[AuditRecord] = []
    problems: list[str] = []
    for path in paths:
        for line, raw in _rows(path):
            where = f"{path}:{line}"
            if isinstance(raw, Unreadable):
                problems.append(f"{where}: {raw.reason}")
                continue
            try:
                records.append(audit_record(raw, where))
            except InputError as exc:
                problems.append(str(exc))
    if problems:
        more = len(problems) - _MAX_PROBLEMS
        shown = "\n  ".join(problems[:_MAX_PROBLEMS])
        raise InputError(
            f"{len(problems)} record(s) cannot be audited:\n  {shown}"
            + (f"\n  ... and {more} more" if more > 0 else "")
            + f"\n{_NEEDS}"
        )
    if not records:
        raise InputError(
            f"{', '.join(map(str, paths))}: no record; give the file `ragjury generate --out` wrote"
        )
    return records


def _rows(path: Path) -> Iterator[tuple[int, object]]:
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise InputError(f"dataset file {str(path)!r} does not exist{where}; check the path")
    read = _READERS.get(path.suffix.lower())
    if read is None:
        raise InputError(
            f"cannot read {str(path)!r}: unknown suffix {path.suffix!r}; give the JSONL "
            "(or JSON, CSV) file `ragjury generate --out` wrote"
        )
    if not path.is_file():
        raise InputError(f"dataset path {str(path)!r} is not a file; give a JSONL file")
    return read(path)


def audit_record(raw: object, where: str) -> AuditRecord:
    """One record as the audit reads it; InputError naming ``where`` and the fix if it
    cannot be."""
    if not isinstance(raw, Mapping):
        raise InputError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    question = raw.get("question")
    if not isinstance(question, str) or not question.strip():
        if raw.get("outcome") == "failed" and "question" not in raw:
            raise InputError(
                f"{where}: a failed chunk (the `--failed` file), not a pair; leave that file out"
            )
        got = "no 'question' field" if question is None else f"'question' is {question!r}"
        raise InputError(f"{where}: {got} ({keys_text(raw)})")
    chunk_ids = _source_ids(raw, where)
    contexts = _strings(raw.get("contexts")) or _strings(raw.get("context"))
    return AuditRecord(
        id=str(raw.get("id") or where),
        where=where,
        question=question,
        chunk_ids=chunk_ids,
        contexts=contexts,
        source=raw["source"] if isinstance(raw.get("source"), str) else None,
        outcome=str(raw.get("outcome") or "kept"),
        question_type=str(raw.get("question_type") or "factoid"),
        persona=_persona(raw.get("persona")),
    )


def _source_ids(raw: Mapping[str, object], where: str) -> tuple[str, ...]:
    for name in CHUNK_ID_FIELDS:
        if raw.get(name) in (None, "", []):
            continue
        ids = _strings(raw[name])
        if not ids:
            raise InputError(
                f"{where}: '{name}' is {raw[name]!r}; give a chunk id or a list of them"
            )
        return ids
    raise InputError(f"{where}: no 'chunk_id' or 'chunk_ids' ({keys_text(raw)})")


def _strings(value: object) -> tuple[str, ...]:
    """A string, a list of strings, or (a CSV cell) the JSON text of a list of strings."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                return (text,)
        else:
            return (value,) if text else ()
    if isinstance(value, list | tuple):
        return tuple(item for item in _flat(value) if item.strip())
    return ()


def _flat(values: Iterable[object]) -> Iterator[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping) and isinstance(value.get("text"), str):
            yield value["text"]


def _persona(value: object) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, Mapping) and isinstance(value.get("name"), str):
        return str(value["name"])
    return None
