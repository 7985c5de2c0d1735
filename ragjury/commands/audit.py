"""``ragjury audit``: coverage, spread, near-duplicates, leakage and difficulty of a set.

No LLM is called and nothing is written: it reads the set (and ``--corpus``) and prints a
table, or ``--json``."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console, Group, RenderableType
from rich.table import Table

from ragjury.config import Settings
from ragjury.errors import ConfigurationError
from ragjury.report.audit import Audit, AuditOptions, audit_dataset, summary_lines
from ragjury.report.audit_input import load_corpus, read_dataset

_ROWS_SHOWN = 10


def audit_command(args: argparse.Namespace, settings: Settings) -> int:
    if args.leak_words < 1:
        raise ConfigurationError(f"--leak-words must be 1 or more, got {args.leak_words}")
    records = read_dataset(args.datasets)
    corpus = load_corpus(args.corpus, settings.generate) if args.corpus else None
    options = AuditOptions(
        near_duplicate=settings.generate.dedup_threshold, leak_words=args.leak_words
    )
    audit = audit_dataset(records, corpus, options)
    unknown = audit.get("unknown_chunk_ids")
    if corpus is not None and unknown is not None:
        kept = audit["records"].get("kept", 0)
        coverage = audit["coverage"]
        known = coverage["chunks_covered"] if coverage is not None else 0
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


def audit_view(audit: Audit) -> RenderableType:
    """The audit as tables (:func:`~ragjury.report.audit.summary_lines` says it in short)."""
    parts: list[RenderableType] = [_documents_table(audit)]
    coverage = audit["coverage"]
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


def _documents_table(audit: Audit) -> Table:
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


def _counts_table(audit: Audit) -> Table:
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
