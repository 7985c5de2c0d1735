"""The flags of ``ragjury generate`` (light to import; see
:mod:`ragjury.commands.common_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragjury.commands.common_options import add_llm_options, add_run_options


def add_generate_arguments(gen: argparse.ArgumentParser) -> None:
    gen.add_argument("paths", nargs="+", type=Path, help="files or folders (searched recursively)")
    gen.add_argument("--out", type=Path, required=True, help="kept pairs (JSONL, CSV or Parquet)")
    gen.add_argument("--rejected", type=Path, help="rejected and failed pairs, with rationales")
    gen.add_argument(
        "--failed", type=Path, help="chunks the generator gave up on, with their errors"
    )
    gen.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet"],
        help="output format (default: the file suffix's, .jsonl .csv .parquet, else jsonl)",
    )
    gen.add_argument("--summary", type=Path, help="write the run summary as JSON here")
    add_run_options(gen)
    add_generation_options(gen)
    add_llm_options(gen)


def add_ingest_options(parser: argparse.ArgumentParser) -> None:
    """How documents are read and chunked: generate's, and audit's for its --corpus."""
    ingest = parser.add_argument_group("input")
    ingest.add_argument(
        "--glob",
        action="append",
        dest="globs",
        metavar="PATTERN",
        help="only files matching (repeatable), e.g. --glob '**/*.md'",
    )
    ingest.add_argument("--text-field", help="JSON/JSONL field holding the text (default text)")
    ingest.add_argument("--id-field", help="JSON/JSONL field holding a record id")
    ingest.add_argument("--chunk-size", type=int, help="characters per chunk (default 2000)")
    ingest.add_argument("--chunk-overlap", type=int, help="characters of overlap (default 200)")
    ingest.add_argument(
        "--whole-documents",
        action="store_true",
        default=None,
        help="generate from whole files instead of chunks",
    )


def add_generation_options(parser: argparse.ArgumentParser) -> None:
    add_ingest_options(parser)
    drafting = parser.add_argument_group("generation")
    drafting.add_argument("--questions-per-chunk", type=int, help="pairs per chunk (default 1)")
    drafting.add_argument(
        "--question-types",
        metavar="TYPE=WEIGHT,...",
        help="the share of each question type, e.g. "
        "factoid=0.5,reasoning=0.2,multi_hop=0.2,comparative=0.1 (default factoid=1)",
    )
    drafting.add_argument(
        "--seed",
        type=int,
        help="seeds each chunk's draw of its question type and persona (default 0)",
    )
    drafting.add_argument(
        "--personas",
        metavar="FILE|auto[:N]",
        help="who asks: a JSON or TOML file of personas (name, description), or auto[:N] to "
        "have the model propose N (default 3) from a sample of the documents",
    )
    drafting.add_argument(
        "--max-pairs",
        type=int,
        help="draft at most N pairs, from chunks spread over the documents, question types "
        "and personas (default: every chunk)",
    )
    drafting.add_argument(
        "--reference-answers",
        action="store_true",
        default=None,
        help="write a complete, self-contained reference answer for each kept pair",
    )
    drafting.add_argument(
        "--answer-style", choices=["factoid", "detailed"], help="short or paragraph-long answers"
    )
    drafting.add_argument(
        "--audience", help="who asks the questions (default: users of these documents)"
    )
    drafting.add_argument(
        "--min-score",
        type=int,
        help="keep a pair only if every critic rates it this or more (default 4)",
    )
    drafting.add_argument(
        "--no-answer-check",
        dest="answer_check",
        action="store_false",
        default=None,
        help="skip the answerability critic, which answers each question from its contexts "
        "alone and rejects a pair whose answer it cannot reproduce (about 2 LLM calls a pair; "
        "a multi-hop pair 1 or 2 more per chunk)",
    )
    drafting.add_argument(
        "--multi-hop-strict",
        action="store_true",
        default=None,
        help="reject a multi-hop question that one of its chunks answers alone (default: "
        "retype it to a factoid of that chunk)",
    )
    drafting.add_argument(
        "--dedup-threshold",
        type=float,
        help="similarity 0..1 at which a question counts as a duplicate (default 0.9)",
    )
