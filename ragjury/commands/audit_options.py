"""The flags of ``ragjury audit`` (light to import; see
:mod:`ragjury.commands.common_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragjury.commands.common_options import add_log_level
from ragjury.commands.generate_options import add_ingest_options

HELP = "audit a generated set: coverage, spread, near-duplicates, leakage, difficulty"
DESCRIPTION = (
    "Read a set `ragjury generate` wrote (its --out file, and --rejected too if given) and, "
    "with --corpus, the documents it came from, read and chunked with the same options as "
    "generate; report the share of documents and chunks with a kept pair, pairs per "
    "document, question type and persona, near-duplicate questions, questions that copy "
    "their chunk verbatim, and how often a plain BM25 search ranks each question's source "
    "chunk first. No LLM is called."
)


def add_audit_arguments(audit: argparse.ArgumentParser) -> None:
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
    add_ingest_options(audit)
    add_log_level(audit)
