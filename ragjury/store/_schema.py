"""The SQLite schema, its version, and the migrations from older ragjury databases.

The version is SQLite's ``user_version``. 0 and 1 are the databases of ragjury 0.1 (queued
jobs, items under leases, results, step cache, LLM calls); 2 adds the durable bus
(``messages``), join state (``joins``), the deduplicator's decisions (``questions``) and the
running ``workers``; 3 adds the shared rate-limit buckets (``rate_buckets``); 4 adds the
deduplicator's index of kept questions (``question_keys``, built per job at the signature in
``question_indexes``; a job from before it is indexed when next deduplicated); 5 adds the
human labels ``ragjury review import`` reads back (``labels``); 6 adds batch mode's
requests, batches and parked messages (``batch_requests``, ``batches``, ``batch_waits``); 7
keeps an item's join state in one row (``item_joins``, a JSON object of its parts); 8 names
the endpoint of each batch request (``batch_requests.endpoint``: a panel's judges may send
batches to endpoints of their own). A newer
ragjury upgrades an older file on open; an older ragjury refuses a newer file with a message
saying so.
"""

from __future__ import annotations

VERSION = 8

TABLES = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    command TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    settings TEXT NOT NULL,
    summary TEXT
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL UNIQUE,
    options TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL REFERENCES jobs(id),
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',
    lease_owner TEXT,
    lease_expires REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    transient_failures INTEGER NOT NULL DEFAULT 0,
    report TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    finished_at REAL,
    started_by TEXT,
    UNIQUE (job_id, key)
);
CREATE INDEX IF NOT EXISTS items_state ON items(state, id);
CREATE INDEX IF NOT EXISTS items_job ON items(job_id, state, id);
CREATE TABLE IF NOT EXISTS pairs (
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    item_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    question TEXT NOT NULL,
    source TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (job_id, id)
);
CREATE TABLE IF NOT EXISTS samples (
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    item_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    record TEXT NOT NULL,
    scored TEXT NOT NULL,
    PRIMARY KEY (job_id, id)
);
CREATE TABLE IF NOT EXISTS steps (
    key TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    output TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    requests INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms REAL NOT NULL,
    statuses TEXT NOT NULL,
    error TEXT,
    created_at TEXT NOT NULL,
    model TEXT,
    cost_usd REAL
);
CREATE INDEX IF NOT EXISTS llm_calls_run ON llm_calls(run_id, stage);
CREATE INDEX IF NOT EXISTS llm_calls_created ON llm_calls(created_at);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    grp TEXT NOT NULL,
    kind TEXT NOT NULL,
    job_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    body TEXT NOT NULL,
    available_at REAL NOT NULL,
    lease_owner TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages(grp, available_at, id);
CREATE INDEX IF NOT EXISTS messages_item ON messages(job_id, item_key);
CREATE TABLE IF NOT EXISTS item_joins (
    job_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    parts TEXT NOT NULL,
    PRIMARY KEY (job_id, item_key)
);
CREATE TABLE IF NOT EXISTS questions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    pair_id TEXT NOT NULL,
    question TEXT NOT NULL,
    duplicate_of TEXT,
    similarity REAL,
    UNIQUE (job_id, pair_id)
);
CREATE TABLE IF NOT EXISTS workers (
    owner TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    agents TEXT NOT NULL,
    started_at REAL NOT NULL,
    heartbeat REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS question_keys (
    job_id TEXT NOT NULL,
    key TEXT NOT NULL,
    question_id INTEGER NOT NULL,
    PRIMARY KEY (job_id, key, question_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS question_indexes (
    job_id TEXT PRIMARY KEY,
    signature TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_buckets (
    key TEXT PRIMARY KEY,
    level REAL NOT NULL,
    stamp REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS labels (
    metric TEXT NOT NULL,
    sample_id TEXT NOT NULL,
    label TEXT NOT NULL,
    sample TEXT NOT NULL,
    source TEXT NOT NULL,
    labelled_by TEXT,
    imported_at REAL NOT NULL,
    PRIMARY KEY (metric, sample_id)
);
CREATE TABLE IF NOT EXISTS batch_requests (
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
    created_at REAL NOT NULL,
    endpoint TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS batch_requests_state ON batch_requests(state, job_id, created_at);
CREATE INDEX IF NOT EXISTS batch_requests_submission ON batch_requests(submission);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    provider_id TEXT,
    state TEXT NOT NULL,
    status TEXT,
    requests INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    next_poll REAL NOT NULL DEFAULT 0,
    polls INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    ended_at REAL
);
CREATE INDEX IF NOT EXISTS batches_state ON batches(state, next_poll);
CREATE TABLE IF NOT EXISTS batch_waits (
    message_id INTEGER NOT NULL,
    request_key TEXT NOT NULL,
    PRIMARY KEY (message_id, request_key)
);
CREATE INDEX IF NOT EXISTS batch_waits_request ON batch_waits(request_key);
"""

# Columns added after the first release: an older database gets them on open.
ADDED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "llm_calls": (("model", "TEXT"), ("cost_usd", "REAL")),
    "items": (("transient_failures", "INTEGER NOT NULL DEFAULT 0"), ("started_by", "TEXT")),
    "runs": (("host", "TEXT"), ("pid", "INTEGER")),
    "batch_requests": (("endpoint", "TEXT NOT NULL DEFAULT ''"),),
}

# Indexes on the added columns: made once the columns are there.
AFTER_COLUMNS = ("CREATE INDEX IF NOT EXISTS items_started ON items(started_by, state)",)

# Indexes that only make reads faster, created on open wherever missing (a database made
# before them needs no new version): the results and reports of a job in item order, a page
# at a time.
ORDER_INDEXES = {
    name: f"CREATE INDEX IF NOT EXISTS {name} ON {table}(job_id, item_id, position)"
    for name, table in (("samples_order", "samples"), ("pairs_order", "pairs"))
} | {"items_order": "CREATE INDEX IF NOT EXISTS items_order ON items(job_id, id)"}

# Run once when a version-0/1 database is opened by this ragjury (not on later upgrades).
FROM_VERSION_1 = (
    # Items a 0.1 daemon held had no messages: they start again (their steps are cached).
    "UPDATE items SET state = 'queued', lease_owner = NULL, lease_expires = NULL "
    "WHERE state = 'processing'",
    # What the 0.1 deduplicator was seeded with: the questions of stored pairs.
    "INSERT OR IGNORE INTO questions (job_id, pair_id, question) "
    "SELECT job_id, id, question FROM pairs ORDER BY item_id, position",
)

# Run when a version 2-6 database is opened: its join state, one row per part, becomes one
# row per item.
FROM_PART_JOINS = (
    "INSERT OR IGNORE INTO item_joins (job_id, item_key, parts) "
    "SELECT job_id, item_key, json_group_object(name, value) FROM joins "
    "GROUP BY job_id, item_key",
    "DROP TABLE joins",
)
