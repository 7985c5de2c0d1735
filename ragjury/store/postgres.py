"""The PostgreSQL store: the queue, the durable bus and the results on a database server, so
agent workers on many machines share one job.

* Driver: asyncpg (the ``postgres`` extra), through a connection pool sized by the caller
  (from ``--concurrency``).
* Claims take rows with ``FOR UPDATE SKIP LOCKED``: concurrent workers never get the same
  message or item, and never wait on each other's locks.
* Operations that read then write one item's state (finish, fail, acknowledge with replies,
  join) are serialised per item by a transaction-scoped advisory lock; the deduplicator's
  step per job likewise.
* Leases and "now" are on the server's clock.
* Publishing notifies ``LISTEN``-ing processes (:meth:`PostgresStore.watch`), so idle
  workers wake without polling fast.
* A lost connection (the server restarted, the network dropped) is retried with backoff;
  the transaction that was cut off rolled back, so it runs again whole.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, TypedDict, TypeVar

import anyio
import structlog

from ragjury.errors import ConfigurationError, StoreUnavailableError
from ragjury.llm.usage import IN_FLIGHT
from ragjury.store import _pg_schema
from ragjury.store.base import Acked, OutgoingMessage, StoredMessage
from ragjury.store.sql import Operation, SQLStore
from ragjury.store.sql.steps import (
    Acknowledge,
    ClaimedSteps,
    ClaimItems,
    EndItem,
    Execute,
    ExecuteMany,
    Fetch,
    InsertItems,
    Lock,
    Publish,
    Step,
    StepResult,
    Steps,
)
from ragjury.urls import redacted

T = TypeVar("T")
Conn = Any
"""An ``asyncpg.Connection``, ``Pool`` or listener (asyncpg ships no type hints)."""

log = structlog.get_logger("ragjury.store")

CHANNEL = "ragjury_messages"
_NOW = "(EXTRACT(EPOCH FROM clock_timestamp())::float8)"
_ENDED = "state IN ('done', 'failed')"
_NEW_PAIRS = (
    "new_pairs AS (INSERT INTO pairs "
    "(job_id, id, item_id, position, outcome, question, source, record) "
    "SELECT $1, p.id, ended.id, p.n, p.outcome, p.question, p.source, p.record FROM ended, "
    "unnest($8::text::int[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[]) "
    "AS p(n, id, outcome, question, source, record) "
    "ON CONFLICT (job_id, id) DO UPDATE SET item_id = excluded.item_id, "
    "position = excluded.position, outcome = excluded.outcome, "
    "question = excluded.question, source = excluded.source, record = excluded.record), "
)
_NO_PAIRS = (
    "new_pairs AS (SELECT $8::text, $9::text[], $10::text[], $11::text[], $12::text[], "
    "$13::text[]), "
)
_NEW_SAMPLES = (
    "new_samples AS (INSERT INTO samples (job_id, id, item_id, position, record, scored) "
    "SELECT $1, s.id, ended.id, ended.position, s.record, s.scored "
    "FROM ended, unnest($14::text[], $15::text[], $16::text[]) AS s(id, record, scored) "
    "ON CONFLICT (job_id, id) DO UPDATE SET item_id = excluded.item_id, "
    "position = excluded.position, record = excluded.record, scored = excluded.scored), "
)
_NO_SAMPLES = "new_samples AS (SELECT $14::text[], $15::text[], $16::text[]), "
"""What an item's end without pairs (an evaluation's) or without samples (a generation's)
has in place of :data:`_NEW_PAIRS` or :data:`_NEW_SAMPLES`: a query nothing reads, so never
run, that keeps their parameters typed, instead of an insert whose set-up the server pays
at every execution, rows or none."""
_END_ITEM = (
    "WITH ended AS (UPDATE items SET state = $3, lease_owner = NULL, lease_expires = NULL, "
    "report = $4, error = COALESCE($5, error), finished_at = $6, "
    "transient_failures = COALESCE($7, transient_failures) "
    f"WHERE job_id = $1 AND key = $2 AND NOT {_ENDED} RETURNING id, position), "
    + _NEW_PAIRS
    + _NEW_SAMPLES
    + "no_joins AS (DELETE FROM item_joins WHERE job_id = $1 AND item_key = $2 "
    "AND EXISTS (SELECT 1 FROM ended)), "
    "no_messages AS (DELETE FROM messages WHERE job_id = $1 AND item_key = $2 "
    "AND EXISTS (SELECT 1 FROM ended)) "
    "SELECT COUNT(*) FROM ended"
)
"""An item's end in one statement (:class:`EndItem`): the update's check of the item's
state, under its row lock, decides whether the rest happens."""


@functools.lru_cache(maxsize=4)
def _end_item(pairs: bool, samples: bool) -> str:
    """:data:`_END_ITEM`, storing pairs only if it has ``pairs`` and samples only if it has
    ``samples``."""
    if _NEW_PAIRS not in _END_ITEM or _NEW_SAMPLES not in _END_ITEM:
        raise AssertionError("the item's end's SQL changed: rewrite _end_item")
    sql = _END_ITEM if pairs else _END_ITEM.replace(_NEW_PAIRS, _NO_PAIRS)
    return sql if samples else sql.replace(_NEW_SAMPLES, _NO_SAMPLES)


_REPLIES = (
    "unnest({0}::text[], {1}::text[], {2}::text[], {3}::text[], {4}::text[], {5}::text::bool[], "
    "{6}::text[]) WITH ORDINALITY AS t(g, k, j, i, b, l, sk, n)"
)
"""The messages to put, as columns: group, kind, job, item, body, leased, step key (and
their order)."""
_PUT = (
    "outgoing AS MATERIALIZED (SELECT nextval('messages_id_seq') AS id, c.*, "
    "CASE WHEN c.l AND {2}::text IS NOT NULL AND c.sk <> '' AND c.output IS NULL "
    "THEN nextval('llm_calls_id_seq') END AS cid FROM (SELECT t.*, (SELECT s.output "
    "FROM steps s WHERE t.sk <> '' AND s.key = t.sk) AS output FROM t) AS c ORDER BY c.n), "
    "new AS (INSERT INTO messages (id, grp, kind, job_id, item_key, body, available_at, "
    "created_at, lease_owner, attempts) OVERRIDING SYSTEM VALUE "
    f"SELECT id, g, k, j, i, b, {_NOW} + CASE WHEN l THEN {{0}}::float8 ELSE 0 END, {_NOW}, "
    "CASE WHEN l THEN {1}::text END, CASE WHEN l THEN 1 ELSE 0 END FROM outgoing), "
    f"woken AS (SELECT pg_notify('{CHANNEL}', g) FROM outgoing WHERE NOT l), "
    "opened AS (INSERT INTO llm_calls (id, run_id, stage, requests, prompt_tokens, "
    "completion_tokens, latency_ms, statuses, error, created_at) OVERRIDING SYSTEM VALUE "
    f"SELECT cid, {{2}}::text, g, 0, 0, 0, 0, '[]', '{IN_FLIGHT}', {{3}}::text "
    "FROM outgoing WHERE cid IS NOT NULL) "
    "SELECT x.id, x.g, x.b, x.j, x.i, x.sk, x.output, x.cid, {4} AS joined "
    "FROM (SELECT COUNT(*) FROM woken) AS w LEFT JOIN outgoing x ON x.l"
)
"""Put the rows of ``t``, the leased ones leased, waking the processes that wait for the
others' groups (the server sends one notice a group however many ask); the leased ones
come back, each with its step's cached output. Under a run ({2}; NULL: none), each leased
one whose step is not cached also comes with its first LLM call's in-flight record, opened
here (as ``open_call`` would as the call starts): the worker's call takes it, so a call
costs no statement of its own. Each leased one also comes with what {4} gives: its item's
join parts (:data:`_JOINED`), or NULL. Each row's message and call ids are drawn first
(``outgoing``, in their order), with its step looked up once (by its key, on the index,
whatever the plan), so nothing is joined back to what was inserted: matched on group and
body, with a DISTINCT against repeated bodies, that took the server more to set up and run
than the insert."""
_JOINED = (
    "(SELECT ij.parts::text FROM item_joins ij WHERE x.id IS NOT NULL "
    "AND ij.job_id = x.j AND ij.item_key = x.i)"
)
"""A leased message's item's join state as the statement found it, which its worker's last
join of the item then need not ask for (:data:`ragjury.agents.joins.seen_joins`). Not in a
:data:`_PUBLISH`, whose own first joins of its items the statement cannot see."""
_PUBLISH = (
    f"WITH t AS (SELECT * FROM {_REPLIES.format('$1', '$2', '$3', '$4', '$5', '$6', '$7')}), "
    "started AS (UPDATE items SET state = 'running', lease_owner = NULL, lease_expires = NULL "
    "WHERE state = 'processing' AND id = ANY($10::text::bigint[])), "
    "joined AS (INSERT INTO item_joins AS ij (job_id, item_key, parts) "
    "SELECT x.j, x.k, x.p::jsonb FROM unnest($13::text[], $14::text[], $15::text[]) "
    "AS x(j, k, p) ON CONFLICT (job_id, item_key) DO UPDATE SET parts = "
    "(excluded.parts || ij.parts)), " + _PUT.format("$8", "$9", "$11", "$12", "NULL::text")
)
"""Messages put, the items they start marked running and those items' first join parts
stored, in one statement (:class:`Publish`)."""
_CLAIMED_STEPS = (
    "WITH c AS MATERIALIZED (SELECT n, g, o, CASE WHEN o IS NULL AND $3::text IS NOT NULL "
    "THEN nextval('llm_calls_id_seq') END AS cid FROM (SELECT m.n, m.g, (SELECT s.output "
    "FROM steps s WHERE s.key = m.k) AS o FROM unnest($1::text[], $2::text[]) "
    "WITH ORDINALITY AS m(g, k, n)) AS q ORDER BY n), "
    "opened AS (INSERT INTO llm_calls (id, run_id, stage, requests, prompt_tokens, "
    "completion_tokens, latency_ms, statuses, error, created_at) OVERRIDING SYSTEM VALUE "
    f"SELECT cid, $3::text, g, 0, 0, 0, 0, '[]', '{IN_FLIGHT}', $4::text FROM c "
    "WHERE cid IS NOT NULL) "
    "SELECT o, cid FROM c ORDER BY n"
)
"""Claimed messages' steps looked up and their first calls' records opened
(:class:`ClaimedSteps`) in one statement: each step by its key on the index, whatever the
plan; $3 NULL (no run) opens none."""
_DROPPED = "dropped AS (DELETE FROM llm_calls WHERE id = ANY($27::text::bigint[])), "
_NOTHING_DROPPED = "dropped AS (SELECT $27::text), "
"""What an acknowledgement with no call records to drop (nearly every one) has in place of
:data:`_DROPPED`: a query nothing reads, so never run, that only keeps ``$27`` typed. The
delete's plan read the whole of ``llm_calls`` to find none of an empty list (the server keeps
one plan per connection, made while the table was small), a cost that grew with every call
recorded."""


_CLOSED = (
    "closed AS (UPDATE llm_calls SET stage = c.stage, requests = c.requests, "
    "prompt_tokens = c.prompt, completion_tokens = c.completion, latency_ms = c.latency, "
    "statuses = c.statuses, error = c.error, model = c.model, cost_usd = c.cost "
    "FROM unnest($17::text[], $18::text::int[], $19::text::int[], $20::text::int[], "
    "$21::text::float8[], $22::text[], $23::text[], $24::text[], $25::text::float8[], "
    "$26::text::bigint[]) AS c(stage, requests, prompt, completion, latency, statuses, error, "
    "model, cost, id) WHERE llm_calls.id = ANY(ARRAY[c.id])), "
)
"""The records of an acknowledgement's calls closed, $17-$26 each a column of their figures
(:data:`~ragjury.store.sql.calls.CLOSE_CALL`'s order). Each is found by its id on the
primary key whatever the plan: ``= ANY(ARRAY[c.id])`` cannot be hashed (as ``= c.id``
could: the plan each connection keeps, made while the table was small, hashed every call
recorded to close one)."""
_ONE_CLOSED = (
    "closed AS (UPDATE llm_calls SET stage = $17, requests = $18::int, prompt_tokens = $19::int, "
    "completion_tokens = $20::int, latency_ms = $21::float8, statuses = $22, error = $23, "
    "model = $24, cost_usd = $25::float8 WHERE id = $26::bigint), "
)
"""What an acknowledgement of a message that made one call (nearly every LLM step) has in
place of :data:`_CLOSED`: its figures as values. Over arrays the kept plan, which cannot know
their length, is costed for ten calls: more than a plan made for one call's values by enough
that the server made a new plan at every other acknowledgement (about 1 ms each)."""
_NONE_CLOSED = (
    "closed AS (SELECT $17::text, $18::int, $19::int, $20::int, $21::float8, $22::text, "
    "$23::text, $24::text, $25::float8, $26::bigint), "
)
"""What an acknowledgement with no call to close has in place of :data:`_CLOSED`: a query
nothing reads, so never run, that keeps $17-$26 typed."""


_REPLYING = (
    "open AS (SELECT 1 FROM gone WHERE NOT EXISTS "
    f"(SELECT 1 FROM items WHERE job_id = $2 AND key = $3 AND {_ENDED})), "
    f"t AS (SELECT * FROM {_REPLIES.format('$4', '$5', '$6', '$7', '$8', '$9', '$10')} "
    "WHERE EXISTS (SELECT 1 FROM open)), "
)
_PUT_REPLIES = _PUT.format("$11", "$12", "$28", "$29", _JOINED)
_ACKNOWLEDGE = (
    "WITH gone AS (DELETE FROM messages WHERE id = $1 RETURNING id), "
    + _REPLYING
    + "cached AS (INSERT INTO steps (key, agent, output, created_at) "
    "SELECT $13::text, $14::text, $15::text, $16::float8 WHERE $13::text IS NOT NULL "
    "ON CONFLICT (key) DO UPDATE SET agent = excluded.agent, output = excluded.output, "
    "created_at = excluded.created_at), " + _CLOSED + _DROPPED + _PUT_REPLIES
)
"""An acknowledgement in one statement (:class:`Acknowledge`): the message removed, its
replies put if that removed it and its item has not ended, its step cached, its calls'
records closed and those opened for calls never made dropped."""
_ACK_PARAMS = 29
_NO_REPLIES = (
    "unused AS (SELECT $2::text, $3::text, $4::text[], $5::text[], $6::text[], $7::text[], "
    "$8::text[], $9::text, $10::text[], $11::float8, $12::text, $28::text, $29::text) "
    "SELECT NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, "
    "NULL::text, NULL::bigint AS cid, NULL::text AS joined"
)
"""What an acknowledgement with no replies (one that ends its item, nearly always) has in
place of :data:`_REPLYING` and :data:`_PUT_REPLIES`: a query nothing reads, so never run,
that keeps their parameters typed, and the row of NULLs a put of nothing returns. The put's
dozen plan nodes (the insert, the wake-up, the call records' opening, the joins that
return the leased messages) each cost the server its set-up at every execution, rows or
none: about a quarter of such an acknowledgement's server CPU."""


@functools.lru_cache(maxsize=32)
def _acknowledgement(
    ending: tuple[bool, bool] | None,
    drops: bool,
    calls: int,
    replies: bool = True,
    joins: bool = False,
) -> str:
    """:data:`_ACKNOWLEDGE`, with :data:`_DROPPED` only if ``drops``, its calls closed as
    ``calls`` (0, 1 or more: 2) asks, its replies put only if it has ``replies`` (with their
    item's join state, :data:`_JOINED`, only if one of them ``joins``), and with
    the item's end first if ``ending`` (whether it stores pairs, samples: :func:`_end_item`,
    its parameters after the acknowledgement's): the message goes with the item's messages
    when it ends it, else on its own."""
    parts = (_DROPPED, _CLOSED, _REPLYING, _PUT_REPLIES)
    if any(part not in _ACKNOWLEDGE for part in parts):
        raise AssertionError("the acknowledgement's SQL changed: rewrite _acknowledgement")
    sql = _ACKNOWLEDGE if drops else _ACKNOWLEDGE.replace(_DROPPED, _NOTHING_DROPPED)
    if calls < 2:
        sql = sql.replace(_CLOSED, _ONE_CLOSED if calls else _NONE_CLOSED)
    if not replies:
        sql = sql.replace(_REPLYING, "").replace(_PUT_REPLIES, _NO_REPLIES)
    elif not joins:
        sql = sql.replace(_JOINED, "NULL::text")
    return sql if ending is None else _ending_acknowledgement(sql, _end_item(*ending))


def _ending_acknowledgement(acknowledge: str, end_item: str) -> str:
    ending = re.sub(r"\$(\d+)", lambda m: f"${int(m.group(1)) + _ACK_PARAMS}", end_item)
    ending = ending.removeprefix("WITH ").removesuffix(" SELECT COUNT(*) FROM ended")
    counted = "e.n FROM (SELECT COUNT(*) AS n FROM ended) AS e"
    sql = acknowledge.replace(
        "WITH gone AS (DELETE FROM messages WHERE id = $1 RETURNING id)",
        f"WITH {ending}, gone AS (DELETE FROM messages WHERE id = $1 "
        "AND NOT EXISTS (SELECT 1 FROM ended) RETURNING id)",
    )
    sql = sql.replace(
        "AS joined FROM (SELECT COUNT(*) FROM woken) AS w",
        f"AS joined, {counted}, (SELECT COUNT(*) FROM woken) AS w",
    ).replace(
        "NULL::bigint AS cid, NULL::text AS joined",
        f"NULL::bigint AS cid, NULL::text AS joined, {counted}",
    )
    if "FROM ended) AS e" not in sql or "AND NOT EXISTS (SELECT 1 FROM ended)" not in sql:
        raise AssertionError("the acknowledgement's SQL changed: rewrite _ending_acknowledgement")
    return sql


@functools.lru_cache(maxsize=2)
def _claim_items(of_jobs: bool) -> str:
    """:class:`ClaimItems` in one statement ($1 owner, $2 limit, $3 lease seconds, $4 the
    attempts limit, $5 the jobs if ``of_jobs``): the expired leases' items first, then
    queued ones up to the limit, each query on its index; those started too often come back
    untaken (their attempts before this claim, as the taken ones').

    The queued items are asked for as ``state BETWEEN 'queued' AND 'queued'`` and ordered by
    ``state, id`` (the same rows in the same order): with ``state = 'queued'`` the planner
    drops the state from the order (it is one value), reads the primary key in ``id``
    order and filters it, walking past every item of the table already done before the
    first queued one, so a claim cost grew with the run (80 ms a claim with 100,000 items
    done). As a range the state stays in the order, which ``items_open (state, id)`` gives
    as it is (the index of the unfinished items alone, ``state NOT IN ('done', 'failed')``,
    which the range implies): the claim reads only the rows it takes, whatever the plan.
    The rows found are then named as an array (``id = ANY(ARRAY(...))``), which the primary
    key answers: joined as ``id IN (SELECT ...)``, a plan that expected a tenth of the table
    (the limit is a parameter) read all of it to hash it."""
    jobs = " AND job_id = ANY($5::text[])" if of_jobs else ""
    return (
        "WITH e AS (SELECT id FROM items WHERE state = 'processing' "
        f"AND lease_expires <= {_NOW} AND lease_owner <> $1{jobs} "
        "ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED), "
        "q AS (SELECT id FROM items WHERE state BETWEEN 'queued' AND 'queued'"
        f"{jobs} ORDER BY state, id "
        "LIMIT GREATEST($2 - (SELECT COUNT(*) FROM e), 0) FOR UPDATE SKIP LOCKED), "
        "found AS (SELECT id FROM e UNION ALL SELECT id FROM q), "
        "claimed AS (UPDATE items SET state = 'processing', lease_owner = $1, "
        f"lease_expires = {_NOW} + $3, attempts = attempts + 1, started_by = $1 "
        "WHERE id = ANY(ARRAY(SELECT id FROM found)) AND attempts < $4 "
        "RETURNING id, job_id, key, position, payload, attempts - 1) "
        "SELECT *, true FROM claimed UNION ALL "
        "SELECT id, job_id, key, position, payload, attempts, false FROM items "
        "WHERE id = ANY(ARRAY(SELECT id FROM found)) AND attempts >= $4"
    )


_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
"""A transaction-scoped lock on a name's hash (a collision only makes two wait)."""
_ITEM_COLUMNS = [
    "job_id", "key", "position", "payload", "created_at", "state", "report", "finished_at",
    "transient_failures",
]  # fmt: skip
_RETRY_FIRST, _RETRY_MAX = 0.2, 5.0


@functools.lru_cache(maxsize=512)
def render(sql: str, numbers: tuple[int, ...] = ()) -> str:
    """The core's SQL as PostgreSQL runs it: ``$1, $2...`` placeholders and its clock; the
    parameters at ``numbers`` (0-based) are lists of integers bound as :func:`_array` text."""
    count = iter(range(1, 10_000))
    sql = _MERGE.sub(r"(\1 || \2)", sql.replace("now_epoch()", _NOW))

    def placeholder(_: re.Match[str]) -> str:
        n = next(count)
        return f"${n}::text::bigint[]" if n - 1 in numbers else f"${n}"

    return re.sub(r"\?", placeholder, sql)


def _bound(sql: str, params: Sequence[object]) -> tuple[str, list[object]]:
    """A core statement and its parameters as asyncpg binds them: a list of integers (an
    ``x = ANY(?)`` of ids) as :func:`_array` text, so no new connection looks up ``bigint[]``."""
    numbers = tuple(
        i
        for i, p in enumerate(params)
        if isinstance(p, list) and p and all(type(x) is int for x in p)
    )
    if not numbers:
        return render(sql), list(params)
    bound = [_array(p) if isinstance(p, list) and i in numbers else p for i, p in enumerate(params)]
    return render(sql, numbers), bound


_MERGE = re.compile(r"json_merge\(([\w.]+), ([\w.]+)\)")
"""``json_merge(a, b)``: the JSON objects' keys together, ``b``'s value for a key in both."""


async def _apply(conn: Conn, step: Step) -> StepResult:
    """Run one step of an operation; its result."""
    if isinstance(step, Fetch):
        sql, params = _bound(step.sql, step.params)
        return [tuple(row) for row in await conn.fetch(sql, *params)]
    if isinstance(step, Execute):
        sql, params = _bound(step.sql, step.params)
        return _affected(await conn.execute(sql, *params))
    if isinstance(step, ExecuteMany):
        await conn.executemany(render(step.sql), step.rows)
    if isinstance(step, EndItem):
        sql = _end_item(bool(step.pairs), bool(step.samples))
        return bool(await conn.fetchval(sql, *_end_item_params(step)))
    if isinstance(step, Acknowledge):
        cached = step.step or (None, None, None, None)
        calls = _closing(step.calls)
        ending = [] if step.end is None else _end_item_params(step.end)
        rows = await conn.fetch(
            _acknowledgement(
                None if step.end is None else (bool(step.end.pairs), bool(step.end.samples)),
                bool(step.unused_calls),
                min(len(step.calls), 2),
                bool(step.replies),
                any(m.joins for m in step.replies),
            ),
            step.message_id,
            step.job_id,
            step.key,
            *_columns(step.replies),
            step.lease_seconds,
            step.owner,
            *cached,
            *calls,
            _array(step.unused_calls),
            *(step.opens or (None, None)),
            *ending,
        )
        ended = None if step.end is None else bool(rows and rows[0][9])
        return Acked(_leased(rows), ended)
    if isinstance(step, Publish):
        return _leased(
            await conn.fetch(
                _PUBLISH,
                *_columns(step.messages),
                step.lease_seconds,
                step.owner,
                _array(step.started),
                *(step.opens or (None, None)),
                *_join_columns(step.joins),
            )
        )
    if isinstance(step, ClaimedSteps):
        groups = [group for group, _ in step.messages]
        keys = [key for _, key in step.messages]
        rows = await conn.fetch(_CLAIMED_STEPS, groups, keys, *(step.opens or (None, None)))
        return [tuple(row) for row in rows]
    if isinstance(step, ClaimItems):
        jobs = [] if step.job_ids is None else [list(step.job_ids)]
        sql = _claim_items(step.job_ids is not None)
        claim = (step.owner, step.limit, step.lease_seconds, step.max_attempts, *jobs)
        return [tuple(row) for row in await conn.fetch(sql, *claim)]
    if isinstance(step, InsertItems):
        await conn.copy_records_to_table(
            "items", records=step.rows, columns=_ITEM_COLUMNS, schema_name=_pg_schema.SCHEMA
        )
    elif isinstance(step, Lock):
        await conn.execute(_LOCK, step.name)
    return None


_MESSAGE_FIELDS = ("group", "kind", "job_id", "item_key", "body", "leased", "step_key")


def _columns(messages: Sequence[OutgoingMessage]) -> list[list[str] | str]:
    columns: list[list[str] | str] = [
        [getattr(m, name) for m in messages] for name in _MESSAGE_FIELDS if name != "leased"
    ]
    columns.insert(5, _array([m.leased for m in messages]))
    return columns


def _closing(rows: Sequence[Sequence[object]]) -> list[object]:
    """$17-$26 of an acknowledgement closing the calls of ``rows`` (see
    :func:`_acknowledgement`): none, one call's figures, or their columns."""
    if not rows:
        return [None] * 10
    if len(rows) == 1:
        return list(rows[0])
    return [
        _array(row[i] for row in rows) if i in _NUMBER_COLUMNS else [row[i] for row in rows]
        for i in range(10)
    ]


_NUMBER_COLUMNS = (1, 2, 3, 4, 8, 9)
"""The columns of a closing row (:data:`~ragjury.store.sql.calls.CLOSE_CALL`) that are
numbers: passed as :func:`_array` text."""


def _array(values: Iterable[object]) -> str:
    """Numbers or flags (None: NULL) as the text of a PostgreSQL array, which the SQL casts
    (``$1::text::bigint[]``). Passed as arrays, such parameters make asyncpg look their
    types up on each new connection (``bigint[]``, ``bool[]``... are not among the types it
    knows): a query of the catalog that costs the server 10-15 ms a connection, more than a
    thousand messages' worth of the rest of what a connection's first statements cost."""
    return "{" + ",".join(_element(v) for v in values) + "}"


def _element(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | float):
        return repr(value)  # 'inf' and 'nan' read back as such
    raise TypeError(f"not a number or a flag: {value!r}")


def _join_columns(joins: Sequence[Sequence[object]]) -> list[list[str]]:
    """(job, item, parts) rows as columns, one row per item (a statement may not change a
    row twice): an item's parts together, the first value of a name kept, as its joins in
    turn would keep it."""
    merged: dict[tuple[str, str], dict[str, str]] = {}
    for job_id, key, parts in joins:
        held = merged.setdefault((str(job_id), str(key)), {})
        for name, value in json.loads(str(parts)).items():
            held.setdefault(name, value)
    return [
        [job_id for job_id, _ in merged],
        [key for _, key in merged],
        [json.dumps(parts, ensure_ascii=False) for parts in merged.values()],
    ]


def _leased(rows: Sequence[Conn]) -> list[StoredMessage]:
    """The leased messages a put returned (one row per message; none: a row of NULLs)."""
    found: dict[int, StoredMessage] = {}
    for message_id, group, body, job_id, key, step_key, output, call, joined, *_ in rows:
        if message_id is not None and message_id not in found:
            found[message_id] = StoredMessage(
                int(message_id), group, body, 1, job_id, key, output, step_key or "",
                None if call is None else int(call), joined,
            )  # fmt: skip
    return sorted(found.values(), key=lambda m: m.id)


def _end_item_params(step: EndItem) -> list[object]:
    # one row per id, the last of a repeated one (as one upsert per row would leave it):
    # a statement may not change a row twice
    pairs = list({row[0]: (n, *row) for n, row in enumerate(step.pairs)}.values())
    samples = list({row[0]: row for row in step.samples}.values())
    return [
        step.job_id,
        step.key,
        step.state,
        step.report,
        step.error,
        step.finished_at,
        step.transient_failures,
        _array(row[0] for row in pairs),
        *([row[i] for row in pairs] for i in range(1, 6)),
        *([row[i] for row in samples] for i in range(3)),
    ]


async def drive(conn: Conn, steps: Steps[T]) -> T:
    """Run an operation of the core to its end on ``conn``."""
    try:
        step = next(steps)
        while True:
            step = steps.send(await _apply(conn, step))
    except StopIteration as done:
        result: T = done.value
        return result


async def _keep_session(_conn: Conn) -> None:
    """What a connection needs when it goes back to the pool: nothing. asyncpg rolls back a
    transaction left open; its default reset would also send four statements (unlock
    advisory locks, close cursors, unlisten, reset settings) at every release, for session
    state ragjury never leaves: its locks end with their transactions, it opens no cursor,
    listens on a connection of its own and changes no setting."""


def pool_size_for(concurrency: int) -> int:
    """Connections for a process sending ``concurrency`` LLM requests at once: a database
    operation takes a millisecond or so against a request's hundreds, so a quarter of them
    (plus two for the intake and the bus) keeps every worker fed; at most 32."""
    return max(4, min(32, concurrency // 4 + 2))


def _driver() -> ModuleType:
    try:
        import asyncpg
    except ImportError as exc:  # the postgres extra is not installed
        raise ConfigurationError(
            "a postgresql:// --db needs the asyncpg driver, in ragjury's postgres extra: "
            "pip install 'ragjury[postgres]'"
        ) from exc
    driver: ModuleType = asyncpg
    return driver


def _lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection or the server went away, or the server cannot
    take the work just now (try again), as opposed to a mistake in what was asked (raise)."""
    asyncpg = _driver()
    if isinstance(exc, OSError | TimeoutError | ConnectionError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        # 08: connection exceptions; 57P: shutdown, crash, cannot connect now; 53: too many
        # connections, out of memory or disk; 40001/40P01: a serialization failure or a
        # deadlock, whose transaction was rolled back whole
        return state.startswith(("08", "57P", "53")) or state in ("40001", "40P01")
    if isinstance(exc, asyncpg.InternalClientError):
        # the driver's own state broken, as a pooled connection can be after the server
        # restarted ("cannot switch to state 15; another operation is in progress"): the
        # operation never ran on the server; a fresh connection does it whole
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        return "closed" in str(exc) or "connection" in str(exc).lower()
    return False


_LZ4 = (
    "SELECT set_config('default_toast_compression', 'lz4', false) FROM pg_settings "
    "WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
)
"""Compress the values stored out of line (over about 2 KB: a sample's record, a message's
body with real-size contexts) with lz4 where the server has it (PostgreSQL 14 or later,
built with lz4), not pglz, the server's default: pglz is slow to compress. An 8 KB message
body here cost the server 300 us of CPU to insert and 125 us to read with pglz, 150 and
100 us with lz4 (stored about a fifth larger). Only values written from then on are
compressed so; the others stay readable as they are. A row when it is set, none when the
server has no lz4."""


class _ConnectOptions(TypedDict):
    dsn: str
    timeout: float
    command_timeout: float
    server_settings: dict[str, str]


class PostgresStore(SQLStore):
    """``async with PostgresStore(url) as store:`` connects, and creates or upgrades the
    schema. ``url`` is a ``postgresql://user@host:port/database`` URL; its password may also
    come from ``PGPASSWORD`` or a ``.pgpass`` file (as for psql). No password is kept
    anywhere but in the driver's connection settings."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        reconnect_seconds: float = 600.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.location = redacted(url)
        self.pool_size = pool_size
        self.reconnect_seconds = reconnect_seconds
        self.connect_timeout = connect_timeout
        self._pool: Conn | None = None
        self._listener: Conn | None = None
        self._watchers: list[Callable[[str], None]] = []
        self._unreachable_since: float | None = None
        self._listening = anyio.Lock()

    # opening ------------------------------------------------------------------------
    def _connect_options(self, *, lz4: bool = False) -> _ConnectOptions:
        options: _ConnectOptions = {
            "dsn": self.url,
            "timeout": self.connect_timeout,
            "command_timeout": 300,
            "server_settings": {
                "search_path": _pg_schema.SCHEMA,
                "application_name": f"ragjury@{socket.gethostname()}",
                # ragjury's statements are short: JIT compiling would cost more than it
                # saves, and with it off asyncpg's type lookup on a new connection does not
                # switch it off and on again around its query (two statements each)
                "jit": "off",
                # every statement is written to be answered on its indexes whatever the
                # parameters (see _claim_items, _CLOSED), so the plan the server keeps for a
                # prepared statement is the generic one from its first execution: left to
                # choose, it plans each statement five times more on every new connection
                # (custom plans, to compare) and goes on planning the claims, whose generic
                # plan it costs higher: about a tenth of the server's CPU on a scale-out run
                "plan_cache_mode": "force_generic_plan",
            },
        }
        if lz4:
            options["server_settings"]["default_toast_compression"] = "lz4"
        return options

    async def __aenter__(self) -> PostgresStore:
        await self._opened()
        return self

    async def _connect(self) -> None:
        asyncpg = _driver()
        try:
            self._pool = await asyncpg.create_pool(
                min_size=1,
                max_size=self.pool_size,
                max_inactive_connection_lifetime=120,
                reset=_keep_session,
                **self._connect_options(),
            )
            async with self._pool.acquire() as conn:
                await self._migrate(conn)
                if await conn.fetchval(_LZ4) is not None:  # this session's and the next ones'
                    self._pool.set_connect_args(**self._connect_options(lz4=True))
        except ConfigurationError:
            raise
        except Exception as exc:
            raise ConfigurationError(self._cannot_open(exc)) from exc

    def _cannot_open(self, exc: Exception) -> str:
        asyncpg = _driver()
        where = f"the PostgreSQL database {self.location}"
        if isinstance(
            exc, asyncpg.InvalidPasswordError | asyncpg.InvalidAuthorizationSpecificationError
        ):
            return (
                f"cannot log in to {where}: {exc}; give the password in the URL, in "
                "PGPASSWORD, or in a ~/.pgpass file"
            )
        if isinstance(exc, asyncpg.InvalidCatalogNameError):
            return f"{where} does not exist: {exc}; create it (createdb) or fix the URL"
        if isinstance(exc, asyncpg.InsufficientPrivilegeError):
            return (
                f"cannot set up ragjury's tables in {where}: {exc}; ragjury keeps them in a "
                "schema named 'ragjury': grant CREATE on the database, or create that schema "
                "for this user"
            )
        if _lost(exc):
            reason = str(exc) or type(exc).__name__
            return (
                f"cannot connect to {where}: {reason}; check that the server is running and "
                "that host and port in --db are right"
            )
        return f"cannot use {where}: {type(exc).__name__}: {exc}"

    async def _migrate(self, conn: Conn) -> None:
        await conn.execute(f"SELECT pg_advisory_lock({_pg_schema.MIGRATION_LOCK})")
        try:
            await conn.execute(_pg_schema.META)
            value = await conn.fetchval("SELECT value FROM meta WHERE key = 'schema_version'")
            version = int(value or 0)
            if version > _pg_schema.VERSION:
                raise ConfigurationError(
                    f"{self.location} was made by a newer ragjury (database schema {version}; "
                    f"this ragjury knows up to {_pg_schema.VERSION}). Upgrade ragjury "
                    "(pip install -U 'ragjury[postgres]') to use it"
                )
            await migrate(conn, version, _pg_schema.VERSION)
        finally:
            await conn.execute(f"SELECT pg_advisory_unlock({_pg_schema.MIGRATION_LOCK})")

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._listener is not None:
                listener, self._listener = self._listener, None
                with anyio.move_on_after(5):
                    await listener.close()
            if self._pool is not None:
                pool, self._pool = self._pool, None
                with anyio.move_on_after(10):
                    await pool.close()
                pool.terminate()

    # plumbing -----------------------------------------------------------------------
    async def _run(self, fn: Callable[[Conn], Awaitable[T]], *, transaction: bool = True) -> T:
        """``fn`` with a pooled connection (in a transaction), again with backoff while the
        server cannot be reached. An attempt that began is shielded from cancellation, so it
        ends committed or rolled back; the waits between attempts are not."""
        if self._pool is None:
            raise RuntimeError("the store is not open; use 'async with PostgresStore(url)'")
        delay = _RETRY_FIRST
        while True:
            try:
                with anyio.CancelScope(shield=True):
                    # no timeout of the acquire's own: asyncpg would run it as a task of its
                    # own under asyncio.wait_for at every statement (about 1% of a serve
                    # process's CPU); a new connection has its own (connect_timeout), and a
                    # busy one comes back when its statement ends (command_timeout)
                    async with self._pool.acquire() as conn:
                        if not transaction:
                            result = await fn(conn)
                        else:
                            async with conn.transaction():
                                result = await fn(conn)
            except Exception as exc:
                if not _lost(exc):
                    raise
                await self._unreachable(exc)
                await anyio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
                continue
            if self._unreachable_since is not None:
                log.warning(
                    "database_reachable_again",
                    db=self.location,
                    after_seconds=round(time.monotonic() - self._unreachable_since, 1),
                )
                self._unreachable_since = None
            return result

    async def _unreachable(self, exc: Exception) -> None:
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
            log.warning(
                "database_unreachable",
                db=self.location,
                error=str(exc) or type(exc).__name__,
                retrying_for_seconds=self.reconnect_seconds,
            )
        elif now - self._unreachable_since > self.reconnect_seconds:
            raise StoreUnavailableError(
                f"the database {self.location} could not be reached for "
                f"{self.reconnect_seconds:.0f} s (last: {exc or type(exc).__name__}); what is "
                "finished is stored, the rest stays queued: start again when it is back"
            ) from exc

    async def _read(self, operation: Operation[T]) -> T:
        return await self._run(lambda conn: drive(conn, operation()), transaction=False)

    async def _write(self, operation: Operation[T], *, single: bool = False) -> T:
        return await self._run(lambda conn: drive(conn, operation()), transaction=not single)

    # waking idle workers --------------------------------------------------------------
    async def watch(self, wake: Callable[[str], None]) -> bool:
        """Call ``wake(group)`` whenever any process puts messages for ``group`` (and
        ``wake("*")`` when the watch starts again after a lost connection, as messages may
        have been missed). True while the watch is live; call again to restore it."""
        if wake not in self._watchers:
            self._watchers.append(wake)
        if self._listener is not None and not self._listener.is_closed():
            return True
        async with self._listening:  # one listener: every group's workers ask at once
            if self._listener is not None and not self._listener.is_closed():
                return True
            return await self._listen()

    async def _listen(self) -> bool:
        asyncpg = _driver()
        try:
            listener = await asyncpg.connect(**self._connect_options())
            await listener.add_listener(CHANNEL, self._notified)
        except Exception as exc:
            if _lost(exc):
                return False
            raise
        restored = self._listener is not None
        self._listener = listener
        if restored:
            for watcher in list(self._watchers):
                watcher("*")
        return True

    def unwatch(self, wake: Callable[[str], None]) -> None:
        if wake in self._watchers:
            self._watchers.remove(wake)

    def _notified(self, _conn: object, _pid: int, _channel: str, group: str) -> None:
        for watcher in list(self._watchers):
            watcher(group)

    async def compact(self) -> None:
        """Mark deleted rows' space for reuse and refresh the planner's statistics. (The
        server keeps the space for new rows rather than giving it back to the file system;
        ``VACUUM FULL`` would, but it locks every table while it runs.)"""
        tables = (
            "runs, jobs, items, pairs, samples, steps, llm_calls, messages, item_joins, questions, "
            "question_keys, question_indexes"
        )
        await self._run(lambda c: c.execute(f"VACUUM (ANALYZE) {tables}"), transaction=False)


async def migrate(conn: Conn, version: int, target: int) -> None:
    """Apply the migrations after ``version`` up to ``target``, each in a transaction."""
    for number, statements in _pg_schema.MIGRATIONS:
        if version < number <= target:
            async with conn.transaction():
                await conn.execute(statements)
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', $1) "
                    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    str(number),
                )


def _affected(status: str) -> int:
    """The row count of a command status such as ``UPDATE 3``."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
