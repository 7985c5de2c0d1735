"""The compact id checks: which ids repeat, exactly, in a few bytes an id."""

from __future__ import annotations

import random

from ragjury._id_hashes import Repeats, Seen


def test_seen_says_whether_an_id_came_before_across_many_merges() -> None:
    rng = random.Random(7)
    seen, reference = Seen(), set()
    for _ in range(30_000):  # enough ids for several runs of doubling sizes to merge
        key = f"doc-{rng.randrange(20_000)}.md"
        assert seen.add(key) == (key not in reference), key
        reference.add(key)


def test_repeats_names_every_hash_added_twice() -> None:
    ids = [f"s{i}" for i in range(5_000)] + ["s17", "s4999"]
    repeats = Repeats()
    for key in ids:
        repeats.add(key)
    assert repeats.suspects() == {hash("s17"), hash("s4999")}
