"""No secret from a URL in any output, table, log or report: a ``--target`` whose URL carries
a password and a token fails every sample, and every artifact of the run is searched."""

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
