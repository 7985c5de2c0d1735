"""``--markdown FILE``: a short summary for a CI job page (e.g. ``$GITHUB_STEP_SUMMARY``).

Markdown viewers render HTML, so text from documents and models is escaped, kept on one line
and shortened before it goes in.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence

from ragjury._json import JSONData, json_list, json_number, json_object
from ragjury.report.gates import GateResult

_TEXT_CHARS = 120
_SAMPLES_LISTED = 10


def inline(text: JSONData, limit: int = _TEXT_CHARS) -> str:
    """One escaped line: no HTML, no table break, no emphasis or code from the text."""
    flat = " ".join(str("" if text is None else text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    escaped = html.escape(flat, quote=False)
    for char in "\\`*_[]|#~":
        escaped = escaped.replace(char, "\\" + char)
    return escaped


def _figure(value: JSONData) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _interval(value: JSONData) -> str:
    if not value:
        return "-"
    low, high = json_list(value)[:2]
    return f"[{_figure(json_number(low))}, {_figure(json_number(high))}]"


def _run_line(summary: Mapping[str, JSONData]) -> str:
    parts = [f"{summary.get('samples', '?')} samples"]
    if summary.get("invalid_input"):
        parts.append(f"{summary['invalid_input']} invalid")
    if summary.get("model"):
        parts.append(f"model `{inline(summary['model'], 60)}`")
    if "llm_calls" in summary:
        parts.append(f"{summary['llm_calls']} LLM calls")
    if "prompt_tokens" in summary:
        tokens = sum(
            int(json_number(summary.get(key) or 0))
            for key in ("prompt_tokens", "completion_tokens")
        )
        parts.append(f"{tokens:,} tokens")
    cost = summary.get("cost_usd")
    if cost is not None:
        parts.append(f"${cost:.4f}")
    modes = summary.get("calls_by_mode")
    if isinstance(modes, Mapping) and json_object(modes.get("batch")).get("llm_calls"):
        parts.append(
            " and ".join(
                f"{mode} {figures.get('llm_calls', 0)} calls"
                + ("" if figures.get("cost_usd") is None else f" ${figures['cost_usd']:.4f}")
                for mode, figures in ((m, json_object(f)) for m, f in modes.items())
            )
        )
    if "wall_seconds" in summary:
        parts.append(f"{summary['wall_seconds']:.1f} s")
    line = ", ".join(parts)
    totals = summary.get("job_totals")
    if summary.get("resumed") and isinstance(totals, Mapping):
        cost = totals.get("cost_usd")
        line += (
            f" (this run, which resumed job `{inline(summary.get('job'), 40)}` and judged "
            f"{summary.get('items_done_now', '?')} of its samples; the job over "
            f"{totals.get('runs')} runs: {totals.get('llm_calls')} LLM calls"
            + (f", ${cost:.4f}" if isinstance(cost, int | float) else "")
            + ")"
        )
    return line


def markdown_summary(
    summary: Mapping[str, JSONData],
    stats: Mapping[str, Mapping[str, JSONData]],
    records: Iterable[Mapping[str, JSONData]],
    gates: Sequence[GateResult] = (),
) -> str:
    failed_gates = [g for g in gates if not g.passed]
    verdict = ""
    if gates:
        verdict = " — gates failed ❌" if failed_gates else " — gates passed ✅"
    lines = [f"## ragjury evaluate{verdict}", "", _run_line(summary), ""]
    lines += [
        "| metric | mean | 95% interval | median | pass rate | 95% interval | scored "
        "| not applicable | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in stats.items():
        lines.append(
            f"| {name} | {_figure(f.get('mean'))} | {_interval(f.get('mean_interval'))} | "
            f"{_figure(f.get('median'))} | {_figure(f.get('pass_rate'))} | "
            f"{_interval(f.get('pass_rate_interval'))} | {f.get('scored', 0)} | "
            f"{f.get('not_applicable', 0)} | {f.get('failed', 0)} |"
        )
    if gates:
        lines += ["", "**Gates**", ""]
        lines += [f"- {'✅' if g.passed else '❌'} `{g.name}`: {g.message}" for g in gates]
    problems = _problems(records)
    if problems:
        lines += ["", f"**Samples that did not pass** ({len(problems)})", ""]
        lines += [
            f"- {inline(rid, 40)}: "
            + "; ".join(f"{metric} ({inline(why)})" for metric, why in whys)
            for rid, whys in problems[:_SAMPLES_LISTED]
        ]
        if len(problems) > _SAMPLES_LISTED:
            lines.append(f"- … and {len(problems) - _SAMPLES_LISTED} more (see the results file)")
    return "\n".join(lines) + "\n"


def _problems(
    records: Iterable[Mapping[str, JSONData]],
) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each sample that did not pass, once: its id, and the metrics that failed or did not
    pass with their reasons. A sample did not pass when its own ``passing`` is false (a
    record without one: when a metric failed or did not pass)."""
    found = []
    for record in records:
        whys = []
        for metric, judged in json_object(record.get("metrics")).items():
            entry = json_object(judged)
            if entry.get("outcome") == "failed":
                whys.append((metric, f"failed: {entry.get('reason')}"))
            elif entry.get("passing") is False:
                whys.append((metric, str(entry.get("reason"))))
        passing = record.get("passing", False if whys else None)
        if passing is False:
            found.append((str(record.get("id")), whys or [("sample", str(record.get("reason")))]))
    return found
