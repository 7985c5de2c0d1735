"""README and ``--help`` say what the code does: agent names, prompt names, the metrics of
``evaluate``'s one-line help, the exit codes the gate flags promise, gate examples on their
metrics' scales, and the benchmark figures (written from ``benchmarks/results/*.json``)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ragjury.agents.custom_judge import load_judge
from ragjury.cli import build_parser
from ragjury.commands._run import EXIT_GATE, EXIT_MAX_FAILED, EXIT_NOTHING_JUDGED
from ragjury.metrics import builtin_metrics, registry
from ragjury.pipelines import all_roles, llm_roles
from ragjury.prompts import GENERATION_PROMPTS, builtin_names
from ragjury.report.gates import check_gates, parse_thresholds

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _subcommands() -> argparse._SubParsersAction[argparse.ArgumentParser]:
    # argparse has no public way to reach a sub-parser; its _actions list is the usual route.
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))


def _commands() -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = _subcommands().choices
    return found


def _one_line_help(command: str) -> str:
    [choice] = [c for c in _subcommands()._choices_actions if c.dest == command]
    return str(choice.help)


def _flag_help(command: str, flag: str) -> str:
    parser = _commands()[command]
    [action] = [a for a in parser._actions if flag in a.option_strings]
    return _flat(str(action.help))


def _names(text: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`", text)


def test_the_readme_names_every_agent_serve_agents_accepts() -> None:
    text = _flat(README).split("Agents: ", 1)[1].split(".", 1)[0]

    assert _names(text) == ["intake", *all_roles()]


def test_the_readme_names_the_agents_that_call_no_llm() -> None:
    text = _flat(README).split("The agents that call no LLM (", 1)[1].split(")", 1)[0]

    assert _names(text) == [role for role in all_roles() if role not in llm_roles()]


def _prompt_row(section: str) -> list[str]:
    part = README.split(f"## `ragjury {section}`", 1)[1].split("\n## ", 1)[0]
    [row] = [line for line in part.splitlines() if line.startswith("| `--prompt NAME=PATH`")]
    return _names(row.split("|")[3])


def test_the_readme_names_the_prompts_each_command_takes() -> None:
    judged = registry().prompt_names()

    assert _prompt_row("evaluate") == list(judged)
    assert _prompt_row("generate") == list(GENERATION_PROMPTS)
    help_text = _flag_help("evaluate", "--prompt")
    assert all(f"{name}," in help_text or f"{name} (" in help_text for name in builtin_names())


def test_evaluates_one_line_help_names_every_builtin_metric_and_where_plugins_are() -> None:
    """The line comes from a list of its own (reading the declarations would make --help
    import every schema): it must be the registry's built-in metrics, in their order."""
    names, plugins = _flat(_one_line_help("evaluate")).split(": ", 1)[1].split("; ", 1)

    assert names.split(", ") == [m.name for m in builtin_metrics()]
    assert "`ragjury metrics` lists all" in plugins


def test_the_gate_flags_help_names_the_exit_codes_the_gates_use() -> None:
    assert _flag_help("evaluate", "--fail-under").startswith(f"exit {EXIT_GATE} if")
    assert _flag_help("compare", "--fail-on-regression").startswith(f"exit {EXIT_GATE} if")
    max_failed = _flag_help("evaluate", "--max-failed")
    assert max_failed.startswith(f"exit {EXIT_MAX_FAILED} when more than N")
    assert f"exit {EXIT_NOTHING_JUDGED} when every judgement failed" in max_failed
    table = README.split("| code | means |", 1)[1].split("\n\n", 1)[0]
    assert f"| {EXIT_GATE} | a gate failed" in table
    assert f"| {EXIT_MAX_FAILED} | more judgements failed than `--max-failed N`" in table


def test_the_readmes_exit_code_table_has_every_code_ragjury_returns() -> None:
    from ragjury import cli
    from ragjury.commands import _run

    codes = {
        value
        for module in (cli, _run)
        for name, value in vars(module).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    table = README.split("| code | means |", 1)[1].split("\n\n", 1)[0]
    rows = [int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)]

    assert rows == sorted(codes)
    assert codes == {0, 1, 2, 3, 4, 5, 6, 7, 130}


def test_every_gate_in_the_readmes_examples_lies_on_its_metrics_scale() -> None:
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", README, re.DOTALL))
    specs = re.findall(r"--fail-under (\S+)", blocks)
    judge = load_judge(ROOT / "examples" / "judges" / "politeness.toml")

    assert len(specs) >= 2
    for spec in specs:
        check_gates(parse_thresholds(spec), registry([judge]))  # raises off the scale
    [row] = [line for line in README.splitlines() if line.startswith("| `--fail-under METRIC")]
    inline = re.findall(r"`((?:pass_rate:)?[a-z_]+=[0-9.]+)`", row)
    assert "answer_relevance=4" in inline
    for spec in inline:
        check_gates(parse_thresholds(spec), registry([judge]))


def _figures() -> object:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import readme_figures
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return readme_figures


def test_the_readmes_benchmark_figures_are_those_of_the_results_files() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "readme_figures.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert README.count("<!-- figures: ") == 5  # batch, peers, startup, bus, scaleout


def test_a_new_results_file_changes_the_readmes_figures(tmp_path: Path) -> None:
    figures = _figures()
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    scaleout = json.loads((results / "scaleout.json").read_text(encoding="utf-8"))
    scaleout["runs"][1]["steady_items_per_second"] = 123456.0
    (results / "scaleout.json").write_text(json.dumps(scaleout), encoding="utf-8")
    bus = json.loads((results / "bus.json").read_text(encoding="utf-8"))
    bus["paths"][-1]["microseconds_per_message"] = 777.0
    (results / "bus.json").write_text(json.dumps(bus), encoding="utf-8")
    startup = json.loads((results / "startup.json").read_text(encoding="utf-8"))
    [version] = [run for run in startup["runs"] if run["run"] == "ragjury --version"]
    version["median_seconds"] = 0.0123
    (results / "startup.json").write_text(json.dumps(startup), encoding="utf-8")
    batch = json.loads((results / "batch.json").read_text(encoding="utf-8"))
    batch["runs"][1]["http_requests"] = 4321
    (results / "batch.json").write_text(json.dumps(batch), encoding="utf-8")

    made = figures.rendered(README, results)  # type: ignore[attr-defined]  # a script, loaded by path

    assert made != README
    assert "| 2 processes, every agent | 123456 (" in made
    assert "costs 777 µs on the durable bus on SQLite with four" in _flat(made)
    assert "| `ragjury --version` | 0.012 s (" in made
    assert "| `--batch` | 4,321 | " in made


def test_every_test_the_readme_names_exists() -> None:
    """'What ragjury guarantees' (and the rest) cites tests as proof: each file, and each
    ``file::test`` function, is there."""
    named = sorted(set(re.findall(r"tests/[\w/]+\.py(?:::\w+)?", README)))
    assert len(named) >= 10
    missing = []
    for reference in named:
        path, _, name = reference.partition("::")
        file = ROOT / path
        if not file.exists() or (name and f"def {name}(" not in file.read_text("utf-8")):
            missing.append(reference)
    assert missing == []
