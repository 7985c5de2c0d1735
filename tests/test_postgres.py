"""What is particular to the PostgreSQL store (the contract suites run on it in
``test_store.py`` and ``test_bus.py``): its schema's versions, connecting and logging in,
passwords kept out of everything ragjury writes, claims by concurrent processes, waking by
NOTIFY, and riding out a server restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import asyncpg
import pytest
from structlog.testing import capture_logs

from ragjury import Jury, SampleScored
from ragjury.cli import main
from ragjury.errors import ConfigurationError
from ragjury.store import _pg_schema, open_store
from ragjury.store.base import ItemResults, OutgoingMessage
from ragjury.store.postgres import PostgresStore, migrate

from conftest import make_settings
from evalfakes import script_judges
from fakeopenai import FakeOpenAI
from pgserver import PASSWORD, PostgresServer

pytestmark = pytest.mark.anyio


def _message(job_id: str, key: str, group: str = "g") -> OutgoingMessage:
    return OutgoingMessage(group=group, kind="k", job_id=job_id, item_key=key, body="{}")


async def test_an_older_schema_is_upgraded_and_a_newer_one_refused(pg_url: str) -> None:
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": "ragjury"})
    try:
        await conn.execute(_pg_schema.META)
        await migrate(conn, 0, 1)  # a database as the first version left it
        await conn.execute(
            "INSERT INTO jobs (id, kind, key, options, created_at) "
            "VALUES ('old', 'evaluate', 'k', '{}', '2026-01-01')"
        )
        assert not await conn.fetchval("SELECT to_regclass('ragjury.messages') IS NOT NULL")
    finally:
        await conn.close()
    async with open_store(pg_url) as store:  # upgraded on open, its data kept
        assert (await store.job("old")).kind == "evaluate"
        await store.put_messages([_message("old", "x")])
        assert await store.waiting_messages() == {"g": 1}
    conn = await asyncpg.connect(pg_url)
    try:
        assert await conn.fetchval(
            "SELECT value FROM ragjury.meta WHERE key = 'schema_version'"
        ) == str(_pg_schema.VERSION)
        await conn.execute("UPDATE ragjury.meta SET value = '99' WHERE key = 'schema_version'")
    finally:
        await conn.close()
    with pytest.raises(ConfigurationError, match=r"newer ragjury \(database schema 99"):
        async with open_store(pg_url):
            pass


async def test_a_version_7_database_gets_the_batch_requests_endpoint_and_keeps_its_requests(
    pg_url: str,
) -> None:
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": "ragjury"})
    try:
        await conn.execute(_pg_schema.META)
        await migrate(conn, 0, 7)
        await conn.execute(
            "INSERT INTO batch_requests (key, job_id, stage, body, state, created_at) "
            "VALUES ('k7', 'j', 'judge', '{}', 'queued', 0)"
        )
    finally:
        await conn.close()
    async with open_store(pg_url) as store:
        submission = await store.claim_submission("p", "e", size=10, wait=0, lease=60)
        assert submission is not None  # a request from before endpoints goes to any
        assert [line[0] for line in submission.lines] == ["k7"]
        assert await store.queue_batch_request("k8", "j", "judge", "{}", "other")
        assert await store.claim_submission("p", "e", size=10, wait=0, lease=60) is None


async def _indexes(conn: asyncpg.Connection, table: str) -> dict[str, str]:
    rows = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'ragjury' "
        "AND tablename = $1",
        table,
    )
    return {row["indexname"]: row["indexdef"] for row in rows}


async def test_a_version_8_database_gets_the_indexes_of_unfinished_items_and_keeps_its_queue(
    pg_url: str,
) -> None:
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": "ragjury"})
    try:
        await conn.execute(_pg_schema.META)
        await migrate(conn, 0, 8)
        await conn.execute(
            "INSERT INTO jobs (id, kind, key, options, created_at) "
            "VALUES ('j8', 'evaluate', 'k', '{}', '2026-01-01')"
        )
        await conn.execute(  # an item of each state, started by a process "w" but the first
            "INSERT INTO items (job_id, key, position, payload, state, created_at, started_by) "
            "SELECT 'j8', 'i' || n, n, '{}', (ARRAY['done', 'failed', 'queued', 'processing', "
            "'running', 'queued'])[n + 1], 0, CASE WHEN n > 0 THEN 'w' END "
            "FROM generate_series(0, 5) AS n"
        )
        assert "items_state" in await _indexes(conn, "items")
    finally:
        await conn.close()
    async with open_store(pg_url) as store:
        assert await store.unfinished(["j8"]) == 4
        assert await store.unfinished_items("w") == 2  # processing and running
        assert (await store.counts(["j8"]))["done"] == 1
        taken = await store.claim_items("x", 5, lease_seconds=60)
        assert [item.key for item in taken] == ["i2", "i5"]  # queued ones, in order
        assert await store.unfinished_items("x") == 2
    conn = await asyncpg.connect(pg_url)
    try:
        items = await _indexes(conn, "items")
        assert "items_state" not in items
        assert items["items_open"].endswith(
            "(state, id) WHERE (state <> ALL (ARRAY['done'::text, 'failed'::text]))"
        )
        assert items["items_started"].endswith(
            "(started_by) WHERE (state = ANY (ARRAY['processing'::text, 'running'::text]))"
        )
        assert (await _indexes(conn, "llm_calls"))["llm_calls_run"].endswith("(run_id)")
        assert "messages_owner" not in await _indexes(conn, "messages")
    finally:
        await conn.close()
    assert _pg_schema.VERSION == 9


async def test_processes_opening_a_new_database_at_once_create_the_schema_once(
    pg_url: str,
) -> None:
    async def open_one() -> None:
        async with open_store(pg_url) as store:
            await store.counts()

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(open_one)


async def test_connection_problems_are_named_with_the_fix(
    postgres: PostgresServer, pg_url: str
) -> None:
    wrong = pg_url.replace(PASSWORD, "wrong-password")
    with pytest.raises(ConfigurationError, match=r"cannot log in.*PGPASSWORD") as caught:
        async with open_store(wrong):
            pass
    assert "wrong-password" not in str(caught.value)
    missing = postgres.url("no_such_db")
    with pytest.raises(ConfigurationError, match=r"no_such_db does not exist.*createdb"):
        async with open_store(missing):
            pass
    closed = f"postgresql://ragjury:{PASSWORD}@127.0.0.1:1/x"
    with pytest.raises(ConfigurationError, match=r"cannot connect.*server is running") as caught:
        async with PostgresStore(closed, connect_timeout=2):
            pass
    assert PASSWORD not in str(caught.value)


def test_the_password_can_come_from_pgpassword_or_pgpass_and_is_never_written(
    postgres: PostgresServer, pg_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        json.dumps({"id": "s1", "question": "q?", "answer": "Paris", "must_contain": ["Paris"]})
        + "\n"
    )
    bare = pg_url.replace(f":{PASSWORD}@", "@")
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    args = ["evaluate", str(samples), "--metrics", "keywords", "--db", bare]
    args += ["--out", str(tmp_path / "out.jsonl"), "--log-level", "debug"]
    ran = subprocess.run(
        [sys.executable, "-m", "ragjury", *args], env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{postgres.port}:*:ragjury:{PASSWORD}\n")
    pgpass.chmod(0o600)
    env = {**os.environ, "PGPASSFILE": str(pgpass)}
    env.pop("PGPASSWORD", None)
    ran2 = subprocess.run(
        [sys.executable, "-m", "ragjury", "status", "--db", bare, "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert ran2.returncode == 0, ran2.stderr
    # with the password in the URL too: it shows nowhere, and is stored nowhere
    assert main([*args[:-4], "--db", pg_url, "--out", str(tmp_path / "o2.jsonl")]) == 0
    printed = capfd.readouterr()
    for text in (ran.stdout, ran.stderr, ran2.stdout, ran2.stderr, printed.out, printed.err):
        assert PASSWORD not in text

    async def stored() -> str:
        conn = await asyncpg.connect(pg_url)
        try:
            rows = await conn.fetch("SELECT settings, coalesce(summary, '') FROM ragjury.runs")
            return json.dumps([tuple(r) for r in rows])
        finally:
            await conn.close()

    text = anyio.run(stored)
    assert "127.0.0.1" in text  # the location is there, redacted
    assert PASSWORD not in text


def test_without_the_driver_the_message_names_the_extra(pg_url: str) -> None:
    code = (
        "import sys; sys.modules['asyncpg'] = None\n"  # as if the extra were not installed
        "from ragjury.cli import main\n"
        f"sys.exit(main(['status', '--db', {pg_url!r}]))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert ran.returncode != 0
    assert "pip install 'ragjury[postgres]'" in ran.stderr
    assert PASSWORD not in ran.stderr + ran.stdout


async def test_concurrent_claims_from_several_processes_never_share_a_message(
    pg_url: str,
) -> None:
    n = 300
    async with open_store(pg_url) as setup:
        job = await setup.submit("evaluate", {}, lambda: [(f"s{i}", {}) for i in range(n)])
        await setup.put_messages([_message(job.id, f"s{i}") for i in range(n)])
    taken: list[int] = []

    async def worker(store: PostgresStore, owner: str) -> None:
        while True:
            claim = await store.claim_messages(owner, ["g"], 7, lease_seconds=60, max_attempts=5)
            if not claim.messages:
                return
            taken.extend(m.id for m in claim.messages)

    # four pools: as four processes would, each with several connections at once
    stores = [PostgresStore(pg_url, pool_size=4) for _ in range(4)]
    for store in stores:
        await store.__aenter__()
    try:
        async with anyio.create_task_group() as group:
            for p, store in enumerate(stores):
                for w in range(3):
                    group.start_soon(worker, store, f"p{p}w{w}")
    finally:
        for store in stores:
            await store.__aexit__(None, None, None)
    assert len(taken) == n
    assert len(set(taken)) == n


async def test_joins_from_two_processes_at_once_both_see_both_parts(pg_url: str) -> None:
    async with (
        PostgresStore(pg_url, pool_size=8) as one,
        PostgresStore(pg_url, pool_size=8) as two,
    ):
        job = await one.submit("evaluate", {}, lambda: [(f"s{i}", {}) for i in range(60)])
        complete: list[str] = []

        async def add(store: PostgresStore, key: str, part: str) -> None:
            state = await store.join(job.id, key, {f"p:{part}": part}, "p:")
            if len(state) == 2:
                complete.append(key)

        async with anyio.create_task_group() as group:
            for i in range(60):
                group.start_soon(add, one, f"s{i}", "a")
                group.start_soon(add, two, f"s{i}", "b")
        # whoever came second saw the first's part: every item completes exactly once
        assert sorted(complete) == sorted(f"s{i}" for i in range(60))


async def test_a_leased_reply_that_asks_comes_with_its_items_join_state(pg_url: str) -> None:
    from ragjury.store.base import Lease

    async with PostgresStore(pg_url) as store:
        job = await store.submit("evaluate", {}, lambda: [("s0", {}), ("s1", {})])
        lease = Lease("w", 60.0)
        await store.join(job.id, "s0", {"s:sample": '{"id": "s0"}'}, "")
        [first] = await store.put_messages(
            [OutgoingMessage("a", "k", job.id, "s0", '{"n": 0}', True, "", True)], lease=lease
        )
        assert first.joined is None  # a put of an item's first messages does not read it
        replies = [
            OutgoingMessage("b", "k", job.id, "s0", '{"n": 1}', True, "", True),
            OutgoingMessage("b", "k", job.id, "s1", '{"n": 2}', True, "", True),  # no state
            OutgoingMessage("c", "k", job.id, "s0", '{"n": 3}', False, "", True),  # not leased
        ]
        acked = await store.ack_message(first.id, replies, lease=lease)
        assert [json.loads(m.joined) if m.joined else None for m in acked.leased] == [
            {"s:sample": '{"id": "s0"}'},
            None,
        ]
        # a reply whose step cannot use it (a generation's) does not carry it
        plain = [OutgoingMessage("b", "k", job.id, "s0", '{"n": 4}', True, "")]
        again = await store.ack_message(acked.leased[0].id, plain, lease=lease)
        assert [m.joined for m in again.leased] == [None]


async def test_every_shape_of_an_acknowledgement_is_one_valid_statement(pg_url: str) -> None:
    """Each statement shape the bus sends, prepared on the server (a put, a claimed
    message's look-up and every acknowledgement's)."""
    import itertools

    from ragjury.store.postgres import _CLAIMED_STEPS, _PUBLISH, _acknowledgement

    async with PostgresStore(pg_url):  # the schema
        pass
    conn = await asyncpg.connect(pg_url, server_settings={"search_path": "ragjury"})
    try:
        endings = (None, (False, False), (False, True), (True, False), (True, True))
        for ending, drops, calls, replies, joins in itertools.product(
            endings, (False, True), (0, 1, 2), (False, True), (False, True)
        ):
            await conn.prepare(_acknowledgement(ending, drops, calls, replies, joins))
        await conn.prepare(_PUBLISH)
        await conn.prepare(_CLAIMED_STEPS)
    finally:
        await conn.close()


async def test_a_message_put_by_another_process_wakes_a_watcher(pg_url: str) -> None:
    async with open_store(pg_url) as listening, open_store(pg_url) as other:
        job = await other.submit("evaluate", {}, lambda: [("s0", {})])
        woken = anyio.Event()
        groups: list[str] = []

        def wake(group: str) -> None:
            groups.append(group)
            woken.set()

        assert isinstance(listening, PostgresStore)
        assert await listening.watch(wake) is True
        await other.put_messages([_message(job.id, "s0", "verdict_judge")])
        with anyio.fail_after(5):
            await woken.wait()
        assert groups == ["verdict_judge"]


async def test_operations_wait_out_a_server_restart_and_lose_nothing(tmp_path: Path) -> None:
    server = PostgresServer(_bin())
    try:
        url = server.database()
        async with PostgresStore(url, pool_size=4) as store:
            job = await store.submit("evaluate", {}, lambda: [(f"s{i}", {}) for i in range(20)])
            for i in range(10):
                await store.finish_item(job.id, f"s{i}", ItemResults(report={"i": i}))
            await anyio.to_thread.run_sync(server.stop)
            with capture_logs() as logs, anyio.fail_after(60):
                async with anyio.create_task_group() as group:

                    async def finish_rest() -> None:  # issued while the server is down
                        for i in range(10, 20):
                            await store.finish_item(job.id, f"s{i}", ItemResults(report={"i": i}))

                    group.start_soon(finish_rest)
                    await anyio.sleep(1.5)
                    await anyio.to_thread.run_sync(server.start)
            events = [entry["event"] for entry in logs]
            assert events.count("database_unreachable") == 1  # said once, not per retry
            assert "database_reachable_again" in events
            assert await store.counts([job.id]) == {
                "queued": 0,
                "processing": 0,
                "done": 20,
                "failed": 0,
            }
            assert [r["i"] async for r in store.reports(job.id)] == list(range(20))
    finally:
        server.close()


def _bin() -> Path:
    from pgserver import binaries

    found = binaries()
    assert found is not None
    return found


async def test_a_jury_with_a_postgresql_db_judges_and_keeps_its_results_there(
    fake: FakeOpenAI, tmp_path: Path, pg_url: str
) -> None:
    script_judges(fake)
    samples = [{"id": "a", "question": "Capital of Japan?", "answer": "Tokyo is its capital."}]
    async with Jury(make_settings(fake, tmp_path, db=pg_url)) as jury:
        await jury.submit_samples(samples, metrics=["rubric"])
        seen = [event async for event in jury.events()]
    [scored] = seen
    assert isinstance(scored, SampleScored)
    assert (scored.sample.id, scored.passing) == ("a", True)
    assert not (tmp_path / "ragjury.db").exists()  # nothing went to a SQLite file
    async with open_store(pg_url) as store:
        assert [r["id"] async for r in store.samples()] == ["a"]


async def test_processes_on_one_server_draw_from_one_rate_bucket(pg_url: str) -> None:
    async with PostgresStore(pg_url) as first, PostgresStore(pg_url) as second:
        assert await first.take_rate("e", 6, per_second=1.0, capacity=10) == 0.0
        wait = await second.take_rate("e", 6, per_second=1.0, capacity=10)
        assert wait == pytest.approx(2.0, abs=0.2)  # 10 - 6 - 6 = -2 units at 1 a second


async def _waiting_for_lock(conn: asyncpg.Connection, waiting: int) -> None:
    """Until ``waiting`` sessions wait for a lock (the server has no event to await)."""
    while True:
        if await conn.fetchval("SELECT COUNT(*) FROM pg_locks WHERE NOT granted") >= waiting:
            return
        await anyio.sleep(0.05)


async def test_large_values_are_compressed_with_lz4_on_every_connection(pg_url: str) -> None:
    # pglz, the server's default, is slow to compress: where the server has lz4, every
    # connection of the store's pool writes what it stores out of line with lz4
    outside = await asyncpg.connect(pg_url)
    try:
        has_lz4 = await outside.fetchval(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
        expected = "lz4" if has_lz4 else "pglz"
        async with PostgresStore(pg_url, pool_size=3) as store:
            job = await store.submit("evaluate", {}, lambda: [("s0", {})])
            body = json.dumps({"contexts": [f"context {n} " * 200 for n in range(5)]})
            await store.put_messages([OutgoingMessage("g", "k", job.id, "s0", body)])
            found: list[tuple[str, int]] = []

            async def setting() -> None:
                # each waits, holding its connection, until the lock is let go: three at once
                [(value, pid)] = await store.read(
                    "SELECT current_setting('default_toast_compression'), pg_backend_pid() "
                    "FROM (SELECT pg_advisory_xact_lock_shared(28)) AS waited"
                )
                found.append((str(value), int(pid)))

            await outside.execute("SELECT pg_advisory_lock(28)")
            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    for _ in range(3):
                        group.start_soon(setting)
                    await _waiting_for_lock(outside, 3)
                    await outside.execute("SELECT pg_advisory_unlock(28)")
        assert len({pid for _, pid in found}) == 3
        assert {value for value, _ in found} <= {expected, "pglz"}
        if has_lz4:
            assert {value for value, _ in found} == {"lz4"}
        assert (
            await outside.fetchval("SELECT pg_column_compression(body) FROM ragjury.messages")
            == expected
        )
    finally:
        await outside.close()
