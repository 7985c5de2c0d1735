"""`ragjury serve` on PostgreSQL, one process killed with SIGKILL and one stopped with SIGTERM
(no grace: what it holds goes back at once) in the middle of a run, both restarted: every
sample is judged exactly once, and no started delivery's attempt is ever given back.

The attempts are read from the database all through the run: a message's ``attempts`` may
only grow while it waits on the bus (a claim counts one; a kill or a stop gives none back),
so a message the stopped process had started keeps the attempt its claim counted. The only
attempts that fall are those of messages the stopped process had claimed and never started,
which its log names."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from pathlib import Path

import anyio
import asyncpg
from test_daemon import Daemon, daemons, until
from test_workers import export, samples, script, states, worker

from ragjury.cli import main

from fakeopenai import FakeOpenAI

__all__ = ["daemons"]  # the fixture, shared with test_daemon

N = 8


class AttemptWatch:
    """Reads every message's attempts from PostgreSQL every 20 ms, in a thread of its own,
    and keeps each fall it sees (an attempt given back)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.seen: dict[int, int] = {}
        self.falls: list[tuple[int, int, int]] = []  # message, attempts before, after
        self.reads = 0
        self._thread = threading.Thread(target=anyio.run, args=(self._watch,), daemon=True)

    async def _watch(self) -> None:
        connection = await asyncpg.connect(self._url)
        try:
            while not self._stop.is_set():
                for row in await connection.fetch("SELECT id, attempts FROM messages"):
                    message, attempts = int(row["id"]), int(row["attempts"])
                    before = self.seen.get(message, 0)
                    if attempts < before:
                        self.falls.append((message, before, attempts))
                    self.seen[message] = max(before, attempts)
                self.reads += 1
                await anyio.sleep(0.02)
        finally:
            await connection.close()

    def __enter__(self) -> AttemptWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def given_back(logs: Path) -> tuple[set[int], set[int]]:
    """The messages the stopped processes said they gave back: started ones (their attempts
    kept) and never-started ones (uncounted), from every worker's log."""
    started: set[int] = set()
    unstarted: set[int] = set()
    for log in logs.glob("w*.log"):
        for line in log.read_text(encoding="utf-8").splitlines():
            if '"messages_given_back"' in line:
                event = json.loads(line)
                started.update(event["started"])
                unstarted.update(event["unstarted"])
    return started, unstarted


def test_serve_killed_and_stopped_mid_run_judges_each_sample_once_and_gives_no_attempt_back(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon], pg_url: str
) -> None:
    script(fake, "evaluate")  # each splitter and verdict step takes 0.4 s
    data = samples(tmp_path / "samples.jsonl", N)
    submitted = ["submit", "--samples", str(data), "--metrics", "faithfulness"]
    assert main([*submitted, "--db", pg_url]) == 0

    def done() -> int:
        return states(pg_url)["done"]

    with AttemptWatch(pg_url) as watch:
        workers = [worker(daemons, fake, pg_url, tmp_path, f"w{i}", "--grace", "0") for i in (0, 1)]
        until(lambda: done() >= 1, "a first sample judged", timeout=60)
        workers[0].process.kill()  # SIGKILL mid-run: its deliveries come back after the lease
        assert workers[0].wait() == -signal.SIGKILL
        until(lambda: fake.in_flight > 0, "the other worker busy", timeout=30)
        workers[1].signal(signal.SIGTERM)  # a clean stop, no grace: what it holds goes back
        assert workers[1].wait() == 0
        assert done() < N  # both landed in the middle of the run
        workers = [worker(daemons, fake, pg_url, tmp_path, f"w{i}", "--grace", "0") for i in (0, 1)]
        until(lambda: done() == N, f"all {N} samples judged", timeout=60)
        for process in workers:
            process.signal(signal.SIGTERM)
        assert [process.wait() for process in workers] == [0, 0]

    assert watch.reads > 10
    started, unstarted = given_back(tmp_path)
    # the only attempts given back are those of messages a stopping process had claimed
    # but never started (buffered), one each; a started one keeps its attempt
    assert {message for message, _, _ in watch.falls} <= unstarted, (watch.falls, unstarted)
    assert all(before - after == 1 for _, before, after in set(watch.falls)), watch.falls
    assert not started & {message for message, _, _ in watch.falls}
    assert max(watch.seen.values()) >= 2  # a delivery the kill or the stop interrupted, taken again
    assert states(pg_url) == Counter({"done": N})
    records = export(pg_url, tmp_path / "export.jsonl")
    assert sorted(record["id"] for record in records) == [f"s{i:02}" for i in range(N)]
    assert {record["metrics"]["faithfulness"]["outcome"] for record in records} == {"scored"}
