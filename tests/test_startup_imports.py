"""What `ragjury --version` and `--help` import: not the LLM client, the settings, logging, the
stores' drivers, the report code or PDF reading, which a command that runs nothing does not
need; `--version` and `--help` not even pydantic or the metric declarations; and a command's
`--help` builds no validator of the pydantic models it imports. (A guard on the import graph
and on import-time work, not a timing: the figures are `benchmarks/startup.py`'s business.)"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragjury.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
# Loaded by no --version or --help: what a command needs only when it runs.
NEVER = (
    "openai",
    "instructor",
    "httpx2",
    "aiohttp",  # the LLM client's transport (openai imports it when installed)
    "anyio",
    "structlog",
    "structlog.processors",
    "rich",
    "pydantic_settings",
    "jinja2",
    "rapidfuzz",
    "sqlite3",
    "aiosqlite",
    "asyncpg",
    "pypdf",
    "pyarrow",
    "ragjury.config",
    "ragjury.logs",
    # the store's interfaces: the agents walked for the metric declarations need them for
    # types only; and TOML, which only a judge file or the bundled sets need
    "ragjury.store.base",
    "ragjury.store.status_report",
    "ragjury.llm.batch_types",
    "ragjury.llm.usage",
    "tomllib",
    "ragjury.llm.client",
    "ragjury.store.sqlite",
    "ragjury.evaluation.targets",
    "ragjury.ingest.loaders",
    "ragjury.pipelines",
    "ragjury.runtime",
    "ragjury.jobs",
    "ragjury.commands._run",
    "ragjury.commands.evaluate",
    "ragjury.report.html",
)
# --version prints a constant and --help names the built-in metrics from a list of its own
# (tests/test_metric_declarations.py checks it): neither reads a metric declaration, so no
# pydantic model either. A command's own --help does (its flags name each metric).
NOT_FOR_TOP_LEVEL = (*NEVER, "pydantic", "ragjury.metrics", "ragjury.schemas", "ragjury.agents")

PROBE = """
import sys
from ragjury.cli import main
try:
    main({args!r})
except SystemExit:
    pass
print("loaded:" + ",".join(sorted(m for m in {watched!r} if m in sys.modules)))
"""
# The pydantic models of ragjury's modules whose validators were built in the process.
BUILT = """
import sys
import pydantic
from ragjury.cli import main
try:
    main({args!r})
except SystemExit:
    pass
built = sorted(
    f"{{name}}.{{key}}"
    for name, module in list(sys.modules.items())
    if name.startswith("ragjury")
    for key, value in vars(module).items()
    if isinstance(value, type)
    and issubclass(value, pydantic.BaseModel)
    and value.__module__ == name
    and value.__pydantic_complete__
)
print("built:" + ",".join(built))
"""


def _probe(script: str, label: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = done.stdout.strip().splitlines()[-1].removeprefix(label)
    return shown.split(",") if shown else []


def _loaded(args: list[str], watched: tuple[str, ...]) -> list[str]:
    """The ``watched`` modules in ``sys.modules`` after ``ragjury ARGS``, in a fresh process."""
    return _probe(PROBE.format(args=args, watched=watched), "loaded:")


def _built(args: list[str]) -> list[str]:
    """ragjury's pydantic models whose validators exist after ``ragjury ARGS``, in a fresh
    process (a model builds its validator at import unless it defers the build)."""
    return _probe(BUILT.format(args=args), "built:")


def _commands() -> list[str]:
    # argparse has no public way to reach a sub-parser; its _actions list is the usual route.
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


@pytest.mark.parametrize("args", [["--version"], ["--help"]], ids=" ".join)
def test_version_and_help_import_neither_pydantic_nor_anything_a_command_runs(
    args: list[str],
) -> None:
    assert _loaded(args, NOT_FOR_TOP_LEVEL) == []


@pytest.mark.parametrize(
    "args", [["--help"], *([name, "--help"] for name in _commands())], ids=" ".join
)
def test_help_imports_nothing_a_command_needs_only_when_it_runs(args: list[str]) -> None:
    assert _loaded(args, NEVER) == []


def test_evaluate_help_builds_no_validator_of_the_models_it_imports() -> None:
    """The metric declarations bring every schema module in; building their validators (the
    event union, the records, the LLM responses) was about a fifth of --help's time."""
    assert _built(["evaluate", "--help"]) == []


def test_the_model_probe_sees_a_built_validator() -> None:
    """The guard can fail: a command that validates its settings builds their models."""
    assert "ragjury.config.EvaluationOptions" in _built(["metrics", "--json"])


def test_the_probe_sees_what_a_running_command_loads() -> None:
    """The guard can fail: ``ragjury metrics`` runs, so it reads settings and logs."""
    loaded = _loaded(["metrics", "--json"], NEVER)

    assert {"ragjury.config", "ragjury.logs", "structlog", "pydantic_settings"} <= set(loaded)


@pytest.mark.parametrize("command", [None, *_commands()])
def test_the_lazy_parser_shows_the_help_the_whole_parser_has(
    command: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = build_parser()
    [sub] = [a for a in whole._actions if isinstance(a, argparse._SubParsersAction)]
    expected = (whole if command is None else sub.choices[command]).format_help()

    with pytest.raises(SystemExit):
        main(["--help"] if command is None else [command, "--help"])

    assert capsys.readouterr().out == expected


# Loaded by an evaluate only for the option that needs it: not on the way to its first request.
EVALUATE_ONLY_WHEN_ASKED = (
    "xml.etree.ElementTree",  # --junit
    "ragjury.report.junit",
    "ragjury.calibration.correction",  # --correct-with
    "ragjury.calibration.review",
    "ragjury.calibration.labels",
)


def test_an_evaluate_loads_junit_and_calibration_only_when_asked(tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"id": "a", "question": "q?", "answer": "Paris.", "contexts": ["c"]}\n')
    run = ["evaluate", str(samples), "--metrics", "keywords", "--db", str(tmp_path / "r.db")]
    out = ["--out", str(tmp_path / "r.jsonl")]

    assert _loaded([*run, *out], EVALUATE_ONLY_WHEN_ASKED) == []
    # the guard can fail: --junit loads the XML writer
    junit = ["--junit", str(tmp_path / "j.xml")]
    assert "ragjury.report.junit" in _loaded([*run, *out, *junit], EVALUATE_ONLY_WHEN_ASKED)


# Loaded only by a run that may call a model: a keywords-only evaluate needs no LLM client.
LLM_CLIENT = ("openai", "instructor", "llama_cpp", "wordllama", "ragjury.llm._structured")


def test_a_keywords_only_evaluate_loads_no_llm_client(tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text(
        '{"id": "a", "question": "q?", "answer": "Paris.", "must_contain": ["Paris"]}\n'
    )
    run = ["evaluate", str(samples), "--metrics", "keywords", "--db", str(tmp_path / "r.db")]

    assert _loaded([*run, "--out", str(tmp_path / "r.jsonl")], LLM_CLIENT) == []
    assert json.loads((tmp_path / "r.jsonl").read_text())["passing"] is True  # it ran
    # (that the probe sees these modules when a run loads them: test_gc_pauses.py)
