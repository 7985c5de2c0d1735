"""CI gates on `ragjury evaluate`: the exit codes, the one-line reason, JUnit XML, Markdown."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ragjury._json import JSONObject
from ragjury.commands._run import EXIT_GATE, EXIT_MAX_FAILED
from ragjury.report.junit import junit_tree

from evalcli import EIFFEL, REFUSAL, TOKYO, evaluate, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, chat

# faithfulness: eiffel 0.5 (not passing), tokyo 1.0, refusal not applicable -> mean 0.75,
# pass rate 0.5; correctness: eiffel 5, tokyo 5, refusal 2 -> mean 4, pass rate 2/3.
SAMPLES = [EIFFEL, TOKYO, REFUSAL]


def run(fake: FakeOpenAI, tmp_path: Path, *flags: str) -> int:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    return evaluate(fake, tmp_path, samples, "--metrics", "faithfulness,correctness", *flags)


def test_a_mean_under_its_bar_exits_with_the_gate_code_and_names_metric_value_and_bar(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(fake, tmp_path, "--fail-under", "faithfulness=0.8,correctness=3")

    assert code == EXIT_GATE == 5
    lines = [x for x in capsys.readouterr().err.splitlines() if "gate failed" in x]
    assert lines == [
        "ragjury evaluate: gate failed: faithfulness mean 0.75 (point estimate; 95% interval "
        "[0.5, 1]) is below 0.8 "
        "(--fail-under faithfulness=0.8)"
    ]


def test_bars_the_run_clears_exit_zero(fake: FakeOpenAI, tmp_path: Path) -> None:
    assert run(fake, tmp_path, "--fail-under", "faithfulness=0.75,correctness=4") == 0


def test_a_pass_rate_bar_fails_on_the_share_of_passing_samples(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(fake, tmp_path, "--fail-under", "pass_rate:faithfulness=0.9")

    assert code == EXIT_GATE
    assert (
        "faithfulness pass rate 0.5 (point estimate; 95% interval [0, 1]) is below 0.9"
        in capsys.readouterr().err
    )


def test_more_failed_judgements_than_allowed_exits_with_the_gate_code(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", chat("this is not JSON"))
    samples = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    flags = ("--metrics", "faithfulness,correctness", "--max-retries", "0")

    assert evaluate(fake, tmp_path, samples, *flags, "--max-failed", "3") == 0
    assert evaluate(fake, tmp_path, samples, *flags, "--max-failed", "2") == EXIT_MAX_FAILED
    assert (
        "ragjury evaluate: gate failed: 3 judgement(s) failed, more than 2 (--max-failed 2)"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("faithfulnes=0.8", "unknown metric 'faithfulnes'"),
        ("faithfulness", "expects METRIC=NUMBER"),
        ("correctness=0.75", "correctness scores run 1 to 5, so this bar can never fail"),
        ("faithfulness=2", "can never pass"),
        ("pass_rate:faithfulness=90", "a pass rate is between 0 and 1"),
        ("confidence=2", "lower confidence is better"),
    ],
)
def test_a_bad_bar_stops_the_command_before_any_llm_request(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spec: str,
    says: str,
) -> None:
    try:
        code = run(fake, tmp_path, "--fail-under", spec)
    except SystemExit as stopped:  # argparse's own: the syntax
        code = int(stopped.code or 0)

    assert code == 2
    assert says in capsys.readouterr().err
    assert fake.requests == []


def test_junit_has_a_case_per_sample_and_metric_and_the_reasons_of_failures(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"
    code = run(fake, tmp_path, "--junit", str(junit), "--fail-under", "faithfulness=0.8")

    assert code == EXIT_GATE
    root = ET.parse(junit).getroot()
    # The structure the JUnit schema (Ant / Jenkins junit-10.xsd) requires.
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [
        "ragjury.faithfulness",
        "ragjury.correctness",
        "ragjury.gates",
    ]
    for suite in suites:
        for attribute in ("name", "tests", "failures", "errors", "skipped", "time"):
            assert suite.get(attribute) is not None, (suite.get("name"), attribute)
        cases = suite.findall("testcase")
        assert int(suite.get("tests", "")) == len(cases)
        assert int(suite.get("failures", "")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("skipped", "")) == sum(c.find("skipped") is not None for c in cases)
        for case in cases:
            assert case.get("name")
            assert case.get("classname") == suite.get("name")
            assert len(list(case)) <= 1  # passed, or one failure / error / skipped
    assert root.get("tests") == "7"  # 3 samples x 2 metrics + 1 gate

    faithfulness = {c.get("name", "").split(":")[0]: c for c in suites[0]}
    eiffel = faithfulness["eiffel"].find("failure")
    assert eiffel is not None
    assert eiffel.get("type") == "below_threshold"
    assert "The Eiffel Tower is made of cheese. (reason: not in the passages)" in (
        eiffel.text or ""
    )
    assert list(faithfulness["tokyo"]) == []
    skipped = faithfulness["refusal"].find("skipped")
    assert skipped is not None
    assert skipped.get("message")
    gate = suites[2].find("testcase/failure")
    assert gate is not None
    assert gate.get("message") == (
        "faithfulness mean 0.75 (point estimate; 95% interval [0.5, 1]) is below 0.8"
    )


def test_junit_keeps_text_xml_cannot_hold_and_markup_as_data() -> None:
    record: JSONObject = {
        "id": "odd",
        "question": "What is </testcase><x>\x00?",
        "answer": "a",
        "metrics": {
            "faithfulness": {
                "outcome": "failed",
                "reason": "model wrote \x1b[31m",
                "error": {"stage": "verdict_judge", "attempts": 3, "last_raw_output": "<oops"},
            }
        },
    }
    text = ET.tostring(junit_tree([record]).getroot(), encoding="unicode")

    case = ET.fromstring(text).find("testsuite/testcase")
    assert case is not None
    assert case.get("name") == "odd: What is </testcase><x>\ufffd?"
    error = case.find("error")
    assert error is not None
    assert error.get("type") == "verdict_judge"
    assert "last raw output:\n<oops" in (error.text or "")


def test_markdown_summary_has_the_figures_the_gates_and_escaped_reasons(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    markdown = tmp_path / "summary.md"
    hostile = {**TOKYO, "id": "x|<b>", "answer": "Tokyo is the capital of <b>Japan</b>."}
    script_judges(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL, hostile])
    code = evaluate(
        fake,
        tmp_path,
        samples,
        "--metrics",
        "faithfulness",
        "--markdown",
        str(markdown),
        "--fail-under",
        "faithfulness=0.25",
    )

    assert code == 0
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("## ragjury evaluate — gates passed ✅\n")
    # scores 0.5 and 0: the bootstrap means are 0, 0.25 and 0.5; no sample passed
    assert "| faithfulness | 0.25 | [0, 0.5] | 0.25 | 0 | [0, 0] | 2 | 0 | 0 |" in text
    assert (
        "- ✅ `--fail-under faithfulness=0.25`: faithfulness mean 0.25 (point estimate; 95% "
        "interval [0, 0.5]) is at least 0.25" in text
    )
    assert "**Samples that did not pass** (2)" in text
    assert "- x\\|&lt;b&gt;: faithfulness (" in text
    assert "<b>" not in text


def _junit(path: Path) -> ET.Element:
    return ET.parse(path).getroot()


def _case(root: ET.Element, suite: str, sample: str) -> ET.Element:
    [found] = [
        case
        for case in root.findall(f"testsuite[@name='ragjury.{suite}']/testcase")
        if case.get("name", "").split(":")[0] == sample
    ]
    return found


def test_markdown_counts_samples_that_did_not_pass_not_their_metrics(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    markdown = tmp_path / "summary.md"

    # eiffel fails faithfulness (0.5) and keywords (it says cheese); refusal fails correctness
    code = run(
        fake,
        tmp_path,
        "--metrics",
        "faithfulness,correctness,keywords",
        "--markdown",
        str(markdown),
    )

    assert code == 0
    text = markdown.read_text(encoding="utf-8")
    assert "**Samples that did not pass** (2)" in text  # 3 metrics did not pass, in 2 samples
    listed = [line for line in text.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in listed] == ["- eiffel", "- refusal"]
    assert listed[0].startswith("- eiffel: faithfulness (1 of 2 statements")
    assert "; keywords (" in listed[0]


def test_junit_has_no_failure_when_every_gate_passes(fake: FakeOpenAI, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"

    code = run(fake, tmp_path, "--junit", str(junit), "--fail-under", "faithfulness=0.5")

    assert code == 0
    root = _junit(junit)
    assert (root.get("failures"), root.get("errors")) == ("0", "0")
    eiffel = _case(root, "faithfulness", "eiffel")  # 0.5, under its pass mark of 0.8
    assert [child.tag for child in eiffel] == ["system-out"]
    assert "the gate on faithfulness passed (--fail-under faithfulness=0.5)" in (
        eiffel.findtext("system-out") or ""
    )
    refusal = _case(root, "correctness", "refusal")  # 2 of 5, on a metric with no gate
    assert "correctness has no gate, and the gates decide" in (refusal.findtext("system-out") or "")


def test_junit_fails_the_samples_of_a_metric_whose_gate_failed(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"

    code = run(fake, tmp_path, "--junit", str(junit), "--fail-under", "faithfulness=0.8")

    assert code == EXIT_GATE
    root = _junit(junit)
    assert root.get("failures") == "2"  # the gate, and eiffel's faithfulness that explains it
    assert _case(root, "faithfulness", "eiffel").find("failure") is not None
    assert _case(root, "correctness", "refusal").find("failure") is None  # no gate on it
    assert _case(root, "gates", "--fail-under faithfulness=0.8").find("failure") is not None


def test_junit_without_gates_fails_each_sample_under_its_pass_mark(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"

    assert run(fake, tmp_path, "--junit", str(junit), "--correctness-threshold", "2") == 0

    root = _junit(junit)
    assert root.get("failures") == "1"  # eiffel's faithfulness; refusal's 2 meets the mark
    assert _case(root, "faithfulness", "eiffel").find("failure") is not None
    assert list(_case(root, "correctness", "refusal")) == []


def test_junit_shows_failed_judgements_as_errors_unless_max_failed_allows_them(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("correctness_judge", chat("this is not JSON"))
    samples = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    junit = ("--junit", str(tmp_path / "j.xml"))
    flags = ("--metrics", "faithfulness,correctness", "--max-retries", "0", *junit)

    assert evaluate(fake, tmp_path, samples, *flags, "--max-failed", "3") == 0
    allowed = _junit(tmp_path / "j.xml")
    assert allowed.get("errors") == "0"
    assert "allowed by --max-failed 3" in (
        _case(allowed, "correctness", "tokyo").findtext("system-out") or ""
    )
    assert evaluate(fake, tmp_path, samples, *flags, "--max-failed", "2") == EXIT_MAX_FAILED
    assert _junit(tmp_path / "j.xml").get("errors") == "3"
    assert evaluate(fake, tmp_path, samples, *flags) == 0
    assert _junit(tmp_path / "j.xml").get("errors") == "3"  # no rule allows them
    only = ("--metrics", "correctness", "--max-retries", "0", *junit, "--max-failed", "3")
    assert evaluate(fake, tmp_path, samples, *only) == 4  # nothing judged at all
    assert _junit(tmp_path / "j.xml").get("errors") == "3"
