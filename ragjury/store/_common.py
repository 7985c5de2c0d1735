"""What every store does the same way, whatever its database: job keys, encodings, the
texts of the errors it stores, and whether a process of this host is still alive."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import from_json, to_json

from ragjury._id_hashes import Repeats, id_hash
from ragjury._json import JSONData, JSONObject
from ragjury.errors import InputError
from ragjury.store._values import Params, Row
from ragjury.store.base import CallTotals, ItemsFactory, Job, JobKind, RunRecord

KILLED = "in flight when its process was killed: never answered"
UNFINISHED_STATES = ("queued", "processing", "running")
STORING = "storing "
"""How the key of a job starts while its samples are still being stored (a job judged as it
is stored, committed a chunk at a time: a run killed meanwhile leaves it so, and the same
command stores and judges the rest)."""
PAGE = 200
"""Rows per page when records are streamed."""


def iso(timestamp: float | None = None) -> str:
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat()


def epoch(timestamp: str) -> float:
    """An :func:`iso` time as epoch seconds."""
    return datetime.fromisoformat(timestamp).timestamp()


def decode_payload(text: str) -> JSONObject:
    """A stored item's payload: read by pydantic-core's parser (about half the time of
    json's on a sample's kilobytes of contexts), or by json where that one refuses it (the
    escape of a lone surrogate, which json.dumps writes and json reads)."""
    try:
        value = from_json(text)
    except ValueError:
        value = json.loads(text)
    if not isinstance(value, dict):
        raise TypeError(f"a stored payload is {type(value).__name__}, not a JSON object")
    return value


def encode(payload: BaseModel | Mapping[str, JSONData] | str) -> str:
    if isinstance(payload, str):  # encoded already (see ItemsFactory)
        return payload
    if isinstance(payload, BaseModel):
        return payload.model_dump_json()
    return json.dumps(payload, sort_keys=True)


def machine() -> str:
    """This machine as the workers table names it: the hostname and, where Linux tells it,
    this boot's id, so that two machines with one hostname (cloned VMs, containers given
    the same name) are never taken for one, nor a machine for itself after a reboot."""
    host = socket.gethostname()
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return host
    return f"{host} (boot {boot[:8]})"


# a worker registers after its process starts; a process with its pid that started this long
# after the registration is another process (allows for a database clock behind this one)
_PID_REUSE_SLACK = 30.0


def alive(pid: int, registered_at: float | None = None) -> bool:
    """Whether the process of this machine with ``pid`` that registered at
    ``registered_at`` (epoch seconds) is still running: the pid is in use, and (where Linux
    says when a process started) not by a process started after that registration."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if registered_at is None:
        return True
    started = _process_start(pid)
    return started is None or started <= registered_at + _PID_REUSE_SLACK


def _process_start(pid: int) -> float | None:
    """When the process ``pid`` started, in epoch seconds (Linux); None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text(encoding="ascii").splitlines()
            if line.startswith("btime ")
        )
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command name
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def job_key(kind: JobKind, options: Mapping[str, JSONData], items: ItemsFactory) -> tuple[str, int]:
    """The key of a job (a hash of what it does and its items) and how many items it has;
    refuses items that share an id (see :class:`JobKey`)."""
    key = JobKey(kind, options)
    for item_key, payload in items():
        key.add(item_key, encode(payload))
    return key.finish(items), key.size


class JobKey:
    """A job's key, a hash of what it does and its items, taken an item at a time (each
    added with its payload as stored). Only the ids' hashes are kept (:class:`Repeats`), so
    a million items cost a few megabytes."""

    def __init__(self, kind: JobKind, options: Mapping[str, JSONData]) -> None:
        self.kind = kind
        self._digest = hashlib.sha256(
            json.dumps([kind, options], sort_keys=True, default=str).encode()
        )
        self._ids = Repeats()
        self.size = 0

    def add(self, key: str, encoded: str) -> None:
        self._ids.add(key)
        self.size += 1
        # surrogatepass: a key with a lone surrogate (stored as U+FFFD) still has a hash
        self._digest.update(b"\0" + key.encode(errors="surrogatepass") + b"\0")
        self._digest.update(encoded.encode())

    def progress(self) -> str:
        """The hash of what was added so far (the key's own, if nothing more is added)."""
        return self._digest.copy().hexdigest()

    def finish(self, items: ItemsFactory) -> str:
        """The key; raises InputError when ids repeat (``items`` is called again only to
        name them)."""
        suspects = self._ids.suspects()
        if suspects:
            seen = Counter(key for key, _ in items() if id_hash(key) in suspects)
            repeated = sorted(k for k, n in seen.items() if n > 1)
            if repeated:
                raise InputError(
                    f"every {'document' if self.kind == 'generate' else 'sample'} needs its "
                    f"own id; repeated: {', '.join(repeated[:5])}; give each record a unique id"
                )
        return self._digest.hexdigest()


def abandoned(attempts: int) -> str:
    return (
        f"abandoned: {attempts} process(es) took this item and never started it (killed or "
        "crashed while preparing it); see their logs"
    )


def poison(group: str, attempts: int, last_error: str | None) -> str:
    why = last_error or "its worker died each time (killed, or crashed the process)"
    return (
        f"poison message: the {group} agent was given this item's message {attempts} time(s) "
        f"and never finished it; last error: {why}"
    )


def totals(row: Row) -> CallTotals:
    """``call_totals`` from (requests, prompt, completion, known cost, calls without cost)."""
    return {
        "llm_calls": int(row[0]),
        "prompt_tokens": int(row[1]),
        "completion_tokens": int(row[2]),
        "cost_usd": None if row[4] else float(row[3]),
        "cost_known_usd": float(row[3]),
    }


def run_record(row: Row) -> RunRecord:
    """A run from (id, command, started_at, finished_at, settings JSON, summary JSON)."""
    run_id, command, started, finished, settings, summary = row
    return RunRecord(
        id=str(run_id),
        command=str(command),
        started_at=str(started),
        finished_at=None if finished is None else str(finished),
        settings=json.loads(settings),
        summary=None if summary is None else json.loads(summary),
    )


def job_summary_pattern(job_id: str) -> str:
    """A LIKE pattern for the summaries that may name ``job_id``: matched as text, then
    checked by :func:`latest_run_of` (a summary is JSON as Python writes it, which may hold
    NaN; parsing it in the database would fail the whole query)."""
    return f'%"job": {json.dumps(job_id)}%'


def latest_run_of(rows: Sequence[Row], job_id: str) -> RunRecord | None:
    """The first of ``rows`` (newest first) whose summary names ``job_id`` and that ended on
    its own (a killed run's summary holds only its calls)."""
    runs = (run_record(row) for row in rows)
    return next(
        (
            r
            for r in runs
            if r.summary and r.summary.get("job") == job_id and not r.summary.get("killed")
        ),
        None,
    )


def job_record(row: Row) -> Job:
    """A job from (id, kind, options JSON, number of items)."""
    job_id, kind, options, size = row
    return Job(id=str(job_id), kind=kind, options=json.loads(options), size=int(size))


def pair_row(job_id: str, item_id: int, index: int, record: Mapping[str, JSONData]) -> Params:
    return (
        job_id,
        _scalar(record["id"]),
        item_id,
        index,
        _scalar(record["outcome"]),
        _scalar(record["question"]),
        _scalar(record["source"]),
        json.dumps(record, ensure_ascii=False),
    )


def sample_row(
    job_id: str, item_id: int, position: int, record: Mapping[str, JSONData], scored: str
) -> Params:
    record_id = _scalar(record["id"])
    return (job_id, record_id, item_id, position, record_text(record), scored)


def record_text(record: Mapping[str, JSONData]) -> str:
    """A judged sample's record as the store keeps it and ``--out`` writes it: compact JSON
    by pydantic-core's serialiser (about a sixth of the time of ``json.dumps`` on a record
    of kilobytes of contexts, made once a sample), or by json where that one refuses a value
    (a lone surrogate, which json writes as it is)."""
    try:
        return to_json(record).decode()
    except (ValueError, UnicodeDecodeError):
        return json.dumps(record, ensure_ascii=False)


def _scalar(value: JSONData) -> str | int | float | bool | None:
    """A field of a record that is stored in a column of its own."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"a record's column holds a list or an object: {value!r}")
