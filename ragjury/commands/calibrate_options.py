"""The flags of ``ragjury calibrate`` (light to import: ``--help`` builds every parser)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ragjury.calibration import LABEL_FIELD
from ragjury.calibration.agreement import RESAMPLES


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of its own; the CLI adds the run, LLM and budget flags every job has."""
    parser.add_argument(
        "source",
        nargs="?",
        help="a bundled set (see --list) or your labelled samples (JSONL, JSON, CSV, Parquet)",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the bundled labelled sets and stop"
    )
    parser.add_argument(
        "--metric",
        help="the judge to calibrate (a metric, a --judge file's or a plugin's); default: the "
        "one a bundled set is for",
    )
    parser.add_argument(
        "--judge",
        action="append",
        default=[],
        metavar="FILE",
        help="a judge file whose metric --metric may name (repeatable)",
    )
    parser.add_argument(
        "--label-field",
        help=f"the record field holding the person's verdict (default {LABEL_FIELD}): "
        "true/false, 1/0, yes/no, pass/fail, or a 1-5 rating",
    )
    parser.add_argument(
        "--label-pass-at",
        type=int,
        metavar="N",
        help="for 1-5 labels: the lowest rating a person passed (default 4)",
    )
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        dest="fields",
        metavar="NAME=SOURCE",
        help="read sample field NAME from the record field SOURCE (repeatable), as evaluate",
    )
    parser.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="judge N samples drawn at random (with --seed): a cheap look, with wide intervals",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of --sample and of the bootstrap (default 0)"
    )
    parser.add_argument(
        "--resamples",
        type=int,
        default=RESAMPLES,
        help=f"bootstrap resamples of each interval (default {RESAMPLES})",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        dest="thresholds",
        metavar="METRIC=X",
        help="the judge's pass mark on its own scale, e.g. --threshold faithfulness=0.7",
    )
    parser.add_argument("--verdict-batch", type=int, help="statements judged per call (default 8)")
    parser.add_argument(
        "--context-window-chars",
        type=int,
        help="contexts longer than this are judged in windows (default 12000)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--submit",
        action="store_true",
        help="queue the judging in --db for `ragjury serve` workers and stop; once they have "
        "judged it, the same command without --submit prints the figures",
    )
    from ragjury.commands.panel_options import add_panel_options

    add_panel_options(parser)
    parser.add_argument("--summary", type=Path, help="write the run summary as JSON here")
