"""Gates that know about noise and a judge corrected by human labels, as a user runs them:
`evaluate --gate-on lower-bound` (a real subprocess against the scripted endpoint) and
`evaluate --correct-with labels.jsonl`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragjury.commands._run import EXIT_GATE

from evalcli import EIFFEL, REFUSAL, TOKYO, evaluate, evaluate_args, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

# faithfulness: eiffel 0.5 (not passing), tokyo 1.0 (passing), refusal not applicable: mean
# 0.75 over two scores, whose bootstrap means are 0.5, 0.75 and 1 -> interval [0.5, 1].
# correctness: eiffel 5, tokyo 5, refusal 2 (not passing).
SAMPLES = [EIFFEL, TOKYO, REFUSAL]


def evaluate_subprocess(
    fake: FakeOpenAI, tmp_path: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    samples = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    args = evaluate_args(fake, tmp_path, samples, "--metrics", "faithfulness", *flags)
    command = [sys.executable, "-m", "ragjury", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def summary(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    return data


def test_a_lower_bound_gate_fails_where_the_point_estimate_passes(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    point = evaluate_subprocess(fake, tmp_path, "--fail-under", "faithfulness=0.7")
    lower = evaluate_subprocess(
        fake, tmp_path, "--fail-under", "faithfulness=0.7", "--gate-on", "lower-bound"
    )

    assert point.returncode == 0, point.stderr
    assert lower.returncode == EXIT_GATE == 5, lower.stderr
    assert lower.stderr.strip().splitlines()[-1] == (
        "ragjury evaluate: gate failed: faithfulness mean's 95% lower bound 0.5 (faithfulness "
        "mean 0.75, interval [0.5, 1]) is below 0.7 (--fail-under faithfulness=0.7)"
    )
    figures = summary(tmp_path)["metrics"]["faithfulness"]
    assert (figures["mean"], figures["mean_interval"]) == (0.75, [0.5, 1.0])
    assert (figures["pass_rate"], figures["pass_rate_interval"]) == (0.5, [0.0, 1.0])
    assert summary(tmp_path)["intervals"]["level"] == 0.95


def test_the_one_line_summary_shows_each_figure_with_its_interval(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)

    done = evaluate_subprocess(fake, tmp_path)

    assert done.returncode == 0, done.stderr
    assert "faithfulness mean 0.75 [0.500, 1.000] pass 0.5 [0.000, 1.000]" in done.stderr


def labels(tmp_path: Path, **human: object) -> Path:
    rows = [{**sample, "human": human[sample["id"]]} for sample in SAMPLES if sample["id"] in human]
    return write_jsonl(tmp_path / "labels.jsonl", rows)


def run(fake: FakeOpenAI, tmp_path: Path, *flags: str) -> int:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    return evaluate(fake, tmp_path, samples, *flags)


def test_human_labels_correct_the_judges_pass_rate_beside_its_own(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the judge passes tokyo, fails eiffel; the person passes both: person - judge is 1 and
    # 0, so the judge's pass rate 0.5 is corrected by +0.5. var(judge) = 0.5 over 2 samples,
    # var(person - judge) = 0.5 over 2: 1 -+ 1.386, clipped to a pass rate's 0..1 (two
    # labels pin down nothing)
    path = labels(tmp_path, eiffel=True, tokyo="yes")
    half = 1.959964 * math.sqrt(0.5 / 2 + 0.5 / 2)
    assert 1 - half < 0

    code = run(fake, tmp_path, "--metrics", "faithfulness", "--correct-with", str(path))

    assert code == 0
    corrected = summary(tmp_path)["corrected"]["faithfulness"]
    assert (corrected["labelled"], corrected["matched"], corrected["unmatched"]) == (2, 2, 0)
    figure = corrected["pass_rate"]
    assert (figure["judge"], figure["judge_interval"]) == (0.5, [0.0, 1.0])
    assert (figure["corrected"], figure["judge_bias"]) == (1.0, -0.5)
    assert figure["interval"] == [0.0, 1.0]
    assert "mean" not in corrected  # pass/fail labels say nothing of a 0-1 faithfulness mean
    err = capsys.readouterr().err
    assert (
        f"faithfulness pass rate corrected by 2 human label(s) from {path}: 1.000 "
        "[0.000, 1.000]; the judge alone 0.500 [0.000, 1.000], judge bias "
        "-0.500"
    ) in err


def test_ratings_correct_a_1_to_5_mean_and_the_pass_rate(fake: FakeOpenAI, tmp_path: Path) -> None:
    # the judge rates all three (5, 5, 2: mean 4, pass rate 2/3); the person rates eiffel 2
    # and tokyo 5 (passing from 4): the mean is corrected by (-3 + 0) / 2, the pass rate by
    # (-1 + 0) / 2
    path = labels(tmp_path, eiffel=2, tokyo=5)
    flags = ("--metrics", "faithfulness,correctness", "--correct-with", f"correctness={path}")

    assert run(fake, tmp_path, *flags) == 0

    corrected = summary(tmp_path)["corrected"]["correctness"]
    assert corrected["mean"]["judge"] == 4.0
    assert corrected["mean"]["corrected"] == 2.5
    assert corrected["pass_rate"]["corrected"] == pytest.approx(2 / 3 - 0.5, abs=1e-4)


def test_labels_of_samples_the_run_did_not_score_are_counted_not_used(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    path = labels(tmp_path, tokyo=True, refusal=False)  # refusal: faithfulness not applicable

    assert run(fake, tmp_path, "--metrics", "faithfulness", "--correct-with", str(path)) == 0

    corrected = summary(tmp_path)["corrected"]["faithfulness"]
    assert (corrected["matched"], corrected["unmatched"]) == (1, 1)
    assert corrected["pass_rate"]["corrected"] == 0.5  # tokyo: judge and person agree


def test_labels_for_a_run_of_several_metrics_must_name_theirs(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = labels(tmp_path, tokyo=True)

    code = run(fake, tmp_path, "--metrics", "faithfulness,correctness", "--correct-with", str(path))

    assert code == 2
    assert (
        "this run judges faithfulness, correctness; name the metric the labels are for, e.g. "
        f"--correct-with faithfulness={path}"
    ) in capsys.readouterr().err
    assert fake.requests == []  # refused before any call


def test_a_label_field_without_labels_is_refused(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(fake, tmp_path, "--metrics", "faithfulness", "--label-field", "verdict") == 2

    assert "--label-field only apply with --correct-with FILE" in capsys.readouterr().err
