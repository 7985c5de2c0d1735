"""Which ids of a large stream occur more than once, in 8 bytes an id.

A set of a million id strings costs about a hundred megabytes; :class:`Repeats` keeps only
each id's 64-bit hash in compact arrays. :meth:`Repeats.suspects` gives the hashes seen more
than once: every repeated id's, and (very rarely) a hash two different ids share. A second
pass over the stream that checks exactly only the ids whose hash is a suspect finds the
repeats, so the answer is exact while memory stays a few bytes an id.
"""

from __future__ import annotations

from array import array

__all__ = ["Repeats", "id_hash"]

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
