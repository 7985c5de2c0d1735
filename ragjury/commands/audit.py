"""``ragjury audit``: coverage, spread, near-duplicates, leakage and difficulty of a set.

No LLM is called and nothing is written: it reads the set (and ``--corpus``) and prints a
table, or ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table

from ragjury.config import Settings
from ragjury.errors import ConfigurationError

_ROWS_SHOWN = 10


def add_audit_command(commands: Any) -> argparse.ArgumentParser:
    audit: argparse.ArgumentParser = commands.add_parser(
        "audit",
        help="audit a generated set: coverage, spread, near-duplicates, leakage, difficulty",
        description="Read a set `ragjury generate` wrote (its --out file, and --rejected "
        "too if given) and, with --corpus, the documents it came from, read and chunked "
        "with the same options as generate; report the share of documents and chunks with "
        "a kept pair, pairs per document, question type and persona, near-duplicate "
        "questions, questions that copy their chunk verbatim, and how often a plain BM25 "
        "search ranks each question's source chunk first. No LLM is called.",
    )
    audit.add_argument("datasets", nargs="+", type=Path, help="the set's JSONL (JSON or CSV) files")
    audit.add_argument(
        "--corpus",
        action="extend",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="the files or folders the set was generated from (after the dataset files); "
        "needed for coverage and difficulty",
    )
    audit.add_argument(
        "--dedup-threshold",
        type=float,
        help="word-level similarity 0..1 at which two questions are near-duplicates "
        "(default: generate's, 0.9)",
    )
    audit.add_argument(
        "--leak-words",
        type=int,
        default=7,
        metavar="N",
        help="a question that shares a run of N consecutive words with its chunk copies "
        "it (default 7)",
    )
    audit.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return audit


def audit_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.leak_words < 1:
        raise ConfigurationError(f"--leak-words must be 1 or more, got {args.leak_words}")
    # imported here, not for the parser: `ragjury --help` stays light
    from ragjury.report.audit import AuditOptions, audit_dataset, summary_lines
    from ragjury.report.audit_input import load_corpus, read_dataset

    records = read_dataset(args.datasets)
    corpus = load_corpus(args.corpus, settings.generate) if args.corpus else None
    options = AuditOptions(
        near_duplicate=settings.generate.dedup_threshold, leak_words=args.leak_words
    )
    audit = audit_dataset(records, corpus, options)
    unknown = audit.get("unknown_chunk_ids")
    if corpus is not None and unknown is not None:
        kept = audit["records"].get("kept", 0)
        known = audit["coverage"]["chunks_covered"]
        message = (
            f"{unknown['count']} source chunk id(s) of the set are not chunks of --corpus "
            f"(e.g. {unknown['examples'][0]!r}); give the same paths as to generate, and its "
            "--chunk-size, --chunk-overlap, --whole-documents, --text-field and --id-field"
        )
        if known == 0 and kept:
            raise ConfigurationError(message)
        print(f"ragjury: warning: {message}", file=sys.stderr)
    if args.json:
        print(json.dumps(audit, indent=2, ensure_ascii=False))
        return 0
    console = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 120)
    console.print(audit_view(audit))
    for line in summary_lines(audit):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    return 0


def audit_view(audit: dict[str, Any]) -> RenderableType:
    """The audit as tables (:func:`~ragjury.report.audit.summary_lines` says it in short)."""
    parts: list[RenderableType] = [_documents_table(audit)]
    coverage = audit.get("coverage")
    if coverage and coverage.get("largest_uncovered"):
        table = Table(title="largest documents without a kept pair", title_justify="left")
        table.add_column("document", overflow="fold")
        table.add_column("characters", justify="right")
        table.add_column("chunks", justify="right")
        for row in coverage["largest_uncovered"]:
            table.add_row(row["document"], str(row["characters"]), str(row["chunks"]))
        parts.append(table)
    parts.append(_counts_table(audit))
    if audit["near_duplicates"]["pairs"]:
        table = Table(
            title=f"near-duplicate questions (similarity >= "
            f"{audit['near_duplicates']['threshold']})",
            title_justify="left",
        )
        for column in ("similarity", "first", "second"):
            table.add_column(column, overflow="fold")
        for pair in audit["near_duplicates"]["pairs"][:_ROWS_SHOWN]:
            table.add_row(
                f"{pair['similarity']:.2f}",
                f"{pair['first']}: {pair['first_question']}",
                f"{pair['second']}: {pair['second_question']}",
            )
        parts.append(table)
    leaks = audit["leakage"]
    if leaks["questions"]:
        table = Table(
            title=f"questions copying {leaks['min_words']}+ words of their chunk",
            title_justify="left",
        )
        for column in ("words", "question", "copied"):
            table.add_column(column, overflow="fold")
        for leak in leaks["questions"][:_ROWS_SHOWN]:
            table.add_row(
                f"{leak['words']}/{leak['question_words']}",
                f"{leak['id']}: {leak['question']}",
                leak["span"],
            )
        parts.append(table)
    return Group(*parts)


def _documents_table(audit: dict[str, Any]) -> Table:
    rows = audit["by_document"]
    table = Table(
        title=f"kept pairs per document ({len(rows)} documents with a pair"
        + (f", the first {_ROWS_SHOWN}" if len(rows) > _ROWS_SHOWN else "")
        + ")",
        title_justify="left",
    )
    table.add_column("document", overflow="fold")
    for column in ("kept", "share", "not kept"):
        table.add_column(column, justify="right")
    for row in rows[:_ROWS_SHOWN]:
        share = "-" if row["share"] is None else f"{row['share']:.0%}"
        table.add_row(row["document"], str(row["kept"]), share, str(row["not_kept"]))
    return table


def _counts_table(audit: dict[str, Any]) -> Table:
    table = Table(title="kept pairs per question type and persona", title_justify="left")
    for column in ("question type", "pairs", "persona", "pairs "):
        table.add_column(column, justify="right" if column.startswith("pairs") else "left")
    types = list(audit["by_question_type"].items())
    personas = list(audit["by_persona"].items())
    for i in range(max(len(types), len(personas))):
        kind, count = types[i] if i < len(types) else ("", "")
        persona, persona_count = personas[i] if i < len(personas) else ("", "")
        table.add_row(kind, str(count), persona, str(persona_count))
    return table
