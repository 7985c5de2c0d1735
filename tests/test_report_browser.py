"""The HTML reports in a real headless Chromium: they render with no console error and no
request, the table filters and sorts, a row opens its detail view, and markup from documents
and models shows as text and never runs.

``RAGJURY_UPDATE_SCREENSHOTS=1`` also saves the README's screenshots in docs/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fakeopenai import FakeOpenAI
from headless import Opened, chromium, open_page
from reportruns import HOSTILE, cli, dataset_run, evaluation_run, wide_run, write_jsonl
from reportruns import SAMPLES as JUDGED

if TYPE_CHECKING:
    from playwright.sync_api import Browser

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def report(fake: FakeOpenAI, tmp_path: Path) -> Path:
    run = evaluation_run(fake, tmp_path / "run")
    flags = ["--summary", "summary.json", "--samples", "samples.jsonl", "--out", "report.html"]
    assert cli(["report", "results.jsonl", *flags], run) == 0
    return run / "report.html"


def ready(opened: Opened) -> Opened:
    opened.page.wait_for_selector("body[data-ready]", timeout=10_000)
    return opened


def row_ids(opened: Opened) -> list[str]:
    return opened.page.locator("#samples tbody tr td:first-child").all_inner_texts()


def test_the_report_renders_offline_with_no_console_error(browser: Browser, report: Path) -> None:
    opened = ready(open_page(browser, report))

    assert opened.errors == []
    assert opened.requests == [report.resolve().as_uri()]  # nothing fetched but the page
    assert row_ids(opened) == [s["id"] for s in JUDGED]
    assert opened.page.locator("#shown").inner_text() == "5 of 5 shown"
    assert opened.page.locator("svg.histogram").count() == 2
    opened.page.emulate_media(media="print")
    assert not opened.page.locator("#filters").is_visible()  # printed: figures and rows only
    assert opened.page.locator("#samples tbody tr").count() == 5
    opened.page.emulate_media(media="screen")


def test_text_search_and_filters_narrow_the_table(browser: Browser, report: Path) -> None:
    opened = ready(open_page(browser, report))
    page = opened.page

    page.fill("#search", "paris")
    assert row_ids(opened) == ["eiffel", "seine"]  # in a question or an answer
    page.fill("#search", "")
    page.select_option("#metric", "correctness")
    page.select_option("#outcome", "failed")
    assert row_ids(opened) == ["seine"]
    page.select_option("#outcome", "")
    page.select_option("#metric", "faithfulness")
    page.select_option("#passing", "no")
    assert row_ids(opened) == ["eiffel", "hostile"]
    page.select_option("#metric", "")
    page.select_option("#passing", "yes")
    assert row_ids(opened) == ["tokyo"]  # the sample's own verdict, not any metric's
    assert page.locator("#shown").inner_text() == "1 of 5 shown"
    page.select_option("#passing", "no")  # a failed judgement (seine) is not passing
    assert row_ids(opened) == ["eiffel", "refusal", "seine", "hostile"]
    page.select_option("#outcome", "failed")
    assert row_ids(opened) == ["seine"]  # not passing, with a failed judgement
    page.select_option("#passing", "")
    page.select_option("#outcome", "")
    page.select_option("#metric", "faithfulness")
    page.select_option("#passing", "none")
    assert row_ids(opened) == ["refusal"]  # not applicable: no verdict of faithfulness
    assert opened.errors == []


def test_the_passing_column_shows_each_samples_own_verdict(browser: Browser, report: Path) -> None:
    opened = ready(open_page(browser, report))

    cells = opened.page.locator("#samples tbody tr td:last-child").all_inner_texts()

    assert dict(zip(row_ids(opened), cells, strict=True)) == {
        "eiffel": "no",
        "tokyo": "yes",
        "refusal": "no",  # correctness 2 of 5
        "seine": "not judged",  # its correctness judgement failed: never shown as passing
        "hostile": "no",
    }


def test_sorting_by_a_metric_orders_rows_and_puts_unscored_last(
    browser: Browser, report: Path
) -> None:
    opened = ready(open_page(browser, report))
    header = opened.page.locator('th[data-key="metric:faithfulness"]')

    header.locator("button").click()
    ascending = row_ids(opened)
    header.locator("button").click()
    descending = row_ids(opened)

    # faithfulness: hostile 0, eiffel 0.5, tokyo 1, seine 1, refusal not applicable (last
    # either way); ties keep the file's order
    assert header.get_attribute("aria-sort") == "descending"
    assert ascending == ["hostile", "eiffel", "tokyo", "seine", "refusal"]
    assert descending == ["tokyo", "seine", "eiffel", "hostile", "refusal"]
    opened.page.locator('th[data-key="id"] button').click()
    assert row_ids(opened) == sorted(s["id"] for s in JUDGED)


def test_a_row_opens_its_detail_view_with_evidence_statements_and_failures(
    browser: Browser, report: Path
) -> None:
    opened = ready(open_page(browser, report))
    page = opened.page

    page.locator("#samples tbody tr", has_text="eiffel").click()
    dialog = page.locator("dialog#detail")
    assert dialog.is_visible()
    text = dialog.inner_text()
    assert "Where is the Eiffel Tower and what is it made of?" in text
    assert dialog.locator("mark").all_inner_texts() == ["The Eiffel Tower is in Paris"]
    assert dialog.locator("ol.statements li").count() == 2
    assert "unsupported" in dialog.locator("ol.statements li").nth(1).inner_text()
    assert "not in the passages" in text
    assert "scripted: 5" in text  # the correctness reasoning

    page.locator("dialog#detail form.close button").click()
    assert not dialog.is_visible()
    page.locator("#samples tbody tr", has_text="seine").focus()
    page.keyboard.press("Enter")
    failed = dialog.inner_text()
    assert "correctness_judge" in failed  # the failure's stage
    assert '{"reasoning": "<i>unfinished' in failed  # its last raw output, as text
    assert opened.errors == []


def test_markup_in_answers_and_contexts_shows_as_text_and_never_runs(
    browser: Browser, report: Path
) -> None:
    opened = ready(open_page(browser, report))
    page = opened.page

    page.locator("#samples tbody tr", has_text="hostile").click()
    shown = page.locator("dialog#detail").inner_text()

    assert HOSTILE["answer"] in shown
    assert HOSTILE["contexts"][0] in shown
    assert "What does the <b>bold</b> tag do?" in shown
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 0
    assert page.locator("main b, dialog b").count() == 0
    assert page.locator("script").count() == 2  # the page's data and its own script
    assert opened.errors == []


def test_the_dataset_report_shows_pairs_their_rationales_and_filters_by_outcome(
    browser: Browser, fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = dataset_run(fake, tmp_path / "run")
    flags = ["--rejected", "rejected.jsonl", "--summary", "summary.json", "--out", "d.html"]
    assert cli(["report", "kept.jsonl", *flags], run) == 0
    out = run / "d.html"
    opened = ready(open_page(browser, out))
    page = opened.page

    assert page.locator("#shown").inner_text() == "3 of 3 shown"
    page.select_option("#outcome", "rejected")
    assert page.locator("#samples tbody tr").count() == 1
    page.locator("#samples tbody tr").first.click()
    detail = page.locator("dialog#detail").inner_text()
    assert "Which command starts the dev server?" in detail
    assert "rated 2" in detail
    assert detail.count("scripted rating") == 3  # the three rationales
    page.locator("dialog#detail form.close button").click()
    page.select_option("#outcome", "")
    page.fill("#search", "docs")
    assert "Where are the <b>docs</b> served?" in page.locator("#samples tbody").inner_text()
    assert opened.errors == []
    if os.environ.get("RAGJURY_UPDATE_SCREENSHOTS"):
        page.fill("#search", "")
        page.screenshot(path=str(DOCS / "dataset.png"), full_page=True)


def test_the_comparison_page_shows_both_answers_of_each_regression(
    browser: Browser, fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = evaluation_run(fake, tmp_path / "run")
    changed = [dict(s) for s in JUDGED]
    changed[0]["answer"] = "The Eiffel Tower is in Paris."  # improved
    changed[1]["answer"] = "Tokyo is the capital of Japan. Japan is made of cheese."
    changed[3]["answer"] = "The Seine flows through Berlin."
    write_jsonl(run / "candidate.jsonl", changed)
    flags = ["--db", "ragjury.db", "--base-url", fake.base_url, "--api-key", "k"]
    flags += ["--model", "fake-model", "--max-retries", "0", "--metrics", "faithfulness"]
    assert (
        cli(["evaluate", "candidate.jsonl", "--out", "candidate-results.jsonl", *flags], run) == 0
    )
    out = tmp_path / "compare.html"
    compared = ["compare", "results.jsonl", "candidate-results.jsonl", "--out", str(out)]

    assert cli([*compared, "--fail-on-regression", "faithfulness=0.2"], run) == 0

    opened = open_page(browser, out)
    page = opened.page
    assert page.locator("table.compare tbody tr").count() == 2
    assert page.locator("h2").first.inner_text() == (
        "results.jsonl (baseline) → candidate-results.jsonl (candidate)"
    )
    rows = page.locator("table.regressions tbody tr")
    assert rows.count() == 2  # seine (1 -> 0), then tokyo (1 -> 0.5)
    seine = rows.nth(0).locator("td").all_inner_texts()
    assert seine[0] == "seine"
    assert seine[4:6] == [
        "The Seine flows through Paris. The Seine is 777 km long.",
        "The Seine flows through Berlin.",
    ]
    assert rows.nth(1).locator("td").first.inner_text() == "tokyo"
    box = page.locator("table.regressions").bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= 1280  # the answers wrap: no sideways scroll
    assert opened.errors == []
    if os.environ.get("RAGJURY_UPDATE_SCREENSHOTS"):
        page.screenshot(path=str(DOCS / "compare.png"), full_page=True)


@pytest.fixture
def wide_report(fake: FakeOpenAI, tmp_path: Path) -> Path:
    """The report of nine metrics: built-in judges, retrieval, the context judges, a judge
    file and a custom prompt (``reportruns.wide_run``)."""
    run = wide_run(fake, tmp_path / "run")
    flags = ["--summary", "summary.json", "--out", "report.html"]
    assert cli(["report", "results.jsonl", *flags], run) == 0
    return run / "report.html"


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_column_fits_the_window_from_1280_pixels_wide(
    browser: Browser, wide_report: Path, width: int
) -> None:
    opened = ready(open_page(browser, wide_report, width=width))
    page = opened.page

    geometry = page.evaluate(
        """() => {
          const box = document.querySelector("#samples").parentElement;
          const last = document.querySelector('#samples th[data-key="passing"]');
          const cells = [...document.querySelectorAll("#samples tbody td:last-child")];
          return {
            scrollWidth: box.scrollWidth,
            clientWidth: box.clientWidth,
            pageWidth: document.documentElement.scrollWidth,
            passingRight: last.getBoundingClientRect().right,
            passingWidth: last.getBoundingClientRect().width,
            cellsRight: Math.max(...cells.map((c) => c.getBoundingClientRect().right)),
            columns: document.querySelectorAll("#samples thead th").length,
            questionWidth: document.querySelector("#samples td.q").getBoundingClientRect().width,
          };
        }"""
    )

    assert geometry["columns"] == 2 + 9 + 1  # id, question, nine metrics, passing
    assert geometry["scrollWidth"] <= geometry["clientWidth"]  # no sideways scroll
    assert geometry["pageWidth"] <= width
    assert 0 < geometry["passingRight"] <= width
    assert geometry["cellsRight"] <= width
    assert geometry["passingWidth"] > 40
    assert geometry["questionWidth"] > 150  # the question keeps room to be read
    assert page.locator('#samples th[data-key="passing"]').is_visible()
    figures = page.evaluate(
        """() => [...document.querySelectorAll("dl.figures dd")].map((dd) => {
          const card = dd.closest(".card").getBoundingClientRect();
          const number = dd.firstChild.textContent.trim();
          const lines = document.createRange();
          lines.selectNodeContents(dd.firstChild);
          return {right: dd.getBoundingClientRect().right, cardRight: card.right,
                  number, numberLines: lines.getClientRects().length};
        })"""
    )
    for figure in figures:  # every figure inside its card, and no number broken over lines
        assert figure["right"] <= figure["cardRight"], figure
        assert figure["numberLines"] == 1, figure
    assert opened.errors == []
    if os.environ.get("RAGJURY_UPDATE_SCREENSHOTS") and width == 1280:
        page.screenshot(path=str(DOCS / "report.png"), full_page=True)


def test_the_detail_view_opens_with_the_verdict_and_shows_verdicts_as_tables(
    browser: Browser, wide_report: Path
) -> None:
    opened = ready(open_page(browser, wide_report))
    page = opened.page

    page.locator("#samples tbody tr", has_text="tokyo").click()
    dialog = page.locator("dialog#detail")
    body = dialog.locator("#detail-body > *")
    assert body.nth(1).get_attribute("id") == "verdict"  # right under the title
    assert dialog.locator("#verdict").inner_text().split("\n")[0] == "passing"
    assert "every requested metric passed" in dialog.locator("#verdict").inner_text()
    relevance = dialog.locator('table.detail[data-detail="contexts"]').first
    assert relevance.locator("tbody tr").count() == 2  # one verdict per retrieved context
    assert relevance.locator("tbody tr").nth(0).inner_text().split("\t")[2:] == [
        "no",
        "off topic",
    ]
    retrieved = dialog.locator('table.detail[data-detail="retrieved"]')
    assert retrieved.locator("tbody tr").count() == 2
    at_k = dialog.locator('table.detail[data-detail="at_k"]')
    assert at_k.locator("thead th").all_inner_texts() == [
        "k",
        "hit",
        "MRR",
        "recall",
        "precision",
        "nDCG",
    ]
    assert "{" not in dialog.inner_text()  # no raw JSON anywhere
    page.keyboard.press("Escape")

    page.locator("#samples tbody tr", has_text="seine").click()
    text = dialog.inner_text()
    assert dialog.locator("#verdict").inner_text().startswith("not judged")
    message = text.split("Stage correctness_judge")[1].split("\n")[2]
    assert message.startswith("correctness_judge: the model's output did not validate")
    assert text.count(message) == 1  # the failure's error, once
    assert opened.errors == []
    if os.environ.get("RAGJURY_UPDATE_SCREENSHOTS"):
        page.keyboard.press("Escape")
        page.locator("#samples tbody tr", has_text="tokyo").click()
        page.screenshot(path=str(DOCS / "report-detail.png"))


def test_the_retrieval_figures_at_each_k_are_a_table_of_the_report(
    browser: Browser, wide_report: Path
) -> None:
    opened = ready(open_page(browser, wide_report))
    table = opened.page.locator('table.breakdown[data-metric="retrieval"]')

    assert table.locator("caption").inner_text() == "retrieval at k"
    assert table.locator("thead th").all_inner_texts() == [
        "k",
        "hit rate",
        "MRR",
        "recall",
        "precision",
        "nDCG",
    ]
    # Tokyo's reference is retrieved second, the others' first: at k=1 four of five hit
    rows = [r.split("\t") for r in table.locator("tbody tr").all_inner_texts()]
    assert [r[0] for r in rows] == ["1", "3", "5", "10"]
    assert rows[0][1:3] == ["0.8", "0.8"]
    assert rows[1][1:3] == ["1", "0.9"]
    assert table.is_visible()
