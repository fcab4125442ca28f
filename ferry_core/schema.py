"""The on-disk schema, versioned with PRAGMA user_version so old code never misreads new files."""

from __future__ import annotations

SCHEMA_VERSION = 4

# queue_deadline = queued_at + queue_ttl_ms, kept as a column so the sweep can use an index.
# pending_deps counts dependencies not yet COMPLETED, so readiness is one indexed predicate.
DDL = """
CREATE TABLE IF NOT EXISTS tasks (
    seq              INTEGER PRIMARY KEY,
    task_id          TEXT    NOT NULL UNIQUE,
    status           TEXT    NOT NULL CHECK (status IN
                         ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT')),
    target_agent     TEXT,
    title            TEXT    NOT NULL DEFAULT '',
    payload          TEXT,
    requester        TEXT    NOT NULL DEFAULT '',
    queue_ttl_ms     INTEGER NOT NULL,
    exec_ttl_ms      INTEGER NOT NULL,
    max_attempts     INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    queued_at        INTEGER NOT NULL,
    queue_deadline   INTEGER NOT NULL,
    claimed_by       TEXT,
    claimed_at       INTEGER,
    lease_expires_at INTEGER,
    completed_at     INTEGER,
    attempt          INTEGER NOT NULL DEFAULT 0,
    extend_count     INTEGER NOT NULL DEFAULT 0,
    release_count    INTEGER NOT NULL DEFAULT 0,
    pending_deps     INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    error_reason     TEXT,
    claim_token      TEXT
);
CREATE TABLE IF NOT EXISTS task_deps (
    task_id    TEXT NOT NULL REFERENCES tasks(task_id),
    depends_on TEXT NOT NULL REFERENCES tasks(task_id),
    UNIQUE (task_id, depends_on)
);
CREATE INDEX IF NOT EXISTS task_deps_by_dep ON task_deps(depends_on);
CREATE TABLE IF NOT EXISTS claim_tokens (
    token       TEXT PRIMARY KEY,
    task_id     TEXT    NOT NULL,
    agent_id    TEXT    NOT NULL,
    issued_at   INTEGER NOT NULL,
    retired_at  INTEGER,
    retired_why TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS salvage (
    id         INTEGER PRIMARY KEY,
    task_id    TEXT    NOT NULL,
    agent_id   TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    data       TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS salvage_by_task ON salvage(task_id, id);
CREATE TABLE IF NOT EXISTS daemon_locks (
    name        TEXT PRIMARY KEY,
    owner       TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_ready
    ON tasks(target_agent, queued_at, seq) WHERE status = 'SUBMITTED' AND pending_deps = 0;
CREATE INDEX IF NOT EXISTS tasks_lease_due
    ON tasks(lease_expires_at) WHERE status = 'CLAIMED';
CREATE INDEX IF NOT EXISTS tasks_queue_due
    ON tasks(queue_deadline) WHERE status = 'SUBMITTED';
-- PROTOCOL.md#the-holder-guard: the token enters the history table before the claiming row changes, in the same
-- statement; the primary key makes a second issue of any token impossible, ever.
CREATE TRIGGER IF NOT EXISTS claim_token_history
    BEFORE UPDATE OF claim_token ON tasks
    WHEN NEW.claim_token IS NOT NULL AND NEW.claim_token IS NOT OLD.claim_token
BEGIN
    INSERT INTO claim_tokens(token, task_id, agent_id, issued_at)
    VALUES (NEW.claim_token, NEW.task_id, NEW.claimed_by, NEW.claimed_at);
END;
"""

# Version 2: the bookkeeping that follows a holder's write happens in the same statement,
# so fulfill and release are one autocommit UPDATE (the write lock is held for one step).
V2_DDL = """
CREATE TRIGGER IF NOT EXISTS claim_token_retired
    AFTER UPDATE OF claim_token ON tasks
    WHEN OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL
BEGIN
    UPDATE claim_tokens SET
        retired_why = CASE
            WHEN NEW.status = 'COMPLETED' THEN 'complete'
            WHEN NEW.status = 'FAILED' THEN 'fail'
            WHEN NEW.release_count > OLD.release_count THEN 'release'
            ELSE 'expiry' END,
        retired_at = CASE
            WHEN NEW.status IN ('COMPLETED', 'FAILED') THEN NEW.completed_at
            ELSE NEW.queued_at END
    WHERE token = OLD.claim_token AND retired_why IS NULL;
END;
CREATE TRIGGER IF NOT EXISTS completed_unblocks_dependents
    AFTER UPDATE OF status ON tasks
    WHEN NEW.status = 'COMPLETED' AND OLD.status <> 'COMPLETED'
BEGIN
    UPDATE tasks SET pending_deps = pending_deps - 1
    WHERE task_id IN (SELECT task_id FROM task_deps WHERE depends_on = NEW.task_id);
END;
"""

# Version 3: a fulfill no longer rewrites the token history. The completed task row
# (status COMPLETED, completed_at, no live token) is the record of that retirement, so the
# history row of a token that completed its task keeps retired_at / retired_why NULL;
# release, expiry and fail still write theirs. A lifecycle writes one page less to the WAL
# (8.8 -> 7.8 frames): lifecycles/s median +10 / +8 / +4 % at 1 / 2 / 8 workers, 25 of
# 30 interleaved pairs faster (reports/bench/notes.md, 2026-12-03).
#: How the retiring trigger stamps a token's history row (OLD / NEW: the task row), in
#: the SQL both SQLite and PostgreSQL read; a completion never gets here.
RETIRE_TOKEN_SET = """retired_why = CASE
            WHEN NEW.status = 'FAILED' THEN 'fail'
            WHEN NEW.release_count > OLD.release_count THEN 'release'
            ELSE 'expiry' END,
        retired_at = CASE
            WHEN NEW.status = 'FAILED' THEN NEW.completed_at
            ELSE NEW.queued_at END"""
V3_DDL = f"""
DROP TRIGGER IF EXISTS claim_token_retired;
CREATE TRIGGER claim_token_retired
    AFTER UPDATE OF claim_token ON tasks
    WHEN OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL
        AND NEW.status <> 'COMPLETED'
BEGIN
    UPDATE claim_tokens SET
        {RETIRE_TOKEN_SET}
    WHERE token = OLD.claim_token AND retired_why IS NULL;
END;
"""

# Version 4: the payload lives in a table of its own, written once by the dispatch, so a
# claim or a fulfill (which rewrite the whole task row) never copies it again, and a new
# file has 1 KiB pages (PAGE_SIZE). Every WAL frame and every page a checkpoint copies and
# syncs is a page: a lifecycle wrote 33 KiB to disk with 4 KiB pages and writes 13 KiB with
# 1 KiB ones, and the checkpoint's fsync costs what it writes (reports/bench/notes.md,
# 2026-12-04). Without the split a payload over ~1 KiB would overflow the small pages and
# be copied on every claim. A file of an older version is upgraded without it: it keeps
# its pages and keeps payloads in tasks.payload, where a process of that version that still
# has the file open (a rolling upgrade) reads them; only a file made by version 4 has
# task_payloads (and no older version opens it: its user_version is newer).
V4_DDL = """
CREATE TABLE IF NOT EXISTS task_payloads (
    seq     INTEGER PRIMARY KEY,
    payload TEXT NOT NULL
);
"""
#: The page size of a file this store creates (SQLite sets it once, before the first write).
PAGE_SIZE = 1024

OWN_TABLES = frozenset({"tasks", "task_deps", "claim_tokens", "salvage", "daemon_locks",
                        "task_payloads"})
