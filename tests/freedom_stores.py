"""Correct stores that take a freedom ferry_core does not: the checker must pass them.

Each is ``ferry_core.LeaseStore`` with one choice changed where PROTOCOL.md allows another
(the opposite of ``tests/broken_stores.py``). ``tests/harness/check/test_freedom_stores.py``
runs a short fuzz campaign on each, in both modes.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable
from typing import Any

from ferry_core import COMPLETED, SUBMITTED, LeaseStore, errors
from ferry_core.store import (
    DEFAULT_EXEC_TTL_MS,
    DEFAULT_QUEUE_TTL_MS,
    _name,
    _positive_int,
    _to_json,
)

# a dependent that is SUBMITTED while one of its dependencies is dead: due for the cascade
_DEAD_DEPENDENT = (
    "EXISTS(SELECT 1 FROM tasks t JOIN task_deps d ON d.task_id = t.task_id"
    " JOIN tasks p ON p.task_id = d.depends_on"
    " WHERE t.status='SUBMITTED' AND p.status IN ('FAILED','TIMED_OUT'))"
)


class LateRequeueStore(LeaseStore):
    """PROTOCOL.md#queued_at-after-a-lease-expiry: an expired claim goes back to the queue
    with ``queued_at = now`` of the call that applies the expiry (what most queues do), not
    ``lease_expires_at``. A task swept late therefore gets a fresh, later queue window."""

    # the freedom: the new window starts at the applying call's now, not at the lease end
    _REQUEUE_SQL = LeaseStore._REQUEUE_SQL.replace(
        "queued_at = :t, queue_deadline = :t + queue_ttl_ms",
        "queued_at = :now, queue_deadline = :now + queue_ttl_ms")


def late_requeue(path: str, *, clock: Any) -> LateRequeueStore:
    return LateRequeueStore(path, clock=clock)


class DeadDependencyWaitsStore(LeaseStore):
    """PROTOCOL.md#dependencies-and-the-failure-cascade: a task dispatched onto a dead
    dependency is created ``SUBMITTED`` (never ready) and failed by the next call that
    applies due changes (a sweep at the latest), not ``FAILED`` at once."""

    _DUE_SQL = LeaseStore._DUE_SQL + " OR " + _DEAD_DEPENDENT

    def dispatch_many(self, payloads: Iterable[Any], *, target_agent: str | None = None,
                      title: str = "", requester: str = "", depends_on: Iterable[str] = (),
                      queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS,
                      exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS, max_attempts: int = 1) -> list[str]:
        # LeaseStore.dispatch_many's validation, then the rows inserted SUBMITTED whatever
        # their dependencies' states (``pending_deps`` keeps a dead dependent unready)
        if target_agent is not None:
            _name("target_agent", target_agent)
        if not isinstance(title, str) or not isinstance(requester, str):
            raise errors.InvalidArgument("title and requester must be strings")
        _positive_int("queue_ttl_ms", queue_ttl_ms)
        _positive_int("exec_ttl_ms", exec_ttl_ms)
        _positive_int("max_attempts", max_attempts, 1_000_000)
        if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on or (), Iterable):
            raise errors.InvalidArgument("depends_on must be a list of task ids")
        deps = list(dict.fromkeys(depends_on or ()))
        for dep in deps:
            _name("dependency id", dep)
        payload_jsons = [_to_json("payload", p) for p in payloads]
        now = self._now()
        task_ids = [uuid.uuid4().hex for _ in payload_jsons]
        with self._tx() as conn:
            self._apply_due(conn, now)
            statuses = {}
            for dep in deps:
                row = conn.execute("SELECT status FROM tasks WHERE task_id=?", (dep,)).fetchall()
                if not row:
                    raise errors.NotFound(f"dependency {dep!r} does not exist; dispatch it first")
                statuses[dep] = row[0][0]
            pending = sum(1 for d in deps if statuses[d] != COMPLETED)
            conn.executemany(
                "INSERT INTO tasks(task_id, status, target_agent, title, payload, requester,"
                " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at,"
                " queue_deadline, pending_deps) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(task_id, SUBMITTED, target_agent, title, pj, requester, queue_ttl_ms,
                  exec_ttl_ms, max_attempts, now, now, now + queue_ttl_ms, pending)
                 for task_id, pj in zip(task_ids, payload_jsons, strict=True)])
            conn.executemany("INSERT INTO task_deps(task_id, depends_on) VALUES (?,?)",
                             [(t, d) for t in task_ids for d in deps])
        return task_ids

    def _apply_due(self, conn: sqlite3.Connection, now: int) -> int:
        return super()._apply_due(conn, now) + self._cascade(conn, now)


def dead_dependency_waits(path: str, *, clock: Any) -> DeadDependencyWaitsStore:
    return DeadDependencyWaitsStore(path, clock=clock)


FREEDOM_STORES: dict[str, str] = {
    "late_requeue": "tests.freedom_stores:late_requeue",
    "dead_dependency_waits": "tests.freedom_stores:dead_dependency_waits",
}
