"""What ``evaluate`` does for CI: the gate flags, the run details a report shows, and the
``--junit`` and ``--markdown`` files (the exit code is ``commands/_run.py``'s)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ragjury.metrics import Metric
from ragjury.output import write_text_atomically
from ragjury.prompts import Prompt
from ragjury.report.gates import GATE_ON, GateResult, parse_thresholds
from ragjury.report.junit import junit_xml
from ragjury.report.load import prompt_origins, prompt_versions
from ragjury.report.markdown import markdown_summary


def add_ci_options(parser: argparse.ArgumentParser) -> None:
    """``--fail-under``, ``--gate-on``, ``--junit`` and ``--markdown`` (``--max-failed`` is the
    command's own)."""
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


def redact_url(url: str | None) -> str | None:
    """An endpoint as a report may show it: no user, password or query string."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def run_details(
    samples: Path,
    base_url: str | None,
    prompts: Mapping[str, Prompt],
    metrics: Iterable[str],
    judges: Sequence[Metric] = (),
) -> dict[str, Any]:
    """What a report's header shows beyond the figures: input, endpoint, prompts, time."""
    return {
        "input": str(samples),
        "base_url": redact_url(base_url),
        "prompt_versions": prompt_versions(prompts, metrics, judges),
        "prompt_origins": prompt_origins(prompts, metrics, judges),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_ci_files(
    junit: Path | None,
    markdown: Path | None,
    summary: Mapping[str, Any],
    records: Sequence[dict[str, Any]],
    gates: Sequence[GateResult],
) -> None:
    """Write the ``--junit`` XML and the ``--markdown`` summary of a run's records."""
    if junit is not None:
        write_text_atomically(junit, junit_xml(records, gates))
    if markdown is not None:
        text = markdown_summary(summary, summary["metrics"], records, gates)
        write_text_atomically(markdown, text)
