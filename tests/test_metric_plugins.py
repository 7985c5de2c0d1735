"""Metric plugins: a package that names metrics under the entry-point group
``ragjury.metrics`` adds them to every command, as if they were built in.

The plugin is installed the way a path entry installs a package (its code and its
``.dist-info`` with ``entry_points.txt`` on ``PYTHONPATH``), and ragjury runs in processes of
its own, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).parent / "data" / "metric_plugin"


def ragjury(*args: str, cwd: Path, plugin: Path = PLUGIN) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd),
        "PYTHONPATH": os.pathsep.join([str(plugin), str(ROOT)]),
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_installed_plugin_metric_is_listed_with_its_declaration(tmp_path: Path) -> None:
    done = ragjury("metrics", "--json", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    listed = {m["name"]: m for m in json.loads(done.stdout)}
    brevity = listed["brevity"]
    assert brevity["origin"] == "plugin brevity"
    assert brevity["pass_rule"] == "score <= 60"
    assert brevity["scale"]["higher_is_better"] is False
    assert brevity["llm"] is False
    assert "faithfulness" in listed


def test_a_plugin_metric_is_judged_end_to_end_and_gated(tmp_path: Path) -> None:
    long_answer = " ".join(["word"] * 80)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        json.dumps({"id": "short", "question": "q", "answer": "Paris."})
        + "\n"
        + json.dumps({"id": "long", "question": "q", "answer": long_answer})
        + "\n",
        encoding="utf-8",
    )
    out = ["--out", "results.jsonl", "--summary", "summary.json", "--db", "run.db"]

    done = ragjury("evaluate", "samples.jsonl", "--metrics", "brevity", *out, cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    results = {
        r["id"]: r["metrics"]["brevity"]
        for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())
    }
    assert (results["short"]["score"], results["short"]["passing"]) == (1, True)
    assert (results["long"]["score"], results["long"]["passing"]) == (80, False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metrics"]["brevity"]["pass_rate"] == 0.5

    gated = ragjury(
        "evaluate",
        "samples.jsonl",
        "--metrics",
        "brevity",
        "--fail-under",
        "pass_rate:brevity=0.9",
        *out,
        cwd=tmp_path,
    )
    assert gated.returncode == 5
    assert (
        "brevity pass rate 0.5 (point estimate; 95% interval [0, 1]) is below 0.9" in gated.stderr
    )
    refused = ragjury(
        "evaluate",
        "samples.jsonl",
        "--metrics",
        "brevity",
        "--fail-under",
        "brevity=50",
        *out,
        cwd=tmp_path,
    )
    assert refused.returncode == 2
    assert "lower brevity is better" in refused.stderr


def test_a_plugin_that_fails_to_load_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    info = broken / "ragjury_broken-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ragjury-broken\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[ragjury.metrics]\nbroken = ragjury_missing:METRIC\n")

    listed = ragjury("metrics", cwd=tmp_path, plugin=broken)

    assert listed.returncode == 2
    assert "metric plugin 'broken'" in listed.stderr
    assert "ragjury-broken" in listed.stderr
    assert "fix or uninstall" in listed.stderr


@pytest.mark.parametrize("command", [["--help"], ["evaluate", "--help"]])
def test_help_still_works_with_a_broken_plugin(tmp_path: Path, command: list[str]) -> None:
    broken = tmp_path / "broken"
    info = broken / "ragjury_broken-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ragjury-broken\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[ragjury.metrics]\nbroken = ragjury_missing:METRIC\n")

    assert ragjury(*command, cwd=tmp_path, plugin=broken).returncode == 0
