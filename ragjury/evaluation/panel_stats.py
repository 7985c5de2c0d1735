"""How much judges agree, and how much a repeated judge wavers: pure functions.

- :func:`fleiss_kappa`: agreement of several judges on pass/fail beyond chance (Fleiss,
  1971); every sample rated by the same number of judges.
- :func:`krippendorff_alpha`: agreement on scores, the interval metric (squared
  differences), with missing ratings allowed (Krippendorff, 2011).
- :func:`within_variance`, :func:`aggregate_stderr` and :func:`widened`: a mean over samples
  that were each judged several times, with the spread between samples and the spread
  within a sample's repeats both counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist, fmean

from ragjury.intervals import CONFIDENCE, Interval


def fleiss_kappa(subjects: Sequence[Sequence[bool]]) -> float | None:
    """Fleiss' kappa of pass/fail votes: ``subjects[i]`` holds sample i's votes, one per
    judge, the same number for every sample (at least two). None when it is undefined (no
    sample, or every vote the same, so chance agreement is already perfect)."""
    if not subjects:
        return None
    raters = len(subjects[0])
    if raters < 2 or any(len(votes) != raters for votes in subjects):
        raise ValueError(
            "fleiss_kappa needs the same number (>= 2) of votes for every sample, got "
            f"{sorted({len(v) for v in subjects})}; leave out the samples a judge missed"
        )
    n, total = len(subjects), len(subjects) * raters
    passes = [sum(votes) for votes in subjects]
    agreement = [
        (p * p + (raters - p) * (raters - p) - raters) / (raters * (raters - 1)) for p in passes
    ]
    share = sum(passes) / total
    chance = share * share + (1 - share) * (1 - share)
    if chance >= 1:
        return None
    return (sum(agreement) / n - chance) / (1 - chance)


def krippendorff_alpha(units: Sequence[Sequence[float]]) -> float | None:
    """Krippendorff's alpha with the interval metric: ``units[i]`` holds the scores the
    judges gave sample i (any number; a sample with fewer than two is not pairable and left
    out). None when undefined (fewer than two pairable scores, or all scores equal)."""
    pairable = [list(u) for u in units if len(u) >= 2]
    values = [v for u in pairable for v in u]
    n = len(values)
    if n < 2:
        return None
    observed = sum(sum((a - b) ** 2 for a in u for b in u) / (len(u) - 1) for u in pairable) / n
    expected = sum((a - b) ** 2 for a in values for b in values) / (n * (n - 1))
    if expected == 0:
        return None
    return 1 - observed / expected


def _variance(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = fmean(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def within_variance(groups: Sequence[Sequence[float]]) -> float:
    """What the repeats add to the variance of a mean over samples: the mean within-sample
    variance over (samples x repeats); 0 without repeats."""
    kept = [list(g) for g in groups if g]
    if not kept:
        return 0.0
    return fmean(_variance(g) for g in kept) / (len(kept) * fmean(len(g) for g in kept))


def aggregate_stderr(values: Sequence[float], groups: Sequence[Sequence[float]]) -> float | None:
    """The standard error of the mean of ``values`` (one per sample), the repeats' spread
    (``groups``, each sample's repeats) added: sqrt(var(values) / n + within_variance)."""
    if not values:
        return None
    return math.sqrt(_variance(values) / len(values) + within_variance(groups))


def widened(
    point: float,
    interval: Sequence[float],
    extra_variance: float,
    *,
    bounds: tuple[float, float | None],
    confidence: float = CONFIDENCE,
) -> Interval:
    """``interval`` (over samples, around ``point``) with ``extra_variance`` added: each
    half-width combined in quadrature with z * sqrt(extra_variance), kept within ``bounds``
    (the scale's; None: unbounded above)."""
    add = NormalDist().inv_cdf(1 - (1 - confidence) / 2) * math.sqrt(extra_variance)
    low = point - math.hypot(point - interval[0], add)
    high = point + math.hypot(interval[1] - point, add)
    top = bounds[1]
    return max(low, bounds[0]), high if top is None else min(high, top)
