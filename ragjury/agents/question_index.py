"""Which kept questions a drafted question could nearly repeat, without comparing it with all.

A question is its normalised words; the similarity of two questions of ``x`` and ``y`` words
is ``2 * LCS / (x + y)`` (rapidfuzz's normalised Indel similarity over words), where LCS is
the longest common subsequence of words. Two questions at or above the threshold ``t``
therefore share at least ``a = ceil(t * (x + y) / 2)`` words (counted with repeats), and
their lengths are within a factor ``t / (2 - t)`` of each other.

Prefix filtering turns that into an index lookup that misses nothing: put every word in one
fixed order; if two word sets share ``a`` words, the first ``x - a + 1`` words of one and
the first ``y - a + 1`` words of the other have a word in common. Since ``a`` is at least
``ceil(t * n / (2 - t))`` for either length ``n`` of a pair that can match, each kept
question is stored under the first ``n - ceil(t * n / (2 - t)) + 1`` of its words (its
keys), and a drafted one is looked up by its own keys, taken the same way. Every kept
question similar enough shares a key with it; the few that share one by chance are
scored and dropped. At the default threshold 0.9 a ten-word question has two keys.

The order puts words common in any question ("what", "the", "does") last and every other
word in a fixed pseudo-random order, so the keys are mostly the words that tell questions
apart and a lookup finds few candidates. The order is part of what is stored: changing it
makes the stored keys wrong, so it is versioned (``ORDER_VERSION``) with the index.

The decisions are those of comparing with every kept question in the order they were kept:
the most similar at or above the threshold, the earliest on a tie.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragjury.store.decisions import QuestionDecision

ORDER_VERSION = 2
"""2: the key of a question with no words is printable (1 used NUL, which PostgreSQL's text
refuses); indexes of version 1 are rebuilt when their job is deduplicated again."""

_NOT_WORD = re.compile(r"[^\w\s]+")
_AFTER_STORED = 2**63  # the row of a question kept in this step, after every stored one
_EMPTY = "#"  # the one key of a question with no words (no word is punctuation): it
# matches only another such, and every database stores it

# Words that start or link questions in any subject, most common last in the order.
_COMMON_WORDS = (
    "per via into onto about between after before during without within across "
    "his her him she he we our us my me i they them their there then than "
    "only also more most many much some any each every all both other another "
    "same such one two first new used using use get set make need needs "
    "have has had been being was were will would could should may might must can "
    "or and not no if as at by from on with for to in of "
    "its it this that these those you your an a "
    "whom whose who when where why which how what do did does are be is the"
)
_COMMON_RANK = {word: rank for rank, word in enumerate(_COMMON_WORDS.split())}


def normalise(question: str) -> str:
    """Lower case, no punctuation, single spaces: what two wordings of one question share."""
    return " ".join(_NOT_WORD.sub(" ", question.casefold()).split())


def words(question: str) -> list[str]:
    return normalise(question).split()


def _order(token: str) -> tuple[int, bytes, str]:
    """A strict total order of tokens: uncommon words first, then the common ones."""
    rank = _COMMON_RANK.get(token.split("\x01", 1)[0], -1)
    return (1 + rank, hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), token)


@dataclass(frozen=True)
class QuestionIndex:
    """Keys and decisions of the deduplicator at one similarity threshold."""

    threshold: float

    @property
    def signature(self) -> str:
        return f"threshold={self.threshold!r} order={ORDER_VERSION}"

    def keys(self, question: str) -> list[str]:
        """The keys a kept question is stored under, and a drafted one looked up by."""
        found = words(question)
        if not found:
            return [_EMPTY]
        if self.threshold <= 0.0:
            return [_EMPTY]  # everything is similar enough: one key shared by all
        tokens = _tagged(found)
        tokens.sort(key=_order)
        n = len(tokens)
        # A little below the exact bound, so rounding can only lengthen the prefix.
        shared = max(1, math.ceil(self.threshold * n / (2.0 - self.threshold) - 1e-9))
        return tokens[: n - min(shared, n) + 1]

    def decide(
        self, candidates: Sequence[tuple[int, str, str]], pairs: Sequence[tuple[str, str]]
    ) -> list[QuestionDecision]:
        """Decide ``pairs`` (pair id, question) in order against ``candidates`` (row, pair id,
        question: every kept question that shares a key with one of the pairs, and
        maybe more) and against the pairs kept before them."""
        from rapidfuzz.distance import Indel  # here: the metric declarations import this module

        kept = [(row, pair_id, words(question)) for row, pair_id, question in candidates]
        kept.sort(key=lambda candidate: candidate[0])
        decisions = []
        for pair_id, question in pairs:
            found = words(question)
            best: tuple[float, str] | None = None
            for _, kept_id, kept_words in kept:
                score = Indel.normalized_similarity(found, kept_words)
                if score >= self.threshold and (best is None or score > best[0]):
                    best = (score, kept_id)
            if best is None:
                kept.append((_AFTER_STORED, pair_id, found))
                decisions.append(QuestionDecision(pair_id, None, None))
            else:
                decisions.append(QuestionDecision(pair_id, best[1], float(best[0])))
        return decisions


def _tagged(found: list[str]) -> list[str]:
    """The words with a repeat told apart ("a", "a\\x012"), so shared tokens count repeats."""
    seen: dict[str, int] = {}
    tokens = []
    for word in found:
        count = seen.get(word, 0) + 1
        seen[word] = count
        tokens.append(word if count == 1 else f"{word}\x01{count}")
    return tokens
