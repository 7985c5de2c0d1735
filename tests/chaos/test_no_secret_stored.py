"""No secret from a URL in any output, table, log or report: a ``--target`` whose URL carries
a password and a token fails every sample, a ``--base-url`` with a password judges them, and
every artifact of each run is searched. (A ``--db`` URL's password: ``test_postgres.py``; a
judge URL with one is refused: ``test_panels.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragjury.cli import main

from evalfakes import script_judges
from fakeopenai import FakeOpenAI

PASSWORD, TOKEN = "s3cretPassw0rd", "t0kenValue42"


def test_a_target_url_secret_is_in_no_artifact_of_the_run(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"id": "q1", "question": "Where is the tower?"}) + "\n")
    host = fake.base_url.split("//", 1)[1].split("/", 1)[0]
    target = f"http://alice:{PASSWORD}@{host}/no-such-rag?token={TOKEN}"
    db = tmp_path / "run.db"
    outputs = {
        "--out": tmp_path / "results.jsonl",
        "--summary": tmp_path / "summary.json",
        "--junit": tmp_path / "junit.xml",
        "--markdown": tmp_path / "summary.md",
    }
    flags = [str(x) for pair in outputs.items() for x in pair]
    endpoint = ["--base-url", fake.base_url, "--api-key", "k", "--db", str(db)]

    main(["evaluate", str(samples), "--target", target, *flags, *endpoint, "--log-level", "debug"])
    report, export = tmp_path / "report.html", tmp_path / "export.jsonl"
    assert main(["report", "--db", str(db), "--out", str(report)]) == 0
    assert main(["export", "--db", str(db), "--results", str(export)]) == 0

    record = json.loads(outputs["--out"].read_text().splitlines()[0])
    assert record["metrics"]["faithfulness"]["outcome"] == "failed"  # the target was asked
    assert "***" in record["metrics"]["faithfulness"]["reason"]
    printed = capsys.readouterr()
    artifacts = [*outputs.values(), report, export, db]
    artifacts += [
        Path(str(db) + suffix) for suffix in ("-wal", "-shm") if Path(str(db) + suffix).exists()
    ]
    for path in artifacts:
        data = path.read_bytes()
        assert PASSWORD.encode() not in data, path
        assert TOKEN.encode() not in data, path
    for stream in (printed.out, printed.err):
        assert PASSWORD not in stream
        assert TOKEN not in stream


def test_a_base_url_secret_is_in_no_artifact_of_the_run(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = tmp_path / "samples.jsonl"
    sample = {"id": "q1", "question": "Where is the tower?", "answer": "In Paris."}
    samples.write_text(json.dumps({**sample, "contexts": ["The tower is in Paris."]}) + "\n")
    host = fake.base_url.split("//", 1)[1]
    db = tmp_path / "run.db"
    outputs = {
        "--out": tmp_path / "results.jsonl",
        "--summary": tmp_path / "summary.json",
        "--junit": tmp_path / "junit.xml",
        "--markdown": tmp_path / "summary.md",
    }
    flags = [str(x) for pair in outputs.items() for x in pair]
    endpoint = ["--base-url", f"http://alice:{PASSWORD}@{host}", "--api-key", "k"]

    args = ["evaluate", str(samples), "--metrics", "faithfulness", *flags, *endpoint]
    assert main([*args, "--db", str(db), "--log-level", "debug"]) == 0
    report, export = tmp_path / "report.html", tmp_path / "export.jsonl"
    assert main(["report", "--db", str(db), "--out", str(report)]) == 0
    assert main(["export", "--db", str(db), "--results", str(export)]) == 0

    record = json.loads(outputs["--out"].read_text().splitlines()[0])
    assert record["metrics"]["faithfulness"]["outcome"] == "scored"  # the endpoint was used
    printed = capsys.readouterr()
    for path in [*outputs.values(), report, export, db]:
        assert PASSWORD.encode() not in path.read_bytes(), path
    assert PASSWORD not in printed.out + printed.err


@pytest.mark.parametrize("secret_part", [f"alice:{PASSWORD}@", f"?token={TOKEN}"])
def test_a_judge_url_with_a_secret_is_refused_before_any_call_without_repeating_it(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str], secret_part: str
) -> None:
    script_judges(fake)
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"id": "q1", "question": "Q?", "answer": "A."}) + "\n")
    scheme, rest = fake.base_url.split("//", 1)
    judge_url = f"{scheme}//{secret_part}{rest}" if "@" in secret_part else fake.base_url
    judge_url += "" if "@" in secret_part else secret_part
    judges = f"a=m1@{judge_url},b=m2@{fake.base_url}"
    args = ["evaluate", str(samples), "--metrics", "faithfulness", "--judges", judges]
    args += ["--base-url", fake.base_url, "--api-key", "k", "--db", str(tmp_path / "run.db")]
    args += ["--out", str(tmp_path / "results.jsonl")]

    assert main(args) == 2  # a configuration error, found before any LLM call
    printed = capsys.readouterr()
    assert "judge 'a'" in printed.err
    assert "--api-key" in printed.err
    assert PASSWORD not in printed.out + printed.err
    assert TOKEN not in printed.out + printed.err
    assert fake.requests == []
