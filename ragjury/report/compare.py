"""``ragjury compare``: did a change make results better or worse, metric by metric?

Samples are paired by id. Per metric, over the samples scored on both sides: each side's
mean, the mean paired difference (candidate - baseline) with a percentile bootstrap 95%
interval (``ragjury.intervals``), and how many samples improved, regressed or stayed the
same (for a metric where lower is better, such as confidence's perplexity, a drop is an
improvement). A metric's change is a regression (or an improvement) only when the interval
of the difference excludes zero; otherwise it is within the noise of the samples. Samples on
one side only are counted and listed, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Literal

from ragjury._json import JSONData, json_number, json_object
from ragjury.errors import InputError
from ragjury.intervals import BOOTSTRAP_AT_MOST, CONFIDENCE, Interval, mean_interval
from ragjury.metrics import scale_of
from ragjury.report.gates import GateResult
from ragjury.report.load import metric_names

_SAME = 1e-9
_REGRESSIONS_LISTED = 5

Change = Literal["regression", "improvement", "within noise"]


@dataclass(frozen=True)
class SampleChange:
    """One sample's score on both sides, and the answers and reasons each side gave."""

    id: str
    question: str
    baseline: float
    candidate: float
    difference: float
    baseline_reason: str | None
    candidate_reason: str | None
    baseline_answer: str | None = None
    candidate_answer: str | None = None


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    higher_is_better: bool
    paired: int
    """Samples scored on both sides: the means, the difference and the counts are over them."""
    baseline_mean: float | None
    candidate_mean: float | None
    mean_difference: float | None
    interval: Interval | None
    """The bootstrap interval of ``mean_difference``."""
    improved: int
    regressed: int
    same: int
    not_comparable: int
    """Samples on both sides with this metric not scored on at least one of them."""
    biggest_regressions: list[SampleChange] = field(default_factory=list)
    """The worst first; all of them, or the first ``--limit N``."""

    @property
    def regressions_title(self) -> str:
        """'Biggest METRIC regressions', saying how many of them are listed when not all."""
        title = f"Biggest {self.metric} regressions"
        listed = len(self.biggest_regressions)
        if listed < self.regressed:
            title += f" ({listed} of {self.regressed}; --all lists every one)"
        return title

    @property
    def regression(self) -> float:
        """How much worse the candidate's mean is (0 or less when it is not worse)."""
        if self.mean_difference is None:
            return 0.0
        return -self.mean_difference if self.higher_is_better else self.mean_difference

    @property
    def change(self) -> Change:
        """A regression or an improvement when the interval of the difference excludes zero
        (on the worse or the better side), else within noise."""
        if self.interval is None:
            return "within noise"
        low, high = self.interval
        if high < 0 or low > 0:
            worse = (high < 0) == self.higher_is_better
            return "regression" if worse else "improvement"
        return "within noise"


@dataclass(frozen=True)
class Comparison:
    baseline: str
    candidate: str
    paired_samples: int
    only_baseline: list[str]
    only_candidate: list[str]
    metrics: list[MetricComparison]
    resamples: int
    seed: int
    gates: list[GateResult] = field(default_factory=list)
    confidence: float = CONFIDENCE
    bootstrap_at_most: int = BOOTSTRAP_AT_MOST
    """Paired samples up to which the interval is bootstrapped (above: the normal one)."""

    def as_dict(self) -> dict[str, JSONData]:
        data = asdict(self)
        for metric, found in zip(data["metrics"], self.metrics, strict=True):
            interval = metric.pop("interval")
            metric["interval_95"] = list(interval) if interval is not None else None
            metric["change"] = found.change
        return data


def by_id(
    records: Sequence[Mapping[str, JSONData]], label: str
) -> dict[str, Mapping[str, JSONData]]:
    indexed: dict[str, Mapping[str, JSONData]] = {}
    for record in records:
        if not isinstance(record.get("metrics"), Mapping):
            raise InputError(
                f"{label}: record {record.get('id')!r} has no 'metrics'; compare takes the "
                "results `ragjury evaluate --out` writes (or evaluation jobs)"
            )
        key = str(record.get("id"))
        if key in indexed:
            raise InputError(f"{label}: sample id {key!r} appears twice; ids must be unique")
        indexed[key] = record
    return indexed


def _score(record: Mapping[str, JSONData], metric: str) -> tuple[float | None, str | None]:
    entry = json_object(record["metrics"]).get(metric)
    if not isinstance(entry, Mapping):
        return None, None
    given = entry.get("reason")
    reason = given if isinstance(given, str) else None
    if entry.get("outcome") != "scored" or entry.get("score") is None:
        return None, reason
    return json_number(entry["score"]), reason


def _answer(record: Mapping[str, object]) -> str | None:
    answer = record.get("answer")
    return None if answer is None else str(answer)


def _compare_metric(
    metric: str,
    ids: Sequence[str],
    base: Mapping[str, Mapping[str, JSONData]],
    cand: Mapping[str, Mapping[str, JSONData]],
    *,
    resamples: int,
    seed: int,
    listed: int | None = _REGRESSIONS_LISTED,
) -> MetricComparison:
    higher_is_better = scale_of(metric).higher_is_better
    changes: list[SampleChange] = []
    not_comparable = 0
    for key in ids:
        b, b_reason = _score(base[key], metric)
        c, c_reason = _score(cand[key], metric)
        if b is None or c is None:
            in_base = metric in json_object(base[key]["metrics"])
            not_comparable += in_base or metric in json_object(cand[key]["metrics"])
            continue
        question = str(cand[key].get("question") or base[key].get("question") or "")
        answers = (_answer(base[key]), _answer(cand[key]))
        changes.append(SampleChange(key, question, b, c, c - b, b_reason, c_reason, *answers))
    differences = [c.difference for c in changes]

    def better(change: SampleChange) -> float:
        return change.difference if higher_is_better else -change.difference

    worst = sorted((c for c in changes if better(c) < -_SAME), key=better)
    return MetricComparison(
        metric=metric,
        higher_is_better=higher_is_better,
        paired=len(changes),
        baseline_mean=fmean(c.baseline for c in changes) if changes else None,
        candidate_mean=fmean(c.candidate for c in changes) if changes else None,
        mean_difference=fmean(differences) if changes else None,
        interval=mean_interval(differences, resamples=resamples, seed=seed),
        improved=sum(better(c) > _SAME for c in changes),
        regressed=len(worst),
        same=sum(abs(c.difference) <= _SAME for c in changes),
        not_comparable=not_comparable,
        biggest_regressions=worst if listed is None else worst[:listed],
    )


def compare(
    baseline: Sequence[Mapping[str, JSONData]],
    candidate: Sequence[Mapping[str, JSONData]],
    *,
    baseline_label: str = "baseline",
    candidate_label: str = "candidate",
    resamples: int = 2000,
    seed: int = 0,
    listed: int | None = _REGRESSIONS_LISTED,
) -> Comparison:
    """Pair ``baseline`` and ``candidate`` by id and compare each metric; ``listed`` is how
    many of each metric's biggest regressions to keep (None: all of them)."""
    base = by_id(baseline, baseline_label)
    cand = by_id(candidate, candidate_label)
    ids = [key for key in base if key in cand]
    metrics = [m for m in metric_names([*baseline, *candidate])]
    return Comparison(
        baseline=baseline_label,
        candidate=candidate_label,
        paired_samples=len(ids),
        only_baseline=[key for key in base if key not in cand],
        only_candidate=[key for key in cand if key not in base],
        metrics=[
            _compare_metric(m, ids, base, cand, resamples=resamples, seed=seed, listed=listed)
            for m in metrics
        ],
        resamples=resamples,
        seed=seed,
    )


def check_regressions(comparison: Comparison, allowed: Mapping[str, float]) -> list[GateResult]:
    """``--fail-on-regression METRIC=DELTA``: the gate fails when the candidate's mean is more
    than DELTA worse and the change is a regression (its interval excludes zero): a drop
    the samples' noise could give does not fail it."""
    by_metric = {m.metric: m for m in comparison.metrics}
    results = []
    for metric, delta in allowed.items():
        name = f"--fail-on-regression {metric}={delta:g}"
        found = by_metric.get(metric)
        if found is None or found.mean_difference is None:
            message = f"{metric} has no sample scored on both sides, so no difference to check"
            results.append(GateResult(name, False, message, metric))
            continue
        change = (
            f"{metric} mean {found.baseline_mean:.4g} -> {found.candidate_mean:.4g}, "
            f"difference {found.mean_difference:+.4g} {_shown(found.interval)}"
        )
        if found.regression <= delta + _SAME:
            results.append(GateResult(name, True, f"{change}, within {delta:g}", metric))
        elif found.change != "regression":
            message = (
                f"{change}: {found.regression:.4g} worse, but the interval holds 0, so within noise"
            )
            results.append(GateResult(name, True, message, metric))
        else:
            message = f"{change}: {found.regression:.4g} worse, more than {delta:g}"
            results.append(GateResult(name, False, message, metric))
    return results


def _shown(interval: Interval | None) -> str:
    if interval is None:
        return "(no interval)"
    return f"(95% interval [{interval[0]:+.4g}, {interval[1]:+.4g}])"
