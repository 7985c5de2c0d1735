"""``ragjury calibrate`` end to end, as a user runs it: the real openai client and instructor
against a scripted judge server that answers from the people's labels with a known share
flipped, real SQLite files, the command line (in process, and once as a subprocess)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from ragjury._json import json_object
from ragjury.calibration.sets import bundled_set, bundled_sets
from ragjury.cli import main
from ragjury.report.load import records_from_db

from calibratecli import SAMPLE, calibrate, write_labels
from evalfakes import passages_of, statements_of, user_message
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json

FLIP_SHARE = 0.2
CLAIM = "Claim: "
_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_ANSWER = re.compile(r"(?:^|\n)Answer:\n(.*)\Z", re.DOTALL)


def labelled(name: str) -> list[dict[str, Any]]:
    found = bundled_set(name)
    assert found is not None
    return [json.loads(line) for line in found.path.read_text(encoding="utf-8").splitlines()]


def flipped(keys: list[str], seed: int = 1) -> set[str]:
    """A fifth (in expectation) of the samples, drawn with a seed: the judge gets these wrong."""
    rng = random.Random(seed)
    return {key for key in keys if rng.random() < FLIP_SHARE}


class LabelJudge:
    """Answers each judge request as the people did, except on the flipped samples; keeps
    which samples it was asked about."""

    def __init__(self, labels: Mapping[str, bool], wrong: set[str]) -> None:
        self.labels, self.wrong = labels, wrong
        self.asked: list[str] = []

    def verdict(self, key: str) -> bool:
        self.asked.append(key)
        return self.labels[key] != (key in self.wrong)


def script_faithfulness(fake: FakeOpenAI, judge: LabelJudge) -> None:
    """The splitter gives the answer back as one statement (led by a word that is no
    pronoun, as the splitter's validator wants); the verdict judge supports it as the person
    did, with a quote from the passage."""

    def split(request: RecordedRequest) -> Reply:
        answer = _ANSWER.search(user_message(request)).group(1)  # type: ignore[union-attr]  # ours
        return chat_json({"statements": [CLAIM + answer.strip()]})

    def verdicts(request: RecordedRequest) -> Reply:
        (statement,) = statements_of(request)
        supported = judge.verdict(statement.removeprefix(CLAIM))
        passage = passages_of(request).strip().removeprefix("[1] ")
        return chat_json(
            {
                "verdicts": [
                    {
                        "statement_index": 0,
                        "reason": "scripted from the label",
                        "evidence": passage[:40] if supported else "",
                        "supported": supported,
                    }
                ]
            }
        )

    fake.route("statement_splitter", split)
    fake.route("verdict_judge", verdicts)


def script_correctness(fake: FakeOpenAI, judge: LabelJudge) -> None:
    def grade(request: RecordedRequest) -> Reply:
        question = _QUESTION.search(user_message(request)).group(1)  # type: ignore[union-attr]
        score = 5 if judge.verdict(question) else 1
        return chat_json({"reasoning": "scripted from the label", "score": score})

    fake.route("correctness_judge", grade)


def script_critic(fake: FakeOpenAI, agent: str, judge: LabelJudge) -> None:
    """A generation critic asked about a sample's question: 5 or 1 as the person said."""

    def rate(request: RecordedRequest) -> Reply:
        question = _QUESTION.search(user_message(request)).group(1)  # type: ignore[union-attr]
        rating = 5 if judge.verdict(question) else 1
        return chat_json({"rationale": "scripted from the label", "rating": rating})

    fake.route(agent, rate)


def printed_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def test_calibrate_recovers_the_accuracy_of_a_judge_that_flips_a_fifth_of_the_labels(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("begin-wow")
    labels = {r["answer"].strip(): bool(r["human"]) for r in records}
    wrong = flipped(list(labels))
    judge = LabelJudge(labels, wrong)
    script_faithfulness(fake, judge)

    assert calibrate(fake, tmp_path, "begin-wow", "--json") == 0

    report = printed_json(capsys)
    figures = report["agreement"]
    assert (report["metric"], report["source"], report["compared"]) == (
        "faithfulness",
        "begin-wow",
        200,
    )
    assert sorted(judge.asked) == sorted(labels)  # every sample judged once
    assert figures["accuracy"]["value"] == pytest.approx(1 - len(wrong) / 200)
    assert figures["accuracy"]["low"] < 1 - FLIP_SHARE < figures["accuracy"]["high"]
    truth = [not labels[k] for k in judge.asked]  # True = the person failed it
    said = [labels[k] == (k in wrong) for k in judge.asked]  # True = the judge failed it
    assert figures["kappa"]["value"] == pytest.approx(cohen_kappa_score(truth, said))
    matrix = figures["confusion"]
    assert matrix["caught"] == sum(t and s for t, s in zip(truth, said, strict=True))
    assert matrix["missed"] + matrix["false_alarms"] == len(wrong)
    scores = [0.0 if s else 1.0 for s in said]
    passed = [not t for t in truth]
    assert figures["auroc"]["value"] == pytest.approx(roc_auc_score(passed, scores))
    assert figures["threshold"]["current"] == 0.8


@pytest.mark.parametrize(
    ("name", "metric", "agent"),
    [
        ("squad2", "question_groundedness", "question_groundedness_judge"),
        ("trec-cast", "question_standalone", "question_standalone_judge"),
    ],
)
def test_the_critics_of_generation_calibrate_on_their_sets(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    metric: str,
    agent: str,
) -> None:
    labels = {r["question"]: bool(r["human"]) for r in labelled(name)}
    wrong = flipped(list(labels), seed=2)
    judge = LabelJudge(labels, wrong)
    script_critic(fake, agent, judge)

    assert calibrate(fake, tmp_path, name, "--json") == 0

    report = printed_json(capsys)
    assert (report["metric"], report["compared"]) == (metric, 200)
    accuracy = report["agreement"]["accuracy"]
    assert accuracy["value"] == pytest.approx(1 - len(wrong) / 200)
    assert accuracy["low"] < 1 - FLIP_SHARE < accuracy["high"]


def test_the_figures_are_kept_with_the_run_in_the_database(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("evouna-nq")
    judge = LabelJudge({r["question"]: bool(r["human"]) for r in records}, set())
    script_correctness(fake, judge)
    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "20", "--json") == 0
    printed = printed_json(capsys)

    loaded = anyio.run(records_from_db, tmp_path / "ragjury.db", None)

    assert loaded.summary["calibration"] == printed
    assert len(loaded.records) == 20  # an ordinary evaluation job of the samples drawn
    assert json_object(json_object(loaded.summary["metrics"])["correctness"])["scored"] == 20


def test_the_report_of_a_calibration_job_shows_the_judge_card(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("evouna-nq")
    labels = {r["question"]: bool(r["human"]) for r in records}
    judge = LabelJudge(labels, flipped(list(labels), seed=4))
    script_correctness(fake, judge)
    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "40", "--json") == 0
    figures = printed_json(capsys)["agreement"]
    page = tmp_path / "report.html"

    assert main(["report", "--db", str(tmp_path / "ragjury.db"), "--out", str(page)]) == 0

    html = page.read_text(encoding="utf-8")
    assert "How far to trust correctness" in html
    accuracy = figures["accuracy"]
    row = (
        f'<td>accuracy</td><td class="num">{accuracy["value"]:.3f}</td>'
        f"<td>{accuracy['low']:.3f} to {accuracy['high']:.3f}</td>"
    )
    assert row in html
    assert f"{figures['confusion']['caught']} caught" in html


def test_the_report_of_an_ordinary_evaluation_has_no_judge_card(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_correctness(fake, LabelJudge({"Capital of Japan?": True}, set()))
    samples = write_labels(tmp_path, [{**SAMPLE, "reference": "Tokyo"}])
    out = ["--out", str(tmp_path / "r.jsonl"), "--metrics", "correctness"]
    db = ["--db", str(tmp_path / "ragjury.db")]
    endpoint = ["--base-url", fake.base_url, "--api-key", "k"]
    assert main(["evaluate", str(samples), *out, *db, *endpoint]) == 0
    page = tmp_path / "report.html"

    assert main(["report", *db, "--out", str(page)]) == 0

    assert "How far to trust" not in page.read_text(encoding="utf-8")


def test_a_sample_draws_n_samples_with_the_seed_and_its_interval_holds_the_true_rate(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("evouna-nq")
    labels = {r["question"]: bool(r["human"]) for r in records}
    wrong = flipped(list(labels), seed=5)
    judge = LabelJudge(labels, wrong)
    script_correctness(fake, judge)

    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "60", "--seed", "3", "--json") == 0

    figures = printed_json(capsys)["agreement"]
    assert len(judge.asked) == 60
    expected = sum(k not in wrong for k in judge.asked) / 60
    assert figures["accuracy"]["value"] == pytest.approx(expected)
    assert figures["accuracy"]["low"] <= 1 - FLIP_SHARE <= figures["accuracy"]["high"]
    assert figures["threshold"]["best"] == 4  # the mark in use splits 1 from 5 as well as any
    assert figures["threshold"]["best_balanced_accuracy"] == figures["balanced_accuracy"]["value"]

    first = list(judge.asked)
    (tmp_path / "again").mkdir()
    assert calibrate(fake, tmp_path / "again", "evouna-nq", "--sample", "60", "--seed", "3") == 0
    assert sorted(judge.asked[60:]) == sorted(first)  # the same seed draws the same samples


def test_a_rerun_reads_the_finished_job_back_without_a_call(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("evouna-nq")
    judge = LabelJudge({r["question"]: bool(r["human"]) for r in records}, set())
    script_correctness(fake, judge)
    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "10", "--json") == 0
    first = printed_json(capsys)
    calls = len(fake.requests)

    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "10", "--json") == 0

    assert len(fake.requests) == calls
    assert printed_json(capsys) == first


def test_a_run_a_budget_stops_compares_what_was_judged_and_the_same_command_finishes_it(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("evouna-nq")
    judge = LabelJudge({r["question"]: bool(r["human"]) for r in records}, set())
    script_correctness(fake, judge)
    slow = ("--concurrency", "1", "--items-in-flight", "1")

    code = calibrate(
        fake, tmp_path, "evouna-nq", "--sample", "10", "--json", "--max-tokens", "50", *slow
    )

    assert code == 6
    stopped = printed_json(capsys)
    assert stopped["unfinished"] > 0
    assert stopped["compared"] + stopped["unfinished"] == 10
    assert stopped["failed"] == 0
    asked = len(judge.asked)

    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "10", "--json", *slow) == 0

    finished = printed_json(capsys)
    assert (finished["compared"], finished["unfinished"]) == (10, 0)
    assert len(judge.asked) - asked == stopped["unfinished"]  # only the rest was asked


def test_a_dry_run_estimates_the_calls_and_calls_nothing(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    estimate = tmp_path / "estimate.json"

    assert calibrate(fake, tmp_path, "begin-wow", "--dry-run", "--summary", str(estimate)) == 0

    data = json.loads(estimate.read_text(encoding="utf-8"))
    assert data["samples"] == 200
    assert data["by_stage"]["statement_splitter"]["llm_calls"] == 200
    assert fake.requests == []


def test_your_own_labels_on_a_1_to_5_scale_calibrate_a_judge_file(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = tmp_path / "polite.toml"
    judge.write_text(
        'name = "polite"\ndescription = "Is the answer polite?"\ninputs = ["answer"]\n'
        'scale = "boolean"\nprompt = """\nIs this polite?\nAnswer: {{ answer }}\n"""\n',
        encoding="utf-8",
    )
    rows = [
        {"id": "a", "question": "q", "answer": "Thank you kindly.", "rating": 5},
        {"id": "b", "question": "q", "answer": "Go away.", "rating": 1},
        {"id": "c", "question": "q", "answer": "Sure, here it is.", "rating": 3},
        {"id": "d", "question": "q", "answer": "Whatever.", "rating": 2},
    ]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def polite(request: RecordedRequest) -> Reply:
        verdict = "kindly" in request.text() or "Go away" in request.text()
        return chat_json({"reasoning": "scripted", "verdict": verdict})

    fake.route("custom_judge:polite", polite)

    code = calibrate(
        fake,
        tmp_path,
        str(path),
        "--judge",
        str(judge),
        "--metric",
        "polite",
        "--label-field",
        "rating",
        "--label-pass-at",
        "3",
        "--json",
    )

    assert code == 0
    report = printed_json(capsys)
    assert (report["label_kind"], report["label_pass_at"], report["human_pass"]) == ("rating", 3, 2)
    a = report["agreement"]
    # people pass a, c; the judge passes a, b: caught d, missed b, false alarm c, agreed a
    assert a["confusion"] == {"caught": 1, "missed": 1, "false_alarms": 1, "agreed_pass": 1}
    assert a["accuracy"]["value"] == 0.5
    assert a["auroc"] is None  # a true/false judge has no graded score
    assert a["threshold"] is None


def test_the_table_names_each_figure_with_its_interval(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = labelled("evouna-nq")
    judge = LabelJudge({r["question"]: bool(r["human"]) for r in records}, set())
    script_correctness(fake, judge)

    assert calibrate(fake, tmp_path, "evouna-nq", "--sample", "12") == 0

    out = capsys.readouterr().out
    for figure in ("accuracy", "balanced accuracy", "Cohen's kappa", "recall of fail", "AUROC"):
        assert re.search(rf"{re.escape(figure)}\s+│\s+1\.000\s+│\s+1\.000 to 1\.000", out), figure
    assert "person fails" in out
    assert "Only 12 sample(s) compared" in out


def test_list_names_every_bundled_set_with_its_size_and_judge_as_a_user_runs_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ragjury", "calibrate", "--list", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    listed = {s["name"]: (s["size"], s["metric"]) for s in json.loads(done.stdout)}
    assert listed == {s.name: (s.size, s.metric) for s in bundled_sets()}
    assert set(listed) == {"begin-wow", "evouna-nq", "squad2", "trec-cast"}
    for s in bundled_sets():
        lines = s.path.read_text(encoding="utf-8").splitlines()
        assert s.size == len(lines) >= 100
        licence = {p.name for p in s.path.parent.iterdir()} & {"LICENSE", "NOTICE"}
        assert licence, f"{s.name} ships without its licence"


def test_an_unknown_set_is_named_with_the_bundled_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calibrate(None, tmp_path, "begin-wwo") == 2

    err = capsys.readouterr().err
    assert "'begin-wwo' is neither a bundled set nor a file" in err
    assert "begin-wow, evouna-nq, squad2, trec-cast" in err
