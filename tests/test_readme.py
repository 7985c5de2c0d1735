"""The README documents what the code does: its flags exist and its example record is real."""

from __future__ import annotations

import argparse
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ragjury.cli import build_parser
from ragjury.output import pair_record
from ragjury.schemas import CritiqueResult, PairJudged, QAPair

from conftest import make_settings
from evalfakes import script_judges
from fakeopenai import FakeOpenAI

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _commands_help() -> str:
    parser = build_parser()
    # argparse has no public way to reach a sub-parser; its _actions list is the usual route.
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands: dict[str, argparse.ArgumentParser] = sub.choices
    return "\n".join(command.format_help() for command in commands.values())


def test_every_flag_the_readme_mentions_exists() -> None:
    documented = set(re.findall(r"`(--[a-z][a-z-]+)", README))
    help_text = _commands_help()
    missing = sorted(flag for flag in documented if flag not in help_text)
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
            critiques={"groundedness": critique, "relevance": critique, "standalone": critique},
        )
    )
    assert set(example) == set(written)
    assert set(example["critiques"]) == set(written["critiques"])


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


@pytest.mark.anyio
async def test_the_readme_python_example_runs(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    code = re.search(r"```python\n(.*?)```", README, re.DOTALL).group(1)  # type: ignore[union-attr]  # the README has one
    real_endpoint = 'Settings(base_url="http://127.0.0.1:8000/v1", model="qwen2.5")'
    assert real_endpoint in code
    body = code.replace(real_endpoint, "SETTINGS")
    source = "async def example():\n" + textwrap.indent(body, "    ") + "    return result\n"
    namespace: dict[str, Any] = {"SETTINGS": make_settings(fake, tmp_path)}
    exec(compile(source, "README.md", "exec"), namespace)

    result = await namespace["example"]()

    assert result.passing is True
    assert result["faithfulness"].score == 1.0
    assert result["correctness"].score == 5
