"""The README documents what the code does: its flags exist and its example record is real."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ragjury.cli import build_parser
from ragjury.output import pair_record
from ragjury.schemas import CritiqueResult, PairJudged, QAPair

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _generate_help() -> str:
    parser = build_parser()
    # argparse has no public way to reach a sub-parser; its _actions list is the usual route.
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    generate: argparse.ArgumentParser = sub.choices["generate"]
    return generate.format_help()


def test_every_flag_the_readme_mentions_exists() -> None:
    documented = set(re.findall(r"`(--[a-z][a-z-]+)", README))
    help_text = _generate_help()
    missing = sorted(flag for flag in documented if flag not in help_text)
    assert documented, "the README should document the generate flags"
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
    assert "pip install . && OPENAI_API_KEY=sk-... ragjury generate" in first_screen
    assert "pip install -e '.[dev]' && python -m pytest -q" in first_screen
    assert (
        "python -m pytest -q" in (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    )
