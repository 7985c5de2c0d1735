"""``compare`` shows the answers of the biggest regressions side by side, baseline first, on
the terminal, in the page (``--out``) and in Markdown for a pull request (``--markdown``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragjury.cli import main
from ragjury.report.markdown import inline

from reportruns import write_jsonl


def judged(sample: str, answer: str, score: float, reason: str) -> dict[str, object]:
    entry = {"outcome": "scored", "score": score, "passing": score >= 0.8, "reason": reason}
    return {
        "id": sample,
        "question": f"Where is {sample}?",
        "answer": answer,
        "metrics": {"faithfulness": entry},
    }


CITIES = ["paris", "rome", "oslo", "lima"]


def _files(tmp_path: Path) -> tuple[str, str]:
    """Every city regressed: the baseline's answer named it, the candidate's names Lyon
    (lima the most: 1 -> 0.1)."""
    base = [judged(c, f"It is {c.title()}.", 1.0, "all supported") for c in CITIES]
    cand = [
        judged(c, "It is <b>Lyon</b> | maybe.", 0.7 - n / 5, "not in the passages")
        for n, c in enumerate(CITIES)
    ]
    return str(write_jsonl(tmp_path / "base.jsonl", base)), str(
        write_jsonl(tmp_path / "cand.jsonl", cand)
    )


def test_the_terminal_lists_both_answers_of_each_regression_baseline_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = _files(tmp_path)

    assert main(["compare", base, cand, "--limit", "2"]) == 0

    out = capsys.readouterr().out
    table = out.split("Biggest faithfulness regressions (2 of 4; --all lists every one)")[1]
    [header] = [line for line in table.splitlines() if "sample" in line]
    assert header.index("baseline's answer") < header.index("candidate's answer")
    rows = [line for line in table.splitlines() if line.startswith("│ ")]
    assert rows[0].split("│")[1].strip() == "lima"
    assert rows[0].split("│")[4].strip() == "It is Lima."
    assert rows[0].split("│")[5].strip() == "It is <b>Lyon</b> | maybe."
    assert sum(row.split("│")[1].strip() in CITIES for row in rows) == 2


def test_the_page_puts_both_answers_beside_the_scores(tmp_path: Path) -> None:
    base, cand = _files(tmp_path)
    out = tmp_path / "compare.html"

    assert main(["compare", base, cand, "--out", str(out), "--all"]) == 0

    html = out.read_text(encoding="utf-8")
    assert "<h2>Biggest faithfulness regressions</h2>" in html  # all four listed
    head = html.split('<table class="regressions">')[1].split("</thead>")[0]
    assert head.index("baseline's answer") < head.index("candidate's answer")
    body = html.split('<table class="regressions">')[1].split("<tbody>")[1]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", body.split("</tr>")[0])
    assert cells[:4] == ["lima", "Where is lima?", "1", "0.1"]
    assert cells[4:6] == ["It is Lima.", "It is &lt;b&gt;Lyon&lt;/b&gt; | maybe."]


def test_the_markdown_for_a_pull_request_has_the_figures_gates_and_answers(
    tmp_path: Path,
) -> None:
    base, cand = _files(tmp_path)
    md = tmp_path / "compare.md"
    gate = ["--fail-on-regression", "faithfulness=0.1"]

    assert main(["compare", base, cand, "--markdown", str(md), "--limit", "3", *gate]) == 5

    text = md.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == (
        f"## ragjury compare: {inline(base, 80)} (baseline) → {inline(cand, 80)} (candidate)"
        " — gates failed ❌"
    )
    [row] = [line for line in lines if line.startswith("| faithfulness |")]
    assert row.split(" | ")[1:4] == ["1", "0.4", "-0.6"]
    assert "regression ❌" in row
    assert "- ❌ `--fail-on-regression faithfulness=0.1`: faithfulness mean 1 -> 0.4" in text
    assert "### Biggest faithfulness regressions (3 of 4; --all lists every one)" in text
    table = text.split("### Biggest faithfulness regressions")[1].splitlines()
    assert table[2] == (
        "| sample | baseline | candidate | baseline's answer | candidate's answer "
        "| candidate's reason |"
    )
    # the model's text escaped: no HTML, no table break
    assert table[4] == (
        "| lima | 1 | 0.1 | It is Lima. | It is &lt;b&gt;Lyon&lt;/b&gt; \\| maybe. "
        "| not in the passages |"
    )
    assert len([line for line in table if line.startswith("| ") and "It is" in line]) == 3
