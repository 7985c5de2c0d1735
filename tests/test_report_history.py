"""`ragjury report --db FILE --history`: one page of every run in a database (a job run
again is a second run), each metric's trend over the runs as inline SVG, links to each run's
report, the runs whose gates failed; checked in the file and in a real headless Chromium."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ragjury.cli import main

from fakeopenai import FakeOpenAI
from headless import chromium, open_page
from reportruns import SAMPLES, cli, evaluation_run, write_jsonl

if TYPE_CHECKING:
    from playwright.sync_api import Browser

DOCS = Path(__file__).resolve().parents[1] / "docs"


def four_runs(fake: FakeOpenAI, folder: Path) -> Path:
    """Four evaluation runs of three jobs in one database, oldest first: the report tests'
    five samples (faithfulness mean 0.625); the same with Eiffel's answer fixed (0.75) under
    a gate of 0.9 that fails; the Eiffel sample only (1.0); and the second job run again
    (it resumes that job, nothing left to judge, and its gate fails again)."""
    evaluation_run(fake, folder)
    fixed = [dict(s) for s in SAMPLES]
    fixed[0]["answer"] = "The Eiffel Tower is in Paris."
    write_jsonl(folder / "fixed.jsonl", fixed)
    write_jsonl(folder / "one.jsonl", fixed[:1])
    common = ["--db", "ragjury.db", "--base-url", fake.base_url, "--api-key", "k"]
    common += ["--model", "fake-model", "--max-retries", "0"]
    common += ["--metrics", "faithfulness,correctness"]
    gate = ["--fail-under", "faithfulness=0.9"]
    assert cli(["evaluate", "fixed.jsonl", "--out", "r2.jsonl", *common, *gate], folder) == 5
    assert cli(["evaluate", "one.jsonl", "--out", "r3.jsonl", *common], folder) == 0
    assert cli(["evaluate", "fixed.jsonl", "--out", "r4.jsonl", *common, *gate], folder) == 5
    return folder


@pytest.fixture
def history(fake: FakeOpenAI, tmp_path: Path) -> Path:
    run = four_runs(fake, tmp_path / "run")
    flags = ["--db", "ragjury.db", "--history", "--out", "history.html"]
    assert cli(["report", *flags], run) == 0
    return run / "history.html"


def _points(html: str, metric: str) -> list[tuple[str, str]]:
    card = html.split(f'<article class="card trend" data-metric="{metric}">')[1]
    card = card.split("</article>")[0]
    found = r'<circle class="point (ok|bad)"[^>]*><title>run \w+ of job \w+: mean ([\d.]+)'
    return re.findall(found, card)


def test_the_history_has_a_trend_per_metric_and_marks_the_runs_whose_gates_failed(
    history: Path,
) -> None:
    html = history.read_text(encoding="utf-8")

    assert _points(html, "faithfulness") == [
        ("ok", "0.625"),
        ("bad", "0.75"),
        ("ok", "1"),
        ("bad", "0.75"),  # the second job's second run
    ]
    assert [v for _, v in _points(html, "correctness")] == ["4.25", "4.25", "5", "4.25"]
    assert html.count('<polyline class="line"') == 2
    rows = re.findall(r'<tr class="(gates-failed|)" data-job="(\w+)" data-run="(\w+)">', html)
    assert [cls for cls, _, _ in rows] == ["", "gates-failed", "", "gates-failed"]
    jobs = [job for _, job, _ in rows]
    assert jobs[1] == jobs[3]  # one job, run twice: two rows
    assert len(set(jobs)) == 3
    assert len({run for _, _, run in rows}) == 4
    assert "4 run(s) of 3 job(s)" in html
    row = f'<tr class="gates-failed" data-job="{jobs[3]}" data-run="{rows[3][2]}">'
    last = html.split(row)[1].split("</tr>")[0]
    assert "resumed" in last
    failed = html.split('<tr class="gates-failed"')[1].split("</tr>")[0]
    assert "--fail-under faithfulness=0.9" in failed
    assert "faithfulness mean 0.75 (point estimate; 95% interval [0.25, 1]) is below 0.9" in failed
    for _, job, run in rows:  # each run's own report, linked and written beside the page
        assert f'href="history-runs/{run}.html"' in html
        page = (history.parent / "history-runs" / f"{run}.html").read_text()
        assert f"job {job} run {run}" in page


def test_history_takes_the_database_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "h.html")

    assert main(["report", "--history", "--out", out]) == 2
    assert "--history reads every run of --db" in capsys.readouterr().err
    assert (
        main(["report", "--db", str(tmp_path / "x.db"), "--job", "a", "--history", "--out", out])
        == 2
    )
    assert "drop --job" in capsys.readouterr().err
    assert main(["report", "--db", str(tmp_path / "none.db"), "--history", "--out", out]) == 2
    assert "no database at" in capsys.readouterr().err


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def test_the_history_page_draws_offline_and_links_to_each_runs_report(
    browser: Browser, history: Path
) -> None:
    opened = open_page(browser, history)
    page = opened.page
    page.wait_for_load_state("load")

    assert opened.errors == []  # a style or script the policy refused would be an error
    assert opened.requests == [history.resolve().as_uri()]
    chart = page.locator('article[data-metric="faithfulness"] svg.trend')
    assert chart.is_visible()
    box = chart.bounding_box()
    assert box is not None
    assert box["width"] > 200
    assert box["height"] > 60
    points = chart.locator("circle.point")
    assert points.count() == 4
    ys = [float(points.nth(i).get_attribute("cy") or "") for i in range(4)]
    assert ys[0] > ys[1] > ys[2]  # the mean rises: 0.625, 0.75, 1 (SVG's y grows downwards)
    assert ys[3] == ys[1]  # then the second job run again: 0.75
    fill = page.evaluate("() => getComputedStyle(document.querySelector('circle.point.bad')).fill")
    assert fill == "rgb(164, 22, 26)"  # the stylesheet applied under the page's policy
    if os.environ.get("RAGJURY_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "history.png"), full_page=True)

    page.locator("table.runs tbody tr").nth(1).locator("a").click()
    page.wait_for_selector("body[data-ready]", timeout=10_000)
    assert "/history-runs/" in page.url
    assert page.locator("#samples tbody tr").count() == 5
    assert opened.errors == []
