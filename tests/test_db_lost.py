"""A run whose PostgreSQL server goes away and stays away: it waits ``--db-reconnect`` seconds,
then stops with exit code 7 and a sentence that says what to do; nothing finished is lost and
the same command finishes the job once the server is back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import read_jsonl
from evalcli import evaluate_args, write_jsonl
from evalfakes import script_judges
from fakeopenai import Behaviour, FakeOpenAI
from pgserver import PostgresServer, binaries

N = 12


def test_a_run_that_loses_its_database_past_db_reconnect_exits_7_and_resumes_later(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    found = binaries()
    if found is None:
        pytest.skip("no PostgreSQL binaries")
    server = PostgresServer(found)
    try:
        url = server.database()
        script_judges(fake)
        fake.behave(Behaviour(latency=0.3))  # slow enough to be mid-run when the server goes
        records: list[dict[str, Any]] = [
            {"id": f"s{i}", "question": f"What is setting {i}?",
             "answer": f"Setting {i} is value {i}.", "contexts": [f"Setting {i} is value {i}."]}
            for i in range(N)
        ]  # fmt: skip
        samples = write_jsonl(tmp_path / "samples.jsonl", records)
        args = evaluate_args(fake, tmp_path, samples, "--metrics", "faithfulness")
        args += ["--db", url, "--db-reconnect", "2", "--concurrency", "2"]
        env = {**os.environ, "RAGJURY_LOG_LEVEL": "warning"}
        run = subprocess.Popen(
            [sys.executable, "-m", "ragjury", *args], env=env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while len(fake.requests) < 4:  # under way: some samples judged, most not
            assert run.poll() is None, "the run ended before the server went away"
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        server.stop("immediate")
        _, stderr = run.communicate(timeout=120)

        assert run.returncode == 7, stderr
        assert "could not be reached for 2 s" in stderr
        assert "start again when it is back" in stderr
        assert "Traceback" not in stderr  # the driver's retries are not printed

        server.start()
        fake.behave(None)
        sent = len(fake.requests)
        done = subprocess.run(
            [sys.executable, "-m", "ragjury", *args], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        scored = read_jsonl(tmp_path / "results.jsonl")
        assert sorted(r["id"] for r in scored) == sorted(r["id"] for r in records)
        assert all(r["metrics"]["faithfulness"]["outcome"] == "scored" for r in scored)
        assert len(fake.requests) - sent < 2 * N  # what the first run finished was kept
    finally:
        server.close()
