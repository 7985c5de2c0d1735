"""The panel's pure functions, against hand computations: agreement (Fleiss' kappa,
Krippendorff's alpha), the repeats' standard error and interval, how judges are combined, and
the --judges flag."""

from __future__ import annotations

import math

import pytest

from ragjury.agents.judges import CORRECTNESS
from ragjury.config import EvaluationOptions
from ragjury.evaluation.panel import combine_results
from ragjury.evaluation.panel_stats import (
    aggregate_stderr,
    fleiss_kappa,
    krippendorff_alpha,
    widened,
    within_variance,
)
from ragjury.schemas import Failure, MetricResult
from ragjury.schemas.panel import Panel, PanelJudge, lane_id, parse_judges, split_lane

OPTIONS = EvaluationOptions()


def test_fleiss_kappa_by_hand() -> None:
    # 3 judges, 4 samples; passes per sample 3, 0, 2, 1.
    # agreement per sample: 1, 1, 1/3, 1/3 -> mean 2/3; pass share 6/12 -> chance 1/2
    votes = [[True] * 3, [False] * 3, [True, True, False], [True, False, False]]
    assert fleiss_kappa(votes) == pytest.approx((2 / 3 - 0.5) / 0.5)


def test_fleiss_kappa_is_one_for_full_agreement_and_undefined_for_one_class() -> None:
    assert fleiss_kappa([[True, True], [False, False]]) == pytest.approx(1.0)
    assert fleiss_kappa([[True, True], [True, True]]) is None
    assert fleiss_kappa([]) is None


def test_fleiss_kappa_refuses_samples_with_other_numbers_of_votes() -> None:
    with pytest.raises(ValueError, match="same number"):
        fleiss_kappa([[True, False], [True, False, True]])


def test_krippendorff_alpha_by_hand_with_a_missing_score() -> None:
    # units (5, 4), (1, 2, 1), (3) -> the lone 3 is not pairable.
    # observed: (2*1)/1 + (2*(1+0+1))/2 = 2 + 2 = 4, over n = 5 values -> 0.8
    # values 5, 4, 1, 2, 1: sum 13, squares 47 -> sum over pairs 2*5*47 - 2*169 = 132,
    # expected 132 / 20 = 6.6
    alpha = krippendorff_alpha([[5, 4], [1, 2, 1], [3]])
    assert alpha == pytest.approx(1 - 0.8 / 6.6)


def test_krippendorff_alpha_is_one_when_judges_agree_and_none_without_variation() -> None:
    assert krippendorff_alpha([[1, 1], [4, 4], [2, 2]]) == pytest.approx(1.0)
    assert krippendorff_alpha([[3, 3], [3, 3]]) is None
    assert krippendorff_alpha([[3]]) is None


def test_the_repeats_spread_widens_an_interval_and_keeps_it_on_the_scale() -> None:
    # within variances 1/3 (1,0,1,0) and 0, over 2 samples x 4 repeats -> (1/6) / 8
    assert within_variance([[1, 0, 1, 0], [1, 1, 1, 1]]) == pytest.approx((1 / 6) / 8)
    assert within_variance([[1.0], [0.0]]) == 0
    add = 1.959964 * math.sqrt(0.01)
    low, high = widened(0.5, [0.4, 0.7], 0.01, bounds=(0.0, 1.0))
    assert low == pytest.approx(0.5 - math.hypot(0.1, add), abs=1e-5)
    assert high == pytest.approx(0.5 + math.hypot(0.2, add), abs=1e-5)
    assert widened(1.0, [1.0, 1.0], 0.25, bounds=(0.0, 1.0))[1] == 1.0  # kept on the scale
    assert widened(1.0, [1.0, 1.0], 0.0, bounds=(0.0, 1.0)) == (1.0, 1.0)
    # sample-level variance 0.125/2 plus the repeats' term
    assert aggregate_stderr([0.5, 1.0], [[1, 0, 1, 0], [1, 1, 1, 1]]) == pytest.approx(
        math.sqrt(0.125 / 2 + (1 / 6) / 8)
    )


PANEL = Panel(judges=tuple(PanelJudge(name=n, model=f"m-{n}") for n in "abc"))


def scored(score: int) -> MetricResult:
    return MetricResult(
        outcome="scored", score=score, passing=CORRECTNESS.passes(score, OPTIONS), reason="x"
    )


def failed() -> MetricResult:
    return MetricResult.failed(Failure(stage="correctness_judge@c", attempts=1, message="down"))


def lanes(*results: MetricResult) -> dict[tuple[str, int], MetricResult]:
    return {(name, 0): r for name, r in zip("abc", results, strict=True)}


@pytest.mark.parametrize(
    ("combine", "score", "passing"),
    [("majority", 11 / 3, True), ("mean", 11 / 3, False), ("median", 4, True), ("min", 2, False)],
)
def test_each_way_of_combining(combine: str, score: float, passing: bool) -> None:
    panel = PANEL.model_copy(update={"combine": combine})
    result = combine_results(CORRECTNESS, OPTIONS, panel, lanes(scored(5), scored(4), scored(2)))
    assert result.score == pytest.approx(score)
    assert result.passing is passing
    assert result.details["panel"]["spread"] == 3


def test_every_judge_failing_fails_the_metric_naming_them() -> None:
    result = combine_results(CORRECTNESS, OPTIONS, PANEL, lanes(failed(), failed(), failed()))
    assert result.outcome == "failed"
    assert result.details["panel"]["failed"] == ["a", "b", "c"]
    assert "every judge failed" in (result.reason or "")


def test_a_judge_that_failed_does_not_vote() -> None:
    result = combine_results(CORRECTNESS, OPTIONS, PANEL, lanes(scored(5), scored(2), failed()))
    assert result.passing is False  # one pass, one fail: a tie of the two that answered
    assert result.details["panel"]["answered"] == 2
    assert "2 of 3 judges" in (result.reason or "")


def test_repeats_are_reduced_per_judge_and_a_flip_is_flaky() -> None:
    panel = Panel(judges=(PanelJudge(name="j", model="m"),), repeats=4)
    results = {("j", r): scored(5 if r % 2 else 2) for r in range(4)}
    result = combine_results(CORRECTNESS, OPTIONS, panel, results)
    view = result.details["panel"]["judges"]["j"]
    assert view["score"] == pytest.approx(3.5)
    assert view["flaky"] is True
    assert result.details["panel"]["flaky"] is True


def test_judges_flag_parses_and_says_what_is_wrong() -> None:
    assert parse_judges("a=gpt-4o-mini, b=llama@http://localhost:11434/v1") == (
        PanelJudge(name="a", model="gpt-4o-mini"),
        PanelJudge(name="b", model="llama", base_url="http://localhost:11434/v1"),
    )
    with pytest.raises(ValueError, match="NAME=MODEL"):
        parse_judges("gpt-4o-mini")
    with pytest.raises(ValueError, match="http"):
        parse_judges("a=m@localhost")
    with pytest.raises(ValueError, match="given twice"):
        Panel(judges=parse_judges("a=m,a=n"))
    # a judge's URL is kept with the job: no secret may ride in it, nor in the error
    for url in ("http://bob:hunter2@h:8000/v1", "https://h/v1?api-key=hunter2"):
        with pytest.raises(ValueError, match="give the key with --api-key") as caught:
            parse_judges(f"b=llama@{url}")
        assert "hunter2" not in str(caught.value)


def test_lane_ids_round_trip_and_leave_sample_ids_alone() -> None:
    assert split_lane(lane_id("q@@1", "b", 3)) == ("q@@1", "b", 3)
    assert split_lane("plain-id") is None
    assert split_lane("odd@@id") is None
