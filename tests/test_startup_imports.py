"""What `ragjury --version` and `--help` import: not the LLM client, the stores' drivers, the
report code or PDF reading, which a command that runs nothing does not need. (A guard on the
import graph, not a timing: the figures are benchmarks' business.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "openai",
    "instructor",
    "asyncpg",
    "pypdf",
    "pyarrow",
    "ragjury.llm.client",
    "ragjury.report.html",
)

PROBE = """
import sys
from ragjury.cli import main
try:
    main({args!r})
except SystemExit:
    pass
print("heavy:" + ",".join(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["evaluate", "--help"]])
def test_a_command_that_runs_nothing_imports_nothing_heavy(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert done.stdout.strip().splitlines()[-1] == "heavy:"
