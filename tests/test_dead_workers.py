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
