"""The flags of ``ragjury evaluate`` and ``ragjury metrics`` (light to import; the installed
metrics, which the flags and their help name, are read when the flags are added)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ragjury.commands.common_options import (
    add_field_option,
    add_llm_options,
    add_log_level,
    add_run_options,
    declared,
)

if TYPE_CHECKING:
    from ragjury.metrics import Registry


# The built-in metrics in listing order, for ``ragjury --help``, which would otherwise import
# every metric declaration and the pydantic models they bring in
# (tests/test_readme_consistency.py checks this list against the registry).
BUILTIN_METRIC_NAMES = (
    "faithfulness",
    "correctness",
    "rubric",
    "keywords",
    "similarity",
    "confidence",
    "retrieval",
    "context_relevance",
    "context_precision",
    "context_recall",
    "answer_relevance",
    "answer_completeness",
    "question_groundedness",
    "question_standalone",
)


def evaluate_help() -> str:
    """The one-line help of ``evaluate`` in ``ragjury --help``: the built-in metrics, and where
    to find those of plugins (reading them would load every declaration)."""
    return (
        f"judge RAG answers: {', '.join(BUILTIN_METRIC_NAMES)}; plugins' metrics too "
        "(`ragjury metrics` lists all)"
    )


def add_evaluate_arguments(ev: argparse.ArgumentParser) -> None:
    ev.add_argument(
        "samples",
        type=Path,
        help="JSONL, JSON, CSV or Parquet of samples, or a Hugging Face dataset folder",
    )
    add_field_option(ev)
    ev.add_argument(
        "--out", type=Path, required=True, help="per-sample results (JSONL, CSV or Parquet)"
    )
    ev.add_argument(
        "--format",
        choices=["jsonl", "csv", "parquet"],
        help="output format (default: the file suffix's, .jsonl .csv .parquet, else jsonl)",
    )
    ev.add_argument("--summary", type=Path, help="write the run summary as JSON here")
    ev.add_argument(
        "--max-failed",
        type=int,
        metavar="N",
        help="exit 3 when more than N judgements (sample x metric) failed (exit 4 when every "
        "judgement failed, whatever N)",
    )
    add_run_options(ev)
    add_evaluation_options(ev)
    ev.add_argument(
        "--embedding-model", help="embedding model for similarity (default text-embedding-3-small)"
    )
    add_ci_options(ev)
    from ragjury.calibration.correct_with import add_correction_options

    add_correction_options(ev)
    from ragjury.commands.panel_options import add_panel_options

    add_panel_options(ev)
    target = ev.add_argument_group("live RAG system")
    target.add_argument(
        "--target",
        help='answer samples that have no answer: an http(s) URL (POST {"question": ...}) '
        "or package.module:function",
    )
    target.add_argument("--target-question-field", default="question")
    target.add_argument("--target-answer-field", default="answer")
    target.add_argument("--target-contexts-field", default="contexts")
    target.add_argument(
        "--target-timeout", type=float, default=60.0, help="seconds per target request"
    )
    add_llm_options(ev)


def metric_help(metrics: Registry) -> str:
    groups = "; ".join(f"{g} ({', '.join(names)})" for g, names in metrics.groups.items())
    chosen = [m.name for m in metrics if m.by_default is not None]
    return (
        f"comma-separated: {', '.join(metrics.names)}"
        + (f", or {groups}" if groups else "")
        + ", or a judge file's metric (see --judge); `ragjury metrics` describes each "
        f"(default: {', '.join(chosen)}, each where the samples have what it needs)"
    )


def add_evaluation_options(parser: argparse.ArgumentParser) -> None:
    metrics = declared()
    judging = parser.add_argument_group("evaluation")
    judging.add_argument("--metrics", help=metric_help(metrics))
    judging.add_argument(
        "--judge",
        action="append",
        default=[],
        metavar="FILE",
        help="add the metric of a judge file you wrote (TOML: name, description, inputs, "
        "scale, pass_at, prompt; repeatable); see the README's 'Write your own judge'",
    )
    judging.add_argument(
        "--k",
        help="comma-separated cut-offs of the retrieval figures (default 1,3,5,10); a k "
        "larger than what was retrieved takes the whole list",
    )
    judging.add_argument("--verdict-batch", type=int, help="statements judged per call (default 8)")
    judging.add_argument(
        "--context-window-chars",
        type=int,
        help="contexts longer than this are judged in windows (default 12000)",
    )
    judging.add_argument(
        "--case-sensitive", action="store_true", default=None, help="keyword tests match case"
    )
    judging.add_argument(
        "--threshold",
        action="append",
        default=[],
        dest="thresholds",
        metavar="METRIC=X",
        help="a metric's pass mark on its own scale, e.g. --threshold politeness=3 (repeatable)",
    )
    marks = parser.add_argument_group("pass marks (each on its metric's scale)")
    for metric in metrics:
        if metric.threshold is None:
            continue
        scale = metric.scale
        marks.add_argument(
            f"--{metric.name.replace('_', '-')}-threshold",
            type=float,
            dest=f"{metric.name}_threshold",
            metavar="X",
            help=f"passing {metric.name} score, {scale.describe()} (default {metric.threshold:g})",
        )


def add_metrics_arguments(listing: argparse.ArgumentParser) -> None:
    listing.add_argument(
        "--judge", action="append", default=[], metavar="FILE", help="include a judge file"
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.add_argument(
        "--markdown", action="store_true", help="print a Markdown table (as in the README)"
    )
    add_log_level(listing)


def add_ci_options(parser: argparse.ArgumentParser) -> None:
    """``--fail-under``, ``--gate-on``, ``--junit`` and ``--markdown`` (``--max-failed`` is the
    command's own)."""
    from ragjury.report.gates import GATE_ON, parse_thresholds

    group = parser.add_argument_group("CI gates and reports")
    group.add_argument(
        "--fail-under",
        action="extend",
        type=parse_thresholds,
        default=[],
        metavar="METRIC=X,...",
        help="exit 5 if a metric's mean over scored samples is below X, on the metric's own "
        "scale (`ragjury metrics`), e.g. faithfulness=0.8,correctness=4; pass_rate:METRIC=X "
        "for its pass rate (repeatable)",
    )
    group.add_argument(
        "--gate-on",
        choices=GATE_ON,
        default="point",
        help="what --fail-under compares with its bar: the mean or pass rate itself (point, "
        "the default) or the lower bound of its 95%% interval over samples (lower-bound: the "
        "gate passes only when the samples leave no reasonable doubt)",
    )
    group.add_argument("--junit", type=Path, metavar="FILE", help="write a JUnit XML report")
    group.add_argument(
        "--markdown", type=Path, metavar="FILE", help="write a Markdown summary for a CI job page"
    )
