"""Make ``pairs_in_flight.db``: a generation job of the ragjury before the answerability
check, killed (SIGKILL) while its drafted pairs wait for two of their critics.

Run from the repository root with the previous version's source in a folder of its own::

    git archive cebec08 ragjury | tar -x -C /tmp/prev-ragjury
    python tests/data/previous/make_pairs_in_flight.py /tmp/prev-ragjury

The previous version runs as ``python -m ragjury`` in that folder (so its own package is
imported), against the tests' scripted server: the generator and the groundedness critic
answer, the relevance and standalone critics never do. Once both documents' pairs are
drafted, their groundedness critiques stored and the other two critics asked, the daemon is
killed, and its database (write-ahead log folded in) is copied here. The test that reads it
is ``tests/test_answer_check.py``.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/: the scripted server and its replies

from conftest import critic_reply, generator_reply, write_qa_document  # noqa: E402
from fakeopenai import FakeOpenAI, Reply  # noqa: E402

DOCUMENTS = {
    "ports.md": [("What port does uvicorn serve on by default?", "8000")],
    "cli.md": [("Which command starts the FastAPI development server?", "fastapi dev")],
}


def _ragjury(previous: Path, *args: str, log: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ragjury", *args],
        cwd=previous,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if log is None else log.open("w", encoding="utf-8"),
        text=True,
    )


def _groundedness_steps(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        try:
            query = "SELECT COUNT(*) FROM steps WHERE agent = 'groundedness_critic'"
            return int(conn.execute(query).fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def main(previous: Path) -> None:
    work = Path(tempfile.mkdtemp())
    docs = work / "docs"
    for name, pairs in DOCUMENTS.items():
        write_qa_document(docs, name, pairs)
    db = work / "in_flight.db"
    with FakeOpenAI() as fake:
        fake.route("generator", generator_reply)
        fake.route("groundedness_critic", critic_reply())
        for agent in ("relevance_critic", "standalone_critic"):
            fake.route(agent, Reply(status=500, delay=3600))  # never answered before the kill
        submit = _ragjury(previous, "submit", str(docs), "--db", str(db), "--whole-documents")
        assert submit.wait(timeout=120) == 0, "the previous version's submit failed"
        endpoint = ["--base-url", fake.base_url, "--api-key", "k", "--model", "fake-model"]
        serve = _ragjury(
            previous,
            *("serve", "--db", str(db), *endpoint, "--lease", "2", "--concurrency", "4"),
            log=work / "serve.log",
        )
        deadline = time.monotonic() + 120
        while not (
            _groundedness_steps(db) == len(DOCUMENTS)
            and len(fake.requests_for("relevance_critic")) == len(DOCUMENTS)
            and len(fake.requests_for("standalone_critic")) == len(DOCUMENTS)
        ):
            assert serve.poll() is None, (work / "serve.log").read_text()
            assert time.monotonic() < deadline, "the previous version never reached the critics"
            time.sleep(0.05)
        serve.send_signal(signal.SIGKILL)
        serve.wait(timeout=30)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0, "the write-ahead log could not be folded into the database"
    finally:
        conn.close()
    shutil.copyfile(db, HERE / "pairs_in_flight.db")
    print(HERE / "pairs_in_flight.db")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
