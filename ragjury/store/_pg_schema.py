"""The PostgreSQL schema: its migrations, applied in order, and the version they reach.

Everything lives in one schema of its own (``ragjury``), so a database shared with other
applications keeps its names. The version is a row in ``ragjury.meta``. A newer ragjury
applies the migrations an older database lacks (under an advisory lock, so processes that
start together do it once); an older ragjury refuses a newer database with a message.

Version 1 is what a one-process store needs (runs, LLM calls, jobs, items, results, the step
cache); version 2 adds what lets processes on many machines share the work: the durable bus
(``messages``), join state (``joins``), the deduplicator's decisions (``questions``) and the
running ``workers``; version 3 the token buckets that share an endpoint's rate limit among
processes (``rate_buckets``), and indexes that read a job's results in item order a page
at a time; version 4 the deduplicator's index of kept questions; version 5 the human labels
``ragjury review import`` reads back (``labels``); version 6 batch mode's requests, batches
and parked messages; version 7 keeps an item's join state in one row (``item_joins``, a JSON
object of its parts), so a join is one statement; version 8 names the endpoint of each batch
request (``batch_requests.endpoint``: a panel's judges may send batches to endpoints of their
own); version 9 makes fewer index entries for each change of an item and each call record.

An item changes state three times (claimed, started, ended), and an update that changes an
indexed column cannot stay on its page without a new entry in every index of the table
(PostgreSQL's HOT updates): with version 8, six entries at each change. From version 9 the
claims' index holds only the unfinished items (``items_open``: the ended ones, nearly all
of a large table, are no longer in it), and the index of a process's items in flight only
those (``items_started``). A call record's index names its run alone: no query asks for
its stage, which its close may change. A bus message's lease holder has no index of its own
(every message put leased to its process had an entry): a lease is renewed or given back by
message id, and a gone process's leases are looked for once, when its host's next process
starts.
"""

from __future__ import annotations

SCHEMA = "ragjury"

MIGRATION_LOCK = 0x7261676A7572  # "ragjur": one advisory lock id for every migration

META = """
CREATE SCHEMA IF NOT EXISTS ragjury;
CREATE TABLE IF NOT EXISTS ragjury.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    command TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    settings TEXT NOT NULL,
    summary TEXT,
    host TEXT,
    pid INTEGER
);
CREATE TABLE jobs (
    seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL UNIQUE,
    options TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE items (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',
    lease_owner TEXT,
    lease_expires DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0,
    transient_failures INTEGER NOT NULL DEFAULT 0,
    report TEXT,
    error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION,
    started_by TEXT,
    UNIQUE (job_id, key)
);
CREATE INDEX items_state ON items(state, id);
CREATE INDEX items_job ON items(job_id, state, id);
CREATE INDEX items_started ON items(started_by, state);
CREATE TABLE pairs (
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    item_id BIGINT NOT NULL,
    position INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    question TEXT NOT NULL,
    source TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (job_id, id)
);
CREATE TABLE samples (
    seq BIGINT GENERATED ALWAYS AS IDENTITY,
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    item_id BIGINT NOT NULL,
    position INTEGER NOT NULL,
    record TEXT NOT NULL,
    scored TEXT NOT NULL,
    PRIMARY KEY (job_id, id)
);
CREATE INDEX samples_order ON samples(job_id, position, seq);
CREATE TABLE steps (
    key TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    output TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE llm_calls (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    requests INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms DOUBLE PRECISION NOT NULL,
    statuses TEXT NOT NULL,
    error TEXT,
    created_at TEXT NOT NULL,
    model TEXT,
    cost_usd DOUBLE PRECISION
);
CREATE INDEX llm_calls_run ON llm_calls(run_id, stage);
CREATE INDEX llm_calls_created ON llm_calls(created_at);
""",
    ),
    (
        2,
        """
CREATE TABLE messages (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    grp TEXT NOT NULL,
    kind TEXT NOT NULL,
    job_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    body TEXT NOT NULL,
    available_at DOUBLE PRECISION NOT NULL,
    lease_owner TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX messages_ready ON messages(grp, available_at, id);
CREATE INDEX messages_item ON messages(job_id, item_key);
CREATE INDEX messages_owner ON messages(lease_owner) WHERE lease_owner IS NOT NULL;
CREATE TABLE joins (
    job_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (job_id, item_key, name)
);
CREATE TABLE questions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id TEXT NOT NULL,
    pair_id TEXT NOT NULL,
    question TEXT NOT NULL,
    duplicate_of TEXT,
    similarity DOUBLE PRECISION,
    UNIQUE (job_id, pair_id)
);
CREATE TABLE workers (
    owner TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    agents TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat DOUBLE PRECISION NOT NULL
);
""",
    ),
    (
        3,
        """
CREATE TABLE rate_buckets (
    key TEXT PRIMARY KEY,
    level DOUBLE PRECISION NOT NULL,
    stamp DOUBLE PRECISION NOT NULL
);
DROP INDEX samples_order;
CREATE INDEX samples_order ON samples(job_id, item_id, position, seq);
CREATE INDEX pairs_order ON pairs(job_id, item_id, position, seq);
""",
    ),
    (
        4,
        """
CREATE TABLE question_keys (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    question_id BIGINT NOT NULL,
    PRIMARY KEY (job_id, key, question_id)
);
CREATE TABLE question_indexes (
    job_id TEXT PRIMARY KEY,
    signature TEXT NOT NULL
);
CREATE INDEX items_order ON items(job_id, id);
""",
    ),
    (
        5,
        """
CREATE TABLE labels (
    metric TEXT NOT NULL,
    sample_id TEXT NOT NULL,
    label TEXT NOT NULL,
    sample TEXT NOT NULL,
    source TEXT NOT NULL,
    labelled_by TEXT,
    imported_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (metric, sample_id)
);
""",
    ),
    (
        6,
        """
CREATE TABLE batch_requests (
    key TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    submission TEXT,
    tries INTEGER NOT NULL DEFAULT 0,
    booked INTEGER NOT NULL DEFAULT 0,
    response TEXT,
    error TEXT,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX batch_requests_state ON batch_requests(state, job_id, created_at);
CREATE INDEX batch_requests_submission ON batch_requests(submission);
CREATE TABLE batches (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    provider_id TEXT,
    state TEXT NOT NULL,
    status TEXT,
    requests INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    next_poll DOUBLE PRECISION NOT NULL DEFAULT 0,
    polls INTEGER NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION
);
CREATE INDEX batches_state ON batches(state, next_poll);
CREATE TABLE batch_waits (
    message_id BIGINT NOT NULL,
    request_key TEXT NOT NULL,
    PRIMARY KEY (message_id, request_key)
);
CREATE INDEX batch_waits_request ON batch_waits(request_key);
""",
    ),
    (
        7,
        """
CREATE TABLE item_joins (
    job_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    parts JSONB NOT NULL,
    PRIMARY KEY (job_id, item_key)
);
INSERT INTO item_joins (job_id, item_key, parts)
SELECT job_id, item_key, jsonb_object_agg(name, value) FROM joins GROUP BY job_id, item_key;
DROP TABLE joins;
""",
    ),
    (
        8,
        """
ALTER TABLE batch_requests ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
""",
    ),
    (
        9,
        """
DROP INDEX items_state;
DROP INDEX items_started;
CREATE INDEX items_open ON items (state, id) WHERE state NOT IN ('done', 'failed');
CREATE INDEX items_started ON items (started_by) WHERE state IN ('processing', 'running');
DROP INDEX llm_calls_run;
CREATE INDEX llm_calls_run ON llm_calls (run_id);
DROP INDEX messages_owner;
""",
    ),
)


VERSION = MIGRATIONS[-1][0]
