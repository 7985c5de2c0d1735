"""Batch mode as a user runs it: a generate job equal to its direct run, re-asks in the next
batch or directly, ``batch = true`` in ragjury.toml, a job's batches cancelled."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakebatches import FakeBatches, batched
from test_generate import corpus
from test_generate import run as generate

from ragjury.cli import main

from conftest import read_jsonl, read_summary, script_happy_path
from evalcli import EIFFEL, TOKYO, evaluate, evaluate_args, results, write_jsonl
from evalfakes import script_judges, verdict_reply
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json, error

FAST = ("--batch", "--batch-wait", "0", "--batch-poll", "0.05")


def _chats(fake: FakeOpenAI, agent: str | None = None) -> list[RecordedRequest]:
    return [
        r
        for r in fake.requests
        if r.path.endswith("/chat/completions") and (agent is None or r.agent == agent)
    ]


def _metrics(folder: Path) -> dict[str, Any]:
    return {key: row["metrics"] for key, row in results(folder).items()}


def test_a_batch_generate_job_writes_the_records_of_a_direct_run(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    direct, batch = tmp_path / "direct", tmp_path / "batch"
    direct.mkdir()
    batch.mkdir()
    docs = corpus(tmp_path)  # one corpus: the records name its files
    assert generate(fake, direct, docs=docs) == 0
    direct_calls = len(_chats(fake))
    fake.reset()
    script_happy_path(fake)
    batches = FakeBatches(fake)

    assert generate(fake, batch, *FAST, docs=docs) == 0

    def records(folder: Path, name: str) -> list[dict[str, Any]]:
        return sorted(read_jsonl(folder / name), key=lambda r: str(r["question"]))

    assert records(batch, "kept.jsonl") == records(direct, "kept.jsonl")
    assert records(batch, "rejected.jsonl") == records(direct, "rejected.jsonl")
    assert len(records(batch, "kept.jsonl")) == 3
    chats = _chats(fake)
    assert len(chats) == direct_calls
    assert all(batched(r) for r in chats)
    assert len(batches.created) >= 2  # the drafts, then the critiques they caused
    summary = read_summary(batch)
    assert summary["llm_calls"] == direct_calls
    assert summary["calls_by_mode"]["batch"]["llm_calls"] == direct_calls
    assert summary["calls_by_mode"]["direct"]["llm_calls"] == 0


def _invalid_verdicts_first() -> list[Reply]:
    """The verdict judge's first answer names no statement (it does not validate); every
    later one is the scripted verdicts."""
    bad = {"statement_index": 99, "reason": "scripted", "evidence": "", "supported": False}
    return [chat_json({"verdicts": [bad]})]


def _reask(request: RecordedRequest) -> bool:
    """Whether a chat request carries a validation error back to the model (a re-ask)."""
    messages = (request.body or {}).get("messages") or []
    return len(messages) > 2


def test_an_answer_that_does_not_validate_is_asked_again_in_the_next_batch(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [TOKYO])
    direct = tmp_path / "direct"
    direct.mkdir()
    assert evaluate(fake, direct, samples, "--metrics", "faithfulness") == 0
    fake.reset()
    script_judges(fake)
    fake.route("verdict_judge", *_invalid_verdicts_first(), verdict_reply)
    FakeBatches(fake)

    assert evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", *FAST) == 0

    assert _metrics(tmp_path) == _metrics(direct)
    verdicts = _chats(fake, "verdict_judge")
    assert len(verdicts) == 2
    first, again = verdicts
    assert not _reask(first)
    assert _reask(again)
    assert batched(first)
    assert batched(again)
    assert first.headers["x-fake-batch"] != again.headers["x-fake-batch"]


def test_with_batch_reask_direct_the_re_ask_is_a_direct_call(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    fake.route("verdict_judge", *_invalid_verdicts_first(), verdict_reply)
    FakeBatches(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [TOKYO])

    assert (
        evaluate(
            fake, tmp_path, samples, "--metrics", "faithfulness", *FAST, "--batch-reask", "direct"
        )
        == 0
    )

    assert _metrics(tmp_path)["tokyo"]["faithfulness"]["outcome"] == "scored"
    first, again = _chats(fake, "verdict_judge")
    assert batched(first)
    assert not _reask(first)
    assert not batched(again)
    assert _reask(again)
    modes = read_summary(tmp_path)["calls_by_mode"]
    assert modes["direct"]["llm_calls"] == 1  # the re-ask, at the direct price
    assert modes["batch"]["llm_calls"] == 2  # the splitter and the verdicts' first answer


def test_batch_true_in_ragjury_toml_turns_batch_mode_on(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script_judges(fake)
    batches = FakeBatches(fake)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ragjury.toml").write_text(
        "batch = true\nbatch_wait = 0\nbatch_poll = 0.05\nbatch_size = 1\n", encoding="utf-8"
    )
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL])

    assert evaluate(fake, tmp_path, samples, "--metrics", "correctness") == 0

    assert _metrics(tmp_path)["eiffel"]["correctness"]["outcome"] == "scored"
    chats = _chats(fake)
    assert chats
    assert all(batched(r) for r in chats)
    assert all(
        len(batches.files[b.input_file_id].splitlines()) == 1 for b in batches.batches.values()
    )  # batch_size = 1
    assert json.loads((tmp_path / "summary.json").read_text())["calls_by_mode"]["batch"][
        "llm_calls"
    ] == len(chats)


def test_a_batch_dry_run_prices_the_calls_at_the_batch_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAGJURY_BASE_URL", "RAGJURY_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"m": {"input": 2.0, "output": 8.0, "batch": {"input": 0.5, "output": 2.0}}})
    )
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    extra = ("--metrics", "faithfulness,correctness", "--model", "m", "--prices", str(prices))

    assert evaluate(None, tmp_path, samples, *extra, "--dry-run") == 0
    direct = read_summary(tmp_path)
    assert evaluate(None, tmp_path, samples, *extra, "--dry-run", "--batch") == 0
    batch = read_summary(tmp_path)

    assert batch["llm_calls"] == direct["llm_calls"] > 0
    tokens = (batch["prompt_tokens"], batch["completion_tokens"])
    assert batch["cost_usd"] == pytest.approx((tokens[0] * 0.5 + tokens[1] * 2.0) / 1e6, abs=1e-6)
    assert batch["direct_cost_usd"] == direct["cost_usd"]
    assert direct["cost_usd"] == pytest.approx((tokens[0] * 2.0 + tokens[1] * 8.0) / 1e6, abs=1e-6)
    assert batch["calls_by_mode"]["batch"]["llm_calls"] == batch["llm_calls"]
    assert direct["calls_by_mode"]["direct"]["llm_calls"] == direct["llm_calls"]
    assert {s["mode"] for s in batch["by_stage"].values()} == {"batch"}
    out = " ".join("".join(capsys.readouterr()).split())
    assert "(batch)" in out
    assert f"Batch stages at the batch price; all direct: ${direct['cost_usd']:.4f}" in out


def test_the_summary_shows_calls_and_cost_per_mode_in_json_markdown_and_the_terminal_line(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    fake.route("verdict_judge", *_invalid_verdicts_first(), verdict_reply)
    FakeBatches(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [TOKYO])
    markdown = tmp_path / "summary.md"
    capsys.readouterr()

    extra = ("--batch-reask", "direct", "--markdown", str(markdown), "--model", "gpt-4o-mini")

    assert evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", *FAST, *extra) == 0

    summary = read_summary(tmp_path)
    modes = summary["calls_by_mode"]
    assert modes["direct"]["llm_calls"] + modes["batch"]["llm_calls"] == summary["llm_calls"]
    assert modes["direct"]["cost_usd"] + modes["batch"]["cost_usd"] == pytest.approx(
        summary["cost_usd"], abs=1e-6
    )
    # the same tokens cost half through the batch: gpt-4o-mini's default batch price
    batch = modes["batch"]
    full = batch["prompt_tokens"] * 0.15 + batch["completion_tokens"] * 0.6
    assert batch["cost_usd"] == pytest.approx(full / 2 / 1e6, abs=1e-6)
    with sqlite3.connect(tmp_path / "ragjury.db") as db:  # what budgets count: the call records
        (recorded,) = db.execute("SELECT SUM(cost_usd) FROM llm_calls").fetchone()
    assert recorded == pytest.approx(summary["cost_usd"], abs=1e-6)
    line = capsys.readouterr().err
    assert "(direct 1 calls $" in line
    assert ", batch 2 calls $" in line
    assert "direct 1 calls" in markdown.read_text(encoding="utf-8")
    assert "batch 2 calls" in markdown.read_text(encoding="utf-8")


def test_batches_cancel_ends_a_jobs_batches_and_the_running_job_goes_on_directly(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL, TOKYO])
    direct = tmp_path / "direct"
    direct.mkdir()
    assert evaluate(fake, direct, samples) == 0
    fake.reset()
    script_judges(fake)
    batches = FakeBatches(fake, delay=3600)  # the provider would answer in an hour
    db = str(tmp_path / "ragjury.db")
    argv = [sys.executable, "-m", "ragjury", *evaluate_args(fake, tmp_path, samples, *FAST)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not batches.polls and time.monotonic() < deadline:
            time.sleep(0.05)  # a real process on its own clock: nothing here to await
        assert batches.polls, "the run submitted and polled no batch"
        capsys.readouterr()
        assert main(["status", "--json", "--db", db]) == 0
        (job,) = {b["job"] for b in json.loads(capsys.readouterr().out)["batches"]}
        out_before = set(batches.created)

        assert main(["batches", "cancel", job, "--db", db, "--base-url", fake.base_url]) == 0

        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert process.returncode == 0, err.decode()
    said = " ".join(capsys.readouterr().err.split())
    assert f"cancelled {len(out_before)} batch(es) of job {job}" in said
    assert {b.status for b in batches.batches.values()} == {"cancelled"}
    assert set(batches.created) == out_before  # nothing submitted after the cancel
    assert _metrics(tmp_path) == _metrics(direct)
    chats = _chats(fake)
    assert chats
    assert not any(batched(r) for r in chats)  # the cancelled batches answered nothing
    modes = read_summary(tmp_path)["calls_by_mode"]
    assert modes["batch"]["llm_calls"] == 0
    assert modes["direct"]["llm_calls"] == len(chats)


def test_batches_cancel_names_a_job_that_is_not_there(
    tmp_path: Path, fake: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = write_jsonl(tmp_path / "s.jsonl", [TOKYO])
    assert evaluate(fake, tmp_path, samples, "--metrics", "correctness") == 0
    capsys.readouterr()

    assert main(["batches", "cancel", "nojob", "--db", str(tmp_path / "ragjury.db")]) == 2

    err = capsys.readouterr().err
    assert "there is no job 'nojob'" in err
    assert "ragjury status" in err


def test_a_batch_run_starts_enough_samples_to_fill_a_batch(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    batches = FakeBatches(fake)
    records = [
        {**TOKYO, "id": f"s{i}", "question": f"{TOKYO['question']} ({i})"} for i in range(10)
    ]
    samples = write_jsonl(tmp_path / "s.jsonl", records)
    extra = ("--concurrency", "1", "--batch-size", "10", "--batch-wait", "30")

    assert evaluate(fake, tmp_path, samples, "--metrics", "correctness", *FAST, *extra) == 0

    # --concurrency 1 starts 4 samples at once in a direct run; a batch run starts up to
    # --batch-size, so one batch carries every sample's request (no 30 s wait for more)
    (only,) = batches.batches.values()
    assert len(batches.files[only.input_file_id].splitlines()) == 10


def test_a_batch_the_endpoint_failed_to_create_is_submitted_again_once(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    batches = FakeBatches(fake)
    batches.refuse_create = error(500, "the batch service hiccuped")
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL])

    assert evaluate(fake, tmp_path, samples, "--metrics", "correctness", *FAST) == 0

    assert _metrics(tmp_path)["eiffel"]["correctness"]["outcome"] == "scored"
    creates = [r for r in fake.requests if r.path.rstrip("/").endswith("/batches")]
    assert [r.method for r in creates].count("POST") == 2  # refused, then made
    assert len(batches.created) == 1


def test_a_request_no_batch_answers_fails_its_metric_after_the_transport_retries(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    batches = FakeBatches(fake)
    batches.expire_after = 0  # every batch expires having answered nothing
    samples = write_jsonl(tmp_path / "s.jsonl", [EIFFEL])
    extra = ("--metrics", "correctness", "--max-transport-retries", "2")

    # exit 4: nothing was judged (its one judgement failed), said with each failure's error
    assert evaluate(fake, tmp_path, samples, *FAST, *extra) == 4

    correctness = _metrics(tmp_path)["eiffel"]["correctness"]
    assert correctness["outcome"] == "failed"
    assert "the batch ended expired without answering it" in json.dumps(correctness)
    assert len(batches.created) == 3  # the first try and --max-transport-retries 2
