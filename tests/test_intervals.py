"""The intervals every report shows (``ragjury.intervals``), computed by hand on small data;
prediction-powered correction of a biased judge; ``compare`` telling noise from a shift."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from ragjury.evaluation.summary import MetricTally
from ragjury.intervals import (
    BOOTSTRAP_AT_MOST,
    corrected_mean,
    mean_interval,
    percentile_interval,
    quantile,
)
from ragjury.report.compare import compare
from ragjury.schemas import MetricResult


def test_quantiles_interpolate_between_ranks() -> None:
    assert quantile([0.0, 1.0, 2.0, 3.0], 0.5) == 1.5
    assert quantile([0.0, 1.0, 2.0, 3.0], 0.025) == pytest.approx(0.075)
    assert percentile_interval([3.0, 0.0, 2.0, 1.0], 0.5) == (0.75, 2.25)
    assert percentile_interval([]) is None


def test_two_scores_give_the_interval_from_the_lower_to_the_higher() -> None:
    # resampling two scores gives means 0.5, 0.75, 1 with chances 1/4, 1/2, 1/4
    assert mean_interval([0.5, 1.0]) == (0.5, 1.0)


def test_nine_passes_in_ten_give_the_binomial_interval() -> None:
    # the bootstrap of 0/1 values draws Binomial(10, 0.9) / 10: P(<= 6) = 0.013 and
    # P(<= 7) = 0.070 put the 2.5% point at 0.7; P(<= 9) = 0.65 puts the 97.5% point at 1
    assert mean_interval([1.0] * 9 + [0.0]) == (0.7, 1.0)


def test_the_same_values_and_seed_give_the_same_interval_and_another_seed_may_not() -> None:
    rng = random.Random(3)
    values = [rng.random() for _ in range(30)]

    assert mean_interval(values, seed=4) == mean_interval(values, seed=4)
    assert mean_interval(values, seed=4) != mean_interval(values, seed=5)


def test_above_the_bootstrap_limit_the_interval_is_the_normal_one() -> None:
    # mean 2.5, variance over the samples 1.25, standard error sqrt(1.25 / 4)
    half = 1.959964 * math.sqrt(1.25 / 4)
    found = mean_interval([1.0, 2.0, 3.0, 4.0], bootstrap_at_most=3)

    assert found == pytest.approx((2.5 - half, 2.5 + half))


@pytest.mark.parametrize("n", [BOOTSTRAP_AT_MOST, 2000])
def test_the_bootstrap_and_the_normal_interval_agree_on_many_samples(n: int) -> None:
    rng = random.Random(8)
    values = [rng.random() for _ in range(n)]
    drawn = mean_interval(values, bootstrap_at_most=n)
    normal = mean_interval(values, bootstrap_at_most=0)

    assert drawn is not None
    assert normal is not None
    assert drawn == pytest.approx(normal, abs=0.003)


def test_the_normal_interval_stays_within_the_values_range() -> None:
    # a pass rate of 0.999: mean + 1.96 standard errors would pass 1
    values = [1.0] * 1998 + [0.0] * 2
    found = mean_interval(values, bootstrap_at_most=0)

    assert found is not None
    low, high = found
    assert high == 1.0
    assert 0.99 < low < 0.999


def test_a_run_summary_carries_each_mean_and_pass_rate_with_its_interval() -> None:
    tally = MetricTally()
    for score in (0.5, 1.0):
        tally.add(MetricResult(outcome="scored", score=score, passing=score >= 0.8))
    tally.add(MetricResult(outcome="not_applicable", reason="no statement"))

    figures = tally.figures()

    assert (figures["mean"], figures["mean_interval"]) == (0.75, [0.5, 1.0])
    assert (figures["pass_rate"], figures["pass_rate_interval"]) == (0.5, [0.0, 1.0])
    assert MetricTally().figures()["mean_interval"] is None


def test_the_corrected_mean_adds_the_labelled_residual_and_both_variances() -> None:
    # judge mean 0.75; on the two labelled samples person - judge is -1 and 0: mean -0.5.
    # var(judge) = 0.25 over 4 samples, var(person - judge) = 0.5 over 2
    found = corrected_mean([1.0, 1.0, 0.0, 1.0], [1.0, 1.0], [0.0, 1.0])
    half = 1.959964 * math.sqrt(0.25 / 4 + 0.5 / 2)

    assert found is not None
    assert found.value == pytest.approx(0.25)
    assert (found.low, found.high) == pytest.approx((0.25 - half, 0.25 + half))
    assert (found.judged, found.labelled) == (4, 2)
    assert found.bias == pytest.approx(0.5)
    assert corrected_mean([1.0], [], []) is None
    with pytest.raises(ValueError, match="pair one sample each"):
        corrected_mean([1.0], [1.0], [])


def test_a_judge_biased_up_by_a_tenth_is_corrected_by_a_hundred_labels() -> None:
    true_mean, corrected_covers, raw_covers = 0.5, 0, 0
    for trial in range(100):
        rng = random.Random(trial)
        people = [rng.random() for _ in range(1000)]  # what a person would score, mean 0.5
        judge = [p + 0.1 + rng.gauss(0, 0.1) for p in people]  # the judge: 0.1 too high
        labelled = rng.sample(range(1000), 100)
        found = corrected_mean(judge, [judge[i] for i in labelled], [people[i] for i in labelled])
        raw = mean_interval(judge, resamples=500, seed=trial)
        assert found is not None
        assert raw is not None
        corrected_covers += found.low <= true_mean <= found.high
        raw_covers += raw[0] <= true_mean <= raw[1]

    assert corrected_covers >= 90
    assert raw_covers == 0


def _run(scores: dict[str, float]) -> list[dict[str, Any]]:
    return [
        {"id": key, "question": key, "metrics": {"faithfulness": {"outcome": "scored", "score": s}}}
        for key, s in scores.items()
    ]


def test_differences_that_cancel_out_are_no_regression() -> None:
    base = {f"s{i}": 0.5 for i in range(40)}
    cand = {key: 0.5 + (0.25 if i % 2 else -0.25) for i, key in enumerate(base)}

    found = compare(_run(base), _run(cand)).metrics[0]

    assert found.mean_difference == pytest.approx(0.0)
    assert found.interval is not None
    assert found.interval[0] < 0 < found.interval[1]
    assert found.change == "within noise"
    assert found.regressed == 20  # samples did get worse; the metric did not


def test_noise_alone_is_seldom_called_a_change_and_a_real_shift_always_is() -> None:
    called_noise, called_shift = 0, 0
    for trial in range(100):
        rng = random.Random(trial)
        base = {f"s{i}": rng.random() for i in range(50)}
        noisy = {key: s + rng.gauss(0, 0.2) for key, s in base.items()}
        shifted = {key: s - 0.2 + rng.gauss(0, 0.2) for key, s in base.items()}
        called_noise += compare(_run(base), _run(noisy), seed=trial).metrics[0].change != (
            "within noise"
        )
        shift = compare(_run(base), _run(shifted), seed=trial).metrics[0]
        called_shift += shift.change == "regression"

    assert called_noise <= 10  # a 95% interval: about 5 in 100 by chance
    assert called_shift == 100
