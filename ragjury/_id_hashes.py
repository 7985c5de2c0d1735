"""Which ids of a large stream occur more than once, in 8 bytes an id.

:class:`Seen` answers as the stream goes (has this id come before?) from the same 8-byte
hashes, for the document loader, which skips a repeat where it meets it.

A set of a million id strings costs about a hundred megabytes; :class:`Repeats` keeps only
each id's 64-bit hash in compact arrays. :meth:`Repeats.suspects` gives the hashes seen more
than once: every repeated id's, and (very rarely) a hash two different ids share. A second
pass over the stream that checks exactly only the ids whose hash is a suspect finds the
repeats, so the answer is exact while memory stays a few bytes an id.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from heapq import merge

__all__ = ["Repeats", "Seen", "id_hash"]

_BUCKETS = 64  # a power of two: ids are spread over these by their hash's low bits


def id_hash(key: str) -> int:
    """The hash :class:`Repeats` keeps of ``key`` (stable within one process)."""
    return hash(key)


class Repeats:
    """Hashes of the ids added so far, kept to find the repeated ones."""

    def __init__(self) -> None:
        self._buckets = [array("q") for _ in range(_BUCKETS)]

    def add(self, key: str) -> None:
        value = hash(key)
        self._buckets[value & (_BUCKETS - 1)].append(value)

    def suspects(self) -> frozenset[int]:
        """The hashes added more than once (empty when every id is unique). One bucket is
        turned into a set at a time, so this costs a sixty-fourth of the ids at most."""
        found: set[int] = set()
        for bucket in self._buckets:
            if len(set(bucket)) == len(bucket):
                continue
            seen: set[int] = set()
            for value in bucket:
                if value in seen:
                    found.add(value)
                seen.add(value)
        return frozenset(found)


class Seen:
    """The ids met so far, as their 64-bit hashes in sorted arrays of doubling sizes (like a
    binary counter: two runs of one size merge into one of the next), so adding is
    O(log n) amortised, a lookup is a binary search per run, and memory is 8 bytes an id.
    Two different ids share a hash with odds of about n^2 / 2^65 (one in three billion at
    100,000 ids): then the later one is taken for a repeat."""

    _BUFFER = 1024

    def __init__(self) -> None:
        self._runs: list[array[int]] = []
        self._recent: set[int] = set()

    def add(self, key: str) -> bool:
        """Record ``key``; whether it was new."""
        value = hash(key)
        if value in self._recent or any(_has(run, value) for run in self._runs):
            return False
        self._recent.add(value)
        if len(self._recent) >= self._BUFFER:
            run = array("q", sorted(self._recent))
            self._recent = set()
            while self._runs and len(self._runs[-1]) <= len(run):
                run = array("q", merge(self._runs.pop(), run))  # no list of ints
            self._runs.append(run)
        return True


def _has(run: array[int], value: int) -> bool:
    i = bisect_left(run, value)
    return i < len(run) and run[i] == value
