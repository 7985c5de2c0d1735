"""No secret from a URL in any output, table, log or report: a ``--target`` whose URL carries
a password and a token fails every sample, a ``--base-url`` with a password judges them, and
every artifact of each run is searched. (A ``--db`` URL's password: ``test_postgres.py``; a
judge URL with one is refused: ``test_panels.py``.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fakebatches import FakeBatches
from test_daemon import Daemon, daemons, spawn, until
from test_workers import states

from ragjury.cli import main

from evalfakes import script_judges
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, error
from pgserver import PASSWORD as PG_PASSWORD
from pgserver import PostgresServer

__all__ = ["daemons"]  # the fixture, shared with test_daemon

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


# -- every URL of a run at once, as a user runs it --------------------------------------------


def _rag(request: RecordedRequest) -> Reply:
    """The fake's answer to a request no agent sent: the RAG target, which fails one question
    (so its error, which names the URL, is stored) and answers the others."""
    question = (request.body or {}).get("question", "")
    if question == "boom?":
        return error(500, "the index is not loaded")
    return Reply(body={"answer": "In Paris.", "contexts": ["The tower is in Paris."]})


def _ragjury(args: list[str], env: dict[str, str], streams: list[str]) -> int:
    """``python -m ragjury ARGS`` as a user runs it (with its own logging and traces); its
    stdout and stderr go in ``streams``."""
    ran = subprocess.run(
        [sys.executable, "-m", "ragjury", *args], env=env, capture_output=True, text=True
    )
    streams += [ran.stdout, ran.stderr]
    return ran.returncode


def _dump(server: PostgresServer, url: str, dump: Path) -> None:
    """The whole PostgreSQL database as pg_dump writes it (its rows, as a backup keeps them)."""
    env = {**os.environ, "PGPASSWORD": PG_PASSWORD}
    bare = url.replace(f":{PG_PASSWORD}@", "@")
    command = [str(server.bin / "pg_dump"), "--dbname", bare, "--file", str(dump)]
    subprocess.run(command, env=env, check=True)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_no_url_secret_is_in_any_artifact_of_a_run_with_every_kind_of_url(
    fake: FakeOpenAI,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capfd: pytest.CaptureFixture[str],
    daemons: list[Daemon],
    store: str,
) -> None:
    """--target, --base-url (through the batch endpoints: files and batches), --db and the
    OTLP endpoint each carry a password; one evaluate, the same queued and worked by `serve`,
    then status, report and export, and
    the failures of a wrong password and of a database that is down: no file written, no
    byte of the database (SQLite's file, PostgreSQL's pg_dump), no stdout or stderr or log
    line holds any of them."""
    script_judges(fake)
    FakeBatches(fake)
    fake.fallback(_rag)
    work = tmp_path / "work"
    work.mkdir()
    samples = work / "samples.jsonl"
    samples.write_text(
        "".join(
            json.dumps({"id": f"q{n}", "question": q}) + "\n"
            for n, q in enumerate(["Where is the tower?", "boom?"])
        )
    )
    scheme, host = fake.base_url.split("//", 1)
    host = host.split("/", 1)[0]
    secrets = [PASSWORD, TOKEN]
    if store == "sqlite":
        db = str(work / "run.db")
    else:
        db = request.getfixturevalue("pg_url")
        assert f":{PG_PASSWORD}@" in db
        secrets.append(PG_PASSWORD)
    traced = {  # the exporter tries (and fails) within the run, and gives up soon after
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://otel:{PASSWORD}@127.0.0.1:1?token={TOKEN}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    }
    streams: list[str] = []
    base_url = f"{scheme}//alice:{PASSWORD}@{host}/v1"
    # the target: the fake answers it with _rag
    target = f"{scheme}//bob:{PASSWORD}@{host}/v1/chat/completions?token={TOKEN}"
    outputs = {"--out": "results.jsonl", "--summary": "summary.json", "--junit": "junit.xml",
               "--markdown": "summary.md"}  # fmt: skip
    args = ["evaluate", str(samples), "--target", target, "--metrics", "faithfulness"]
    args += ["--base-url", base_url, "--api-key", "k", "--db", db, "--log-level", "debug"]
    args += ["--batch", "--batch-wait", "0", "--batch-poll", "0.05"]
    args += [x for flag, name in outputs.items() for x in (flag, str(work / name))]

    assert _ragjury(args, traced, streams) == 0, streams[-1]
    # the exporter said it failed: "Transient error ... while exporting spans batch" when it
    # retries, "Failed to export spans batch due to timeout" when the 1 s leaves no retry
    assert re.search(r"export(ing)? spans", streams[-1]), streams[-1]
    results = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    outcomes = {r["id"]: r["metrics"]["faithfulness"]["outcome"] for r in results}
    assert outcomes == {"q0": "scored", "q1": "failed"}  # judged through the batch endpoints,
    assert any(r.path.endswith("/batches") for r in fake.requests)  # and the target's error
    failed = next(r for r in results if r["id"] == "q1")["metrics"]["faithfulness"]["reason"]
    assert "bob:***@" in failed  # is stored, its URL redacted
    assert "token=***" in failed
    # samples queued and worked by a daemon, its log at debug level kept with the rest
    answered = work / "answered.jsonl"
    answered.write_text(json.dumps({"id": "a1", "question": "Where is the tower?",
                                    "answer": "In Paris.", "contexts": ["The tower is in Paris."]})
                        + "\n")  # fmt: skip
    assert main(["submit", "--samples", str(answered), "--db", db]) == 0
    log = work / "serve.log"
    serving = ["serve", "--base-url", base_url, "--api-key", "k", "--db", db]
    daemon = Daemon(spawn([*serving, "--log-level", "debug"], log), log)
    daemons.append(daemon)
    until(lambda: states(db)["queued"] + states(db)["processing"] == 0, "the queue worked")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0, daemon.stderr()
    assert "llm_request" in daemon.stderr()  # it judged through the URL with the password
    assert main(["status", "--db", db]) == 0
    assert main(["status", "--db", db, "--json"]) == 0
    assert main(["report", "--db", db, "--out", str(work / "report.html")]) == 0
    assert main(["export", "--db", db, "--results", str(work / "export.jsonl")]) == 0
    if store == "postgresql":
        wrong = db.replace(PG_PASSWORD, f"{PASSWORD}-wrong")
        down = f"postgresql://ragjury:{PASSWORD}@127.0.0.1:1/x"
        assert main(["status", "--db", wrong]) == 2
        assert "cannot log in" in capfd.readouterr().err
        assert main(["status", "--db", down]) == 2
        assert "cannot connect" in capfd.readouterr().err
        _dump(request.getfixturevalue("postgres"), db, work / "dump.sql")
        assert "The tower is in Paris." in (work / "dump.sql").read_text()  # the rows are there

    printed = capfd.readouterr()
    streams += [printed.out, printed.err]
    artifacts = sorted(p for p in work.rglob("*") if p.is_file())
    assert len(artifacts) >= 8, artifacts
    for path in artifacts:
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, (path, secret)
    for text in streams:
        for secret in secrets:
            assert secret not in text, (secret, text[-2000:])
