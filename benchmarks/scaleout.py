"""Scale-out: 1, 2 and 4 `serve` processes on one queue, on PostgreSQL and on SQLite.

A queue of samples judged for faithfulness against the fake endpoint with no latency, so
the client's CPU (ragjury's own work per message) is what limits the rate. For each store
and number of processes: items per second from the first process's start to the last
item done, and the ratio to one process. Also one process per agent (intake,
statement_splitter, verdict_judge) against every agent in every process.
On PostgreSQL it reads the server's CPU time (its processes' /proc counters: CPU spent,
not time waited for a lock or idle in a transaction) to give the database's cost per
message handled, over the whole run and over the steady window between 10% and 90% of the
items done. The whole run's figure also holds what each process pays once (its
connections: authentication, the first look-ups of the catalog, the driver's questions about
types, the first plans of each statement), which a short run spreads over few messages; the
steady window's is the cost of one more message, which says how many messages a second one
server core could carry for a larger fleet. Where the server loads
``pg_stat_statements`` (as the throwaway one does) it also gives the SQL statements it ran
per message. On both stores it gives the
`serve` processes' own CPU per message, which a busy machine moves far less than the rates:
over the whole run (what a user pays, each process's start-up included: its imports, about
2.5 s of CPU, are about 2 ms a message of a 600-sample run) and in the steady window, with
the fake endpoint's beside it. The steady figures together are what one message costs the
machine; with them it gives the ceiling of each ratio on this machine's cores (one core at
most per process, and the server's and the endpoint's CPU from the same cores), so a ratio
short of its ceiling is lost to something other than CPU, and a ceiling under the goal is
the machine's, not the code's.

    python benchmarks/scaleout.py                  # 600 samples per run
    python benchmarks/scaleout.py --quick          # 120 samples per run
    python benchmarks/scaleout.py --layouts 2      # one and two processes only
    python benchmarks/scaleout.py --db-url postgresql://...   # a server of yours (a scratch
                                                   # database: each run empties ragjury's schema)

Without --db-url it starts a throwaway PostgreSQL server as the tests do (needs Debian's
``postgresql`` package or initdb and pg_ctl on PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from ragjury._json import JSONObject, JSONValue
from ragjury.store import Store, open_store
from ragjury.store.postgres import PostgresStore

from _harness import BENCHMARKS, FakeEndpoint, base_parser, quiet, show, write_result

sys.path.insert(0, str(BENCHMARKS.parent / "tests"))
from pgserver import PostgresServer, binaries  # the tests' throwaway server

_RUN_CLI = "import sys; from ragjury.cli import main; sys.exit(main(sys.argv[1:]))"
AGENTS = ("intake", "statement_splitter", "verdict_judge")
"""The agents that take messages in this workload (the others run where their input is
made)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=None, help="samples per run")
    parser.add_argument("--db-url", default=None, help="an existing PostgreSQL database URL")
    parser.add_argument("--concurrency", type=int, default=16, help="per serve process")
    parser.add_argument(
        "--layouts", type=int, default=4, choices=range(1, 5),
        help="run the first N layouts only (2: one and two processes, every agent)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.samples = args.samples or (120 if args.quick else 600)
    return args


def write_samples(path: Path, n: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            text = f"Setting {i} is value {i}. Setting {i} was changed in {2000 + i % 25}."
            record = {"id": f"s{i}", "question": f"What is setting {i}?", "answer": text}
            out.write(json.dumps({**record, "contexts": [text]}) + "\n")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", _RUN_CLI, *args]


def _outcome(record: JSONObject, metric: str) -> JSONValue:
    metrics = record["metrics"]
    assert isinstance(metrics, dict)
    entry = metrics[metric]
    assert isinstance(entry, dict)
    return entry["outcome"]


async def _failed(db: str) -> int:
    async with open_store(db) as store:
        outcomes = [_outcome(r, "faithfulness") async for r in store.samples()]
    return sum(outcome != "scored" for outcome in outcomes)


class _Waited(NamedTuple):
    seconds: float
    """From the first process's start until every item ended."""
    steady: float
    """Items per second between 10% and 90% of them ended (the rate once the processes
    have started, before the last items trickle in)."""
    polling_cpu: float
    """Server CPU seconds of this polling's own connection (not ragjury's work: left out
    of the server's CPU per message)."""
    steady_cpu: float | None
    """Server CPU seconds between the same 10% and 90% marks, this polling's own left out
    (None on SQLite)."""
    steady_workers_cpu: float
    """The serve processes' CPU seconds between the same marks (their start-up left out)."""
    steady_endpoint_cpu: float | None
    """The fake endpoint's CPU seconds between the same marks (None: not on this machine)."""


async def _wait_for(
    db: str, total: int, processes: list[subprocess.Popen[bytes]], logs: Path, started: float,
    server_pid: int | None, endpoint_pid: int | None,
) -> _Waited:  # fmt: skip
    marks: dict[float, float] = {}
    cpu: dict[float, float] = {}
    workers: dict[float, float] = {}
    endpoint: dict[float, float] = {}
    async with open_store(db) as store:
        while True:
            counts = await store.counts()
            ended = counts["done"] + counts["failed"]
            now = time.perf_counter()
            for fraction in (0.1, 0.9):
                if ended >= fraction * total and fraction not in marks:
                    marks[fraction] = now
                    workers[fraction] = sum(_own_cpu(p.pid) for p in processes)
                    if endpoint_pid is not None:
                        endpoint[fraction] = _own_cpu(endpoint_pid)
                    if server_pid is not None:
                        own = await _own_backend_cpu(store)
                        cpu[fraction] = _cpu_seconds(server_pid) - own
            if ended >= total:
                steady = 0.8 * total / max(marks[0.9] - marks[0.1], 1e-6)
                window = cpu[0.9] - cpu[0.1] if cpu else None
                fake = endpoint[0.9] - endpoint[0.1] if endpoint else None
                own = await _own_backend_cpu(store)
                return _Waited(
                    now - started, steady, own, window, workers[0.9] - workers[0.1], fake
                )
            if any(p.poll() is not None for p in processes):
                raise RuntimeError(f"a serve process exited early; see {logs}")
            await anyio.sleep(0.1)


async def _own_backend_cpu(store: Store) -> float:
    """CPU seconds of the server process behind the polling store's connection (one: it
    asks one thing at a time), or 0 on SQLite."""
    if not isinstance(store, PostgresStore):
        return 0.0
    [(pid,)] = await store.read("SELECT pg_backend_pid()")
    return _own_cpu(int(pid))


def _own_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (the serve processes, once waited
    for): what the workers spent, which a busy machine moves far less than their rate."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and its reaped children, plus its live children's."""
    ticks = os.sysconf("SC_CLK_TCK")

    def stat(p: int) -> list[str]:
        text = Path(f"/proc/{p}/stat").read_text()
        return text.rsplit(")", 1)[1].split()

    fields = stat(pid)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks  # utime stime cutime cstime
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != pid:
            try:
                child = stat(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if int(child[1]) == pid:  # ppid
                total += (int(child[11]) + int(child[12])) / ticks
    return total


def run_once(
    db: str, samples: Path, logs: Path, groups: list[list[str] | None], args: argparse.Namespace,
    base_url: str, server_pid: int | None, messages: int, log_level: str = "warning",
    endpoint_pid: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    submit = _cli("submit", "--samples", str(samples), "--metrics", "faithfulness", "--db", db)
    subprocess.run(submit, check=True, stdout=subprocess.DEVNULL, env=_user_env())
    endpoint = ["--base-url", base_url, "--api-key", "bench", "--model", "fake-model"]
    # the count started first: its connection is the benchmark's, not ragjury's work
    counting = server_pid is not None and anyio.run(_statements, db, True) is not None
    cpu_before = _cpu_seconds(server_pid) if server_pid else 0.0
    workers_before = _children_cpu()
    started = time.perf_counter()
    processes = []
    for n, agents in enumerate(groups):
        command = _cli("serve", "--db", db, *endpoint, "--concurrency", str(args.concurrency))
        command += ["--log-level", log_level]
        if agents is not None:
            command += ["--agents", ",".join(agents)]
        with (logs / f"serve-{n}.log").open("w") as log:
            processes.append(
                subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=_user_env())
            )
    try:
        waited = anyio.run(
            _wait_for, db, count_lines(samples), processes, logs, started, server_pid,
            endpoint_pid,
        )  # fmt: skip
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=120)
    db_cpu = (_cpu_seconds(server_pid) - cpu_before - waited.polling_cpu) if server_pid else None
    workers_cpu = _children_cpu() - workers_before
    failed = anyio.run(_failed, db)
    row: dict[str, Any] = {
        "seconds": round(waited.seconds, 2),
        "items_per_second": round(count_lines(samples) / waited.seconds, 1),
        "steady_items_per_second": round(waited.steady, 1),
        "failed": failed,
        "workers_cpu_ms_per_message": round(1000 * workers_cpu / max(messages, 1), 3),
        "steady_workers_cpu_ms_per_message": _per_message(waited.steady_workers_cpu, messages),
    }
    if waited.steady_endpoint_cpu is not None:
        row["steady_endpoint_cpu_ms_per_message"] = _per_message(
            waited.steady_endpoint_cpu, messages
        )
    if db_cpu is not None:
        row["db_cpu_seconds"] = round(db_cpu, 2)
        row["db_cpu_ms_per_message"] = round(1000 * db_cpu / messages, 3)
    if waited.steady_cpu is not None:
        row["steady_db_cpu_ms_per_message"] = _per_message(waited.steady_cpu, messages)
    if counting:
        statements = anyio.run(_statements, db, False) or 0
        row["statements_per_message"] = round(statements / messages, 2)
    # what one message costs the machine once started (workers, server, fake endpoint) and
    # how many cores that kept busy: near the machine's count, the run was CPU-bound
    machine = sum(
        row.get(k, 0.0)
        for k in (
            "steady_workers_cpu_ms_per_message",
            "steady_db_cpu_ms_per_message",
            "steady_endpoint_cpu_ms_per_message",
        )
    )
    row["steady_machine_cpu_ms_per_message"] = round(machine, 3)
    per_second = waited.steady * messages / count_lines(samples)
    row["steady_cores_busy"] = round(per_second * machine / 1000, 2)
    return row


def cpu_ceiling(one: dict[str, Any], row: dict[str, Any], processes: int, cpus: int) -> float:
    """The most ``row``'s layout could give over one process (``one``) if the machine's
    cores were the only limit, at the CPU a message each run measured in its steady window:
    a process runs one thread of Python, so ``n`` processes take at most ``n`` cores, and
    every message also takes the server's and the fake endpoint's CPU from the same cores.
    Rates per millisecond of CPU: ``min(n / workers, cpus / machine)``."""

    def rate(run: dict[str, Any], n: int) -> float:
        workers = float(run["steady_workers_cpu_ms_per_message"])
        machine = float(run["steady_machine_cpu_ms_per_message"])
        return min(n / max(workers, 1e-9), cpus / max(machine, 1e-9))

    return round(rate(row, processes) / rate(one, 1), 2)


def _per_message(window_cpu: float, messages: int) -> float:
    """Milliseconds of CPU a message in the steady window (the messages of the items that
    ended between the 10% and 90% marks: 80% of them)."""
    return round(1000 * window_cpu / max(0.8 * messages, 1), 3)


def _user_env() -> dict[str, str]:
    """The environment of the ragjury processes: this one's, but with Python's bytecode
    cache on (in a folder of its own when this shell turns it off), as a user's installed
    package has its ``.pyc`` files: a process's start-up is then its imports, not their
    compilation. The first run (the count of messages a sample) writes the cache."""
    env = dict(os.environ)
    if env.pop("PYTHONDONTWRITEBYTECODE", None) and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "ragjury-bench-pyc")
    return env


async def _statements(db: str, reset: bool) -> int | None:
    """Statements the server ran in this database (``pg_stat_statements``; None when the
    server does not load it), leaving out this benchmark's own polling; ``reset`` starts
    the count again."""
    import asyncpg

    conn = await asyncpg.connect(db)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if reset:
            await conn.execute("SELECT pg_stat_statements_reset()")
            return 0
        return int(
            await conn.fetchval(
                "SELECT COALESCE(SUM(calls), 0) FROM pg_stat_statements s "
                "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() "
                "AND s.query NOT LIKE '%pg_stat_statements%' "
                "AND s.query NOT LIKE '%GROUP BY state%'"
            )
        )
    except asyncpg.PostgresError:  # not loaded (shared_preload_libraries)
        return None
    finally:
        await conn.close()


def count_lines(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for _ in lines)


def messages_per_sample(tmp: Path, base_url: str, args: argparse.Namespace) -> float:
    """Deliveries per sample in this workload, counted in the logs of a small run."""
    work = tmp / "count"
    work.mkdir()
    samples = work / "samples.jsonl"
    write_samples(samples, 20)
    run_once(str(work / "q.db"), samples, work, [None], args, base_url, None, 0, "info")
    handled = sum(
        line.count("message_handled") for line in (work / "serve-0.log").open(encoding="utf-8")
    )
    return handled / 20


@contextmanager
def postgres(url: str | None) -> Iterator[tuple[PostgresServer | None, str | None]]:
    if url is not None:
        yield None, url
        return
    found = binaries()
    if found is None:
        print("no PostgreSQL server binaries: measuring SQLite only", file=sys.stderr)
        yield None, None
        return
    server = PostgresServer(found)
    try:
        yield server, None
    finally:
        server.close()


def _server_pid(server: PostgresServer | None) -> int | None:
    if server is None:
        return None
    return int((server.data / "postmaster.pid").read_text().splitlines()[0])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    layouts: list[tuple[str, list[list[str] | None]]] = [
        ("1 process, every agent", [None]),
        ("2 processes, every agent", [None, None]),
        ("4 processes, every agent", [None] * 4),
        ("3 processes, one per LLM agent and intake", [[a] for a in AGENTS]),
    ]
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as folder,
        FakeEndpoint(latency_ms=0.0) as fake,
        postgres(args.db_url) as (server, url),
    ):
        tmp = Path(folder)
        per_sample = messages_per_sample(tmp, fake.base_url, args)
        samples = tmp / "samples.jsonl"
        write_samples(samples, args.samples)
        stores = ["sqlite"] + (["postgresql"] if server is not None or url else [])
        for store in stores:
            for n, (layout, groups) in enumerate(layouts[: args.layouts]):
                work = tmp / f"{store}-{n}"
                work.mkdir()
                if store == "sqlite":
                    db, pid = str(work / "queue.db"), None
                elif server is not None:
                    db, pid = server.database(), _server_pid(server)
                else:
                    db, pid = str(url), None
                    anyio.run(_empty, db)
                messages = round(per_sample * args.samples)
                measured = run_once(
                    db, samples, work, groups, args, fake.base_url, pid, messages,
                    endpoint_pid=fake.pid,
                )  # fmt: skip
                rows.append({"store": store, "layout": layout, **measured})
    for store in {r["store"] for r in rows}:
        mine = [r for r in rows if r["store"] == store]
        for row in mine:
            row["ratio_to_one_process"] = round(
                row["steady_items_per_second"] / mine[0]["steady_items_per_second"], 2
            )
            if row["layout"].endswith("every agent"):
                row["cpu_ceiling_ratio"] = cpu_ceiling(
                    mine[0], row, int(row["layout"].split()[0]), os.cpu_count() or 1
                )
    result = {
        "settings": {
            "samples": args.samples,
            "concurrency": args.concurrency,
            "cpus": os.cpu_count(),
            "messages_per_sample": per_sample,
        },
        "runs": rows,
    }
    path = write_result("scaleout", result, args.out)
    columns = [
        "store", "layout", "seconds", "items/s", "steady items/s", "ratio to 1 process",
        "CPU ceiling of the ratio",
        "workers CPU ms/message", "steady workers CPU ms/message", "db CPU ms/message",
        "steady db CPU ms/message", "steady endpoint CPU ms/message",
        "steady machine CPU ms/message", "steady cores busy", "statements/message",
    ]  # fmt: skip
    table = [
        [
            r["store"], r["layout"], r["seconds"], r["items_per_second"],
            r["steady_items_per_second"], r["ratio_to_one_process"],
            r.get("cpu_ceiling_ratio", "-"),
            r["workers_cpu_ms_per_message"], r["steady_workers_cpu_ms_per_message"],
            r.get("db_cpu_ms_per_message", "-"), r.get("steady_db_cpu_ms_per_message", "-"),
            r.get("steady_endpoint_cpu_ms_per_message", "-"),
            r["steady_machine_cpu_ms_per_message"], r["steady_cores_busy"],
            r.get("statements_per_message", "-"),
        ]
        for r in rows
    ]  # fmt: skip
    show(
        "serve processes on one queue (faithfulness, endpoint with no latency)",
        columns,
        table,
        path,
    )
    return 0


async def _empty(url: str) -> None:
    """A user's own server: drop what a previous run left (ragjury's schema only)."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP SCHEMA IF EXISTS ragjury CASCADE")
    finally:
        await conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
