"""The flags of ``evaluate --correct-with`` and what they parse to (light to import: the
parser adds them; :mod:`ragjury.calibration.correction` does the correcting)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ragjury.calibration import LABEL_FIELD


@dataclass(frozen=True)
class CorrectWith:
    """``--correct-with [METRIC=]FILE``."""

    path: Path
    metric: str | None = None

    @property
    def spec(self) -> str:
        return f"{self.metric}={self.path}" if self.metric else str(self.path)


def parse_correct_with(text: str) -> CorrectWith:
    """``--correct-with`` (argparse ``type=``): a labels file, or METRIC=FILE."""
    metric, sep, path = text.partition("=")
    if not sep:
        return CorrectWith(Path(text))
    if not metric.strip() or not path.strip():
        raise argparse.ArgumentTypeError(
            f"--correct-with expects FILE or METRIC=FILE, got {text!r}; "
            "e.g. --correct-with faithfulness=labels.jsonl"
        )
    return CorrectWith(Path(path.strip()), metric.strip())


def add_correction_options(parser: argparse.ArgumentParser) -> None:
    """``--correct-with``, ``--label-field`` and ``--label-pass-at`` (evaluate)."""
    group = parser.add_argument_group("correct the judge with human labels")
    group.add_argument(
        "--correct-with",
        type=parse_correct_with,
        metavar="[METRIC=]FILE",
        help="human labels for some of the samples (the file `ragjury calibrate` takes, "
        "matched by id): report METRIC's pass rate (and, with 1-5 labels, its 1-5 mean) "
        "corrected by them, with its 95%% interval, beside the judge's own",
    )
    group.add_argument(
        "--label-field",
        help=f"with --correct-with: the record field holding the person's verdict (default "
        f"{LABEL_FIELD}): true/false, 1/0, yes/no, pass/fail, or a 1-5 rating",
    )
    group.add_argument(
        "--label-pass-at",
        type=int,
        metavar="N",
        help="with --correct-with and 1-5 labels: the lowest rating a person passed (default 4)",
    )
