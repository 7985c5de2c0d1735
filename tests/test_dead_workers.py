"""Which registered workers of this machine are dead: a process that is gone, and a pid that a
later process took over (a worker restarted after a crash must not wait for the dead one's
leases because the kernel gave its pid to something else); the same for a killed run."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ragjury.store import SQLiteStore
from ragjury.store._common import alive, machine

pytestmark = pytest.mark.anyio


@pytest.fixture
def other_process() -> Iterator[int]:
    """A live process of this machine that is not this one (started now)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_a_pid_taken_by_a_process_started_after_the_registration_is_not_the_worker(
    other_process: int,
) -> None:
    assert alive(other_process)  # the pid is in use
    assert alive(other_process, registered_at=time.time())  # registered just now: the same
    # registered an hour before this process started: the worker that registered is gone
    assert not alive(other_process, registered_at=time.time() - 3600)


def test_a_gone_process_is_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not alive(child.pid)


async def test_registering_releases_the_workers_whose_pid_another_process_took(
    tmp_path: Path, other_process: int
) -> None:
    db = tmp_path / "w.db"
    async with SQLiteStore(db) as store:
        with sqlite3.connect(db) as conn:  # two workers of another process of this machine
            conn.executemany(
                "INSERT INTO workers (owner, host, pid, agents, started_at, heartbeat) "
                "VALUES (?, ?, ?, 'generator', ?, ?)",
                [
                    ("live", machine(), other_process, time.time(), time.time()),
                    ("reused", machine(), other_process, 0.0, 0.0),  # registered in 1970
                ],
            )
        await store.register_worker("new", ["generator"])
        with sqlite3.connect(db) as conn:
            rows = dict(conn.execute("SELECT owner, host FROM workers").fetchall())
    assert sorted(rows) == ["live", "new"]  # 'reused' registered in 1970: its pid moved on
    assert set(rows.values()) == {machine()}
    assert machine().startswith(os.uname().nodename)


async def test_a_killed_runs_pid_taken_by_a_later_process_does_not_keep_it_running(
    tmp_path: Path, other_process: int
) -> None:
    """A run's owner is its machine (hostname and boot id), its pid and when it started: a
    pid the kernel gave to a later process is not the run's, so the run is closed as killed
    (and its calls in flight with it) when the next run starts."""
    db = tmp_path / "r.db"
    hour_ago = datetime.fromtimestamp(time.time() - 3600, UTC).isoformat()
    now = datetime.now(UTC).isoformat()
    async with SQLiteStore(db) as store:
        with sqlite3.connect(db) as conn:
            conn.executemany(
                "INSERT INTO runs (id, command, started_at, settings, host, pid) "
                "VALUES (?, 'evaluate', ?, '{}', ?, ?)",
                [
                    ("reused", hour_ago, machine(), other_process),  # the pid moved on
                    ("live", now, machine(), other_process),  # started with that process
                    ("elsewhere", hour_ago, "another-host (boot 1234abcd)", 1),
                ],
            )
        await store.start_run("evaluate", {})
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT id, summary FROM runs WHERE id <> ''").fetchall()
    summaries = {run: summary and json.loads(summary) for run, summary in rows}
    assert summaries["reused"]["killed"] is True
    assert summaries["live"] is None
    assert summaries["elsewhere"] is None  # another machine's runs are its own to judge


@pytest.fixture
def gone_pid() -> int:
    """The pid of a process of this machine that has ended."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    return gone.pid


async def test_registering_takes_over_the_batches_a_dead_worker_was_submitting_or_polling(
    tmp_path: Path, gone_pid: int
) -> None:
    """A serve killed while it submitted or polled a batch held it under a long lease; the
    next worker of this machine resumes both at once (the batch daemon test waited for the
    lease when the kill fell inside a poll)."""
    poller = "dead:batches:0"
    db = tmp_path / "b.db"
    async with SQLiteStore(db) as store:
        with sqlite3.connect(db) as conn:
            conn.execute(
                "INSERT INTO workers (owner, host, pid, agents, started_at, heartbeat) "
                "VALUES ('dead', ?, ?, 'generator', ?, ?)",
                (machine(), gone_pid, time.time(), time.time()),
            )
        job = await store.submit("evaluate", {}, lambda: [("s0", {})])
        await store.queue_batch_request("k1", job.id, "judge", "{}")
        polled = await store.claim_submission(poller, "e", size=1, wait=0, lease=3600)
        assert polled is not None
        await store.batch_created(polled.id, "batch_1", 0)
        assert [b.provider_id for b in await store.due_batches(poller, 5, 3600)] == ["batch_1"]
        await store.queue_batch_request("k2", job.id, "judge", "{}")
        submitting = await store.claim_submission(poller, "e", size=1, wait=0, lease=3600)
        assert submitting is not None
        assert await store.claim_submission("other", "e", size=1, wait=0, lease=60) is None

        await store.register_worker("new", ["judge"])
        resumed = await store.claim_submission("new:batches:0", "e", size=1, wait=0, lease=60)
        due = await store.due_batches("new:batches:0", 5, 60)
    assert resumed is not None
    assert (resumed.id, resumed.resumed) == (submitting.id, True)
    assert [b.provider_id for b in due] == ["batch_1"]
