"""The ceiling every run is compared with: single-process, autocommit write rates on the
same machine, in the same invocation.

- ``measure_ceiling``: raw SQLite, one ``UPDATE`` of one integer-keyed row per statement,
  the same pragmas as ferry_core (WAL, synchronous=NORMAL);
- ``measure_store_claim_update``: ferry_core's own claiming UPDATE through its public API
  (``LeaseStore.claim(..., sweep=False)``), for scale.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid

from ferry_core import LeaseStore

CEILING_UPDATES = 20_000  #: distinct rows updated per sample
CEILING_SAMPLES = 3  #: samples before the matrix; as many again after each repetition
#: The statement the raw ceiling times (reported as ``ceiling.statement``).
CEILING_STATEMENT = "UPDATE t SET status='CLAIMED', at=? WHERE id=? AND status='SUBMITTED'"


def _unlink_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(path + suffix)
        except OSError:
            pass


def measure_ceiling(workdir: str, updates: int = CEILING_UPDATES) -> float:
    """Single process, autocommit: UPDATEs of distinct integer-keyed rows per second."""
    path = os.path.join(workdir, f"ceiling-{uuid.uuid4().hex[:8]}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, status TEXT NOT NULL, at INTEGER)")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t(id, status) VALUES (?, 'SUBMITTED')",
                         ((i,) for i in range(updates)))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t0 = time.perf_counter()
        for i in range(updates):
            conn.execute(CEILING_STATEMENT, (i, i))
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
        _unlink_db(path)
    return updates / elapsed


def measure_store_claim_update(workdir: str, updates: int) -> float:
    """Single process, autocommit: ferry_core's own claiming UPDATE (trigger, indexes,
    token) on distinct ready tasks per second, with no pick or sweep around it."""
    path = os.path.join(workdir, f"claimupdate-{uuid.uuid4().hex[:8]}.db")
    try:
        with LeaseStore(path) as store:
            ids = store.dispatch_many([{"n": i} for i in range(updates)], requester="bench",
                                      queue_ttl_ms=86_400_000, exec_ttl_ms=3_600_000)
            t0 = time.perf_counter()
            for task_id in ids:
                store.claim(task_id, "ceiling", sweep=False)
            elapsed = time.perf_counter() - t0
    finally:
        _unlink_db(path)
    return updates / elapsed
