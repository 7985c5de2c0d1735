"""Judges users write in a file (``--judge politeness.toml``): scored, re-asked, cached,
estimated, gated and shown like the built-in ones; a bad file is named with its field."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from ragjury import Jury, Settings
from ragjury.agents.custom_judge import load_judge
from ragjury.cli import main

from conftest import make_settings
from evalcli import EIFFEL, TOKYO, evaluate, write_jsonl
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json
from headless import chromium, open_page
from reportruns import cli

if TYPE_CHECKING:
    from playwright.sync_api import Browser

POLITENESS = '''
name = "politeness"
description = "Is the answer polite and respectful to the user?"
inputs = ["question", "answer"]
scale = [1, 5]
pass_at = 4
prompt = """
Rate how polite and respectful the answer is to the person who asked.
Question: {{ question }}
Answer: {{ answer }}
"""
'''
AGENT = "custom_judge:politeness"


def judge_file(tmp_path: Path, text: str = POLITENESS, name: str = "politeness.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def graded(score: int) -> Reply:
    return chat_json({"reasoning": "It thanks the user and answers plainly.", "score": score})


def run(
    fake: FakeOpenAI,
    tmp_path: Path,
    *flags: str,
    samples: Sequence[Mapping[str, object]] | None = None,
) -> int:
    path = write_jsonl(tmp_path / "samples.jsonl", [dict(s) for s in samples or [TOKYO]])
    judge = judge_file(tmp_path)
    return evaluate(fake, tmp_path, path, "--judge", str(judge), "--metrics", "politeness", *flags)


def result(tmp_path: Path) -> dict[str, object]:
    record = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    metrics = record["metrics"]
    assert isinstance(metrics, dict)
    found: dict[str, object] = metrics["politeness"]
    return found


def test_a_judge_file_scores_a_sample_reasoning_first(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.route(AGENT, graded(5))

    assert run(fake, tmp_path) == 0

    scored = result(tmp_path)
    assert (scored["outcome"], scored["score"], scored["passing"]) == ("scored", 5.0, True)
    assert scored["reason"] == "It thanks the user and answers plainly."
    (request,) = fake.requests_for(AGENT)
    assert "What is the capital of Japan?" in request.text()
    assert "Tokyo is the capital of Japan." in request.text()
    text = request.text()  # the response schema instructor sends: reasoning comes first
    assert text.index('"reasoning"') < text.index('"score"')


def test_an_out_of_scale_score_is_asked_again(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.route(AGENT, graded(7), graded(3))

    assert run(fake, tmp_path) == 0

    assert len(fake.requests_for(AGENT)) == 2
    scored = result(tmp_path)
    assert (scored["score"], scored["passing"]) == (3.0, False)
    assert "7" in fake.requests_for(AGENT)[1].text()  # the re-ask names the bad value


def test_a_rerun_takes_the_judgement_from_the_cache(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.route(AGENT, graded(5))
    assert run(fake, tmp_path) == 0
    (tmp_path / "results.jsonl").unlink()

    assert run(fake, tmp_path, "--no-cache") == 0  # a new job, asks again
    assert len(fake.requests_for(AGENT)) == 2
    assert run(fake, tmp_path) == 0  # the first job again: nothing asked

    assert len(fake.requests_for(AGENT)) == 2
    assert result(tmp_path)["score"] == 5.0


def test_a_changed_judge_prompt_is_not_served_from_the_cache(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route(AGENT, graded(5))
    assert run(fake, tmp_path) == 0
    changed = POLITENESS.replace("polite and respectful", "courteous")
    samples = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])
    judge = judge_file(tmp_path, changed, "changed.toml")

    evaluate(fake, tmp_path, samples, "--judge", str(judge), "--metrics", "politeness")

    assert len(fake.requests_for(AGENT)) == 2


def test_a_dry_run_estimates_the_judge_files_calls(fake: FakeOpenAI, tmp_path: Path) -> None:
    estimate = tmp_path / "estimate.json"

    assert (
        run(fake, tmp_path, "--dry-run", "--summary", str(estimate), samples=[TOKYO, EIFFEL]) == 0
    )

    stage = json.loads(estimate.read_text())["by_stage"][AGENT]
    assert stage["llm_calls"] == 2
    assert stage["prompt_tokens"] > 100
    assert fake.requests == []


def test_a_gate_on_a_judge_file_metric_uses_its_scale(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.route(AGENT, graded(3))

    assert run(fake, tmp_path, "--fail-under", "politeness=3") == 0
    assert run(fake, tmp_path, "--fail-under", "politeness=4") == 5
    assert (
        "politeness mean 3 (point estimate; 95% interval [3, 3]) is below 4"
        in capsys.readouterr().err
    )
    assert run(fake, tmp_path, "--fail-under", "politeness=0.7") == 2
    assert "politeness scores run 1 to 5" in capsys.readouterr().err


def test_junit_and_markdown_carry_the_judge_file_metric(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.route(AGENT, graded(2))
    junit, markdown = tmp_path / "junit.xml", tmp_path / "summary.md"

    run(fake, tmp_path, "--junit", str(junit), "--markdown", str(markdown))

    suites = [s.get("name") for s in ET.parse(junit).getroot().findall("testsuite")]
    assert "ragjury.politeness" in suites
    assert "politeness" in markdown.read_text()


def test_the_judge_file_metric_is_in_metrics_listing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["metrics", "--json", "--judge", str(judge_file(tmp_path))]) == 0

    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["politeness"]["pass_rule"] == "score >= 4"
    assert listed["politeness"]["scale"]["high"] == 5.0
    assert "judge file" in listed["politeness"]["origin"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            ('inputs = ["question", "answer"]', 'inputs = ["question", "mood"]'),
            "inputs unknown sample field(s) 'mood'",
        ),
        (("pass_at = 4\n", ""), "needs pass_at, the lowest passing score"),
        (
            ("Answer: {{ answer }}", "Answer: {{ answer }} {{ contexts }}"),
            "prompt uses {{ contexts }} but inputs are",
        ),
        (('name = "politeness"', 'name = "faithfulness"'), "clashes with the builtin metric"),
        (("pass_at = 4", "pass_at = 9"), "pass_at = 9 is outside the scale 1 to 5"),
        (("scale = [1, 5]", 'scale = "stars"'), "scale"),
        (("description", "descriptio"), "descriptio is not a judge file field"),
    ],
)
def test_a_bad_judge_file_names_the_file_the_field_and_what_is_allowed(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: tuple[str, str],
    says: str,
) -> None:
    bad = judge_file(tmp_path, POLITENESS.replace(*change), "bad.toml")
    samples = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])

    code = evaluate(fake, tmp_path, samples, "--judge", str(bad), "--metrics", "politeness")

    assert code == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert says in err
    assert fake.requests == []


def test_the_readme_judge_file_is_the_example_and_loads() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("### Write your own judge")[1].split("```toml\n")[1].split("```")[0]
    example = Path(__file__).parents[1] / "examples" / "judges" / "politeness.toml"

    assert block == example.read_text(encoding="utf-8")
    assert load_judge(example).name == "politeness"


def test_jury_takes_judge_files_and_settings_name_them_too(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route(AGENT, graded(5))
    judge = judge_file(tmp_path)

    async def judged(settings: Settings, **kw: Any) -> float | None:
        async with Jury(settings, **kw) as jury:
            result = await jury.evaluate_one(
                question="What is the capital of Japan?",
                answer="Tokyo is the capital of Japan.",
                metrics=["politeness"],
            )
        score: float | None = result.politeness.score
        return score

    settings = make_settings(fake, tmp_path)
    assert anyio.run(lambda: judged(settings, judges=[judge])) == 5.0
    named = settings.model_copy(update={"judges": (str(judge),)})
    assert anyio.run(lambda: judged(named)) == 5.0


def test_ragjury_toml_judges_are_read(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.route(AGENT, graded(4))
    judge_file(tmp_path)
    (tmp_path / "ragjury.toml").write_text('judges = ["politeness.toml"]\n', encoding="utf-8")
    samples = write_jsonl(tmp_path / "samples.jsonl", [TOKYO])
    monkeypatch.chdir(tmp_path)  # ragjury.toml is read from the working directory

    assert evaluate(fake, tmp_path, samples, "--metrics", "politeness") == 0
    assert result(tmp_path)["score"] == 4.0


def test_a_queued_judge_file_job_is_worked_by_a_worker_that_never_read_the_file(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.route(AGENT, graded(4))
    judge = judge_file(tmp_path)
    settings = make_settings(fake, tmp_path)

    async def submit() -> str:
        async with Jury(settings, judges=[judge]) as jury:
            return await jury.submit_samples([TOKYO], metrics=["politeness"])

    async def work() -> list[Any]:
        async with Jury(settings) as jury:  # another worker: no judge file of its own
            return [event async for event in jury.events()]

    job = anyio.run(submit)
    judge.unlink()  # the job keeps what the file said
    events = anyio.run(work)

    [scored] = [e for e in events if getattr(e, "kind", "") == "sample_scored"]
    assert scored.metrics["politeness"].score == 4.0
    assert job


# Last: Playwright keeps an event loop running in the test thread once the browser starts.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def test_the_report_shows_the_judge_file_metric_in_the_browser(
    fake: FakeOpenAI, tmp_path: Path, browser: Browser
) -> None:
    def by_answer(request: RecordedRequest) -> Reply:
        return graded(5 if "Tokyo" in request.text() else 2)

    fake.route(AGENT, by_answer)
    write_jsonl(tmp_path / "samples.jsonl", [TOKYO, EIFFEL])
    judge_file(tmp_path)
    endpoint = ["--base-url", fake.base_url, "--api-key", "test-key", "--db", "run.db"]
    judged = ["--judge", "politeness.toml", "--metrics", "politeness"]
    outputs = ["--out", "results.jsonl", "--summary", "summary.json"]
    # in processes of their own: Playwright keeps an event loop running in this thread
    assert cli(["evaluate", "samples.jsonl", *judged, *outputs, *endpoint], tmp_path) == 0
    report = tmp_path / "report.html"
    assert (
        cli(
            ["report", "results.jsonl", "--summary", "summary.json", "--out", "report.html"],
            tmp_path,
        )
        == 0
    )

    opened = open_page(browser, report)
    opened.page.wait_for_selector("body[data-ready]", timeout=10_000)
    assert opened.errors == []
    text = opened.page.inner_text("body")
    assert "politeness" in text
    assert "scores 1 to 5" in text
    bars = opened.page.locator("svg.histogram").first.text_content() or ""
    assert "5" in bars
