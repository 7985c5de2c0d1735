"""`ragjury compare`: paired differences on known data, the interval's coverage, the
regression gate, and jobs read from the database."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_report import page_data

from ragjury.cli import main
from ragjury.commands._run import EXIT_GATE
from ragjury.intervals import mean_interval
from ragjury.report.compare import compare

from conftest import read_summary
from evalfakes import script_judges
from fakeopenai import FakeOpenAI
from pgserver import PASSWORD
from reportruns import write_jsonl


def scored(score: float, reason: str = "") -> dict[str, Any]:
    return {"outcome": "scored", "score": score, "passing": score >= 0.8, "reason": reason}


def record(sample: str, **metrics: dict[str, Any]) -> dict[str, Any]:
    return {"id": sample, "question": f"question {sample}", "answer": "x", "metrics": metrics}


FAILED = {"outcome": "failed", "score": None, "passing": None, "reason": "did not validate"}
BASELINE = [
    record("a", faithfulness=scored(1.0, "all supported"), confidence=scored(2.0)),
    record("b", faithfulness=scored(0.5)),
    record("c", faithfulness=scored(0.0)),
    record("d", faithfulness=scored(1.0, "all supported")),
    record("e", faithfulness=FAILED),
    record("f", faithfulness=scored(0.5)),
]
CANDIDATE = [
    record("a", faithfulness=scored(0.5, "1 of 2 supported"), confidence=scored(1.5)),
    record("b", faithfulness=scored(1.0)),
    record("c", faithfulness=scored(0.0)),
    record("d", faithfulness=scored(0.25, "1 of 4 supported")),
    record("e", faithfulness=scored(1.0)),
    record("g", faithfulness=scored(1.0)),
]


def test_samples_are_paired_by_id_and_counted_improved_regressed_or_same() -> None:
    result = compare(BASELINE, CANDIDATE, seed=1)

    assert result.paired_samples == 5
    assert result.only_baseline == ["f"]
    assert result.only_candidate == ["g"]
    faith = result.metrics[0]
    assert faith.metric == "faithfulness"
    assert (faith.paired, faith.not_comparable) == (4, 1)  # e failed on one side
    assert faith.baseline_mean == pytest.approx(0.625)
    assert faith.candidate_mean == pytest.approx(0.4375)
    assert faith.mean_difference == pytest.approx(-0.1875)
    assert (faith.improved, faith.regressed, faith.same) == (1, 2, 1)
    assert [(c.id, c.difference) for c in faith.biggest_regressions] == [("d", -0.75), ("a", -0.5)]
    assert faith.biggest_regressions[0].candidate_reason == "1 of 4 supported"
    assert faith.biggest_regressions[0].baseline_reason == "all supported"
    assert faith.interval is not None
    low, high = faith.interval
    assert -0.75 <= low < -0.1875 < high <= 0.5
    assert compare(BASELINE, CANDIDATE, seed=1).metrics[0].interval == faith.interval


def test_a_lower_perplexity_counts_as_an_improvement() -> None:
    confidence = compare(BASELINE, CANDIDATE).metrics[1]

    assert confidence.metric == "confidence"
    assert confidence.higher_is_better is False
    assert confidence.mean_difference == pytest.approx(-0.5)
    assert (confidence.improved, confidence.regressed) == (1, 0)
    assert confidence.regression < 0


def test_the_bootstrap_interval_covers_the_true_mean_difference_about_95_percent() -> None:
    rng = random.Random(2024)
    trials, covered = 200, 0
    for trial in range(trials):
        # paired faithfulness-like scores: the candidate is 0.1 better on average
        differences = [rng.gauss(0.1, 0.3) for _ in range(40)]
        interval = mean_interval(differences, resamples=1000, seed=trial)
        assert interval is not None
        covered += interval[0] <= 0.1 <= interval[1]

    assert 0.90 <= covered / trials <= 0.99


def test_no_pair_gives_no_interval() -> None:
    assert mean_interval([]) is None
    assert mean_interval([0.25]) == (0.25, 0.25)


def _files(tmp_path: Path) -> tuple[str, str]:
    base = write_jsonl(tmp_path / "baseline.jsonl", BASELINE)
    cand = write_jsonl(tmp_path / "candidate.jsonl", CANDIDATE)
    return str(base), str(cand)


def test_json_output_has_the_figures_and_the_samples_on_one_side_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _files(tmp_path)

    assert main(["compare", base, cand, "--json"]) == 0

    data = json.loads(capsys.readouterr().out)
    assert data["only_baseline"] == ["f"]
    assert data["only_candidate"] == ["g"]
    faith = data["metrics"][0]
    assert faith["mean_difference"] == pytest.approx(-0.1875)
    assert len(faith["interval_95"]) == 2
    assert faith["biggest_regressions"][0]["id"] == "d"


def test_the_terminal_table_shows_metrics_regressions_and_unpaired_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _files(tmp_path)

    assert main(["compare", base, cand]) == 0

    out = capsys.readouterr().out
    assert "faithfulness" in out
    assert "-0.1875" in out
    assert "Biggest faithfulness regressions" in out
    assert "1 of 4 supported" in out
    assert "Only in " + base + ": 1 sample(s): f" in out
    assert "Only in " + cand + ": 1 sample(s): g" in out
    assert "faithfulness: 1 sample(s) on both sides not compared" in out


SHIFTED_BASELINE = [record(f"s{i}", faithfulness=scored(1.0 if i % 2 else 0.75)) for i in range(20)]
SHIFTED_CANDIDATE = [  # 18 of 20 samples 0.25 worse: a shift the noise cannot explain
    record(f"s{i}", faithfulness=scored((1.0 if i % 2 else 0.75) - (0.25 if i >= 2 else 0.0)))
    for i in range(20)
]


def test_a_regression_beyond_the_allowed_drop_exits_with_the_gate_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = str(write_jsonl(tmp_path / "baseline.jsonl", SHIFTED_BASELINE))
    cand = str(write_jsonl(tmp_path / "candidate.jsonl", SHIFTED_CANDIDATE))

    assert main(["compare", base, cand, "--fail-on-regression", "faithfulness=0.3"]) == 0
    capsys.readouterr()
    code = main(["compare", base, cand, "--json", "--fail-on-regression", "faithfulness=0.1"])

    assert code == EXIT_GATE
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    low, high = data["metrics"][0]["interval_95"]
    assert high < 0
    assert data["metrics"][0]["change"] == "regression"
    message = (
        f"faithfulness mean 0.875 -> 0.65, difference -0.225 (95% interval [{low:+.4g}, "
        f"{high:+.4g}]): 0.225 worse, more than 0.1"
    )
    assert captured.err.strip().splitlines()[-1] == (
        f"ragjury compare: gate failed: {message} (--fail-on-regression faithfulness=0.1)"
    )
    assert data["gates"] == [
        {
            "name": "--fail-on-regression faithfulness=0.1",
            "passed": False,
            "message": message,
            "metric": "faithfulness",
        }
    ]


def test_a_drop_within_the_noise_of_the_samples_passes_the_regression_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _files(tmp_path)  # 4 pairs, mean 0.1875 worse, interval holding 0

    code = main(["compare", base, cand, "--json", "--fail-on-regression", "faithfulness=0.1"])

    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["metrics"][0]["change"] == "within noise"
    assert data["gates"][0]["passed"] is True
    assert data["gates"][0]["message"].endswith(
        "0.1875 worse, but the interval holds 0, so within noise"
    )


def test_the_comparison_page_escapes_what_models_wrote(tmp_path: Path) -> None:
    hostile = [record("a", faithfulness=scored(0.0, "<script>alert(1)</script>"))]
    base = write_jsonl(tmp_path / "b.jsonl", BASELINE[:1])
    cand = write_jsonl(tmp_path / "c.jsonl", hostile)
    out = tmp_path / "compare.html"

    assert main(["compare", str(base), str(cand), "--out", str(out)]) == 0

    html = out.read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html  # the comparison page has no script at all


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_compare_and_report_read_jobs_from_either_store(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    kind: str,
) -> None:
    db = str(tmp_path / "ragjury.db") if kind == "sqlite" else request.getfixturevalue("pg_url")
    script_judges(fake)
    sample = {
        "id": "eiffel",
        "question": "Where is the Eiffel Tower?",
        "contexts": ["The Eiffel Tower is in Paris."],
    }
    jobs = []
    for name, answer in (
        ("old", "The Eiffel Tower is in Paris."),
        ("new", "The Eiffel Tower is in Rome."),
    ):
        samples = write_jsonl(tmp_path / f"{name}.jsonl", [{**sample, "answer": answer}])
        code = main(
            [
                "evaluate",
                str(samples),
                "--out",
                str(tmp_path / f"{name}-results.jsonl"),
                "--summary",
                str(tmp_path / "summary.json"),
                "--db",
                db,
                "--base-url",
                fake.base_url,
                "--api-key",
                "k",
            ]
        )
        assert code == 0
        jobs.append(read_summary(tmp_path)["job"])
    capsys.readouterr()

    code = main(["compare", "--db", db, *jobs, "--json"])

    assert code == 0
    faith = json.loads(capsys.readouterr().out)["metrics"][0]
    assert faith["baseline_mean"] == 1.0
    assert faith["candidate_mean"] == 0.0
    assert faith["regressed"] == 1
    page = tmp_path / "report.html"
    assert main(["report", "--db", db, "--out", str(page)]) == 0  # the newest job
    html = page.read_text(encoding="utf-8")
    assert f"job {jobs[1]}" in html
    data = page_data(html)
    assert [s["answer"] for s in data["samples"]] == ["The Eiffel Tower is in Rome."]
    assert data["samples"][0]["contexts"] == ["The Eiffel Tower is in Paris."]
    history = tmp_path / "history.html"
    assert main(["report", "--db", db, "--history", "--out", str(history)]) == 0
    runs = history.read_text(encoding="utf-8")
    assert [job for job in jobs if f'data-job="{job}" data-run=' in runs] == jobs  # a run each
    if kind == "postgresql":  # the pages name the database without its password
        assert PASSWORD not in html + json.dumps(data) + runs


def test_a_repeated_id_is_refused_with_the_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_jsonl(tmp_path / "b.jsonl", [BASELINE[0], BASELINE[0]])

    assert main(["compare", str(base), str(base)]) == 2
    assert "sample id 'a' appears twice" in capsys.readouterr().err


def test_limit_and_all_choose_how_many_regressions_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [f"s{i}" for i in range(8)]
    base = write_jsonl(tmp_path / "b.jsonl", [record(i, faithfulness=scored(1.0)) for i in ids])
    cand = write_jsonl(
        tmp_path / "c.jsonl",
        [record(i, faithfulness=scored(0.9 - n / 10)) for n, i in enumerate(ids)],
    )  # all eight regressed, s7 the most

    def listed(*flags: str) -> list[str]:
        assert main(["compare", str(base), str(cand), "--json", *flags]) == 0
        found = json.loads(capsys.readouterr().out)["metrics"][0]["biggest_regressions"]
        return [r["id"] for r in found]

    assert listed() == ["s7", "s6", "s5", "s4", "s3"]  # five by default
    assert listed("--limit", "2") == ["s7", "s6"]
    assert listed("--all") == ids[::-1]


def test_the_terminal_title_puts_the_baseline_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _files(tmp_path)

    assert main(["compare", base, cand]) == 0

    out = " ".join(capsys.readouterr().out.split())
    assert out.index("(baseline)") < out.index("(candidate)")
    assert out.index(base[-20:]) < out.index(cand[-20:])
