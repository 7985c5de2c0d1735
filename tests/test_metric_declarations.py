"""Every metric is one declaration, and everything that names metrics reads it.

The table-driven test runs one evaluate with every built-in metric against the scripted
server and checks that each declared metric reaches `ragjury metrics`, the dry-run estimate,
the summary, the report and the gates; the source test fails when a consumer of the
declarations names a metric by hand again.
"""

from __future__ import annotations

import ast
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import ragjury
from ragjury.cli import main
from ragjury.metrics import builtin_metrics, registry
from ragjury.report.html import unpack_json

from evalcli import EIFFEL, REFUSAL, TOKYO, evaluate, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, chat_json

BUILTIN = [m.name for m in builtin_metrics()]
LLM_METRICS = [m.name for m in builtin_metrics() if m.llm]
PACKAGE = Path(ragjury.__file__).parent

# What reads the declarations and must keep no list of metrics of its own (the agents'
# modules, where the declarations live, and the message schemas are not consumers).
CONSUMERS = [
    "cli.py",
    "estimate.py",
    "jury.py",
    "runner/submit.py",
    "runner/runner.py",
    "runner/workers.py",
    "results.py",
    "testing.py",
    "config.py",
    "output.py",
    "evaluation/summary.py",
    "pipelines/evaluation.py",
    "report/gates.py",
    "report/compare.py",
    "report/html.py",
    "report/load.py",
    "report/markdown.py",
    "report/junit.py",
    "report/ci.py",
    "report/history.py",
    "commands/evaluate.py",
    "commands/queue.py",
    "commands/_display.py",
    "commands/_run.py",
    "commands/report.py",
    "commands/metrics.py",
]
SAMPLE = {
    **EIFFEL,
    "reference_context_ids": ["doc-1"],
    "context_ids": ["doc-1"],
    "answer_logprobs": [-0.1, -0.2, -0.05],
}


def _strings(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    }


@pytest.mark.parametrize("module", CONSUMERS)
def test_no_consumer_of_the_declarations_names_a_metric_by_hand(module: str) -> None:
    named = sorted(_strings(PACKAGE / module) & set(BUILTIN))

    assert named == [], f"{module} names {named}: read the metric's declaration instead"


def test_every_builtin_metric_is_declared_once_with_what_the_issue_asks() -> None:
    names = [m.name for m in builtin_metrics()]
    assert len(names) == len(set(names))
    for metric in builtin_metrics():
        assert metric.description, metric.name
        assert metric.inputs, metric.name
        assert metric.agents, metric.name
        assert metric.rule(), metric.name
        if metric.llm:
            assert metric.estimate is not None, f"{metric.name} calls an LLM: estimate it"
            assert metric.calls != "0", metric.name
        for prompt in metric.prompts:
            assert (PACKAGE / "prompts" / "templates" / f"{prompt}.j2").exists()


def _script_everything(fake: FakeOpenAI) -> None:
    script_judges(fake)
    fake.route(
        "answer_completeness_judge",
        chat_json(
            {
                "parts": [
                    {"part": "where", "covered": True, "reason": "it says Paris"},
                    {"part": "material", "covered": False, "reason": "cheese is not iron"},
                ]
            }
        ),
    )


def test_metrics_lists_every_metric_with_scale_rule_fields_and_calls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["metrics", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}

    assert list(listed) == BUILTIN
    relevance = listed["answer_relevance"]
    assert relevance["scale"] == {
        "kind": "rating",
        "low": 1.0,
        "high": 5.0,
        "higher_is_better": True,
    }
    assert relevance["pass_rule"] == "score >= 4"
    assert relevance["inputs"] == ["question", "answer"]
    assert relevance["calls_per_sample"] == "1"
    assert listed["keywords"]["llm"] is False

    assert main(["metrics"]) == 0
    table = capsys.readouterr().out
    for name in BUILTIN:
        assert name in table


def test_every_declared_metric_reaches_the_estimate_summary_report_and_gates(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _script_everything(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", [SAMPLE, TOKYO, REFUSAL])
    every = ",".join(BUILTIN)

    dry = tmp_path / "estimate.json"
    assert (
        evaluate(fake, tmp_path, samples, "--metrics", every, "--dry-run", "--summary", str(dry))
        == 0
    )
    assert fake.requests == []
    estimate = json.loads(dry.read_text())
    for name in LLM_METRICS:
        agents = registry()[name].agents
        assert set(agents) & set(estimate["by_stage"]), f"{name} is missing from the estimate"

    gates = [f"{m.name}={m.scale.example()}" for m in builtin_metrics() if m.scale.higher_is_better]
    junit = tmp_path / "junit.xml"
    flags = ("--fail-under", ",".join(gates), "--junit", str(junit))
    code = evaluate(fake, tmp_path, samples, "--metrics", every, *flags)
    assert code in (0, 5)  # some bars fail on these answers; none is refused (that is exit 2)
    [suite] = [s for s in ET.parse(junit).getroot() if s.get("name") == "ragjury.gates"]
    judged = {case.get("name") for case in suite}
    assert judged == {f"--fail-under {gate}" for gate in gates}  # every bar was checked
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["metrics"]) == BUILTIN
    assert set(summary["declarations"]) == set(BUILTIN)
    assert set(summary["prompt_versions"]) == set(registry().prompt_names(BUILTIN))
    for name in BUILTIN:
        assert summary["metrics"][name]["scored"] + summary["metrics"][name]["not_applicable"] >= 1

    report = tmp_path / "report.html"
    assert (
        main(
            [
                "report",
                str(tmp_path / "results.jsonl"),
                "--summary",
                str(tmp_path / "summary.json"),
                "--out",
                str(report),
            ]
        )
        == 0
    )
    html = report.read_text()
    for name in BUILTIN:
        assert f">{name}<" in html or name in _report_data(html)["metrics"]


def _report_data(html: str) -> dict[str, Any]:
    start = html.index('id="ragjury-data"')
    body = html[html.index(">", start) + 1 : html.index("</script>", start)]
    data: dict[str, Any] = unpack_json(body.strip())
    return data


def test_a_gate_on_a_rating_metric_takes_its_own_scale(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL, TOKYO, REFUSAL])
    flags = ("--metrics", "answer_relevance")

    # the refusal scores 1, the others 5: mean 3.67
    assert evaluate(fake, tmp_path, samples, *flags, "--fail-under", "answer_relevance=3") == 0
    assert evaluate(fake, tmp_path, samples, *flags, "--fail-under", "answer_relevance=4") == 5
    assert (
        "answer_relevance mean 3.6667 (point estimate; 95% interval [1, 5]) is below 4"
        in capsys.readouterr().err
    )

    requests = len(fake.requests)
    assert evaluate(fake, tmp_path, samples, *flags, "--fail-under", "answer_relevance=0.8") == 2
    err = capsys.readouterr().err
    assert "answer_relevance scores run 1 to 5, so this bar can never fail" in err
    assert "answer_relevance=4" in err
    assert len(fake.requests) == requests  # refused before any LLM call


def test_a_gate_on_a_metric_not_judged_is_refused_before_any_call(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL])

    code = evaluate(
        fake, tmp_path, samples, "--metrics", "faithfulness", "--fail-under", "correctness=4"
    )

    assert code == 2
    assert "correctness is not judged in this run" in capsys.readouterr().err
    assert fake.requests == []


def test_a_pass_mark_off_its_scale_is_refused_with_the_scale(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL])

    code = evaluate(
        fake, tmp_path, samples, "--metrics", "correctness", "--threshold", "correctness=0.8"
    )

    assert code == 2
    assert "correctness scores run 1 to 5" in capsys.readouterr().err
    assert fake.requests == []


def test_the_histogram_of_a_rating_metric_is_drawn_on_its_scale(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL, TOKYO, REFUSAL])
    assert evaluate(fake, tmp_path, samples, "--metrics", "answer_relevance") == 0
    report = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "results.jsonl"), "--out", str(report)]) == 0

    html = report.read_text()
    assert "scores 1 to 5" in html
    assert "0 to 0.1" not in html  # not binned on 0-1


def test_a_sample_whose_judgement_failed_is_not_passing(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    fake.route("correctness_judge", chat_json({"nonsense": True}))
    samples = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])

    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness,correctness", "--max-retries", "0")

    record = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    assert record["metrics"]["correctness"]["outcome"] == "failed"
    assert record["passing"] is not True


def test_the_readme_metrics_table_is_what_ragjury_metrics_prints() -> None:
    from ragjury.commands.metrics import metrics_markdown

    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")

    assert metrics_markdown(list(builtin_metrics())) in readme
