"""The flags of the queue commands, ``submit``, ``serve``, ``status``, ``prune`` and ``export``
(light to import; see :mod:`ragjury.commands.common_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragjury.commands.common_options import (
    add_field_option,
    add_llm_options,
    add_log_level,
    add_run_options,
)
from ragjury.commands.evaluate_options import add_evaluation_options
from ragjury.commands.generate_options import add_generation_options


def add_submit_arguments(submit: argparse.ArgumentParser) -> None:
    submit.add_argument("paths", nargs="*", type=Path, help="files or folders of documents")
    submit.add_argument(
        "--samples", type=Path, help="JSONL, JSON, CSV or Parquet of samples to judge"
    )
    add_field_option(submit)
    submit.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    add_log_level(submit)
    submit.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="your Jinja2 template for a prompt, kept with the job",
    )
    add_generation_options(submit)
    add_evaluation_options(submit)
    from ragjury.commands.panel_options import add_panel_options

    add_panel_options(submit)


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    add_run_options(serve)
    serve.add_argument(
        "--lease",
        dest="lease_seconds",
        type=float,
        help="seconds a message stays this worker's without renewal (default 30); a killed "
        "worker's messages are taken up again after this (at once by a worker started on "
        "the same machine)",
    )
    serve.add_argument(
        "--agents",
        help="comma-separated agents this process works, e.g. verdict_judge,statement_splitter "
        "(default: every agent and the intake of queued items; name 'intake' to include it)",
    )
    serve.add_argument(
        "--embedding-model", help="embedding model for similarity (default text-embedding-3-small)"
    )
    add_llm_options(serve)


def add_status_arguments(status: argparse.ArgumentParser) -> None:
    status.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    status.add_argument("--json", action="store_true", help="print JSON instead of tables")


def add_prune_arguments(prune: argparse.ArgumentParser) -> None:
    prune.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    prune.add_argument("--older-than", required=True, help="an age: 30d, 12h, 90m or 3600s")
    prune.add_argument(
        "--no-vacuum",
        dest="vacuum",
        action="store_false",
        help="do not give the space back to the file system (VACUUM rewrites the file)",
    )


def add_export_arguments(export: argparse.ArgumentParser) -> None:
    export.add_argument("--db", help="SQLite file or postgresql:// URL (default ragjury.db)")
    export.add_argument("--out", type=Path, help="kept pairs of every generation job")
    export.add_argument("--rejected", type=Path, help="rejected and failed pairs")
    export.add_argument("--results", type=Path, help="judged samples of every evaluation job")
    export.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet"],
        help="output format (default: the file suffix's, .jsonl .csv .parquet, else jsonl)",
    )
    export.add_argument(
        "--job", action="append", dest="jobs", metavar="ID", help="only this job (repeatable)"
    )
