"""The agreement figures of ``ragjury calibrate``: checked against hand computations and
against scikit-learn (a test-only dependency), on data where the answer is known."""

from __future__ import annotations

import random

import pytest
from sklearn.metrics import (
    balanced_accuracy_score,
    cohen_kappa_score,
    precision_score,
    recall_score,
    roc_auc_score,
)

from ragjury.calibration.agreement import (
    Judgement,
    agreement,
    auroc,
    balanced_accuracy,
    best_threshold,
    cohen_kappa,
    confusion,
)

# 10 samples by hand: people fail 4 (F) and pass 6 (P); the judge catches 3 of the 4 and
# raises 1 false alarm.   caught 3, missed 1, false alarms 1, agreed pass 5.
HAND = [
    Judgement(False, False, 1.0),
    Judgement(False, False, 2.0),
    Judgement(False, False, 2.0),
    Judgement(False, True, 4.0),
    Judgement(True, False, 3.0),
    Judgement(True, True, 4.0),
    Judgement(True, True, 4.0),
    Judgement(True, True, 5.0),
    Judgement(True, True, 5.0),
    Judgement(True, True, 5.0),
]


def test_the_confusion_matrix_counts_fail_as_the_class_caught() -> None:
    c = confusion(HAND)

    assert (c.caught, c.missed, c.false_alarms, c.agreed_pass) == (3, 1, 1, 5)


def test_figures_match_a_hand_computation() -> None:
    a = agreement(HAND, threshold=4, resamples=200)

    assert a.accuracy.value == pytest.approx(8 / 10)
    assert a.fail_recall.value == pytest.approx(3 / 4)
    assert a.fail_precision.value == pytest.approx(3 / 4)
    assert a.balanced_accuracy.value == pytest.approx((3 / 4 + 5 / 6) / 2)
    # observed 0.8; chance = (4*4 + 6*6) / 100 = 0.52; kappa = 0.28 / 0.48
    assert a.kappa.value == pytest.approx(0.28 / 0.48)
    # AUROC: pairs (passed, failed) = 24; passed scores 3,4,4,5,5,5 vs failed 1,2,2,4:
    # 3 beats 3 failed; each 4 beats 3 and ties 1 (3.5 twice); each 5 beats 4 -> 3+7+12 = 22
    assert a.auroc is not None
    assert a.auroc.value == pytest.approx(22 / 24)


def test_figures_match_scikit_learn_on_random_data() -> None:
    rng = random.Random(7)
    human = [rng.random() < 0.6 for _ in range(300)]
    scores = [float(rng.randint(1, 5)) + (1.0 if h else 0.0) for h in human]
    judged = [Judgement(h, s >= 4, s) for h, s in zip(human, scores, strict=True)]
    truth = [0 if h else 1 for h in human]  # 1 = fail, the class of interest
    predicted = [0 if j.judge_pass else 1 for j in judged]

    a = agreement(judged, threshold=4, resamples=100)

    agreed = sum(t == p for t, p in zip(truth, predicted, strict=True))
    assert a.accuracy.value == pytest.approx(agreed / 300)
    assert a.balanced_accuracy.value == pytest.approx(balanced_accuracy_score(truth, predicted))
    assert a.kappa.value == pytest.approx(cohen_kappa_score(truth, predicted))
    assert a.fail_precision.value == pytest.approx(precision_score(truth, predicted))
    assert a.fail_recall.value == pytest.approx(recall_score(truth, predicted))
    assert a.auroc is not None
    assert a.auroc.value == pytest.approx(roc_auc_score(human, scores))


def test_auroc_reads_lower_as_better_for_a_scale_where_lower_is_better() -> None:
    human = [True, True, False, False]
    perplexity = [1.1, 1.5, 3.0, 2.0]
    judged = [Judgement(h, p <= 1.8, p) for h, p in zip(human, perplexity, strict=True)]

    a = agreement(judged, threshold=1.8, higher_is_better=False, resamples=50)

    assert a.auroc is not None
    assert a.auroc.value == 1.0
    assert a.threshold is not None
    assert a.threshold.best_balanced_accuracy == 1.0
    assert a.threshold.best == 1.8  # the mark in use already separates them: kept


def test_a_judge_that_passes_everything_is_at_chance_however_few_fail() -> None:
    judged = [Judgement(True, True, 5.0)] * 95 + [Judgement(False, True, 5.0)] * 5

    a = agreement(judged, threshold=4, resamples=100)

    assert a.accuracy.value == pytest.approx(0.95)
    assert a.balanced_accuracy.value == pytest.approx(0.5)
    assert a.kappa.value == pytest.approx(0.0)
    assert a.fail_recall.value == 0.0
    assert a.fail_precision.value is None  # it never failed anything
    assert a.auroc is not None
    assert a.auroc.value == pytest.approx(0.5)


def test_undefined_figures_are_none_not_nan() -> None:
    only_passed = [Judgement(True, True, 5.0), Judgement(True, False, 2.0)]

    a = agreement(only_passed, threshold=4, resamples=50)

    assert a.fail_recall.value is None
    assert a.balanced_accuracy.value is None
    assert a.auroc is not None
    assert a.auroc.value is None
    assert a.threshold is None
    assert cohen_kappa(confusion([Judgement(True, True)] * 3)) is None
    assert balanced_accuracy(confusion([])) is None
    assert auroc([], []) is None


def test_the_interval_holds_the_point_and_narrows_with_more_samples() -> None:
    def flipped(n: int, seed: int) -> list[Judgement]:
        rng = random.Random(seed)
        out = []
        for i in range(n):
            human = i % 2 == 0
            judge = human if rng.random() >= 0.2 else not human
            out.append(Judgement(human, judge, 5.0 if judge else 1.0))
        return out

    small = agreement(flipped(40, 1), threshold=4, resamples=500)
    large = agreement(flipped(1000, 1), threshold=4, resamples=500)

    for a in (small, large):
        assert a.accuracy.low is not None
        assert a.accuracy.high is not None
        assert a.accuracy.value is not None
        assert a.accuracy.low <= a.accuracy.value <= a.accuracy.high
    assert large.accuracy.low is not None
    assert large.accuracy.high is not None
    assert small.accuracy.low is not None
    assert small.accuracy.high is not None
    assert large.accuracy.high - large.accuracy.low < (small.accuracy.high - small.accuracy.low) / 3
    assert large.accuracy.low < 0.8 < large.accuracy.high


def test_the_same_seed_gives_the_same_interval_and_another_seed_another() -> None:
    a = agreement(HAND, threshold=4, resamples=300, seed=3)
    b = agreement(HAND, threshold=4, resamples=300, seed=3)
    c = agreement(HAND, threshold=4, resamples=300, seed=4)

    assert a == b
    assert (a.kappa.low, a.kappa.high) != (c.kappa.low, c.kappa.high)


def test_the_best_threshold_maximises_balanced_accuracy_beside_the_current_one() -> None:
    a = agreement(HAND, threshold=5, resamples=50)

    assert a.threshold is not None
    # at 5: caught 4 of 4 failed, passed 3 of 6 -> (1 + 0.5) / 2 = 0.75;
    # at 3: caught 3 of 4, passed 6 of 6 -> 0.875, the best; at 4: (3/4 + 5/6) / 2
    assert a.threshold.current == 5
    assert a.threshold.current_balanced_accuracy == pytest.approx(0.75)
    assert a.threshold.best == 3.0
    assert a.threshold.best_balanced_accuracy == pytest.approx(0.875)


def test_ties_between_marks_go_to_the_one_nearest_the_current_then_the_lower() -> None:
    human = [False, False, True, True]
    scores = [1.0, 3.0, 3.0, 5.0]  # at 3 and at 5 the balanced accuracy is 0.75

    assert best_threshold(human, scores, prefer=10) == (5.0, 0.75)
    assert best_threshold(human, scores, prefer=0) == (3.0, 0.75)
    assert best_threshold(human, scores) == (3.0, 0.75)


def test_the_mark_in_use_is_kept_when_no_score_seen_does_better() -> None:
    human = [False, True, False, True]
    scores = [1.0, 5.0, 1.0, 5.0]  # any mark above 1 and up to 5 separates them

    assert best_threshold(human, scores, prefer=4) == (4, 1.0)


def test_a_true_false_judge_has_no_auroc_and_no_threshold() -> None:
    judged = [Judgement(h, p) for h, p in [(True, True), (False, False), (True, False)]]

    a = agreement(judged, graded=False, resamples=50)

    assert a.auroc is None
    assert a.threshold is None
    assert a.accuracy.value == pytest.approx(2 / 3)
