"""Agent workers in separate processes on one database, SQLite or PostgreSQL.

Three ``serve`` processes, one of them ``--agents`` for two agents only, killed with SIGKILL
at random moments and restarted: every item ends exactly once and as a single-process run
ends it, and the only LLM requests asked twice are ones in flight at a kill. On PostgreSQL,
also a server restart in the middle of a run. Also: a poison record in a served queue, and
``status`` naming the agents that wait for workers.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_daemon import Daemon, daemons, endpoint, script_slowly, slow, spawn, until

from ragjury.cli import main
from ragjury.prompts import Prompt
from ragjury.store import open_store

from conftest import read_jsonl, write_qa_document
from evalfakes import script_judges, splitter_reply, verdict_reply
from fakeopenai import FakeOpenAI
from pgserver import PostgresServer, binaries

__all__ = ["daemons"]  # the fixture, shared with test_daemon

KILLS = 3


def documents(folder: Path, n: int) -> Path:
    for i in range(n):
        write_qa_document(folder, f"doc{i:02}.md", [(f"What is setting number {i}?", f"value {i}")])
    return folder


def samples(path: Path, n: int, *, poison: int | None = None) -> Path:
    rows = []
    for i in range(n):
        answer = f"Setting {i} is value {i}. Setting {i} was set in 2024."
        if i == poison:
            answer = "poison " + answer
        rows.append(
            {
                "id": f"s{i:02}",
                "question": f"What is setting {i}?",
                "answer": answer,
                "contexts": [f"Setting {i} is value {i}. Setting {i} was set in 2024."],
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def states(db: str | Path) -> Counter[str]:
    """Items per state, read through the store (``processing`` includes running)."""

    async def read() -> dict[str, int]:
        async with open_store(str(db)) as store:
            return await store.counts()

    return Counter(anyio.run(read))


@pytest.fixture(params=["sqlite", "postgresql"])
def queue_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the workers share."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "queue.db")


def export(db: str | Path, out: Path) -> list[dict[str, Any]]:
    args = ["export", "--db", str(db), "--out", str(out), "--rejected", f"{out}.r"]
    args += ["--results", f"{out}.s"]
    assert main(args) == 0
    return read_jsonl(out) + read_jsonl(Path(f"{out}.r")) + read_jsonl(Path(f"{out}.s"))


def worker(
    started: list[Daemon], fake: FakeOpenAI, db: str | Path, logs: Path, name: str, *extra: str
) -> Daemon:
    log = logs / f"{name}-{len(started)}.log"
    args = ["serve", "--db", str(db), *endpoint(fake), "--lease", "3", "--concurrency", "2"]
    args += ["--items-in-flight", "3", "--log-level", "info", *extra]
    daemon = Daemon(spawn(args, log), log)
    started.append(daemon)
    return daemon


def requests_after(fake: FakeOpenAI, start: int) -> Counter[tuple[str | None, str]]:
    return Counter((r.agent, r.text()) for r in fake.requests[start:])


def script(fake: FakeOpenAI, kind: str) -> None:
    if kind == "generate":
        script_slowly(fake, 0.25)
    else:
        fake.route("statement_splitter", slow(splitter_reply, 0.4))
        fake.route("verdict_judge", slow(verdict_reply, 0.4))


@pytest.mark.parametrize(
    ("kind", "split"),
    [
        ("generate", "groundedness_critic,generator"),
        ("evaluate", "verdict_judge,statement_splitter"),
    ],
)
def test_workers_in_three_processes_killed_at_random_lose_and_repeat_nothing(
    fake: FakeOpenAI,
    tmp_path: Path,
    daemons: list[Daemon],
    kind: str,
    split: str,
    queue_db: str,
) -> None:
    rng = random.Random(f"{kind}-kills")
    script(fake, kind)
    n = 10
    if kind == "generate":
        source = ["--whole-documents", str(documents(tmp_path / "docs", n))]
        solo = ["generate", *source, "--out", str(tmp_path / "solo.jsonl")]
        solo += ["--rejected", str(tmp_path / "solo.jsonl.r")]
        submitted = ["submit", *source]
    else:
        data = samples(tmp_path / "samples.jsonl", n)
        solo = ["evaluate", str(data), "--out", str(tmp_path / "solo.jsonl.s")]
        solo += ["--metrics", "faithfulness"]
        submitted = ["submit", "--samples", str(data), "--metrics", "faithfulness"]
    # the reference: the same work in one process, on a database of its own
    assert main([*solo, "--db", str(tmp_path / "solo.db"), *endpoint(fake)]) == 0
    reference = export(tmp_path / "solo.db", tmp_path / "solo-export.jsonl")
    steps_per_run = len(requests_after(fake, 0))

    db = queue_db
    assert main([*submitted, "--db", db]) == 0
    start = len(fake.requests)
    roles = [(), (), ("--agents", split)]
    processes = [worker(daemons, fake, db, tmp_path, f"w{i}", *roles[i]) for i in range(3)]
    in_flight_at_kills = killed = 0
    for _ in range(KILLS):
        time.sleep(rng.uniform(0.2, 0.8))
        if states(db)["done"] + states(db)["failed"] == n:
            break
        killed += 1
        victim = rng.randrange(3)
        in_flight_at_kills += fake.in_flight  # an upper bound on the victim's own
        processes[victim].process.kill()
        assert processes[victim].wait() == -signal.SIGKILL
        processes[victim] = worker(daemons, fake, db, tmp_path, f"w{victim}", *roles[victim])
    assert killed == KILLS  # every kill landed while there was work
    until(lambda: states(db)["done"] == n, f"all {n} items done", timeout=120)
    for process in processes:
        process.signal(signal.SIGTERM)
    assert [p.wait() for p in processes] == [0, 0, 0]

    assert states(db) == Counter({"done": n})
    records = export(db, tmp_path / "export.jsonl")
    assert sorted(map(json.dumps, records)) == sorted(map(json.dumps, reference))
    if kind == "evaluate":  # the judgements really were made, by both agents
        assert {r["metrics"]["faithfulness"]["outcome"] for r in records} == {"scored"}
    else:
        assert {r["outcome"] for r in records} == {"kept"}
    asked = requests_after(fake, start)
    assert len(asked) == steps_per_run  # every step of every item asked, none missing
    repeated = sum(asked.values()) - len(asked)
    assert repeated <= in_flight_at_kills


def test_a_postgresql_restart_in_the_middle_of_a_run_loses_and_repeats_nothing(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script(fake, "evaluate")
    n = 10
    data = samples(tmp_path / "samples.jsonl", n)
    solo = ["evaluate", str(data), "--out", str(tmp_path / "solo.jsonl"), *endpoint(fake)]
    assert main([*solo, "--metrics", "faithfulness", "--db", str(tmp_path / "solo.db")]) == 0
    reference = export(tmp_path / "solo.db", tmp_path / "solo-export.jsonl")
    steps_per_run = len(requests_after(fake, 0))

    bin_dir = binaries()
    assert bin_dir is not None, "the postgresql fixture would have skipped"
    server = PostgresServer(bin_dir)  # a server of its own: this test restarts it
    try:
        db = server.database()
        assert (
            main(["submit", "--samples", str(data), "--metrics", "faithfulness", "--db", db]) == 0
        )
        start = len(fake.requests)
        processes = [worker(daemons, fake, db, tmp_path, f"w{i}") for i in range(2)]
        until(lambda: 2 <= states(db)["done"] < n - 2, "some items done, not all")
        server.stop()  # a fast shutdown: its clients' connections are cut
        in_flight_at_restart = fake.in_flight
        time.sleep(2)
        server.start()
        until(lambda: states(db)["done"] == n, f"all {n} items done", timeout=120)
        for process in processes:
            process.signal(signal.SIGTERM)
        codes = [p.wait() for p in processes]
        logs = "".join(p.stderr() for p in processes)
        assert codes == [0, 0], logs[-3000:]
        assert "database_unreachable" in logs
        assert "database_reachable_again" in logs

        records = export(db, tmp_path / "export.jsonl")
        assert sorted(map(json.dumps, records)) == sorted(map(json.dumps, reference))
        asked = requests_after(fake, start)
        assert len(asked) == steps_per_run
        # the workers kept their LLM calls going while the database was away: at most the
        # calls then in flight (whose results could not be stored) were asked again
        assert sum(asked.values()) - len(asked) <= in_flight_at_restart + 2 * 2
    finally:
        server.close()


def test_a_poison_record_in_a_served_queue_fails_alone(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    script_judges(fake)
    fragile = tmp_path / "splitter.j2"
    fragile.write_text(
        "{{ '' if 1 / (0 if 'poison' in answer else 1) else '' }}"
        + Prompt.builtin("splitter").source,
        encoding="utf-8",
    )
    data = samples(tmp_path / "samples.jsonl", 6, poison=2)
    db = tmp_path / "queue.db"
    args = ["submit", "--samples", str(data), "--db", str(db), "--metrics", "faithfulness"]
    assert main([*args, "--prompt", f"splitter={fragile}"]) == 0
    process = worker(daemons, fake, db, tmp_path, "poisoned")
    until(lambda: states(db)["done"] == 5 and states(db)["failed"] == 1, "5 done, 1 failed")
    process.signal(signal.SIGTERM)
    assert process.wait() == 0

    results = {r["id"]: r for r in export(db, tmp_path / "export.jsonl")}
    assert len(results) == 6
    failed = results["s02"]["metrics"]["faithfulness"]
    assert failed["outcome"] == "failed"
    assert "statement_splitter: ZeroDivisionError" in failed["reason"]
    assert "given up after 5 deliveries" in failed["reason"]
    assert all(
        results[f"s{i:02}"]["metrics"]["faithfulness"]["outcome"] == "scored"
        for i in (0, 1, 3, 4, 5)
    )


def test_status_names_the_agents_waiting_for_workers(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon], capsys: pytest.CaptureFixture[str]
) -> None:
    script_slowly(fake, 0.0)
    db = tmp_path / "queue.db"
    docs = documents(tmp_path / "docs", 2)
    assert main(["submit", str(docs), "--db", str(db), "--whole-documents"]) == 0
    front = worker(
        daemons, fake, db, tmp_path, "front", "--agents", "intake,chunker,generator,deduplicator"
    )

    def waiting() -> list[str]:
        capsys.readouterr()
        assert main(["status", "--db", str(db), "--json"]) == 0
        return list(json.loads(capsys.readouterr().out)["waiting_for_workers"])

    until(lambda: "groundedness_critic" in waiting(), "the critics' messages waiting")
    assert {"relevance_critic", "standalone_critic", "answerability_critic"} <= set(waiting())
    # agents without an LLM run where their input is made: nothing waits for them
    assert not {"generator", "chunker", "deduplicator", "aggregator", "collector"} & set(waiting())
    capsys.readouterr()
    assert main(["status", "--db", str(db)]) == 0
    assert "no worker is serving it" in capsys.readouterr().out

    back = worker(daemons, fake, db, tmp_path, "back")
    until(lambda: states(db)["done"] == 2, "both documents done once every agent has a worker")
    for process in (front, back):
        process.signal(signal.SIGTERM)
        assert process.wait() == 0
    assert waiting() == []
