"""``compare --markdown FILE``: the comparison as Markdown for a pull request comment or a CI
job page, baseline first: the metrics, the gates, and each metric's biggest regressions with
both sides' answers side by side. Text from documents and models goes in escaped, on one
line and shortened (:func:`ragjury.report.markdown.inline`)."""

from __future__ import annotations

from ragjury.report.compare import Comparison, MetricComparison
from ragjury.report.markdown import inline

_ANSWER_CHARS = 200


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def _metric_row(m: MetricComparison) -> str:
    interval = "-" if m.interval is None else f"[{m.interval[0]:+.4g}, {m.interval[1]:+.4g}]"
    change = {"regression": "regression ❌", "improvement": "improvement ✅"}.get(
        m.change, m.change
    )
    name = m.metric + ("" if m.higher_is_better else " (lower is better)")
    cells = [
        name,
        _number(m.baseline_mean),
        _number(m.candidate_mean),
        _number(m.mean_difference, signed=True),
        interval,
        change,
        str(m.improved),
        str(m.regressed),
        str(m.same),
        str(m.paired),
    ]
    return "| " + " | ".join(cells) + " |"


def comparison_markdown(comparison: Comparison) -> str:
    c = comparison
    failed = [g for g in c.gates if not g.passed]
    verdict = (" — gates failed ❌" if failed else " — gates passed ✅") if c.gates else ""
    lines = [
        f"## ragjury compare: {inline(c.baseline, 80)} (baseline) → "
        f"{inline(c.candidate, 80)} (candidate){verdict}",
        "",
        f"{c.paired_samples} sample(s) paired by id. Differences are candidate - baseline over "
        "the samples scored on both sides, with a bootstrap 95% interval; a change is a "
        "regression or an improvement only when its interval excludes 0.",
        "",
        "| metric | baseline | candidate | difference | 95% interval | change | improved "
        "| regressed | same | paired |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [_metric_row(m) for m in c.metrics]
    if c.gates:
        lines += ["", "**Gates**", ""]
        lines += [f"- {'✅' if g.passed else '❌'} `{g.name}`: {g.message}" for g in c.gates]
    for m in c.metrics:
        if not m.biggest_regressions:
            continue
        lines += [
            "",
            f"### {inline(m.regressions_title, 200)}",
            "",
            "| sample | baseline | candidate | baseline's answer | candidate's answer "
            "| candidate's reason |",
            "| --- | ---: | ---: | --- | --- | --- |",
        ]
        lines += [
            f"| {inline(ch.id, 40)} | {ch.baseline:.4g} | {ch.candidate:.4g} | "
            f"{inline(ch.baseline_answer, _ANSWER_CHARS)} | "
            f"{inline(ch.candidate_answer, _ANSWER_CHARS)} | {inline(ch.candidate_reason)} |"
            for ch in m.biggest_regressions
        ]
    for side, ids in ((c.baseline, c.only_baseline), (c.candidate, c.only_candidate)):
        if ids:
            shown = ", ".join(inline(i, 40) for i in ids[:20]) + (" …" if len(ids) > 20 else "")
            lines += [
                "",
                f"Only in {inline(side, 80)}: {len(ids)} sample(s), not compared: {shown}",
            ]
    return "\n".join(lines) + "\n"
