"""``ragjury review`` round trip, as a user runs it: evaluate judges samples against the
scripted server, ``review export`` writes Label Studio tasks (checked with Label Studio's own
validator) or CSV, a person's labels come back in Label Studio's JSON export or the filled-in
CSV, ``review import`` keeps them in the database, and ``calibrate reviewed`` and
``--correct-with METRIC=reviewed`` use them."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from label_studio_sdk.label_interface.interface import LabelInterface

from ragjury.calibration.review import LABEL_CONFIG
from ragjury.cli import main

from evalcli import evaluate, write_jsonl
from evalfakes import user_message
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json

_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)

# The judge passes the answers it is scripted to pass; the person disagrees on two of them.
SAMPLES = [
    {
        "id": f"s{i}",
        "question": f"Quelle est la capitale n°{i} ? « Tōkyō » {i}",
        "answer": f"Réponse {i}: 東京",
        "contexts": [f"Passage {i} — Tōkyō est la capitale.", f"Second passage {i}."],
        "reference": f"Tōkyō {i}",
    }
    for i in range(8)
]
JUDGE_PASSES = {f"s{i}": i % 2 == 0 for i in range(8)}
HUMAN = {**JUDGE_PASSES, "s0": False, "s1": True}  # the person overrules the judge twice


def script_judge(fake: FakeOpenAI) -> None:
    def grade(request: RecordedRequest) -> Reply:
        question = _QUESTION.search(user_message(request)).group(1)  # type: ignore[union-attr]
        sample = next(s for s in SAMPLES if s["question"] == question)
        passes = JUDGE_PASSES[str(sample["id"])]
        return chat_json({"reasoning": f"scripted «{sample['id']}»", "score": 5 if passes else 1})

    fake.route("correctness_judge", grade)


def judged(fake: FakeOpenAI, tmp_path: Path) -> Path:
    script_judge(fake)
    samples = write_jsonl(tmp_path / "samples.jsonl", SAMPLES)
    assert evaluate(fake, tmp_path, samples, "--metrics", "correctness") == 0
    return tmp_path / "ragjury.db"


def review(*args: str) -> int:
    return main(["review", *args])


def annotated(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks as Label Studio exports them once a person has labelled them: an id, and
    the person's annotation beside the prediction (one task skipped, one annotation
    cancelled and then redone, one cancelled only)."""
    out = []
    for n, task in enumerate(tasks, 1):
        sample_id = task["data"]["id"]
        choice = "pass" if HUMAN[sample_id] else "fail"
        result = {"from_name": "verdict", "to_name": "answer", "type": "choices"}
        done = {"result": [{**result, "value": {"choices": [choice]}}], "was_cancelled": False}
        cancelled = {"result": [], "was_cancelled": True}
        annotations = {
            "s5": [],
            "s6": [cancelled],
            "s3": [{**done, "completed_by": 7}, cancelled],
        }.get(sample_id, [{**done, "completed_by": 3}])
        out.append({"id": n, **task, "annotations": annotations})
    return out


def test_label_studio_round_trip_into_the_database_and_calibrate(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = judged(fake, tmp_path)
    tasks_path = tmp_path / "tasks.json"
    assert review("export", "--db", str(db), "--out", str(tasks_path)) == 0

    config = tasks_path.with_suffix(".label-config.xml").read_text(encoding="utf-8")
    assert config == LABEL_CONFIG
    # Label Studio's own reading of the configuration (the SDK is untyped)
    interface: Any = LabelInterface(config)
    tasks = json.loads(tasks_path.read_text(encoding="utf-8"))
    assert [t["data"]["id"] for t in tasks] == [s["id"] for s in SAMPLES]
    for task, sample in zip(tasks, SAMPLES, strict=True):
        assert interface.validate_task({"data": task["data"]})
        [prediction] = task["predictions"]
        assert interface.validate_prediction(prediction)
        [choice] = prediction["result"][0]["value"]["choices"]
        assert choice == ("pass" if JUDGE_PASSES[str(sample["id"])] else "fail")
        assert task["data"]["question"] == sample["question"]  # non-ASCII kept as it was
        assert task["data"]["judge_reason"] == f"scripted «{sample['id']}»"

    export = tmp_path / "project-1-at-2026-11-25.json"
    labelled = annotated(tasks)
    for task in labelled:
        for annotation in task["annotations"]:
            if not annotation["was_cancelled"]:
                assert interface.validate_annotation(annotation)
    export.write_text(json.dumps(labelled, ensure_ascii=False), encoding="utf-8")
    capsys.readouterr()
    assert review("import", str(export), "--db", str(db)) == 0
    err = capsys.readouterr().err
    assert "imported 6 correctness label(s)" in err
    assert "2 item(s) had no label and were skipped" in err

    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT sample_id, label, sample, labelled_by FROM labels").fetchall()
    stored = {sample_id: (label, json.loads(sample), by) for sample_id, label, sample, by in rows}
    assert set(stored) == {"s0", "s1", "s2", "s3", "s4", "s7"}
    for sample_id, (label, sample, _) in stored.items():
        assert label == ("pass" if HUMAN[sample_id] else "fail")
        original = next(s for s in SAMPLES if s["id"] == sample_id)
        assert {k: sample[k] for k in original} == original  # the whole sample, unchanged
    assert stored["s3"][2] == "7"  # the annotation that was not cancelled

    capsys.readouterr()
    asked = len(fake.requests)
    assert main(["calibrate", "reviewed", "--metric", "correctness", "--db", str(db), "--json",
                 "--base-url", fake.base_url, "--api-key", "k", "--summary",
                 str(tmp_path / "calibrated.json")]) == 0  # fmt: skip
    figures = json.loads(capsys.readouterr().out)
    # the judgements evaluate made are served from the step cache: nothing reaches the server
    assert len(fake.requests) == asked
    calibrated = json.loads((tmp_path / "calibrated.json").read_text(encoding="utf-8"))
    assert calibrated["llm_calls"] == 0
    # the judge agrees with the person on 4 of the 6 labelled samples (s0 and s1 overruled)
    assert figures["compared"] == 6
    assert figures["agreement"]["accuracy"]["value"] == pytest.approx(4 / 6, abs=1e-3)


def test_csv_round_trip_and_correct_with_the_reviewed_labels(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = judged(fake, tmp_path)
    sheet = tmp_path / "review.csv"
    assert review("export", str(tmp_path / "results.jsonl"), "--out", str(sheet)) == 0
    with sheet.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["id"] for r in rows] == [s["id"] for s in SAMPLES]
    assert json.loads(rows[0]["contexts"]) == SAMPLES[0]["contexts"]
    assert {r["human"] for r in rows} == {""}
    for row in rows:
        row["human"] = "pass" if HUMAN[row["id"]] else "fail"
    with sheet.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    assert review("import", str(sheet), "--db", str(db)) == 0
    capsys.readouterr()
    samples = tmp_path / "samples.jsonl"
    code = evaluate(fake, tmp_path, samples, "--metrics", "correctness", "--no-cache",
                    "--correct-with", "correctness=reviewed")  # fmt: skip
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    corrected = summary["corrected"]["correctness"]
    assert corrected["labelled"] == 8
    assert corrected["matched"] == 8
    # the judge passes 4 of 8; the people pass 4 of 8 too, but not the same ones
    assert corrected["pass_rate"]["judge"] == pytest.approx(0.5)
    assert corrected["pass_rate"]["judge_bias"] == pytest.approx(0.0)


def test_bad_review_input_is_named_with_the_fix(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = judged(fake, tmp_path)
    results = str(tmp_path / "results.jsonl")
    assert review("export", results, "--out", str(tmp_path / "x.json"), "--metric", "nope") == 2
    assert "--metric nope: not judged in these results (they have correctness)" in (
        capsys.readouterr().err
    )
    assert review("export", results, "--out", str(tmp_path / "x.txt")) == 2
    assert "give a .json file" in capsys.readouterr().err

    sheet = tmp_path / "bad.csv"
    sheet.write_text(
        "id,metric,question,answer,human\ns0,correctness,Q?,A,pass\ns1,correctness,Q?,A,maybe\n",
        encoding="utf-8",
    )
    assert review("import", str(sheet), "--db", str(db)) == 2
    assert f"{sheet}:3: label 'maybe' is not a verdict" in capsys.readouterr().err
    with sqlite3.connect(db) as conn:  # nothing of the bad file was kept
        assert conn.execute("SELECT COUNT(*) FROM labels").fetchone() == (0,)

    assert main(["calibrate", "reviewed", "--metric", "correctness", "--db", str(db)]) == 2
    assert "no label for this judge; import the reviewed file first" in capsys.readouterr().err
