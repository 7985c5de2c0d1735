"""Keyword tests on answers: must_contain, must_not_contain, must_not_start_with."""

from __future__ import annotations

import pytest

from ragjury.evaluation.keywords import check_keywords, failure_rates, keyword_score
from ragjury.schemas.records import KeywordCheck


def test_must_contain_passes_when_the_keyword_is_present() -> None:
    checks = check_keywords("Paris is the capital.", must_contain=["Paris", "Lyon"])

    assert checks == [
        KeywordCheck(type="must_contain", keyword="Paris", passed=True),
        KeywordCheck(type="must_contain", keyword="Lyon", passed=False),
    ]


def test_must_not_contain_passes_when_the_keyword_is_absent() -> None:
    checks = check_keywords("Paris is the capital.", must_not_contain=["London", "capital"])

    assert [check.passed for check in checks] == [True, False]


def test_matching_ignores_case_by_default() -> None:
    (check,) = check_keywords("PARIS is the capital.", must_contain=["paris"])

    assert check.passed


def test_case_sensitive_matching_tells_case_apart() -> None:
    (check,) = check_keywords("PARIS is the capital.", must_contain=["paris"], case_sensitive=True)

    assert not check.passed


def test_case_insensitive_matching_uses_casefold() -> None:
    (check,) = check_keywords("Die Straße ist lang.", must_contain=["STRASSE"])

    assert check.passed


def test_keywords_are_plain_substrings_not_patterns() -> None:
    checks = check_keywords("It costs 5 dollars.", must_contain=["5.", "costs 5"])

    assert [check.passed for check in checks] == [False, True]


def test_must_not_start_with_fails_when_the_answer_opens_with_the_keyword() -> None:
    (check,) = check_keywords("Sorry, I cannot help.", must_not_start_with=["sorry"])

    assert check == KeywordCheck(type="must_not_start_with", keyword="sorry", passed=False)


def test_must_not_start_with_ignores_leading_whitespace_of_the_answer() -> None:
    (check,) = check_keywords("\n   Sorry, I cannot help.", must_not_start_with=["Sorry"])

    assert not check.passed


def test_must_not_start_with_passes_when_the_keyword_is_only_inside_the_answer() -> None:
    (check,) = check_keywords("I am sorry to say no.", must_not_start_with=["Sorry"])

    assert check.passed


def test_checks_come_in_rule_order_one_per_keyword() -> None:
    checks = check_keywords(
        "Yes.", must_not_start_with=["No"], must_not_contain=["maybe"], must_contain=["Yes"]
    )

    assert [check.type for check in checks] == [
        "must_contain",
        "must_not_contain",
        "must_not_start_with",
    ]


def test_empty_keyword_is_refused() -> None:
    with pytest.raises(ValueError, match="must_contain holds an empty keyword"):
        check_keywords("anything", must_contain=[""])


def test_keyword_score_is_the_share_of_checks_passed() -> None:
    checks = check_keywords("Paris", must_contain=["Paris", "France", "Seine", "capital"])

    assert keyword_score(checks) == 0.25


def test_keyword_score_of_no_checks_raises() -> None:
    with pytest.raises(ValueError, match="at least one check"):
        keyword_score([])


def test_failure_rates_count_checks_and_failures_per_rule() -> None:
    first = check_keywords("Paris", must_contain=["Paris", "France"], must_not_contain=["Rome"])
    second = check_keywords("Rome", must_contain=["Paris"], must_not_contain=["Rome"])

    assert failure_rates([first, second]) == {
        "must_contain": {"checks": 3, "failed": 2, "failure_rate": 2 / 3},
        "must_not_contain": {"checks": 2, "failed": 1, "failure_rate": 0.5},
    }


def test_failure_rates_of_no_checks_are_empty() -> None:
    assert failure_rates([[], []]) == {}
