"""Keyword tests on an answer: cheap, deterministic checks that need no LLM.

Keywords are plain substrings, not patterns. Matching ignores case (``str.casefold``) unless
``case_sensitive`` is set. ``must_not_start_with`` looks at the answer with its leading
whitespace stripped, so ``"  Sorry, ..."`` starts with ``"Sorry"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ragjury.schemas.records import KeywordCheck, KeywordRule

__all__ = ["KeywordTally", "check_keywords", "failure_rates", "keyword_score"]

_RULES: tuple[KeywordRule, ...] = ("must_contain", "must_not_contain", "must_not_start_with")


def check_keywords(
    answer: str,
    *,
    must_contain: Sequence[str] = (),
    must_not_contain: Sequence[str] = (),
    must_not_start_with: Sequence[str] = (),
    case_sensitive: bool = False,
) -> list[KeywordCheck]:
    """One check per keyword, in the order given: must_contain, must_not_contain, then
    must_not_start_with. Raises ValueError for an empty keyword, which would always match."""
    found = keyword_outcomes(
        answer,
        must_contain=must_contain,
        must_not_contain=must_not_contain,
        must_not_start_with=must_not_start_with,
        case_sensitive=case_sensitive,
    )
    return [
        KeywordCheck(type=rule, keyword=keyword, passed=passed) for rule, keyword, passed in found
    ]


def keyword_outcomes(
    answer: str,
    *,
    must_contain: Sequence[str] = (),
    must_not_contain: Sequence[str] = (),
    must_not_start_with: Sequence[str] = (),
    case_sensitive: bool = False,
) -> list[tuple[KeywordRule, str, bool]]:
    """:func:`check_keywords` as (rule, keyword, passed), no model made for each check (the
    keyword agent stores them as plain values)."""
    fold: Callable[[str], str] = str if case_sensitive else str.casefold
    text = fold(answer)
    opening = text.lstrip()
    rules: dict[KeywordRule, Sequence[str]] = {
        "must_contain": must_contain,
        "must_not_contain": must_not_contain,
        "must_not_start_with": must_not_start_with,
    }
    found: list[tuple[KeywordRule, str, bool]] = []
    for rule, keywords in rules.items():
        for keyword in keywords:
            if not keyword:
                raise ValueError(
                    f"{rule} holds an empty keyword, which matches every answer; remove it"
                )
            needle = fold(keyword)
            if rule == "must_contain":
                passed = needle in text
            elif rule == "must_not_contain":
                passed = needle not in text
            else:
                passed = not opening.startswith(needle)
            found.append((rule, keyword, passed))
    return found


def keyword_score(checks: Sequence[KeywordCheck]) -> float:
    """The share of checks that passed, from 0.0 to 1.0.

    Raises ValueError when there are no checks: a sample without keywords has no score, and
    callers should leave it out rather than count it as passing or failing.
    """
    if not checks:
        raise ValueError(
            "keyword_score needs at least one check; skip samples that have no keywords"
        )
    return sum(check.passed for check in checks) / len(checks)


class KeywordTally:
    """Checks and failures per keyword rule, added one sample's checks at a time."""

    def __init__(self) -> None:
        self._counts: dict[KeywordRule, list[int]] = {}

    def add(self, checks: Iterable[KeywordCheck]) -> None:
        for check in checks:
            self.count(check.type, check.passed)

    def count(self, rule: KeywordRule, passed: bool) -> None:
        """One check of ``rule`` (as a stored result's ``checks`` hold it: no model made)."""
        tally = self._counts.setdefault(rule, [0, 0])
        tally[0] += 1
        tally[1] += not passed

    def rates(self) -> dict[str, dict[str, float | int]]:
        """Per rule that occurred: ``{"checks": n, "failed": k, "failure_rate": k / n}``."""
        rates: dict[str, dict[str, float | int]] = {}
        for rule in _RULES:
            if rule in self._counts:
                total, failed = self._counts[rule]
                rates[rule] = {"checks": total, "failed": failed, "failure_rate": failed / total}
        return rates


def failure_rates(
    all_checks: Iterable[Sequence[KeywordCheck]],
) -> dict[str, dict[str, float | int]]:
    """Per rule that occurred: ``{"checks": n, "failed": k, "failure_rate": k / n}``."""
    tally = KeywordTally()
    for checks in all_checks:
        tally.add(checks)
    return tally.rates()
