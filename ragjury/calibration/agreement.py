"""How often a judge agrees with people: the figures of ``ragjury calibrate``, pure functions.

Each judged sample is a :class:`Judgement`: whether the person passed it, whether the judge
did, and the judge's score. "Fail" is the class of interest (the judge catching a bad
answer), so precision and recall are of "fail":

================  =================================  ==========================
                  judge passes                       judge fails
person passes     agree (true negative of "fail")    false alarm
person fails      missed                             caught (true positive)
================  =================================  ==========================

Accuracy, balanced accuracy (the mean of the recall of "fail" and of "pass", so a judge that
passes everything scores 0.5 however few bad answers there are), Cohen's kappa (agreement
beyond what the two margins give by chance), precision and recall of "fail", and, where the
score is graded, AUROC (the chance that a random passed sample scores above a random failed
one, ties counting half). Each comes with a percentile bootstrap 95% interval over samples,
seeded, so the same data gives the same interval. A figure that is undefined (no failed
sample, so no recall of "fail") is None, never NaN; a resample where it is undefined is left
out of its interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from ragjury.intervals import CONFIDENCE, percentile_interval, resampled

RESAMPLES = 1000


@dataclass(frozen=True)
class Judgement:
    """One sample: the person's verdict, the judge's, and the judge's score (None when it
    gives none)."""

    human_pass: bool
    judge_pass: bool
    score: float | None = None


class Confusion(BaseModel):
    """The four counts; "fail" is the positive class."""

    model_config = ConfigDict(frozen=True)

    caught: int = 0
    """The person failed it and so did the judge."""
    missed: int = 0
    """The person failed it; the judge passed it."""
    false_alarms: int = 0
    """The person passed it; the judge failed it."""
    agreed_pass: int = 0
    """Both passed it."""

    @property
    def total(self) -> int:
        return self.caught + self.missed + self.false_alarms + self.agreed_pass

    @property
    def human_fail(self) -> int:
        return self.caught + self.missed

    @property
    def human_pass(self) -> int:
        return self.false_alarms + self.agreed_pass

    @property
    def judge_fail(self) -> int:
        return self.caught + self.false_alarms

    @property
    def judge_pass(self) -> int:
        return self.missed + self.agreed_pass


def confusion(judgements: Sequence[Judgement]) -> Confusion:
    counts = Counter((j.human_pass, j.judge_pass) for j in judgements)
    return _confusion(counts)


def _confusion(counts: Mapping[tuple[bool, bool], int]) -> Confusion:
    return Confusion(
        caught=counts.get((False, False), 0),
        missed=counts.get((False, True), 0),
        false_alarms=counts.get((True, False), 0),
        agreed_pass=counts.get((True, True), 0),
    )


def _ratio(top: float, bottom: float) -> float | None:
    return top / bottom if bottom else None


def accuracy(c: Confusion) -> float | None:
    return _ratio(c.caught + c.agreed_pass, c.total)


def fail_recall(c: Confusion) -> float | None:
    """Of the samples the person failed, the share the judge failed too."""
    return _ratio(c.caught, c.human_fail)


def fail_precision(c: Confusion) -> float | None:
    """Of the samples the judge failed, the share the person failed too."""
    return _ratio(c.caught, c.judge_fail)


def pass_recall(c: Confusion) -> float | None:
    """Of the samples the person passed, the share the judge passed too (specificity)."""
    return _ratio(c.agreed_pass, c.human_pass)


def balanced_accuracy(c: Confusion) -> float | None:
    """The mean of the recall of "fail" and of "pass"; None unless the person both passed
    and failed some sample."""
    caught, passed = fail_recall(c), pass_recall(c)
    if caught is None or passed is None:
        return None
    return (caught + passed) / 2


def cohen_kappa(c: Confusion) -> float | None:
    """(observed agreement - chance agreement) / (1 - chance agreement); None when chance
    agreement is 1 (both always said the same one thing)."""
    n = c.total
    if not n:
        return None
    observed = (c.caught + c.agreed_pass) / n
    chance = (c.human_fail * c.judge_fail + c.human_pass * c.judge_pass) / (n * n)
    if chance >= 1:
        return None
    return (observed - chance) / (1 - chance)


def auroc(human_pass: Sequence[bool], scores: Sequence[float]) -> float | None:
    """The chance that a sample the person passed scores higher than one they failed (ties
    count half); None unless both kinds are present. Higher scores must mean better."""
    counts = Counter(zip(scores, human_pass, strict=True))
    return _auroc(counts)


def _auroc(counts: Mapping[tuple[float, bool], int]) -> float | None:
    values = sorted({score for score, _ in counts})
    passed = sum(n for (_, good), n in counts.items() if good)
    failed = sum(n for (_, good), n in counts.items() if not good)
    if not passed or not failed:
        return None
    below = 0  # failed samples scoring below the current value
    wins = 0.0
    for value in values:
        good, bad = counts.get((value, True), 0), counts.get((value, False), 0)
        wins += good * (below + bad / 2)
        below += bad
    return wins / (passed * failed)


class Figure(BaseModel):
    """A figure and its bootstrap interval (None where undefined)."""

    model_config = ConfigDict(frozen=True)

    value: float | None
    low: float | None = None
    high: float | None = None


class Threshold(BaseModel):
    """The pass mark in use and the one that agrees best with people (on these samples)."""

    model_config = ConfigDict(frozen=True)

    current: float | None
    current_balanced_accuracy: float | None
    best: float
    best_balanced_accuracy: float


class Agreement(BaseModel):
    """Every figure of one judge against one set of human labels."""

    model_config = ConfigDict(frozen=True)

    samples: int
    human_fail: int
    accuracy: Figure
    balanced_accuracy: Figure
    kappa: Figure
    fail_precision: Figure
    fail_recall: Figure
    auroc: Figure | None
    """None when the judge's score is not graded (a true/false judge)."""
    confusion: Confusion
    threshold: Threshold | None
    """None when the score is not graded, or the person's labels are all one kind."""
    resamples: int
    seed: int
    confidence: float = CONFIDENCE


def best_threshold(
    human_pass: Sequence[bool],
    scores: Sequence[float],
    *,
    higher_is_better: bool = True,
    prefer: float | None = None,
) -> tuple[float, float] | None:
    """The pass mark that maximises balanced accuracy, among the scores seen and ``prefer``
    (the mark in use, kept when none does better), and that balanced accuracy; ties go to
    the mark nearest ``prefer``, then to the lower one. None unless the person both passed
    and failed some sample."""
    best: tuple[float, float] | None = None
    best_key: tuple[float, float, float] | None = None
    marks = set(scores) | ({prefer} if prefer is not None else set())
    for mark in sorted(marks):
        c = confusion(
            [
                Judgement(good, score >= mark if higher_is_better else score <= mark)
                for good, score in zip(human_pass, scores, strict=True)
            ]
        )
        figure = balanced_accuracy(c)
        if figure is None:
            return None
        key = (-figure, abs(mark - prefer) if prefer is not None else 0.0, mark)
        if best_key is None or key < best_key:
            best, best_key = (mark, figure), key
    return best


_Counts = Mapping[tuple[bool, bool, float], int]
"""(person passed, judge passed, score) -> samples: all a resample's figures need."""


def _figures(counts: _Counts, graded: bool) -> dict[str, float | None]:
    pairs: Counter[tuple[bool, bool]] = Counter()
    scored: Counter[tuple[float, bool]] = Counter()
    for (good, judged, score), n in counts.items():
        pairs[good, judged] += n
        scored[score, good] += n
    c = _confusion(pairs)
    return {
        "accuracy": accuracy(c),
        "balanced_accuracy": balanced_accuracy(c),
        "kappa": cohen_kappa(c),
        "fail_precision": fail_precision(c),
        "fail_recall": fail_recall(c),
        "auroc": _auroc(scored) if graded else None,
    }


def agreement(
    judgements: Sequence[Judgement],
    *,
    threshold: float | None = None,
    higher_is_better: bool = True,
    graded: bool = True,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Agreement:
    """The judge's agreement with people over ``judgements``. ``graded``: the judge's score
    is more than pass/fail, so AUROC and the best threshold are computed (every judgement
    then needs a score); ``threshold`` is the pass mark in use."""
    if graded and any(j.score is None for j in judgements):
        raise ValueError("a graded judge needs a score for every judgement")
    sign = 1.0 if higher_is_better else -1.0  # AUROC reads higher as better

    def key(j: Judgement) -> tuple[bool, bool, float]:
        return j.human_pass, j.judge_pass, sign * j.score if graded and j.score is not None else 0.0

    keys = [key(j) for j in judgements]
    point = _figures(Counter(keys), graded)
    drawn: dict[str, list[float]] = {name: [] for name in point}
    for keys_drawn in resampled(keys, resamples=resamples, seed=seed):
        for name, value in _figures(Counter(keys_drawn), graded).items():
            if value is not None:
                drawn[name].append(value)

    def figure(name: str) -> Figure:
        interval = percentile_interval(drawn[name], confidence)
        if point[name] is None or interval is None:
            return Figure(value=point[name])
        return Figure(value=point[name], low=interval[0], high=interval[1])

    human = [j.human_pass for j in judgements]
    scores = [j.score for j in judgements if j.score is not None]
    chosen = None
    if graded:
        found = best_threshold(human, scores, higher_is_better=higher_is_better, prefer=threshold)
        if found is not None:
            current = None
            if threshold is not None:
                current = balanced_accuracy(
                    confusion(
                        [
                            Judgement(good, _passes(score, threshold, higher_is_better))
                            for good, score in zip(human, scores, strict=True)
                        ]
                    )
                )
            chosen = Threshold(
                current=threshold,
                current_balanced_accuracy=current,
                best=found[0],
                best_balanced_accuracy=found[1],
            )
    c = confusion(judgements)
    return Agreement(
        samples=len(judgements),
        human_fail=c.human_fail,
        accuracy=figure("accuracy"),
        balanced_accuracy=figure("balanced_accuracy"),
        kappa=figure("kappa"),
        fail_precision=figure("fail_precision"),
        fail_recall=figure("fail_recall"),
        auroc=figure("auroc") if graded else None,
        confusion=c,
        threshold=chosen,
        resamples=resamples,
        seed=seed,
        confidence=confidence,
    )


def _passes(score: float, mark: float, higher_is_better: bool) -> bool:
    return score >= mark if higher_is_better else score <= mark


FIGURES: tuple[tuple[str, str, Callable[[Agreement], Figure | None]], ...] = (
    ("accuracy", "share of samples where judge and person agree", lambda a: a.accuracy),
    (
        "balanced accuracy",
        "mean of the recall of fail and of pass (0.5 is chance)",
        lambda a: a.balanced_accuracy,
    ),
    ("Cohen's kappa", "agreement beyond chance (0 is chance, 1 perfect)", lambda a: a.kappa),
    (
        "precision of fail",
        "of the samples the judge failed, the share people failed",
        lambda a: a.fail_precision,
    ),
    (
        "recall of fail",
        "of the samples people failed, the share the judge caught",
        lambda a: a.fail_recall,
    ),
    (
        "AUROC",
        "chance a passed sample outscores a failed one (0.5 is chance)",
        lambda a: a.auroc,
    ),
)
"""The figures in the order they are shown, each with what it means."""
