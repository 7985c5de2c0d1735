"""What a person sees on a terminal while `evaluate` runs: one "samples judged" bar that only
goes forward, from the intake to the end, and ends at the number of samples. Run under a
real pseudo-terminal, so that rich draws it as it does for a user."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from evalcli import keyword_samples

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``args`` with stdout and stderr on a fresh pseudo-terminal; its exit and what it
    drew, escape sequences removed."""
    main, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env
    )
    os.close(child)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child side is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    code = process.wait(timeout=300)
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


def test_evaluate_draws_one_bar_that_only_goes_forward_to_the_total(tmp_path: Path) -> None:
    n = 2600  # not a multiple of any chunk or page size
    samples = keyword_samples(tmp_path / "samples.jsonl", n)
    code, drawn = _on_a_terminal(
        [
            sys.executable,
            "-m",
            "ragjury",
            "evaluate",
            str(samples),
            "--metrics",
            "keywords",
            "--db",
            str(tmp_path / "run.db"),
            "--out",
            str(tmp_path / "out.jsonl"),
        ],
        tmp_path,
    )
    assert code == 0, drawn
    counts = [int(done) for done in re.findall(rf"samples judged\s.*?(\d+)/{n}\b", drawn)]
    assert counts, drawn
    assert counts == sorted(counts), f"the bar went back: {counts}"
    assert counts[-1] == n
    # one bar: every drawing of it has the same total, and no second bar starts from 0 after
    # the first was under way
    assert not re.search(rf"samples judged\s.*?\d+/(?!{n}\b)\d+", drawn)
    assert sum(1 for _ in (tmp_path / "out.jsonl").open(encoding="utf-8")) == n
