"""What ``evaluate`` does for CI: the gate flags, the run details a report shows, and the
end of the command (``--junit``, ``--markdown``, the gates and their exit code)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console

from ragjury.errors import ConfigurationError
from ragjury.prompts import Prompt
from ragjury.report.gates import (
    EXIT_GATE,
    GateResult,
    check_max_failed,
    check_thresholds,
    parse_thresholds,
    reason_line,
)
from ragjury.report.junit import write_junit
from ragjury.report.load import metric_stats, prompt_versions
from ragjury.report.markdown import markdown_summary


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expects a whole number >= 0, got {text!r}")
    return value


def add_ci_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("CI gates and reports")
    group.add_argument(
        "--fail-under",
        action="extend",
        type=parse_thresholds,
        default=[],
        metavar="METRIC=X,...",
        help="exit 4 if a metric's mean over scored samples is below X, e.g. "
        "faithfulness=0.8,correctness=4; pass_rate:METRIC=X for its pass rate (repeatable)",
    )
    group.add_argument(
        "--max-failed",
        type=_count,
        metavar="N",
        help="exit 4 if more than N judgements (a sample's metric) failed",
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
    samples: Path, base_url: str | None, prompts: Mapping[str, Prompt], metrics: Iterable[str]
) -> dict[str, Any]:
    """What a report's header shows beyond the figures: input, endpoint, prompts, time."""
    return {
        "input": str(samples),
        "base_url": redact_url(base_url),
        "prompt_versions": prompt_versions(prompts, metrics),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write {str(path)!r}: {exc.strerror}; choose a writable path"
        ) from exc


def finish_evaluate(
    args: argparse.Namespace,
    summary: Mapping[str, Any],
    records: Iterable[dict[str, Any]],
    code: int,
    console: Console,
) -> int:
    """Write ``--junit`` / ``--markdown`` and check the gates; the command's exit code.

    Gates are checked only when the run judged everything (``code`` 0): a run stopped by a
    budget or a signal keeps its own code, as does one with invalid input (1)."""
    thresholds = getattr(args, "fail_under", None) or []
    max_failed = getattr(args, "max_failed", None)
    junit, markdown = getattr(args, "junit", None), getattr(args, "markdown", None)
    if not (thresholds or max_failed is not None or junit or markdown):
        return code
    rows = list(records)
    stats = metric_stats(rows)
    gates: list[GateResult] = check_thresholds(stats, thresholds)
    if max_failed is not None:
        gates.append(check_max_failed(stats, max_failed))
    if junit is not None:
        try:
            write_junit(junit, rows, gates)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot write {str(junit)!r}: {exc.strerror}; choose a writable path"
            ) from exc
    if markdown is not None:
        _write(markdown, markdown_summary(summary, stats, rows, gates))
    reason = reason_line(gates)
    if reason is None:
        return code
    console.print(reason, soft_wrap=True, markup=False, highlight=False)
    return EXIT_GATE if code == 0 else code
