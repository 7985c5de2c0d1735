"""The flags of ``ragjury report`` and ``ragjury compare`` (light to import; see
:mod:`ragjury.commands.common_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expects a whole number >= 1, got {text!r}")
    return value


def add_report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "results", nargs="?", type=Path, help="results or dataset JSONL (omit with --db)"
    )
    report.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    report.add_argument("--summary", type=Path, help="the run's --summary JSON, for the header")
    report.add_argument(
        "--samples", type=Path, help="the samples judged, to show their contexts and references"
    )
    report.add_argument(
        "--rejected", type=Path, help="the rejected pairs of a dataset (`generate --rejected`)"
    )
    report.add_argument(
        "--db", help="read a job from this database instead (a file, or a postgresql:// URL)"
    )
    report.add_argument("--job", help="the job to read from --db (default: the newest)")
    report.add_argument(
        "--history",
        action="store_true",
        help="with --db: one page of every run in the database (each metric's trend over the "
        "runs, the runs whose gates failed) and, in OUT-runs/ beside it, each run's report",
    )
    report.add_argument("--title", help="the page title")


def add_compare_arguments(comp: argparse.ArgumentParser) -> None:
    from ragjury.report.gates import parse_regressions

    comp.add_argument("baseline", help="results JSONL (or a job id with --db)")
    comp.add_argument("candidate", help="results JSONL (or a job id with --db)")
    comp.add_argument(
        "--db",
        help="BASELINE and CANDIDATE are jobs in this database (a file, or a postgresql:// URL)",
    )
    comp.add_argument("--out", type=Path, help="also write the comparison as an HTML page")
    comp.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="also write the comparison as Markdown, for a pull request comment or "
        "$GITHUB_STEP_SUMMARY (the answers of the biggest regressions side by side)",
    )
    comp.add_argument("--json", action="store_true", help="print JSON instead of tables")
    comp.add_argument(
        "--fail-on-regression",
        action="append",
        type=parse_regressions,
        default=[],
        metavar="METRIC=DELTA,...",
        help="exit 5 if a metric's mean is more than DELTA worse in the candidate (repeatable)",
    )
    comp.add_argument(
        "--resamples", type=_positive, default=2000, help="bootstrap resamples (default 2000)"
    )
    comp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    shown = comp.add_mutually_exclusive_group()
    shown.add_argument(
        "--limit",
        type=int,
        default=5,
        metavar="N",
        help="list the N biggest regressions of each metric (default 5)",
    )
    shown.add_argument("--all", action="store_true", help="list every regression")
    comp.add_argument("--title", help="the page title of --out")
