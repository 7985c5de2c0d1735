"""Self-contained HTML pages: the evaluation report, the dataset report, the comparison.

One file each, with its CSS, script, data and charts inline, so it opens offline and can be
mailed or kept as a CI artifact. Safety: the Jinja2 templates autoescape every value; the
records travel as gzip-compressed JSON in base64 (:func:`packed_json`), which holds no
character that could end its ``<script>`` element; the page's script builds the table and
detail views with ``textContent`` only; and a Content Security Policy lets nothing load from
the network and no script run but the page's own.

Size: about 25 KB of page, then the records' JSON compressed: each sample's (or pair's) text
once, at roughly 40% of its size for English text (gzip, then base64's 4/3).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from ragjury import __version__
from ragjury._json import JSONData, json_list, json_number, json_object
from ragjury.evaluation.panel import disagreeing_first
from ragjury.metrics import Scale, registry, scale_of
from ragjury.report.audit import page_audit
from ragjury.report.compare import Comparison
from ragjury.report.judge_card import judge_card
from ragjury.report.load import Loaded, metric_stats
from ragjury.schemas import ANSWERABILITY, CRITERIA


def packed_json(data: JSONData) -> str:
    """``data`` as gzip-compressed JSON in base64: about a third of the text's size, and made
    of letters, digits, ``+``, ``/`` and ``=`` only, so nothing in it can end its ``<script>``
    or start markup. The page unpacks it with the browser's ``DecompressionStream``."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return base64.b64encode(gzip.compress(text.encode("utf-8"), 9, mtime=0)).decode("ascii")


def unpack_json(packed: str) -> Any:
    """The inverse of :func:`packed_json` (for tests and tools that read a report)."""
    return json.loads(gzip.decompress(base64.b64decode(packed)).decode("utf-8"))


def _asset(name: str) -> str:
    return resources.files("ragjury.report").joinpath("assets", name).read_text("utf-8")


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("ragjury.report", "assets"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _csp_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


def page(template: str, *, title: str, data: JSONData, **context: Any) -> str:
    css = _asset("report.css")
    script = _asset("report.js") if data is not None else ""
    policy = f"default-src 'none'; style-src '{_csp_hash(css)}'; img-src data:"
    policy += f"; script-src '{_csp_hash(script)}'" if script else "; script-src 'none'"
    return (
        _environment()
        .get_template(template)
        .render(
            title=title,
            css=Markup(css),
            script=Markup(script),
            policy=policy,
            data=packed_json(data) if data is not None else None,
            version=__version__,
            **context,
        )
    )


# -- charts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    label: str
    count: int


def histogram(scale: Scale, scores: Sequence[float]) -> list[Bar]:
    """Counts of scores in equal bins over the metric's range (one bar per value on a small
    whole-number scale, such as a 1-5 rating or a boolean)."""
    if not scores:
        return []
    small = scale.high is not None and scale.high - scale.low <= 10
    if scale.whole and small and all(float(s).is_integer() for s in scores):
        counts = Counter(int(s) for s in scores)
        assert scale.high is not None
        return [Bar(str(v), counts[v]) for v in range(int(scale.low), int(scale.high) + 1)]
    low = scale.low if scale.low <= min(scores) else min(scores)
    high = scale.high if scale.high is not None else max(scores)
    if high <= low:
        return [Bar(f"{low:.3g}", len(scores))]
    bins = 10
    width = (high - low) / bins
    counts = Counter(min(int((s - low) / width), bins - 1) for s in scores)
    return [
        Bar(f"{low + i * width:.3g} to {low + (i + 1) * width:.3g}", counts[i]) for i in range(bins)
    ]


def _rating_bars(ratings: Iterable[int]) -> list[Bar]:
    counts = Counter(ratings)
    return [Bar(str(value), counts[value]) for value in range(1, 6)]


# -- evidence -----------------------------------------------------------------------------


def evidence_spans(context: str, quotes: Sequence[tuple[int, str]]) -> list[list[int]]:
    """``[start, end, statement]`` of each quote where it occurs in ``context`` (exactly, or
    ignoring case and runs of whitespace, as a model may cite it), first come first kept."""
    spans: list[list[int]] = []
    for statement, quote in quotes:
        words = quote.split()
        if not words:
            continue
        pattern = r"\s+".join(re.escape(w) for w in words)
        for found in re.finditer(pattern, context, re.IGNORECASE):
            start, end = found.span()
            if all(end <= s[0] or start >= s[1] for s in spans):
                spans.append([start, end, statement])
    return sorted(spans)


def _supported_quotes(metrics: Mapping[str, JSONData]) -> list[tuple[int, str]]:
    """The evidence quotes of the answer's supported statements (of the metrics whose
    declaration says they carry evidence from the contexts)."""
    known = registry()
    for name, entry in metrics.items():
        metric = known.get(name)
        if metric is not None and metric.evidence and isinstance(entry, Mapping):
            statements = [json_object(s) for s in json_list(entry.get("statements"))]
            return [
                (index, str(s["evidence"]))
                for index, s in enumerate(statements)
                if s.get("supported") and s.get("evidence")
            ]
    return []


def _sample_data(record: Mapping[str, JSONData]) -> dict[str, JSONData]:
    metrics = json_object(record.get("metrics"))
    contexts = [str(c) for c in json_list(record.get("contexts"))]
    quotes = _supported_quotes(metrics)
    return {
        "id": str(record.get("id")),
        "question": record.get("question"),
        "answer": record.get("answer"),
        "reference": record.get("reference"),
        "contexts": contexts if "contexts" in record else None,
        "marks": [evidence_spans(c, quotes) for c in contexts],
        "passing": record.get("passing"),  # the record's own verdict: a failure never passes
        "reason": record.get("reason"),
        "metrics": {
            name: {k: v for k, v in json_object(entry).items() if k != "llm_calls"}
            for name, entry in metrics.items()
        },
    }


# -- breakdowns ---------------------------------------------------------------------------

_LABELS = {"mrr": "MRR", "ndcg": "nDCG"}


def _label(key: str) -> str:
    return _LABELS.get(key, key.replace("_", " "))


@dataclass(frozen=True)
class Breakdown:
    """One table of the figures a metric's tally adds (retrieval at each k, keyword failure
    rates): a row per key of the figure, a column per figure inside it."""

    metric: str
    caption: str
    row_label: str
    columns: list[str]
    column_labels: list[str]
    rows: list[tuple[str, list[object]]]


def breakdowns(stats: Mapping[str, Mapping[str, object]]) -> list[Breakdown]:
    """The tables of every figure a metric's declared tally adds to its summary (read from
    the declaration: no metric is named here)."""
    known = registry()
    found = []
    for name, figures in stats.items():
        metric = known.get(name)
        if metric is None or metric.tally is None:
            continue
        for key in metric.tally().figures():
            table = figures.get(key)
            if not isinstance(table, dict) or not table:
                continue
            if not all(isinstance(row, dict) for row in table.values()):
                continue
            columns = list(dict.fromkeys(c for row in table.values() for c in row))
            found.append(
                Breakdown(
                    metric=name,
                    caption=f"{name} {key.replace('_', ' ')}",
                    row_label=key.removeprefix("at_") if key.startswith("at_") else "",
                    columns=columns,
                    column_labels=[_label(c) for c in columns],
                    rows=[(str(k), [row.get(c) for c in columns]) for k, row in table.items()],
                )
            )
    return found


# -- pages --------------------------------------------------------------------------------


def _cost(summary: Mapping[str, JSONData]) -> str:
    cost = summary.get("cost_usd")
    if cost is not None:
        return f"${cost:.4f}"
    unpriced = summary.get("unpriced_models")
    if unpriced:
        return "unknown (no price for " + ", ".join(map(str, json_list(unpriced))) + ")"
    return "not recorded"


def prompts_shown(summary: Mapping[str, object]) -> list[str]:
    """Every prompt version the run used, each with where it came from when it is not the
    built-in template (a ``--prompt`` file, a judge file)."""
    versions = summary.get("prompt_versions")
    origins = summary.get("prompt_origins")
    if not isinstance(versions, dict):
        return []
    if not isinstance(origins, dict):
        origins = {}
    shown = []
    for name, version in versions.items():
        origin = origins.get(name, "built-in")
        shown.append(str(version) if origin == "built-in" else f"{version} ({origin})")
    return shown


def _run_rows(summary: Mapping[str, JSONData], failures: str) -> list[tuple[str, str | list[str]]]:
    def given(key: str, fmt: str = "{}") -> str:
        value = summary.get(key)
        return "not recorded" if value is None else fmt.format(value)

    prompts = prompts_shown(summary)
    tokens = "not recorded"
    if "prompt_tokens" in summary:
        tokens = (
            f"{summary['prompt_tokens']:,} prompt + {summary.get('completion_tokens', 0):,} "
            "completion"
        )
    return [
        ("Judged", given("input")),
        ("Finished", given("finished_at")),
        ("Model", given("model")),
        ("Endpoint", given("base_url")),
        ("Prompts", prompts if prompts else "not recorded"),
        ("LLM calls", given("llm_calls", "{:,}")),
        ("Tokens", tokens),
        ("Cost", _cost(summary)),
        ("Wall time", given("wall_seconds", "{:.1f} s")),
        ("Failures", failures),
    ]


def evaluation_html(loaded: Loaded, *, title: str | None = None) -> str:
    records = loaded.records
    stats = metric_stats(records)
    scores: dict[str, list[float]] = {name: [] for name in stats}
    for record in records:
        for name, judged in json_object(record.get("metrics")).items():
            entry = json_object(judged)
            if (
                name in scores
                and entry.get("outcome") == "scored"
                and entry.get("score") is not None
            ):
                score = json_number(entry["score"])
                if math.isfinite(score):
                    scores[name].append(score)
    failed = sum(int(json_number(s["failed"])) for s in stats.values())
    invalid = int(json_number(loaded.summary.get("invalid_input") or 0))
    failures = f"{failed} failed judgement(s)" + (
        f", {invalid} invalid input(s)" if invalid else ""
    )
    declared = loaded.summary.get("declarations")
    metrics = [
        {
            "name": name,
            "stats": figures,
            "bars": histogram(scale_of(name, declared), scores[name]),
            "scale": scale_of(name, declared),
        }
        for name, figures in stats.items()
    ]
    return page(
        "evaluation.html.j2",
        title=title or "ragjury evaluation report",
        data={
            "kind": "evaluation",
            "metrics": list(stats),
            # where a panel's judges disagree comes first: what a person should look at
            "samples": [_sample_data(r) for r in disagreeing_first(records)],
        },
        source=loaded.source,
        samples=len(records),
        run=_run_rows(loaded.summary, failures),
        metrics=metrics,
        breakdowns=breakdowns(stats),
        judge=judge_card(loaded.summary),
        has_contexts=any("contexts" in r for r in records),
    )


def dataset_html(loaded: Loaded, *, title: str | None = None) -> str:
    pairs = loaded.records
    outcomes = Counter(str(p.get("outcome", "kept")) for p in pairs)
    checked = any(ANSWERABILITY in json_object(p.get("critiques")) for p in pairs)
    criteria = (*CRITERIA, ANSWERABILITY) if checked else CRITERIA
    ratings = {
        criterion: _rating_bars(
            rating
            for p in pairs
            if isinstance(
                rating := json_object(json_object(p.get("critiques")).get(criterion)).get("rating"),
                int,
            )
        )
        for criterion in criteria
    }
    sources: dict[str, Counter[str]] = {}
    for pair in pairs:
        sources.setdefault(str(pair.get("source")), Counter())[str(pair.get("outcome"))] += 1
    summary = loaded.summary
    failures = f"{outcomes['failed']} failed pair(s)"
    if summary.get("chunks_failed"):
        failures += f", {summary['chunks_failed']} failed chunk(s)"
    run = [row for row in _run_rows(summary, failures) if row[0] != "Prompts"]
    run[0] = ("Documents", f"{summary['documents']}" if "documents" in summary else "not recorded")
    data_pairs = [
        {
            key: pair.get(key)
            for key in ("id", "question", "answer", "context", "source", "outcome", "error")
        }
        | {"critiques": pair.get("critiques") or {}, "answer_check": pair.get("answer_check")}
        for pair in pairs
    ]
    return page(
        "dataset.html.j2",
        title=title or "ragjury dataset report",
        data={"kind": "dataset", "criteria": list(criteria), "pairs": data_pairs},
        source=loaded.source,
        outcomes={name: outcomes[name] for name in ("kept", "rejected", "failed")},
        total=len(pairs),
        ratings=ratings,
        sources=sorted(sources.items(), key=lambda item: (-sum(item[1].values()), item[0])),
        run=run,
        audit=page_audit(loaded.records, loaded.summary),
    )


def comparison_html(comparison: Comparison, *, title: str | None = None) -> str:
    return page(
        "compare.html.j2",
        title=title or "ragjury comparison",
        data=None,
        source=f"{comparison.baseline} (baseline) -> {comparison.candidate} (candidate)",
        c=comparison,
    )
