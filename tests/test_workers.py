"""Agent workers in separate processes on one SQLite database.

Three ``serve`` processes, one of them ``--agents`` for two agents only, killed with SIGKILL
at random moments and restarted: every item ends exactly once and as a single-process run
ends it, and the only LLM requests asked twice are ones in flight at a kill. Also: a poison
record in a served queue, and ``status`` naming the agents that wait for workers.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_daemon import Daemon, daemons, endpoint, script_slowly, slow, spawn, states, until

from ragjury.cli import main
from ragjury.prompts import Prompt

from conftest import read_jsonl, write_qa_document
from evalfakes import script_judges, splitter_reply, verdict_reply
from fakeopenai import FakeOpenAI

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


def export(db: Path, out: Path) -> list[dict[str, Any]]:
    args = ["export", "--db", str(db), "--out", str(out), "--rejected", f"{out}.r"]
    args += ["--results", f"{out}.s"]
    assert main(args) == 0
    return read_jsonl(out) + read_jsonl(Path(f"{out}.r")) + read_jsonl(Path(f"{out}.s"))


def worker(started: list[Daemon], fake: FakeOpenAI, db: Path, name: str, *extra: str) -> Daemon:
    log = db.parent / f"{name}-{len(started)}.log"
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
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon], kind: str, split: str
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

    db = tmp_path / "queue.db"
    assert main([*submitted, "--db", str(db)]) == 0
    start = len(fake.requests)
    roles = [(), (), ("--agents", split)]
    processes = [worker(daemons, fake, db, f"w{i}", *roles[i]) for i in range(3)]
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
        processes[victim] = worker(daemons, fake, db, f"w{victim}", *roles[victim])
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
    process = worker(daemons, fake, db, "poisoned")
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
    front = worker(daemons, fake, db, "front", "--agents", "intake,chunker,generator,deduplicator")

    def waiting() -> list[str]:
        capsys.readouterr()
        assert main(["status", "--db", str(db), "--json"]) == 0
        return list(json.loads(capsys.readouterr().out)["waiting_for_workers"])

    until(lambda: "groundedness_critic" in waiting(), "the critics' messages waiting")
    assert {"relevance_critic", "standalone_critic", "aggregator", "collector"} <= set(waiting())
    assert "generator" not in waiting()
    capsys.readouterr()
    assert main(["status", "--db", str(db)]) == 0
    assert "no worker is serving it" in capsys.readouterr().out

    back = worker(daemons, fake, db, "back")
    until(lambda: states(db)["done"] == 2, "both documents done once every agent has a worker")
    for process in (front, back):
        process.signal(signal.SIGTERM)
        assert process.wait() == 0
    assert waiting() == []
