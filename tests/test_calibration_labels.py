"""Reading a person's labels beside the samples: the kinds accepted, and what is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragjury.calibration.labels import load_labelled
from ragjury.errors import InputError

SAMPLE = {"question": "Capital of Japan?", "answer": "Tokyo.", "contexts": ["Tokyo is it."]}


def jsonl(tmp_path: Path, labels: list[object], field: str = "human") -> Path:
    path = tmp_path / "labels.jsonl"
    rows = [{**SAMPLE, "id": f"s{i}", field: label} for i, label in enumerate(labels)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_pass_fail_labels_may_be_booleans_numbers_or_words(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [True, False, 1, 0, "pass", "FAIL", "yes", "no", "true"])

    found = load_labelled(path, "human")

    assert found.kind == "boolean"
    assert [i.human_pass for i in found.items] == [1, 0, 1, 0, 1, 0, 1, 0, 1]


def test_ratings_pass_from_the_mark_given(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [1, 2, 3, 4, 5, "3"])

    default = load_labelled(path, "human")
    lenient = load_labelled(path, "human", pass_at=3)

    assert (default.kind, default.pass_at) == ("rating", 4)
    assert [i.human_pass for i in default.items] == [0, 0, 0, 1, 1, 0]
    assert [i.human_pass for i in lenient.items] == [0, 0, 1, 1, 1, 1]


def test_labels_in_a_csv_file_are_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("id,question,answer,verdict\na,q1,a1,true\nb,q2,a2,false\n", encoding="utf-8")

    found = load_labelled(path, "verdict")

    assert [(i.sample.id, i.human_pass) for i in found.items] == [("a", True), ("b", False)]


def test_pass_fail_mixed_with_ratings_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"labels.jsonl:1: label true is pass/fail but other"):
        load_labelled(jsonl(tmp_path, [True, 4]), "human")


def test_a_fraction_is_not_a_label(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"label 0.5 in 'human' is not a human label"):
        load_labelled(jsonl(tmp_path, [0.5]), "human")


def test_a_record_without_a_label_among_labelled_ones_is_named(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [True, None, False])

    with pytest.raises(InputError, match=r"labels.jsonl:2: the record has no 'human' label"):
        load_labelled(path, "human")


def test_a_pass_mark_for_pass_fail_labels_or_off_the_scale_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--label-pass-at 3: the labels of .* are pass/fail"):
        load_labelled(jsonl(tmp_path, [True, False]), "human", pass_at=3)
    with pytest.raises(InputError, match=r"--label-pass-at 6: the labels run 1 to 5"):
        load_labelled(jsonl(tmp_path, [2, 5]), "human", pass_at=6)


def test_a_draw_is_seeded_keeps_file_order_and_refuses_zero(tmp_path: Path) -> None:
    found = load_labelled(jsonl(tmp_path, [True, False] * 10), "human")

    first = [i.sample.id for i in found.drawn(5, seed=1).items]
    again = [i.sample.id for i in found.drawn(5, seed=1).items]
    other = [i.sample.id for i in found.drawn(5, seed=2).items]

    assert first == again != other
    assert first == sorted(first, key=lambda s: int(s[1:]))
    assert found.drawn(5, seed=1).total == 20
    assert found.drawn(50, seed=1) is found
    with pytest.raises(InputError, match=r"--sample 0: give a number of samples of at least 1"):
        found.drawn(0, seed=1)


def test_invalid_records_are_skipped_and_listed(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    rows = [{**SAMPLE, "id": "a", "human": True}, {"id": "b", "human": False}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    found = load_labelled(path, "human")

    assert [i.sample.id for i in found.items] == ["a"]
    assert [r.line for r in found.invalid] == [2]
    assert "no question" in found.invalid[0].reason
