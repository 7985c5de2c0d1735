"""`ragjury evaluate --batch`: the LLM calls go through the endpoint's batch API, the steps
that asked wait in the store, and the results equal a direct run's."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakebatches import FakeBatches, batched

from ragjury.cli import main

from conftest import read_summary
from evalcli import EIFFEL, REFUSAL, TOKYO, evaluate, results, write_jsonl
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, RecordedRequest

FAST = ("--batch", "--batch-wait", "0", "--batch-poll", "0.05")


def _chats(fake: FakeOpenAI) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.path.endswith("/chat/completions")]


def _metrics(tmp_path: Path) -> dict[str, Any]:
    return {key: row["metrics"] for key, row in results(tmp_path).items()}


def test_a_batch_run_gives_the_results_of_a_direct_run_with_no_direct_call(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO, REFUSAL])
    direct, batch = tmp_path / "direct", tmp_path / "batch"
    direct.mkdir()
    batch.mkdir()
    assert evaluate(fake, direct, samples) == 0
    direct_calls = len(_chats(fake))
    fake.reset()
    script_judges(fake)
    batches = FakeBatches(fake)

    assert evaluate(fake, batch, samples, *FAST) == 0

    assert _metrics(batch) == _metrics(direct)
    chats = _chats(fake)
    assert chats
    assert all(batched(r) for r in chats)
    assert len(chats) == direct_calls
    assert batches.created  # the splitter's requests, then the verdicts that needed them
    summary = read_summary(batch)
    assert summary["llm_calls"] == direct_calls


def test_a_request_the_batch_fails_becomes_a_typed_failure_of_its_metric(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    batches = FakeBatches(fake)
    batches.fail = lambda custom_id: (
        "model overloaded" if custom_id.startswith("correctness_judge:") else None
    )
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL])

    assert evaluate(fake, tmp_path, samples, *FAST) == 0

    correctness = results(tmp_path)["eiffel"]["metrics"]["correctness"]
    assert correctness["outcome"] == "failed"
    assert "the batch API failed the request: 400: model overloaded" in json.dumps(correctness)
    assert results(tmp_path)["eiffel"]["metrics"]["faithfulness"]["outcome"] == "scored"


def test_malformed_lines_and_an_expired_batch_are_asked_again_in_the_next_batch(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    direct = tmp_path / "direct"
    direct.mkdir()
    assert evaluate(fake, direct, samples) == 0
    fake.reset()
    script_judges(fake)
    batches = FakeBatches(fake)
    garbled: set[str] = set()

    def once(custom_id: str) -> bool:
        first = custom_id not in garbled
        garbled.add(custom_id)
        return first and custom_id.startswith("verdict_judge:")

    batches.malformed = once
    batches.expire_after = 1  # every batch answers one line, then expires

    assert evaluate(fake, tmp_path, samples, *FAST) == 0

    assert _metrics(tmp_path) == _metrics(direct)
    assert len(batches.created) > 4


def test_an_endpoint_without_a_batch_api_is_named_in_a_clear_error(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL])

    assert evaluate(fake, tmp_path, samples, *FAST) == 2

    err = capsys.readouterr().err
    assert "--batch needs the endpoint's /v1/files" in err
    assert fake.base_url in err
    assert _chats(fake) == []


def test_killing_the_run_while_batches_are_out_loses_nothing_and_submits_nothing_twice(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO, REFUSAL])
    direct = tmp_path / "direct"
    direct.mkdir()
    assert evaluate(fake, direct, samples) == 0
    fake.reset()
    script_judges(fake)
    batches = FakeBatches(fake, delay=3600)  # nothing comes back while the first run lives
    argv = [
        sys.executable, "-m", "ragjury", "evaluate", str(samples),
        "--out", str(tmp_path / "results.jsonl"), "--db", str(tmp_path / "ragjury.db"),
        "--base-url", fake.base_url, "--api-key", "k", *FAST,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not batches.polls and time.monotonic() < deadline:
            time.sleep(0.05)  # a real process on its own clock: nothing here to await
        assert batches.polls, "the first run submitted and polled no batch"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        parked = db.execute("SELECT COUNT(*) FROM batch_waits").fetchone()[0]
    assert parked > 0
    capsys.readouterr()
    assert main(["status", "--json", "--db", str(tmp_path / "ragjury.db")]) == 0
    in_flight = json.loads(capsys.readouterr().out)["batches"]
    assert {b["batch"] for b in in_flight} <= {*batches.created, None}
    assert in_flight
    batches.delay = 0

    assert evaluate(fake, tmp_path, samples, *FAST) == 0

    assert _metrics(tmp_path) == _metrics(direct)
    submitted = [
        json.loads(line)["custom_id"]
        for batch in batches.batches.values()
        for line in batches.files[batch.input_file_id].decode().splitlines()
    ]
    assert len(submitted) == len(set(submitted))  # no request went out twice
