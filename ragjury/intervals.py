"""How far a figure over samples can be trusted: 95% intervals, pure functions.

One place for the intervals every report shows: a run's means and pass rates (the
``--summary``, the tables, the HTML report), ``compare``'s paired differences, the figures of
``ragjury calibrate``, and a judge's aggregate corrected by human labels.

- :func:`resampled` and :func:`percentile_interval`: the percentile bootstrap over samples,
  seeded (``random.Random(seed)``), so the same data gives the same interval.
- :func:`mean_interval`: the bootstrap interval of a mean. The bootstrap of a mean tends to
  the normal one (the mean plus or minus z standard errors, the standard deviation taken over
  the samples as the bootstrap takes it), so above :data:`BOOTSTRAP_AT_MOST` samples that is
  used instead of drawing millions of numbers (kept within the values' range, as the
  bootstrap's is).
- :func:`corrected_mean`: prediction-powered inference (Angelopoulos et al., 2023, as ARES
  uses it): the judge's mean over every sample plus the mean of (person - judge) over the
  samples a person labelled, with its normal (CLT) interval. A judge that is biased moves its
  own mean, not the corrected one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist, fmean, pvariance
from typing import TypeVar

CONFIDENCE = 0.95
RESAMPLES = 2000
BOOTSTRAP_AT_MOST = 1000
"""Samples up to which :func:`mean_interval` draws resamples; above, the normal interval.
Drawing costs ``RESAMPLES`` x n numbers (at 2,000 samples 4 million, about 1.7 s a figure,
longer than a keywords-only run of those samples takes), and from about a thousand samples
the two intervals agree to within a few thousandths (tests/test_intervals.py)."""

T = TypeVar("T")
Interval = tuple[float, float]


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted ``ordered``, interpolated linearly between ranks."""
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def resampled(items: Sequence[T], *, resamples: int, seed: int) -> Iterator[list[T]]:
    """``resamples`` draws of ``len(items)`` items with replacement (none when empty)."""
    if not items:
        return
    rng = random.Random(seed)
    for _ in range(resamples):
        yield rng.choices(items, k=len(items))


def percentile_interval(draws: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The central ``confidence`` share of ``draws`` (a statistic over each resample)."""
    if not draws:
        return None
    ordered = sorted(draws)
    tail = (1 - confidence) / 2
    return quantile(ordered, tail), quantile(ordered, 1 - tail)


def bootstrap(
    items: Sequence[T],
    statistic: Callable[[list[T]], float | None],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Interval | None:
    """Percentile bootstrap interval of ``statistic`` over ``items``; resamples where it is
    undefined (None) are left out. None when there are no items."""
    draws = [
        value
        for drawn in resampled(items, resamples=resamples, seed=seed)
        if (value := statistic(drawn)) is not None
    ]
    return percentile_interval(draws, confidence)


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def mean_interval(
    values: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    bootstrap_at_most: int = BOOTSTRAP_AT_MOST,
) -> Interval | None:
    """The interval of the mean of ``values`` (None if there are none): the percentile
    bootstrap up to ``bootstrap_at_most`` values, the normal interval above."""
    n = len(values)
    if n == 0:
        return None
    if n > bootstrap_at_most:
        mean = fmean(values)
        half = _z(confidence) * math.sqrt(pvariance(values, mean) / n)
        # no resample's mean leaves the values' range: neither does the interval (a pass
        # rate of 0.999 does not reach past 1)
        return max(mean - half, min(values)), min(mean + half, max(values))
    draws = [sum(drawn) / n for drawn in resampled(values, resamples=resamples, seed=seed)]
    return percentile_interval(draws, confidence)


@dataclass(frozen=True)
class Corrected:
    """A judge's mean corrected by human labels, beside the judge's own."""

    value: float
    low: float
    high: float
    judged: int
    """Samples the judge scored: its mean is over these."""
    labelled: int
    """Of those, the samples a person labelled: the correction is over these."""
    bias: float
    """The mean of (judge - person) on the labelled samples: what the correction removes."""


def corrected_mean(
    judge_all: Sequence[float],
    judge_labelled: Sequence[float],
    human_labelled: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
) -> Corrected | None:
    """Prediction-powered inference of the mean people would give: mean(judge over all) +
    mean(person - judge over the labelled), with the interval from the two variances
    (var(judge) / N + var(person - judge) / n). ``judge_labelled[i]`` and
    ``human_labelled[i]`` are one sample's. None unless both sides have a sample."""
    if len(judge_labelled) != len(human_labelled):
        raise ValueError("judge_labelled and human_labelled must pair one sample each")
    if not judge_all or not judge_labelled:
        return None
    residuals = [h - j for j, h in zip(judge_labelled, human_labelled, strict=True)]
    judge_mean, correction = fmean(judge_all), fmean(residuals)
    variance = _variance(judge_all, judge_mean) / len(judge_all)
    variance += _variance(residuals, correction) / len(residuals)
    half = _z(confidence) * math.sqrt(variance)
    value = judge_mean + correction
    return Corrected(value, value - half, value + half, len(judge_all), len(residuals), -correction)


def _variance(values: Sequence[float], mean: float) -> float:
    """The sample variance (0 for one value: nothing is known of the spread)."""
    if len(values) < 2:
        return 0.0
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)
