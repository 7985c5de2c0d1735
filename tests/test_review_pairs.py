"""``ragjury review`` of generated pairs: the critics' verdicts and rationales out to people
(Label Studio tasks checked with its own validator, or CSV), their labels back into the
database, and ``calibrate reviewed`` judging the critic metrics (question_groundedness,
question_standalone) against them, as a user runs it."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk.label_interface.interface import LabelInterface

from ragjury.calibration.review import LABEL_CONFIG
from ragjury.cli import main

from conftest import critic_reply, question_of, read_jsonl, script_happy_path, write_qa_document
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json

PAIRS = [(f"Quelle valeur a le réglage n°{i} « ç » ?", f"valeur {i} — 東京") for i in range(6)]
# the groundedness critic passes the even questions, the standalone critic every one
GROUNDED = {q: (5 if i % 2 == 0 else 2) for i, (q, _) in enumerate(PAIRS)}


def generated(fake: FakeOpenAI, tmp_path: Path) -> Path:
    script_happy_path(fake, {"groundedness_critic": GROUNDED})
    write_qa_document(tmp_path / "docs", "réglages.md", PAIRS)
    out = tmp_path / "pairs.jsonl"
    code = main(["generate", str(tmp_path / "docs"), "--out", str(out), "--rejected",
                 str(tmp_path / "rejected.jsonl"), "--db", str(tmp_path / "ragjury.db"),
                 "--base-url", fake.base_url, "--api-key", "k", "--whole-documents",
                 "--questions-per-chunk", "6"])  # fmt: skip
    assert code == 0
    return tmp_path / "ragjury.db"


def test_pairs_go_out_with_the_critics_verdicts_and_rationales_and_come_back(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = generated(fake, tmp_path)
    tasks_path = tmp_path / "pairs-review.json"
    assert main(["review", "export", "--db", str(db), "--out", str(tasks_path)]) == 0
    assert "wrote 12 item(s) to review (6 question_groundedness, 6 question_standalone)" in (
        capsys.readouterr().err
    )
    interface: Any = LabelInterface(LABEL_CONFIG)  # Label Studio's own reading (untyped SDK)
    tasks = json.loads(tasks_path.read_text(encoding="utf-8"))
    records = read_jsonl(tmp_path / "pairs.jsonl") + read_jsonl(tmp_path / "rejected.jsonl")
    by_id = {r["id"]: r for r in records}
    for task in tasks:
        data = task["data"]
        assert interface.validate_task({"data": data})
        assert interface.validate_prediction(task["predictions"][0])
        pair = by_id[data["id"]]
        criterion = data["metric"].removeprefix("question_")
        critique = pair["critiques"][criterion]
        assert data["question"] == pair["question"]  # non-ASCII kept as it was
        assert data["contexts"] == [pair["context"]]
        assert data["judge_score"] == critique["rating"]
        assert data["judge_reason"] == critique["rationale"]
        assert data["judge_verdict"] == ("pass" if critique["rating"] >= 4 else "fail")

    # the same pairs as CSV from the files generate wrote; a person labels groundedness
    sheet = tmp_path / "pairs-review.csv"
    assert main(["review", "export", str(tmp_path / "pairs.jsonl"), "--rejected",
                 str(tmp_path / "rejected.jsonl"), "--metric", "question_groundedness",
                 "--out", str(sheet)]) == 0  # fmt: skip
    with sheet.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    human = {row["question"]: "pass" for row in rows}  # the person finds every one grounded
    for row in rows:
        row["human"] = human[row["question"]]
    with sheet.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["review", "import", str(sheet), "--db", str(db)]) == 0
    assert "imported 6 question_groundedness label(s)" in capsys.readouterr().err

    def judge(request: RecordedRequest) -> Reply:  # the metric asks as the critic did
        rating = GROUNDED[question_of(request)]
        return chat_json({"rationale": f"scripted {rating}", "rating": rating})

    fake.route("question_groundedness_judge", judge)
    assert main(["calibrate", "reviewed", "--metric", "question_groundedness", "--db", str(db),
                 "--base-url", fake.base_url, "--api-key", "k", "--json"]) == 0  # fmt: skip
    figures = json.loads(capsys.readouterr().out)
    assert len(fake.requests_for("question_groundedness_judge")) == 6
    assert figures["compared"] == 6
    assert figures["human_pass"] == 6
    # the judge fails the three odd questions the person passed
    assert figures["agreement"]["accuracy"]["value"] == pytest.approx(3 / 6)
    assert figures["agreement"]["confusion"]["false_alarms"] == 3


def test_a_metric_no_critic_gives_is_refused_with_the_ones_it_does(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.route("groundedness_critic", critic_reply())
    db = generated(fake, tmp_path)
    out = str(tmp_path / "x.csv")
    flags = ["--out", out, "--metric", "faithfulness"]
    assert main(["review", "export", "--db", str(db), *flags]) == 2
    assert (
        "--metric faithfulness: generated pairs are reviewed for question_groundedness, "
        "question_standalone"
    ) in capsys.readouterr().err
