"""The README documents what the code does: its flags exist and its example record is real."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragjury._json import json_object
from ragjury.cli import build_parser
from ragjury.output import pair_record
from ragjury.schemas import AnswerCheck, CritiqueResult, PairJudged, QAPair

from conftest import script_happy_path, write_qa_document
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _parsers() -> list[argparse.ArgumentParser]:
    parser = build_parser()
    # argparse has no public way to reach a sub-parser; its _actions list is the usual route.
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, argparse.ArgumentParser] = sub.choices
    nested = [
        choice
        for command in commands.values()
        for action in command._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action.choices.values()
    ]
    return [parser, *commands.values(), *nested]


def _commands_help() -> str:
    return "\n".join(p.format_help() for p in _parsers())


def _flags() -> set[str]:
    """Every flag a command takes (not merely named in some help text)."""
    return {flag for p in _parsers() for a in p._actions for flag in a.option_strings}


def test_every_flag_the_help_mentions_exists() -> None:
    mentioned = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*[a-z])", _commands_help()))

    assert sorted(mentioned - _flags()) == []


def test_every_flag_the_readme_mentions_exists() -> None:
    documented = set(re.findall(r"`(--[a-z][a-z-]+)", README))
    flags = _flags()
    missing = sorted(flag for flag in documented if flag not in flags)
    assert "--verdict-batch" in documented
    assert "--questions-per-chunk" in documented
    assert missing == []


def test_the_readme_example_record_has_the_fields_ragjury_writes() -> None:
    example = json.loads(re.search(r"```json\n(\{.*?\})\n```", README, re.DOTALL).group(1))  # type: ignore[union-attr]  # the README has one
    pair = QAPair(id="x", question="q", answer="a", context="c", source="s", chunk_id="s::0")
    critique = CritiqueResult(rating=5, rationale="r")
    written = pair_record(
        PairJudged(
            pair=pair,
            outcome="kept",
            critiques={
                "groundedness": critique,
                "relevance": critique,
                "standalone": critique,
                "answerability": critique,
            },
            answer_check=AnswerCheck(answer="a", answerable=True),  # on by default
        )
    )
    assert list(example) == list(written)
    assert set(example["critiques"]) == set(json_object(written["critiques"]))
    assert list(example["answer_check"]) == list(json_object(written["answer_check"]))


def test_readme_first_screen_has_the_install_and_test_commands() -> None:
    first_screen = "\n".join(README.splitlines()[:30])
    assert (
        "pip install '.[local]' && ragjury generate examples/fastapi-docs --out dataset.jsonl"
        in first_screen
    )
    assert "pip install -e '.[dev]' && python -m pytest -q" in first_screen
    assert (
        "python -m pytest -q" in (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    )


PYTEST_SUITE = "# test_rag.py"
"""The first line of the README's example test file: a pytest session runs that one
(``tests/test_pytest_plugin.py``), not python."""
PYTHON_BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    if not block.startswith(PYTEST_SUITE)
]
README_ENDPOINT = "http://127.0.0.1:8000/v1"
# What each README Python example prints against the scripted server, found by a line of
# its code; an example with no entry here fails, so every example is run and checked.
EXPECTED = {
    "jury.evaluate_one(": [
        "True",
        "True The Eiffel Tower is in Paris. The Eiffel Tower is in Paris",
        "sample-1 True every requested metric passed",
    ],
    "jury.submit_documents(": [
        "kept What port does uvicorn use by default?",
        "sample-1 True every requested metric passed",
    ],
    "tg.start(jury.serve)": ["sample-1 True"],
}


def test_the_readme_has_the_python_examples_the_tests_expect() -> None:
    matched = [[m for m in EXPECTED if m in code] for code in PYTHON_BLOCKS]
    assert matched == [[m] for m in EXPECTED]


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_every_readme_python_example_runs(fake: FakeOpenAI, tmp_path: Path, index: int) -> None:
    script_judges(fake)
    script_happy_path(fake)
    write_qa_document(
        tmp_path / "docs", "ports.md", [("What port does uvicorn use by default?", "8000")]
    )
    code = PYTHON_BLOCKS[index]
    assert README_ENDPOINT in code
    program = tmp_path / "example.py"
    program.write_text(code.replace(README_ENDPOINT, fake.base_url), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }

    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    [marker] = [m for m in EXPECTED if m in code]
    printed = done.stdout.splitlines()
    assert [line for line in EXPECTED[marker] if line not in printed] == [], done.stdout


def test_the_readme_names_only_files_the_repository_has() -> None:
    documents = set(re.findall(r"`([A-Z]+\.md)`", README))
    assert sorted(d for d in documents if not (ROOT / d).exists()) == []
    shipped = README.split("Examples on the data this repository ships with:")[1].split("```")[1]
    paths = [
        line.split()[2] for line in shipped.splitlines() if line.startswith("ragjury generate")
    ]
    assert paths
    assert [p for p in paths if not (ROOT / p).exists()] == []
