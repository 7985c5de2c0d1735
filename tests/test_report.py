"""`ragjury report`: what the page holds, from files or the database, and how big it gets.
(How it behaves in a browser is tests/test_report_browser.py.)"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ragjury.cli import main
from ragjury.prompts import Prompt
from ragjury.report.html import evidence_spans, packed_json, unpack_json

from conftest import read_jsonl
from fakeopenai import FakeOpenAI
from reportruns import dataset_run, evaluation_run, wide_run


def page_data(html: str) -> dict[str, Any]:
    found = re.search(
        r'<script type="application/gzip-base64" id="ragjury-data">(.*?)</script>', html
    )
    assert found is not None
    data: dict[str, Any] = unpack_json(found.group(1))
    return data


def test_data_in_the_page_cannot_close_its_script_or_open_a_comment() -> None:
    text = packed_json({"answer": "</script><!-- <script>&amp;\u2028"})

    assert re.fullmatch(r"[A-Za-z0-9+/=]+", text)
    assert unpack_json(text) == {"answer": "</script><!-- <script>&amp;\u2028"}


def test_evidence_is_found_as_models_quote_it_ignoring_case_and_spacing() -> None:
    context = "The tower is in Paris,\n  France. It is made of IRON. Paris again."

    spans = evidence_spans(context, [(0, "in paris, France"), (2, "made of iron"), (3, "")])

    assert [(context[s:e], n) for s, e, n in spans] == [
        ("in Paris,\n  France", 0),
        ("made of IRON", 2),
    ]


def test_report_from_files_shows_the_run_the_metrics_and_every_sample_with_its_contexts(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = evaluation_run(fake, tmp_path / "run")
    out = tmp_path / "report.html"

    code = main(
        [
            "report",
            str(run / "results.jsonl"),
            "--summary",
            str(run / "summary.json"),
            "--samples",
            str(run / "samples.jsonl"),
            "--out",
            str(out),
        ]
    )

    assert code == 0
    html = out.read_text(encoding="utf-8")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    for shown in ("fake-model", fake.base_url, "splitter@", "verdict@", "correctness@"):
        assert shown in html
    assert summary["base_url"] == fake.base_url
    # the per-metric figures are the summary's (one implementation of them)
    for name in ("faithfulness", "correctness"):
        figures = summary["metrics"][name]
        assert f"{figures['scored']} scored" in html
        assert f"{figures['failed']} failed" in html
        low, high = figures["mean_interval"]  # each mean beside its 95% interval
        assert (
            '<span class="muted interval" title="95% interval over samples">'
            f"[{low:.3g}, {high:.3g}]" in html
        )
    assert summary["metrics"]["correctness"]["failed"] == 1
    data = page_data(html)
    assert [s["id"] for s in data["samples"]] == [
        r["id"] for r in read_jsonl(run / "results.jsonl")
    ]
    eiffel = next(s for s in data["samples"] if s["id"] == "eiffel")
    context = eiffel["contexts"][0]
    assert [context[a:b] for a, b, _ in eiffel["marks"][0]] == ["The Eiffel Tower is in Paris"]
    seine = next(s for s in data["samples"] if s["id"] == "seine")
    assert seine["metrics"]["correctness"]["error"]["last_raw_output"].startswith('{"reasoning"')
    assert "http://" not in re.sub(r'content="[^"]*"', "", html.split("<body>")[0])


def test_report_from_the_database_reads_the_job_with_its_contexts_and_run(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = evaluation_run(fake, tmp_path / "run")
    out = tmp_path / "report.html"

    assert main(["report", "--db", str(run / "ragjury.db"), "--out", str(out)]) == 0

    html = out.read_text(encoding="utf-8")
    data = page_data(html)
    from_files = read_jsonl(run / "results.jsonl")
    assert [s["id"] for s in data["samples"]] == [r["id"] for r in from_files]
    assert all(s["contexts"] for s in data["samples"])
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert f"{summary['llm_calls']:,}" in html
    assert "fake-model" in html
    assert "verdict@" in html


def test_every_prompt_version_used_is_in_the_summary_and_the_header_with_its_origin(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = wide_run(fake, tmp_path / "run")  # context judges, a judge file, --prompt verdict=
    from_files, from_db = tmp_path / "files.html", tmp_path / "db.html"

    assert (
        main(
            [
                "report",
                str(run / "results.jsonl"),
                "--summary",
                str(run / "summary.json"),
                "--out",
                str(from_files),
            ]
        )
        == 0
    )
    assert main(["report", "--db", str(run / "ragjury.db"), "--out", str(from_db)]) == 0

    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    versions, origins = summary["prompt_versions"], summary["prompt_origins"]
    assert set(versions) == {
        "splitter",
        "verdict",
        "correctness",
        "rubric",
        "context_relevance",
        "context_precision",
        "answer_relevance",
        "politeness",
    }
    assert versions["verdict"] != Prompt.builtin("verdict").version  # the custom one's
    assert versions["context_relevance"] == Prompt.builtin("context_relevance").version
    assert origins["verdict"] == "--prompt verdict.j2"
    assert origins["politeness"] == "judge file politeness.toml"
    assert origins["splitter"] == origins["context_precision"] == "built-in"
    for page in (from_files, from_db):
        header = page.read_text(encoding="utf-8").split('id="metrics-title"')[0]
        for version in versions.values():
            assert version in header, (page.name, version)
        assert f"{versions['politeness']} (judge file politeness.toml)" in header
        assert f"{versions['verdict']} (--prompt verdict.j2)" in header


def test_the_report_has_a_table_of_each_figure_a_metric_tallies_at_each_k(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = wide_run(fake, tmp_path / "run")
    out = tmp_path / "report.html"

    assert main(["report", str(run / "results.jsonl"), "--out", str(out)]) == 0

    html = out.read_text(encoding="utf-8")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    table = html.split('<table class="breakdown" data-metric="retrieval">')[1].split("</table>")[0]
    assert "<caption>retrieval at k</caption>" in table
    for k, figures in summary["metrics"]["retrieval"]["at_k"].items():
        cells = [f'<td class="num">{figures[f]:.3g}</td>' for f in ("hit_rate", "mrr", "ndcg")]
        row = table.split(f'<th scope="row">{k}</th>')[1].split("</tr>")[0]
        assert all(cell in row for cell in cells), (k, row)
    assert html.count('<table class="breakdown"') == 1  # no other metric here tallies


def test_report_of_an_unknown_job_names_the_jobs_there_are(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = evaluation_run(fake, tmp_path / "run")

    code = main(
        ["report", "--db", str(run / "ragjury.db"), "--job", "nope", "--out", str(tmp_path / "x")]
    )

    assert code == 2
    err = capsys.readouterr().err
    assert "no job 'nope'" in err
    assert "(evaluate)" in err


def test_report_of_a_dataset_counts_outcomes_ratings_and_sources(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = dataset_run(fake, tmp_path / "run")
    out = tmp_path / "dataset.html"

    code = main(
        [
            "report",
            str(run / "kept.jsonl"),
            "--rejected",
            str(run / "rejected.jsonl"),
            "--summary",
            str(run / "summary.json"),
            "--out",
            str(out),
        ]
    )

    assert code == 0
    html = out.read_text(encoding="utf-8")
    data = page_data(html)
    assert sorted(p["outcome"] for p in data["pairs"]) == ["kept", "kept", "rejected"]
    rejected = next(p for p in data["pairs"] if p["outcome"] == "rejected")
    assert rejected["critiques"]["relevance"]["rating"] == 2
    assert set(rejected["critiques"]) == {
        *("groundedness", "relevance", "standalone", "answerability"),
    }
    # the answerability critic's rating is a column, its own answer in the pair's detail
    assert data["criteria"] == ["groundedness", "relevance", "standalone", "answerability"]
    assert rejected["answer_check"]["answer"] == "fastapi dev"
    assert re.search(r"<dt>kept</dt><dd[^>]*>2</dd>", html)
    assert re.search(r"<dt>rejected</dt><dd[^>]*>1</dd>", html)
    for name in ("ports.md", "cli.md", "docs.md"):
        assert name in html
    assert "<title>2: 1</title>" in html  # the relevance critic's 2
    assert "<title>5: 3</title>" in html  # groundedness and standalone: every pair 5


def test_report_of_a_generation_job_from_the_database_is_a_dataset_report(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    run = dataset_run(fake, tmp_path / "run")
    out = tmp_path / "dataset.html"

    assert main(["report", "--db", str(run / "ragjury.db"), "--out", str(out)]) == 0

    data = page_data(out.read_text(encoding="utf-8"))
    assert data["kind"] == "dataset"
    assert len(data["pairs"]) == 3


def test_a_file_that_is_not_results_is_refused_with_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"foo": 1}\n', encoding="utf-8")

    assert main(["report", str(odd), "--out", str(tmp_path / "r.html")]) == 2
    assert "neither 'metrics'" in capsys.readouterr().err


def _synthetic(n: int) -> list[dict[str, Any]]:
    """Results of a typical size: a 300-character answer of three statements, a reference,
    1,000 characters of contexts, faithfulness and correctness. The words are drawn at random
    from a vocabulary, so the text compresses about as well as English does (not better)."""
    rng = random.Random(7)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    weights = [13, 9, 8, 8, 7, 7, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1]
    vocabulary = ["".join(rng.choices(letters, weights, k=rng.randint(2, 9))) for _ in range(3000)]

    def words(chars: int) -> str:
        text = ""
        while len(text) < chars:
            text += rng.choice(vocabulary) + " "
        return text[:chars]

    records = []
    for i in range(n):
        statements = [
            {
                "text": words(70),
                "supported": k != 2,
                "reason": "The passage states this directly in its second paragraph."
                if k != 2
                else "The passages do not mention it.",
                "evidence": f"sample {i} says something" if k != 2 else None,
            }
            for k in range(3)
        ]
        records.append(
            {
                "id": f"sample-{i:05d}",
                "question": f"What does the documentation say about feature number {i}?",
                "answer": words(300),
                "metrics": {
                    "faithfulness": {
                        "outcome": "scored",
                        "score": 2 / 3,
                        "passing": False,
                        "reason": "2 of 3 statements supported",
                        "statements": statements,
                        "llm_calls": 2,
                    },
                    "correctness": {
                        "outcome": "scored",
                        "score": 4,
                        "passing": True,
                        "reason": "mostly right",
                        "reasoning": "The answer matches the reference on the main point.",
                        "llm_calls": 1,
                    },
                },
                "contexts": [words(600), words(400)],
                "reference": "The reference answer, a sentence long.",
            }
        )
    return records


def test_a_report_of_1000_samples_stays_under_2_mb(tmp_path: Path) -> None:
    from ragjury.report.html import evaluation_html
    from ragjury.report.load import Loaded

    records = _synthetic(1000)
    text_bytes = sum(
        len(json.dumps([r["question"], r["answer"], r["contexts"], r["metrics"]]).encode())
        for r in records
    )

    page = evaluation_html(Loaded("evaluation", records, "synthetic")).encode("utf-8")

    assert text_bytes > 2_000_000  # more than the page may be
    assert len(page) < 2_000_000
    assert len(page) < text_bytes * 0.6 + 40_000  # the text once, compressed, plus the page


def test_the_readme_shows_screenshots_of_the_report_that_exist() -> None:
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")

    shown = re.findall(r"\]\((docs/[a-z-]+\.png)\)", readme)

    assert "docs/report.png" in shown
    for name in shown:
        assert (root / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), name


def test_browser_tests_fail_rather_than_skip_without_chromium_in_ci(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(root),
        "CI": "true",
        "RAGJURY_CHROMIUM": str(tmp_path / "no-such-chromium"),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(root / "tests" / "test_report_browser.py"),
            "-k",
            "renders_offline",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 1, done.stdout
    assert "the browser tests need Chromium at" in done.stdout
    assert "CI installs them in .ci/run" in done.stdout
    assert "skipped" not in done.stdout
