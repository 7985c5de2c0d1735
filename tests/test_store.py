"""The store contract (``tests/store_contract.py``) on every store implementation, and what
is particular to SQLite: migrating an older database, refusing a newer one."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from store_contract import *  # noqa: F403 - the contract's tests run here, on each store
from store_contract_batches import *  # noqa: F403 - and batch mode's
from store_contract_items import *  # noqa: F403 - and these
from store_contract_records import *  # noqa: F403 - and the rest of the roles
from store_contract_text import *  # noqa: F403 - and these

from ragjury.agents.question_index import QuestionIndex
from ragjury.errors import ConfigurationError
from ragjury.store import SQLiteStore, Store, _schema, open_store, parse_location
from ragjury.store.base import QuestionDecision
from ragjury.store.sql.steps import Steps, execute

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    db = str(tmp_path / "contract.db")
    if request.param == "postgresql":
        db = request.getfixturevalue("pg_url")
    async with open_store(db) as opened:
        yield opened


_VERSION_1 = """
CREATE TABLE runs (id TEXT PRIMARY KEY, command TEXT NOT NULL, started_at TEXT NOT NULL,
    finished_at TEXT, settings TEXT NOT NULL, summary TEXT);
CREATE TABLE jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL UNIQUE,
    options TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, key TEXT NOT NULL,
    position INTEGER NOT NULL, payload TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'queued',
    lease_owner TEXT, lease_expires REAL, attempts INTEGER NOT NULL DEFAULT 0, report TEXT,
    error TEXT, created_at REAL NOT NULL, finished_at REAL, UNIQUE (job_id, key));
CREATE TABLE pairs (job_id TEXT NOT NULL, id TEXT NOT NULL, item_id INTEGER NOT NULL,
    position INTEGER NOT NULL, outcome TEXT NOT NULL, question TEXT NOT NULL,
    source TEXT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (job_id, id));
CREATE TABLE samples (job_id TEXT NOT NULL, id TEXT NOT NULL, item_id INTEGER NOT NULL,
    position INTEGER NOT NULL, record TEXT NOT NULL, scored TEXT NOT NULL,
    PRIMARY KEY (job_id, id));
CREATE TABLE steps (key TEXT PRIMARY KEY, agent TEXT NOT NULL, output TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE llm_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,
    stage TEXT NOT NULL, requests INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, latency_ms REAL NOT NULL, statuses TEXT NOT NULL,
    error TEXT, created_at TEXT NOT NULL);
INSERT INTO jobs VALUES ('j1', 'generate', 'k', '{}', '2026-01-01');
INSERT INTO items (job_id, key, position, payload, state, lease_owner, created_at)
    VALUES ('j1', 'd0', 0, '{}', 'done', NULL, 0), ('j1', 'd1', 1, '{}', 'processing', 'x', 0);
INSERT INTO pairs VALUES ('j1', 'p0', 1, 0, 'kept', 'Old question?', 's', '{"id": "p0"}');
"""


async def test_a_ragjury_0_1_database_is_upgraded_on_open(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(_VERSION_1)
    async with SQLiteStore(db) as store:
        counts = await store.counts()
        assert (counts["done"], counts["queued"]) == (1, 1)  # its held item starts again
        assert [r async for r in store.pairs()] == [{"id": "p0"}]
        decisions = await store.decide_questions(
            "j1", [("p9", "old question"), ("p10", "New?")], QuestionIndex(0.9)
        )  # the deduplicator knows the old questions
        assert decisions == [QuestionDecision("p9", "p0", 1.0), QuestionDecision("p10", None, None)]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (_schema.VERSION,)


async def test_a_database_made_before_the_order_indexes_gets_them_on_open(
    tmp_path: Path,
) -> None:
    db = tmp_path / "before.db"
    async with SQLiteStore(db):
        pass
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX samples_order")
        conn.execute("DROP INDEX pairs_order")
    async with SQLiteStore(db):
        pass
    with sqlite3.connect(db) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT record FROM samples WHERE job_id = ? "
            "AND (item_id, position, rowid) > (?, ?, ?) ORDER BY item_id, position, rowid",
            ("j", 0, 0, 0),
        ).fetchall()
        assert "samples_order" in str(plan)
        assert "TEMP B-TREE" not in str(plan)
        # indexes need no new schema version
        assert conn.execute("PRAGMA user_version").fetchone() == (_schema.VERSION,)


async def test_a_version_7_database_gets_the_batch_requests_endpoint_and_keeps_its_requests(
    tmp_path: Path,
) -> None:
    db = tmp_path / "v7.db"
    async with SQLiteStore(db):
        pass
    with sqlite3.connect(db) as conn:  # batch_requests as version 7 had it, one request queued
        conn.execute("ALTER TABLE batch_requests DROP COLUMN endpoint")
        conn.execute(
            "INSERT INTO batch_requests (key, job_id, stage, body, state, created_at) "
            "VALUES ('k7', 'j', 'judge', '{}', 'queued', 0)"
        )
        conn.execute("PRAGMA user_version = 7")
    async with SQLiteStore(db) as store:
        submission = await store.claim_submission("p", "e", size=10, wait=0, lease=60)
        assert submission is not None  # a request from before endpoints goes to any
        assert [line[0] for line in submission.lines] == ["k7"]
        assert await store.queue_batch_request("k8", "j", "judge", "{}", "other")
        assert await store.claim_submission("p", "e", size=10, wait=0, lease=60) is None
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (_schema.VERSION,) == (8,)


async def test_a_database_from_a_newer_ragjury_is_refused_with_what_to_do(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(ConfigurationError, match=r"newer ragjury.*schema 99.*Upgrade"):
        async with SQLiteStore(db):
            pass


def test_db_is_parsed_as_a_location() -> None:
    assert parse_location("queue.db").path == Path("queue.db")
    url = parse_location("postgresql://me:secret@db.internal/ragjury")
    assert url.kind == "postgresql"
    assert "secret" not in str(url)
    assert "me:***@db.internal" in str(url)
    with pytest.raises(ConfigurationError, match="unknown scheme 'mysql'"):
        parse_location("mysql://x/y")
    assert open_store("postgresql://me:secret@db.internal/ragjury").location == (
        "postgresql://me:***@db.internal/ragjury"
    )


async def test_processes_on_one_database_draw_from_one_rate_bucket(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    async with SQLiteStore(db) as first, SQLiteStore(db) as second:
        assert await first.take_rate("e", 6, per_second=1.0, capacity=10) == 0.0
        assert await second.take_rate("e", 6, per_second=1.0, capacity=10) == pytest.approx(
            2.0, abs=0.2
        )


async def test_a_write_that_fails_in_a_group_commit_is_undone_alone(tmp_path: Path) -> None:
    """Writes that arrive together go in one transaction: one that fails after writing (the
    first of the transaction, which has no savepoint, or a later one) raises to its own
    caller with its rows undone, and the others' rows are committed."""
    insert = "INSERT INTO steps (key, agent, output, created_at) VALUES (?, 'a', 'o', 0)"

    def operation(key: str, fails: bool) -> Steps[int]:
        written = yield from execute(insert, key)
        if fails:
            raise ValueError(f"{key} failed after writing")
        return written

    plan = {"k0": True, "k1": False, "k2": True, "k3": False}
    outcomes: dict[str, str] = {}
    async with SQLiteStore(tmp_path / "group.db") as store:

        async def write(key: str, fails: bool) -> None:
            try:
                outcomes[key] = str(await store._write(lambda: operation(key, fails)))
            except ValueError as exc:
                outcomes[key] = str(exc)

        async with anyio.create_task_group() as tg:
            for key, fails in plan.items():  # they queue while the first takes the lock
                tg.start_soon(write, key, fails)
        rows = await store.read("SELECT key FROM steps ORDER BY key")
    assert outcomes == {
        "k0": "k0 failed after writing",
        "k1": "1",
        "k2": "k2 failed after writing",
        "k3": "1",
    }
    assert [row[0] for row in rows] == ["k1", "k3"]


async def test_writes_that_arrive_during_a_commit_are_committed_together_after_it(
    tmp_path: Path,
) -> None:
    """A write that finds a commit in flight waits for it; the writes that gather meanwhile
    go in the next transaction together (another connection sees them appear at once, not
    one by one), and each returns its own result when it is committed."""
    path = tmp_path / "gather.db"
    insert = "INSERT INTO steps (key, agent, output, created_at) VALUES (?, 'a', 'o', 0)"
    first_running, first_may_end = threading.Event(), threading.Event()
    seen: dict[str, int] = {}
    outcomes: dict[str, int] = {}

    def operation(key: str, reader: sqlite3.Connection) -> Steps[int]:
        written = yield from execute(insert, key)
        if key == "k0":  # (in the database thread) hold the first commit until told
            first_running.set()
            first_may_end.wait(10)
        seen[key] = reader.execute("SELECT count(*) FROM steps").fetchone()[0]
        return written

    async with SQLiteStore(path) as store:
        reader = sqlite3.connect(path, check_same_thread=False)

        async def write(key: str) -> None:
            outcomes[key] = await store._write(lambda: operation(key, reader))

        async with anyio.create_task_group() as tg:
            tg.start_soon(write, "k0")
            await anyio.to_thread.run_sync(first_running.wait, 10)
            for key in ("k1", "k2", "k3"):
                tg.start_soon(write, key)
            await anyio.wait_all_tasks_blocked()
            assert outcomes == {}  # all wait: k0 for its commit, the others for k0's
            first_may_end.set()
        reader.close()
    assert outcomes == {"k0": 1, "k1": 1, "k2": 1, "k3": 1}
    # k0 was committed alone; k1-k3 in one transaction after it (the reader saw k0 only)
    assert seen == {"k0": 0, "k1": 1, "k2": 1, "k3": 1}


def test_a_claimed_payload_reads_as_json_reads_it() -> None:
    """Payloads are parsed by pydantic-core's parser, by json where it refuses one (the
    escape of a lone surrogate, which json.dumps writes): the same values either way."""
    import json

    from ragjury.schemas import Sample
    from ragjury.store._common import decode_payload

    sample = Sample(id="s1", question="Q?", answer="It\u2019s 42.", contexts=("a\nb", "\u00e9"))
    texts = [
        sample.model_dump_json(),
        json.dumps({"a": "lone \ud800 surrogate", "b": [1, 2.5, None, True], "c": {"d": -0.0}}),
        json.dumps({"big": 123456789012345678901234567890, "tiny": 1.5e-300}),
    ]
    for text in texts:
        assert decode_payload(text) == json.loads(text)
    with pytest.raises(TypeError, match="not a JSON object"):
        decode_payload("[1, 2]")


async def test_a_statement_that_fails_in_the_database_thread_raises_to_its_caller_alone(
    tmp_path: Path,
) -> None:
    """The SQLite store's calls run in its own database thread: one that raises raises to
    its caller, and the calls around it (some waiting at once) are answered as usual."""
    async with SQLiteStore(tmp_path / "t.db") as store:
        await store.put_step("k", "a", "[]")
        got: list[str | None] = []

        async def reader() -> None:
            got.append(await store.get_step("k"))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(reader)
            with pytest.raises(sqlite3.OperationalError, match="no such table"):
                await store.read("SELECT * FROM no_such_table", ())
        assert got == ["[]"] * 5
        assert await store.claimed_steps([("a", "k")]) == [("[]", None)]
