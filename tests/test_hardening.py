"""What a fault and bad-input campaign found: no input jams or crashes a command, exit codes
CI can trust, permanent errors are not retried, a hung endpoint fails in reasonable time with
a message that names --timeout, and a killed run is on the books (that no secret is stored or
logged: ``test_secrets_redacted.py``)."""

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
from test_daemon import Daemon, daemons, endpoint, serve, states, until

from ragjury.cli import main

from conftest import read_jsonl, read_summary, script_happy_path
from evalfakes import script_judges
from fakeopenai import FakeOpenAI, chat, chat_json, error

__all__ = ["daemons"]  # the fixture, shared with test_daemon

BAD = Path(__file__).parent / "data" / "bad"


def evaluate(fake: FakeOpenAI | None, tmp_path: Path, samples: Path, *extra: str) -> int:
    args = ["evaluate", str(samples), "--out", str(tmp_path / "results.jsonl")]
    args += ["--summary", str(tmp_path / "summary.json"), "--db", str(tmp_path / "run.db")]
    return main([*args, *(endpoint(fake) if fake else []), *extra])


def samples_file(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


SAMPLE = {
    "id": "s1",
    "question": "Capital of Japan?",
    "answer": "Tokyo is the capital of Japan.",
    "contexts": ["Tokyo is the capital of Japan."],
}


# -- bad input ------------------------------------------------------------------------------


def test_bad_sample_records_are_repaired_or_named_and_the_rest_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert evaluate(None, tmp_path, BAD / "samples.jsonl", "--metrics", "keywords") == 1
    err = capsys.readouterr().err
    judged = {r["id"]: r for r in read_jsonl(tmp_path / "results.jsonl")}
    assert set(judged) == {"ok1", "surrogate", "nul", "ok2"}  # every good record, repaired
    assert "\ufffd" in judged["surrogate"]["answer"]
    assert "\x00" not in judged["nul"]["answer"]
    assert all(r["metrics"]["keywords"]["outcome"] == "scored" for r in judged.values())
    # for a person: a sentence on stderr, not a JSON log line (stderr is not a terminal here)
    assert "ragjury: warning: line 2: " in err
    assert "replaced by U+FFFD, so the text can be stored and sent" in err
    assert "input_repaired" not in err
    assert "samples.jsonl:4" in err  # the wrong types, named by line
    assert "samples.jsonl:5" in err  # a list where a record should be


def test_bad_documents_are_repaired_or_named_and_a_corrupt_pdf_skipped_quietly(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_happy_path(fake)
    out = tmp_path / "kept.jsonl"
    out.write_text("an earlier output\n", encoding="utf-8")
    args = ["generate", str(BAD / "documents.jsonl"), str(BAD / "corrupt.pdf"), "--out", str(out)]
    args += ["--db", str(tmp_path / "run.db"), "--whole-documents", *endpoint(fake)]
    assert main(args) == 0
    err = capsys.readouterr().err
    kept = read_jsonl(out)
    assert {r["question"] for r in kept} == {
        "What is setting alpha?",
        "What is setting \ufffd beta?",
        "What is setting gamma?",
    }
    assert "documents.jsonl:4" in err  # the record whose text is a number
    assert "corrupt.pdf" in err
    assert "EOF marker" not in err.replace("unreadable PDF", "")  # pypdf's own noise is quiet


def test_submit_and_serve_take_bad_records_and_finish_the_queue(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_judges(fake)
    db = tmp_path / "queue.db"
    args = ["submit", "--samples", str(BAD / "samples.jsonl"), "--db", str(db)]
    assert main([*args, "--metrics", "keywords,faithfulness"]) == 0
    daemon = serve(daemons, fake, db, "bad")
    until(lambda: states(db)["done"] == 4, "the four good records done")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    assert states(db) == {"done": 4}


def test_a_crash_never_truncates_an_earlier_output(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    out.write_text('{"id": "from an earlier run"}\n', encoding="utf-8")
    samples = samples_file(tmp_path, [SAMPLE])
    # nothing listens there: the run stops (nothing judged) after opening --out
    dead = ["--base-url", "http://127.0.0.1:9/v1", "--api-key", "k", "--max-transport-retries", "0"]
    code = main(
        ["evaluate", str(samples), "--out", str(out), "--db", str(tmp_path / "r.db"), *dead]
    )
    assert code == 4
    assert out.read_text(encoding="utf-8") == '{"id": "from an earlier run"}\n'
    assert not list(tmp_path.glob(".results.jsonl.*"))  # no partial file left behind


# -- exit codes -----------------------------------------------------------------------------


def test_exit_code_4_when_every_judgement_failed(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.fallback(error(503, "overloaded"))  # answered, but always failing
    samples = samples_file(tmp_path, [SAMPLE, {**SAMPLE, "id": "s2"}])
    code = evaluate(fake, tmp_path, samples, "--max-transport-retries", "0")
    assert code == 4
    assert read_summary(tmp_path)["metrics"]["faithfulness"]["failed"] == 2


def test_exit_code_3_when_more_failed_than_max_failed(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    broken = {**SAMPLE, "id": "s2", "answer": "Tokyo is the capital."}
    fake.route("statement_splitter", chat_json({"statements": ["Tokyo is the capital."]}))
    fake.route("verdict_judge", error(500))  # every verdict fails: one failure per sample
    samples = samples_file(tmp_path, [SAMPLE, broken])
    args = ("--metrics", "faithfulness,keywords", "--max-transport-retries", "0")
    assert evaluate(fake, tmp_path, samples, *args, "--max-failed", "5") == 0
    assert evaluate(fake, tmp_path, samples, *args, "--max-failed", "1") == 3


# -- permanent errors, prompt size, hung endpoints -----------------------------------------


def test_a_400_is_permanent_quoted_and_not_sent_again_by_a_rerun(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    message = "This model's maximum context length is 8192 tokens. Please reduce the length."
    fake.fallback(error(400, message))
    samples = samples_file(tmp_path, [SAMPLE])
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness")
    failed = read_jsonl(tmp_path / "results.jsonl")[0]["metrics"]["faithfulness"]
    assert failed["outcome"] == "failed"
    assert "400" in failed["error"]["message"]
    assert "maximum context length is 8192 tokens" in failed["error"]["message"]
    assert failed["error"]["transient"] is False
    assert len(fake.requests) == 1  # not retried
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness")
    assert len(fake.requests) == 1  # nor asked again by the same command


def test_a_prompt_larger_than_max_prompt_tokens_fails_without_a_request(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    huge = {**SAMPLE, "answer": "Tokyo is the capital. " * 5000}  # about 27,000 tokens
    samples = samples_file(tmp_path, [huge])
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", "--max-prompt-tokens", "4000")
    failed = read_jsonl(tmp_path / "results.jsonl")[0]["metrics"]["faithfulness"]
    assert failed["outcome"] == "failed"
    assert "more than --max-prompt-tokens 4,000" in failed["reason"]
    assert fake.requests == []
    # the message says to raise the limit: the same command with a higher one judges it
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", "--max-prompt-tokens", "60000")
    scored = read_jsonl(tmp_path / "results.jsonl")[0]["metrics"]["faithfulness"]
    assert scored["outcome"] == "scored"
    assert fake.requests


def test_a_hung_endpoint_fails_after_two_requests_naming_timeout(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.fallback(chat_json({"statements": []}, delay=5.0))
    samples = samples_file(tmp_path, [SAMPLE])
    started = time.monotonic()
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", "--timeout", "0.5")
    assert time.monotonic() - started < 4.5  # not --max-transport-retries (6) timeouts
    failed = read_jsonl(tmp_path / "results.jsonl")[0]["metrics"]["faithfulness"]
    assert "did not answer within --timeout 0.5 s (2 request(s))" in failed["reason"]
    assert len(fake.requests) == 2


# -- a killed run ---------------------------------------------------------------------------


def test_a_killed_runs_calls_in_flight_are_on_the_books_and_the_run_is_closed(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.fallback(chat_json({"statements": []}, delay=30.0))
    samples = samples_file(tmp_path, [SAMPLE, {**SAMPLE, "id": "s2"}])
    db = tmp_path / "run.db"
    command = [sys.executable, "-m", "ragjury", "evaluate", str(samples), "--out",
               str(tmp_path / "r.jsonl"), "--db", str(db), *endpoint(fake),
               "--metrics", "faithfulness"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until(lambda: fake.in_flight == 2, "both calls in flight")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    with sqlite3.connect(db) as conn:
        in_flight = conn.execute("SELECT COUNT(*) FROM llm_calls WHERE error LIKE 'in flight%'")
        assert in_flight.fetchone() == (2,)  # recorded when sent
    fake.fallback(chat_json({"statements": []}))
    # resumes; every answer states nothing, so nothing was applicable: exit 4 says so
    assert evaluate(fake, tmp_path, samples, "--metrics", "faithfulness") == 4
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT command, finished_at, summary FROM runs ORDER BY started_at")
        first, second = runs.fetchall()
        killed = conn.execute("SELECT COUNT(*) FROM llm_calls WHERE error LIKE '%was killed%'")
        assert killed.fetchone() == (2,)
    assert first[1] is not None
    assert json.loads(first[2])["killed"] is True
    assert second[1] is not None


def test_a_killed_runs_answered_calls_count_in_the_job_totals_when_it_resumes(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """kill -9 while one call waits for its re-ask and another for its first answer: the
    answer the endpoint gave before the kill (tokens and cost) is in the job's totals."""
    hang = chat_json({"statements": []}, delay=30.0)
    fake.route("statement_splitter", chat("not json", prompt_tokens=70, completion_tokens=30), hang)
    samples = samples_file(tmp_path, [SAMPLE, {**SAMPLE, "id": "s2"}])
    priced = ("--metrics", "faithfulness", "--model", "gpt-4o-mini")
    command = [sys.executable, "-m", "ragjury", "evaluate", str(samples), "--out",
               str(tmp_path / "r.jsonl"), "--db", str(tmp_path / "run.db"), *endpoint(fake),
               *priced]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # one answered (it did not parse) and re-asked; the other sample's first request
        until(lambda: len(fake.requests) == 3 and fake.in_flight == 2, "a re-ask in flight")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    fake.reset()
    script_judges(fake)

    assert evaluate(fake, tmp_path, samples, *priced) == 0

    summary = read_summary(tmp_path)
    served = fake.stats()
    assert summary["llm_calls"] == served["chat_requests"]  # this run's own
    totals = summary["job_totals"]
    assert totals["runs"] == 2
    assert totals["llm_calls"] == served["chat_requests"] + 1  # and the answer before the kill
    assert totals["prompt_tokens"] == served["prompt_tokens"] + 70
    assert totals["completion_tokens"] == served["completion_tokens"] + 30
    assert totals["cost_usd"] > summary["cost_usd"]


def test_a_keywords_only_run_killed_while_it_takes_the_job_in_keeps_its_chunks_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job that calls no LLM is judged as it is stored, committed a chunk at a time: kill -9
    once a chunk is committed keeps that chunk's samples judged (the job under a key that
    says it is unfinished); the same command stores and judges only the rest, the samples of
    the first run untouched, and writes what an unkilled run writes."""
    n = 12000
    records = [{**SAMPLE, "id": f"s{i}", "must_contain": ["Tokyo" if i % 3 else "Osaka"]}
               for i in range(n)]  # fmt: skip
    samples = samples_file(tmp_path, records)
    db = tmp_path / "run.db"
    command = [sys.executable, "-m", "ragjury", "evaluate", str(samples), "--out",
               str(tmp_path / "r.jsonl"), "--db", str(db), "--metrics", "keywords"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def query(sql: str) -> list[Any]:
        if not db.exists():
            return []
        try:
            with sqlite3.connect(db, timeout=30) as conn:
                return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:  # its schema not made yet
            return []

    try:
        until(lambda: bool(query("SELECT 1 FROM items LIMIT 1")), "a chunk of the job committed")
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    [(key,)] = query("SELECT key FROM jobs")
    assert key.startswith("storing ")
    before = query("SELECT id, key, state, finished_at FROM items ORDER BY id")
    kept = query("SELECT rowid, id, record, scored FROM samples ORDER BY rowid")
    assert 0 < len(before) < n
    assert {row[2] for row in before} == {"done"}
    assert len(kept) == len(before)
    # status says the job was not stored in full and what to do, not that it is all done
    capsys.readouterr()
    assert main(["status", "--db", str(db), "--json"]) == 0
    [job] = json.loads(capsys.readouterr().out)["jobs"]
    assert (job["done"], job["stored_in_full"]) == (len(before), False)
    assert main(["status", "--db", str(db)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"stopped after {len(before)} of them; run the same command again" in shown
    assert evaluate(None, tmp_path, samples, "--metrics", "keywords") == 0
    ids = [r["id"] for r in read_jsonl(tmp_path / "results.jsonl")]
    assert ids == [f"s{i}" for i in range(n)]
    [(key,)] = query("SELECT key FROM jobs")
    assert not key.startswith("storing ")
    capsys.readouterr()
    assert main(["status", "--db", str(db), "--json"]) == 0
    [job] = json.loads(capsys.readouterr().out)["jobs"]
    assert (job["done"], job["stored_in_full"]) == (n, True)
    assert query("SELECT COUNT(*), COUNT(DISTINCT key) FROM items") == [(n, n)]
    # the first run's samples as it stored them: not judged again
    assert query(f"SELECT id, key, state, finished_at FROM items WHERE id <= {before[-1][0]}"
                 " ORDER BY id") == before  # fmt: skip
    assert query(f"SELECT rowid, id, record, scored FROM samples WHERE rowid <= {kept[-1][0]}"
                 " ORDER BY rowid") == kept  # fmt: skip
    assert query("SELECT COUNT(*) FROM samples") == [(n,)]
    claims = query("SELECT MAX(attempts), COUNT(lease_owner) FROM items")
    assert claims == [(0, 0)]  # each stored ended, never claimed
    summary = read_summary(tmp_path)
    assert summary["items_done_now"] == n - len(before)
    assert summary["metrics"]["keywords"]["scored"] == n
    assert summary["metrics"]["keywords"]["pass_rate"] == pytest.approx(2 / 3, abs=1e-3)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert evaluate(None, fresh, samples, "--metrics", "keywords") == 0
    assert (fresh / "results.jsonl").read_bytes() == (tmp_path / "results.jsonl").read_bytes()


def test_a_keywords_only_run_stopped_while_it_takes_the_job_in_keeps_what_it_judged(
    tmp_path: Path,
) -> None:
    """SIGINT while a job that calls no LLM is judged as it is stored: the rest of its
    samples are stored queued, unjudged, the job is committed with those judged, the run
    exits as interrupted (130) with them written, and the same command judges the rest as it
    finds the job (a chunk at a time, none claimed by the runner)."""
    n = 12000
    records = [{**SAMPLE, "id": f"s{i}", "must_contain": ["Tokyo" if i % 3 else "Osaka"]}
               for i in range(n)]  # fmt: skip
    samples = samples_file(tmp_path, records)
    db, wal, out = tmp_path / "run.db", tmp_path / "run.db-wal", tmp_path / "results.jsonl"
    command = [sys.executable, "-m", "ragjury", "evaluate", str(samples), "--out", str(out),
               "--db", str(db), "--metrics", "keywords"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        until(lambda: wal.exists() and wal.stat().st_size > 4_000_000, "the job being stored")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "Run the same command again to resume" in err.decode()
    with sqlite3.connect(db) as conn:
        states = dict(conn.execute("SELECT state, COUNT(*) FROM items GROUP BY state").fetchall())
    assert set(states) == {"done", "queued"}
    assert states["done"] + states["queued"] == n
    assert [r["id"] for r in read_jsonl(out)] == [f"s{i}" for i in range(states["done"])]
    assert evaluate(None, tmp_path, samples, "--metrics", "keywords") == 0  # the same command
    assert read_summary(tmp_path)["items_done_now"] == states["queued"]
    with sqlite3.connect(db) as conn:  # the rest judged as the job was found, never claimed
        claims = conn.execute("SELECT MAX(attempts), COUNT(lease_owner) FROM items").fetchone()
    assert claims == (0, 0)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert evaluate(None, fresh, samples, "--metrics", "keywords") == 0
    assert (fresh / "results.jsonl").read_bytes() == out.read_bytes()


def test_a_sample_judged_as_it_is_stored_is_logged_as_a_runner_logs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At info level, each sample of a keywords-only run (judged as the job is stored, no
    runner) has its ``item_done`` line with its job once stored, as an item a runner ends
    has."""
    records = [{**SAMPLE, "id": f"s{i}", "must_contain": ["Tokyo"]} for i in range(3)]
    samples = samples_file(tmp_path, records)
    assert evaluate(None, tmp_path, samples, "--metrics", "keywords", "--log-level", "info") == 0
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()
             if '"event": "item_done"' in line]  # fmt: skip
    job = read_summary(tmp_path)["job"]
    assert sorted((line["item"], line["job"]) for line in lines) == [
        (f"s{i}", job) for i in range(3)
    ]


# -- the small ones -------------------------------------------------------------------------


def test_an_unpriced_model_with_no_calls_has_an_unknown_cost(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    samples = samples_file(tmp_path, [{**SAMPLE, "must_contain": ["Tokyo"]}])
    args = ("--metrics", "keywords", "--model", "my-own-model")
    assert evaluate(fake, tmp_path, samples, *args) == 0
    summary = read_summary(tmp_path)
    assert summary["cost_usd"] is None
    assert summary["unpriced_models"] == ["my-own-model"]


def test_debug_logging_says_more_than_info(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_judges(fake)
    samples = samples_file(tmp_path, [SAMPLE])
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", "--log-level", "info")
    info = capsys.readouterr().err
    evaluate(fake, tmp_path, samples, "--metrics", "faithfulness", "--log-level", "debug",
             "--no-cache")  # fmt: skip
    debug = capsys.readouterr().err
    assert '"event": "llm_request"' not in info
    assert '"event": "llm_request"' in debug
    assert "message_received" in debug
    assert "message_handled" in info


def test_lines_below_ragjurys_level_are_skipped_but_an_applications_setup_gets_all() -> None:
    import structlog

    from ragjury.logs import configure_logging, enabled

    try:
        configure_logging("warning")
        assert not enabled("info")
        assert not enabled("debug")
        assert enabled("warning")
        assert enabled("error")
        configure_logging("debug")
        assert enabled("debug")
        # an application that sets structlog up itself decides what it filters
        configure_logging("error")
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(10))
        assert enabled("debug")
    finally:
        configure_logging("warning")


def test_the_summary_is_written_when_generate_finds_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "docs"
    empty.mkdir()
    (empty / "blank.md").write_text("   \n", encoding="utf-8")
    summary = tmp_path / "summary.json"
    code = main(["generate", str(empty), "--out", str(tmp_path / "o.jsonl"), "--summary",
                 str(summary), "--db", str(tmp_path / "r.db")])  # fmt: skip
    assert code == 1
    written = json.loads(summary.read_text(encoding="utf-8"))
    assert written["documents"] == 0
    assert written["skipped"][0]["reason"] == "empty"


def test_similarity_never_exceeds_one() -> None:
    from ragjury.agents.scorers import cosine

    assert cosine([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]) == 1.0
    assert cosine([1.0, 0.0], [-1.0, 0.0]) == -1.0


def test_evidence_is_matched_as_models_cite_it_and_invented_text_still_fails() -> None:
    from ragjury.schemas.responses import normalise_text, quote_occurs

    contexts = normalise_text(
        "Building evals is hard. You should start small. Then grow the set over time."
    )
    for cited in (
        "[1] Building evals is hard.",
        "Context 2: You should start small",
        "\u201cThen grow the set\u201d",
        "Building evals is hard ... grow the set over time",
        "Building evals is hard\u2026 You should start small",
    ):
        assert quote_occurs(cited, contexts), cited
    for invented in ("Building evals is easy", "[1]", "...", "evals ... set", "Start big."):
        assert not quote_occurs(invented, contexts), invented


def test_a_models_nul_characters_are_taken_out_of_every_string_it_answers() -> None:
    from ragjury.schemas.responses import RubricGrades, Statements

    split = Statements.model_validate_json('{"statements": ["Tokyo\\u0000 is big.", "ok"]}')
    assert split.statements == ["Tokyo is big.", "ok"]
    clean = '{"statements": ["Tokyo is big."]}'
    assert Statements.model_validate_json(clean).statements == ["Tokyo is big."]
    grade = {"score": 5, "reasoning": "fine"}
    nested = {"toxicity": {"score": 5, "reasoning": "no\u0000ne"}, "faithfulness": grade,
              "helpfulness": grade, "relevance": grade}  # fmt: skip
    graded = RubricGrades.model_validate_json(json.dumps(nested))
    assert graded.toxicity.reasoning == "none"  # a nested model's strings too
