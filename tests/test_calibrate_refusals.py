"""What `ragjury calibrate` refuses, and says why: label files without the label, labels off
the scale or of no known kind, a file without its metric, and an endpoint that fails every
call."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibratecli import SAMPLE, calibrate, write_labels
from fakeopenai import FakeOpenAI, error


def test_a_missing_label_field_names_the_fields_found_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_labels(tmp_path, [{**SAMPLE, "verdict": True}])

    assert calibrate(None, tmp_path, str(path), "--metric", "faithfulness") == 2

    err = capsys.readouterr().err
    assert "no record has the label field 'human'" in err
    assert "verdict" in err
    assert "--label-field NAME" in err


def test_a_label_off_the_scale_names_its_line_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_labels(tmp_path, [{**SAMPLE, "human": 4}, {**SAMPLE, "id": "x", "human": 7}])

    assert calibrate(None, tmp_path, str(path), "--metric", "faithfulness") == 2

    err = capsys.readouterr().err
    assert "labels.jsonl:2: label 7 is off the scale" in err
    assert "a whole rating from 1 to 5" in err


def test_a_label_of_no_known_kind_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_labels(tmp_path, [{**SAMPLE, "human": "maybe"}])

    assert calibrate(None, tmp_path, str(path), "--metric", "faithfulness") == 2

    assert "labels.jsonl:1: label 'maybe' in 'human' is not a human label" in (
        capsys.readouterr().err
    )


def test_a_file_needs_the_metric_and_the_metric_needs_its_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_labels(tmp_path, [{**SAMPLE, "human": True}])

    assert calibrate(None, tmp_path, str(path)) == 2
    assert "--metric: name the judge to calibrate" in capsys.readouterr().err

    assert calibrate(None, tmp_path, str(path), "--metric", "correctness") == 2
    err = capsys.readouterr().err
    assert "--metric correctness needs answer, reference" in err
    assert "have no reference" in err

    assert calibrate(None, tmp_path, "begin-wow", "--metric", "confidence") == 2
    assert "has no pass mark" in capsys.readouterr().err


def test_an_endpoint_that_fails_every_call_compares_nothing_and_says_so(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.route("correctness_judge", error(400, "model not found"))

    code = calibrate(fake, tmp_path, "evouna-nq", "--sample", "3", "--max-transport-retries", "0")

    assert code == 4
    assert "nothing was compared: of 3 sample(s), 3 failed" in capsys.readouterr().err
