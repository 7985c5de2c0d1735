"""`ragjury report --db FILE --history`: one page of every job in a database, each metric's
trend over the runs as inline SVG, links to each job's report, the runs whose gates failed;
checked in the file and in a real headless Chromium."""

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


def three_runs(fake: FakeOpenAI, folder: Path) -> Path:
    """Three evaluation jobs in one database, oldest first: the report tests' five samples
    (faithfulness mean 0.625); the same with Eiffel's answer fixed (0.75) under a gate of
    0.9 that fails; and with the Eiffel sample only (1.0)."""
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
    return folder


@pytest.fixture
def history(fake: FakeOpenAI, tmp_path: Path) -> Path:
    run = three_runs(fake, tmp_path / "run")
    flags = ["--db", "ragjury.db", "--history", "--out", "history.html"]
    assert cli(["report", *flags], run) == 0
    return run / "history.html"


def _points(html: str, metric: str) -> list[tuple[str, str]]:
    card = html.split(f'<article class="card trend" data-metric="{metric}">')[1]
    card = card.split("</article>")[0]
    return re.findall(r'<circle class="point (ok|bad)"[^>]*><title>job \w+: mean ([\d.]+)', card)


def test_the_history_has_a_trend_per_metric_and_marks_the_runs_whose_gates_failed(
    history: Path,
) -> None:
    html = history.read_text(encoding="utf-8")

    assert _points(html, "faithfulness") == [("ok", "0.625"), ("bad", "0.75"), ("ok", "1")]
    assert [v for _, v in _points(html, "correctness")] == ["4.25", "4.25", "5"]
    assert html.count('<polyline class="line"') == 2
    rows = re.findall(r'<tr class="(gates-failed|)" data-job="(\w+)">', html)
    assert [cls for cls, _ in rows] == ["", "gates-failed", ""]
    failed = html.split('<tr class="gates-failed"')[1].split("</tr>")[0]
    assert "--fail-under faithfulness=0.9" in failed
    assert "faithfulness mean 0.75 (point estimate; 95% interval [0.25, 1]) is below 0.9" in failed
    for _, job in rows:  # each job's own report, linked and written beside the page
        assert f'href="history-runs/{job}.html"' in html
        assert f"job {job}" in (history.parent / "history-runs" / f"{job}.html").read_text()


def test_history_takes_the_database_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "h.html")

    assert main(["report", "--history", "--out", out]) == 2
    assert "--history reads every job of --db" in capsys.readouterr().err
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


def test_the_history_page_draws_offline_and_links_to_each_jobs_report(
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
    assert points.count() == 3
    ys = [float(points.nth(i).get_attribute("cy") or "") for i in range(3)]
    assert ys[0] > ys[1] > ys[2]  # the mean rises: 0.625, 0.75, 1 (SVG's y grows downwards)
    fill = page.evaluate("() => getComputedStyle(document.querySelector('circle.point.bad')).fill")
    assert fill == "rgb(164, 22, 26)"  # the stylesheet applied under the page's policy
    if os.environ.get("RAGJURY_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "history.png"), full_page=True)

    page.locator("table.runs tbody tr").nth(1).locator("a").click()
    page.wait_for_selector("body[data-ready]", timeout=10_000)
    assert "/history-runs/" in page.url
    assert page.locator("#samples tbody tr").count() == 5
    assert opened.errors == []
