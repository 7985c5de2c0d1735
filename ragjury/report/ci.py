"""What ``evaluate`` does for CI: the gate flags, the run details a report shows, and the
``--junit`` and ``--markdown`` files (the exit code is ``commands/_run.py``'s)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from ragjury._json import JSONData, json_object
from ragjury.metrics import Metric
from ragjury.output import write_text_atomically
from ragjury.prompts import Prompt
from ragjury.report.gates import GateResult
from ragjury.report.load import prompt_origins, prompt_versions
from ragjury.report.markdown import markdown_summary
from ragjury.urls import endpoint_shown


def run_details(
    samples: Path,
    base_url: str | None,
    prompts: Mapping[str, Prompt],
    metrics: Iterable[str],
    judges: Sequence[Metric] = (),
) -> dict[str, JSONData]:
    """What a report's header shows beyond the figures: input, endpoint, prompts, time."""
    return {
        "input": str(samples),
        "base_url": base_url and endpoint_shown(base_url),
        "prompt_versions": prompt_versions(prompts, metrics, judges),
        "prompt_origins": prompt_origins(prompts, metrics, judges),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write_ci_files(
    junit: Path | None,
    markdown: Path | None,
    summary: Mapping[str, JSONData],
    records: Sequence[Mapping[str, JSONData]],
    gates: Sequence[GateResult],
) -> None:
    """Write the ``--junit`` XML and the ``--markdown`` summary of a run's records."""
    if junit is not None:
        from ragjury.report.junit import junit_xml  # XML (ElementTree) for --junit only

        write_text_atomically(junit, junit_xml(records, gates))
    if markdown is not None:
        stats = {
            name: json_object(figures) for name, figures in json_object(summary["metrics"]).items()
        }
        text = markdown_summary(summary, stats, records, gates)
        write_text_atomically(markdown, text)
