"""The summary's median at any size is the exact median, without a sorted copy of every
score (at a million samples that copy was the run's largest object)."""

from __future__ import annotations

import random
import statistics
import tracemalloc
from array import array

import pytest

from ragjury.evaluation.summary import median_of

_RNG = random.Random(7)


@pytest.mark.parametrize(
    "values",
    [
        [_RNG.random() for _ in range(120_001)],  # continuous, odd count
        [_RNG.choice([0.0, 0.5, 1.0]) for _ in range(100_000)],  # a few distinct scores
        [1.0] * 60_000 + [0.0] * 60_001,  # two values, the middle in a crowded range
        [_RNG.gauss(0, 1) for _ in range(70_000)],  # negative and positive
        [3.0] * 80_000,  # all equal
        [0.25, 0.75, 0.5],  # small: sorted as before
    ],
)
def test_the_median_is_exact(values: list[float]) -> None:
    assert median_of(array("d", values)) == statistics.median(values)


def test_a_million_scores_need_no_sorted_copy() -> None:
    values = array("d", (_RNG.random() for _ in range(1_000_000)))
    tracemalloc.start()
    try:
        median_of(values)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024  # a sorted list of a million floats is about 32 MB
