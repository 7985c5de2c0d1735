"""The flags of ``ragjury review export`` and ``ragjury review import`` (light to import; see
:mod:`ragjury.commands.common_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragjury.commands.common_options import add_log_level

HELP = "export judged samples for people to label (Label Studio, CSV) and import their labels"
DESCRIPTION = (
    "`review export` writes each judged sample and metric with the judge's score, verdict and "
    "reason, for people to confirm or correct: Label Studio tasks (.json, with the labelling "
    "configuration beside it) or a spreadsheet (.csv, with an empty human column). `review "
    "import` reads the labelled file back into --db, where `ragjury calibrate reviewed` and "
    "`evaluate --correct-with METRIC=reviewed` use the labels."
)


def add_review_arguments(review: argparse.ArgumentParser) -> None:
    from ragjury.calibration import LABEL_FIELD  # not for `--version`

    actions = review.add_subparsers(dest="review_command", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="write judged samples (or generated pairs) for review",
        description="Write judged samples and the judges' verdicts, or generated pairs and "
        "their critics' verdicts, for people to label.",
    )
    export.add_argument(
        "results",
        nargs="?",
        type=Path,
        help="evaluate results JSONL, or the pairs generate kept (--out); omit with --db",
    )
    export.add_argument(
        "--rejected",
        type=Path,
        help="the pairs generate rejected (its --rejected file), reviewed with the kept ones",
    )
    export.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the file to write: .json (Label Studio tasks) or .csv (a spreadsheet)",
    )
    export.add_argument(
        "--db", help="read a job from this database instead (a file, or a postgresql:// URL)"
    )
    export.add_argument("--job", help="the job to read from --db (default: the newest)")
    export.add_argument(
        "--metric",
        action="append",
        default=[],
        help="only this metric's verdicts (repeatable; default: every metric with a pass "
        "mark; for generated pairs question_groundedness and question_standalone, their "
        "critics' verdicts)",
    )
    add_log_level(export)
    imported = actions.add_parser(
        "import",
        help="read people's labels back into the database",
        description="Read a reviewed file (Label Studio's JSON export, or the CSV/JSONL with "
        "the label column filled in) into --db; items nobody labelled are skipped.",
    )
    imported.add_argument("file", type=Path, help="the reviewed file (.json, .jsonl or .csv)")
    imported.add_argument(
        "--db",
        help="the database to keep the labels in (default ragjury.db; a file or a "
        "postgresql:// URL)",
    )
    imported.add_argument(
        "--metric", help="the judge the labels are for, where the file's rows do not say"
    )
    imported.add_argument(
        "--label-field",
        help=f"the CSV/JSONL column holding the person's verdict (default {LABEL_FIELD})",
    )
    add_log_level(imported)
