"""`ragjury serve` as a real process: SIGKILL and restart, graceful shutdown, two daemons.

The scripted LLM server runs in this process; daemons are subprocesses that share one
database file. Conditions across processes are polled from the database with a deadline.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragjury.cli import main

from conftest import (
    CHECK_CALLS,
    CRITIC_AGENTS,
    agreement_reply,
    critic_reply,
    generator_reply,
    own_answer_reply,
    read_jsonl,
    write_qa_document,
)
from fakeopenai import FakeOpenAI, RecordedRequest, Reply

DEADLINE = 60.0


def slow(responder: Callable[[RecordedRequest], Reply], seconds: float) -> Callable[..., Reply]:
    def respond(request: RecordedRequest) -> Reply:
        return dataclasses.replace(responder(request), delay=seconds)

    return respond


def script_slowly(fake: FakeOpenAI, seconds: float) -> None:
    fake.route("generator", slow(generator_reply, seconds))
    for agent in CRITIC_AGENTS:
        fake.route(agent, slow(critic_reply(), seconds))
    fake.route("answerability_critic", slow(own_answer_reply, seconds))
    fake.route("answer_agreement", slow(agreement_reply, seconds))


def submit(tmp_path: Path, n: int, *flags: str) -> Path:
    docs = tmp_path / "docs"
    for i in range(n):
        write_qa_document(docs, f"doc{i:02}.md", [(f"What is setting number {i}?", f"value {i}")])
    db = tmp_path / "queue.db"
    assert main(["submit", str(docs), "--db", str(db), "--whole-documents", *flags]) == 0
    return db


@dataclasses.dataclass
class Daemon:
    process: subprocess.Popen[str]
    log: Path

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = DEADLINE) -> int:
        return self.process.wait(timeout=timeout)

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8")


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for daemon in started:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(timeout=10)


def endpoint(fake: FakeOpenAI) -> list[str]:
    return ["--base-url", fake.base_url, "--api-key", "test-key", "--model", "fake-model"]


def spawn(args: list[str], log: Path) -> subprocess.Popen[str]:
    """``python -m ragjury ARGS`` with its stderr in ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "ragjury", *args],
        stdout=subprocess.DEVNULL,
        stderr=log.open("w", encoding="utf-8"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def serve(started: list[Daemon], fake: FakeOpenAI, db: Path, name: str, *extra: str) -> Daemon:
    log = db.parent / f"{name}.log"
    args = ["serve", "--db", str(db), *endpoint(fake), "--lease", "2", "--concurrency", "2"]
    args += ["--items-in-flight", "2", "--log-level", "info", *extra]
    daemon = Daemon(spawn(args, log), log)
    started.append(daemon)
    return daemon


def states(db: Path) -> Counter[str]:
    with sqlite3.connect(db, timeout=30) as conn:
        try:
            rows = conn.execute("SELECT state, COUNT(*) FROM items GROUP BY state")
        except sqlite3.OperationalError:  # the process has not created the schema yet
            return Counter()
        return Counter(dict(rows))


def cached_steps(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0])


def until(
    condition: Callable[[], bool], what: str, timeout: float = DEADLINE, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def steps(fake: FakeOpenAI) -> Counter[tuple[str | None, str]]:
    """Every distinct LLM step the server was asked for, with how often."""
    return Counter((r.agent, r.text()) for r in fake.requests)


def exported(db: Path, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "export.jsonl"
    assert main(["export", "--db", str(db), "--out", str(out), "--rejected", str(out) + ".r"]) == 0
    return read_jsonl(out) + read_jsonl(Path(str(out) + ".r"))


def test_a_daemon_killed_midway_loses_nothing_and_repeats_only_steps_in_flight(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_slowly(fake, 0.3)
    # without the answerability check: this test counts requests against cached steps, one
    # each, and the check is one step of two requests (its kills are the other tests')
    db = submit(tmp_path, 8, "--no-answer-check")
    first = serve(daemons, fake, db, "first")

    def midway() -> bool:
        # some items done, and an unfinished one has finished steps, and a request is out
        done = states(db)["done"]
        return done >= 2 and cached_steps(db) > 4 * done and fake.in_flight >= 1

    until(midway, "an item half done")

    first.process.kill()  # SIGKILL: no cleanup of any kind
    assert first.wait() == -signal.SIGKILL
    # Steps in flight at the kill: asked of the server, but not stored as finished. That is
    # the requests still out (never more than --concurrency 2, checked below) and answers
    # already in whose steps wait for their acknowledgement's commit: a slot frees when its
    # answer arrives, so the next request can go out before that commit (CI once saw 3).
    in_flight_at_kill = len(steps(fake)) - cached_steps(db)
    assert 1 <= in_flight_at_kill <= 2 * 2
    done_at_kill = states(db)["done"]
    assert done_at_kill < 8

    second = serve(daemons, fake, db, "second")
    until(lambda: states(db)["done"] == 8, "every item done after the restart")
    second.signal(signal.SIGTERM)
    assert second.wait() == 0

    assert states(db) == Counter({"done": 8})
    records = exported(db, tmp_path)
    assert len(records) == 8
    assert len({r["id"] for r in records}) == 8  # each item's results exactly once
    asked = steps(fake)
    assert len(asked) == 8 * 4  # every step of every document was asked at least once
    repeated = sum(asked.values()) - len(asked)
    assert repeated <= in_flight_at_kill
    assert fake.in_flight_max <= 2  # --concurrency 2, before the kill and after it
    # the restart took the dead process's messages at once (same host, its pid is gone), not
    # after their leases, and they came back as second deliveries
    assert "released_from_dead_processes" in second.stderr()
    assert '"attempt": 2' in second.stderr()


def test_sigterm_lets_in_flight_items_finish_and_leaves_the_rest_queued(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_slowly(fake, 0.5)
    db = submit(tmp_path, 6)
    daemon = serve(daemons, fake, db, "graceful", "--grace", "30")
    until(lambda: states(db)["running"] == 2 and fake.in_flight >= 1, "two items in flight")
    with sqlite3.connect(db) as conn:
        held = {
            row[0]
            for row in conn.execute("SELECT id FROM items WHERE state IN ('processing', 'running')")
        }

    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0

    with sqlite3.connect(db) as conn:
        done = {row[0] for row in conn.execute("SELECT id FROM items WHERE state = 'done'")}
    assert held <= done  # what was in flight finished within the grace period
    counts = states(db)
    assert counts["processing"] == counts["running"] == 0
    assert counts["queued"] == 6 - len(done) > 0  # the rest waits for the next daemon
    assert "SIGTERM: taking no new work" in daemon.stderr()


def test_a_second_signal_stops_at_once_and_puts_the_work_back(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_slowly(fake, 20.0)
    db = submit(tmp_path, 3)
    daemon = serve(daemons, fake, db, "impatient", "--grace", "60")
    until(lambda: fake.in_flight >= 1, "a request in flight")

    started = time.monotonic()
    daemon.signal(signal.SIGINT)
    until(lambda: "SIGINT: taking no new work" in daemon.stderr(), "the first signal seen")
    daemon.signal(signal.SIGINT)
    assert daemon.wait() == 0
    assert time.monotonic() - started < 15  # neither the 20 s answer nor the 60 s grace

    counts = states(db)
    assert counts["done"] == 0
    assert sum(counts.values()) == 3
    with sqlite3.connect(db) as conn:
        (held,) = conn.execute("SELECT COUNT(*) FROM messages WHERE lease_owner IS NOT NULL")
        (waiting,) = conn.execute("SELECT COUNT(*) FROM messages")
    assert held == (0,)  # what it held went back to the bus, for any worker to take at once
    assert waiting[0] >= 1


def test_two_daemons_share_one_database_and_never_do_an_item_twice(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_slowly(fake, 0.2)
    db = submit(tmp_path, 10)
    pair = [serve(daemons, fake, db, "one"), serve(daemons, fake, db, "two")]
    until(lambda: states(db)["done"] == 10, "every item done")
    for daemon in pair:
        daemon.signal(signal.SIGTERM)
    assert [daemon.wait() for daemon in pair] == [0, 0]

    asked = steps(fake)
    assert len(asked) == 10 * (4 + CHECK_CALLS)  # a draft, 3 critics, the check's 2 calls
    assert max(asked.values()) == 1  # no step was asked twice
    assert len({r["id"] for r in exported(db, tmp_path)}) == 10
    with sqlite3.connect(db) as conn:
        per_daemon = [
            int(n)
            for (n,) in conn.execute(
                "SELECT json_extract(summary, '$.items_done') FROM runs WHERE command = 'serve'"
            )
        ]
    assert sum(per_daemon) == 10
    assert min(per_daemon) > 0  # both took a share


def test_serve_logs_one_json_line_per_handled_message(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_slowly(fake, 0.0)
    db = submit(tmp_path, 1)
    daemon = serve(daemons, fake, db, "logs")
    until(lambda: states(db)["done"] == 1, "the item done")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0

    import json

    lines = [json.loads(line) for line in daemon.stderr().splitlines() if line.startswith("{")]
    handled = [line for line in lines if line["event"] == "message_handled"]
    generator = next(line for line in handled if line["agent"] == "generator")
    for field in ("message_id", "correlation_id", "ms", "attempt", "llm_requests"):
        assert field in generator
    assert generator["prompt_tokens"] == 100
    assert {line["agent"] for line in handled} == {  # the LLM agents
        "generator",
        *CRITIC_AGENTS,
        "answerability_critic",
    }
    # (the chunker, deduplicator, aggregator and collector ran in the intake's and the
    # critics' steps, with no message of their own)


def test_ctrl_c_on_generate_keeps_what_finished_and_the_same_command_resumes(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_slowly(fake, 0.3)
    docs = tmp_path / "docs"
    for i in range(6):
        write_qa_document(docs, f"doc{i}.md", [(f"What is setting number {i}?", f"value {i}")])
    db, out = tmp_path / "run.db", tmp_path / "kept.jsonl"
    command = ["generate", str(docs), "--out", str(out), "--db", str(db), "--whole-documents"]
    command += [*endpoint(fake), "--concurrency", "1", "--items-in-flight", "1"]
    log = tmp_path / "generate.log"
    process = spawn(command, log)
    try:
        until(lambda: states(db)["done"] >= 1, "one document done")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=DEADLINE) == 130
    finally:
        if process.poll() is None:
            process.kill()
    done = states(db)["done"]
    assert 1 <= done < 6
    assert len(read_jsonl(out)) == done  # what finished is written
    assert "Run the same command again to resume" in log.read_text(encoding="utf-8")
    asked = len(fake.requests)

    assert main(command) == 0  # the same command, again

    assert len(read_jsonl(out)) == 6
    assert states(db) == Counter({"done": 6})
    # the finished documents were not asked again: 4 steps (6 requests, the check making 2)
    # for each of the others at most
    assert len(fake.requests) - asked <= (4 + CHECK_CALLS) * (6 - done)


def catches(process: subprocess.Popen[str], signum: int) -> bool:
    """Whether ``process`` has a handler for ``signum`` (the kernel's SigCgt mask)."""
    for line in Path(f"/proc/{process.pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_a_sigterm_sent_while_serve_starts_stops_it_cleanly_once_started(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_slowly(fake, 0.5)
    db = submit(tmp_path, 3)
    daemon = serve(daemons, fake, db, "early")
    # the first moment it catches SIGTERM: it is still importing its LLM client then
    until(lambda: catches(daemon.process, signal.SIGTERM), "SIGTERM caught", interval=0.001)
    daemon.signal(signal.SIGTERM)

    assert daemon.wait() == 0  # not -15: killed by the signal's default action
    log = daemon.stderr()
    assert "SIGTERM while starting" in log
    assert "SIGTERM (sent while starting): taking no new work; in-flight items get up to" in log
    assert "ragjury serve: stopped; 0 item(s) done here" in log
    assert states(db) == Counter({"queued": 3})  # nothing taken, nothing lost
    assert fake.requests == []


def test_a_second_sigterm_while_serve_starts_stops_it_at_once(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    db = submit(tmp_path, 2)
    daemon = serve(daemons, fake, db, "twice")
    until(lambda: catches(daemon.process, signal.SIGTERM), "SIGTERM caught", interval=0.001)
    daemon.signal(signal.SIGTERM)
    until(lambda: "SIGTERM while starting" in daemon.stderr(), "the first signal kept")
    daemon.signal(signal.SIGTERM)

    code = daemon.wait()
    # at once: still starting (the usual case), or just past it, by the second-signal rule
    log = daemon.stderr()
    assert (code, "SIGTERM again while starting: stopping now" in log) == (130, True) or (
        code == 0 and "SIGTERM again: stopping now" in log
    ), (code, log)
    assert states(db) == Counter({"queued": 2})
    assert fake.requests == []
