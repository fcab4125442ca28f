"""Deliberately broken Postgres stores: ``ferry_core.PgLeaseStore`` with ONE bug each.

They are Postgres targets (``ferry_backend = "postgres"``, inherited), loaded by the
harness as ``tests.pg.broken_pg_stores:<Class>`` and called ``Class(uri, clock=clock)``
with the example's schema in the URI (PROTOCOL.md#postgres-targets). ``BROKEN_PG`` maps
each to the invariant id it must trip.

The first two break the Postgres meanings of the WAL invariants; the others are
tests/broken_stores.py's check-then-act claim, unguarded fulfill and closed lease, re-based
on PgLeaseStore.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from ferry_core import PgLeaseStore, errors
from ferry_core.store import _name, _to_json
from ferry_core.types import Claim

# as tests/broken_stores.py: a sleep stands in for what widens a check-then-act window in
# real life (a network hop, a GC pause), so a short stress run lands two workers in it
TOCTOU_WINDOW_S = 0.002


class HeartbeatPollStore(PgLeaseStore):
    """BUG: every poll writes a "last seen" heartbeat, even one with nothing to do: the
    poll assigns a transaction id. Invariant: ``idle-no-write``."""

    def poll_next(self, agent_id: str) -> Claim | None:
        claim = super().poll_next(agent_id)
        self._rows("UPDATE ferry_meta SET version = version RETURNING version")  # BUG
        return claim


class OpenAfterReadStore(PgLeaseStore):
    """BUG: ``get`` leaves its transaction open (as Python's implicit BEGIN does) until
    the next call commits it: the connection sits idle in transaction between calls.
    Invariant: ``wal-bounded`` (its Postgres meaning)."""

    def get(self, task_id: str) -> Any:
        view = super().get(task_id)
        self._conn.execute("BEGIN")  # BUG: never committed by this call
        self._conn.execute("SELECT 1").fetchall()
        return view

    def _now(self) -> int:
        if self.in_transaction():  # the next call ends what get left open
            self._conn.execute("COMMIT")
        return super()._now()


class PgCheckThenActStore(PgLeaseStore):
    """BUG: ``claim`` checks readiness with a SELECT, then writes
    ``UPDATE … WHERE task_id = …`` with no readiness condition: two claimers that both
    passed the check both win. Invariant: ``single-winner``."""

    def claim(self, task_id: str, agent_id: str, *, sweep: bool = True) -> Claim | None:
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        now = self._now()
        if sweep:
            self.sweep_at(now)
        ready = self._rows(
            "SELECT 1 FROM tasks WHERE task_id=%(t)s AND status='SUBMITTED'"
            " AND queue_deadline > %(now)s AND (target_agent IS NULL OR target_agent=%(a)s)"
            " AND NOT EXISTS(SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id=d.depends_on"
            "  WHERE d.task_id = tasks.task_id AND p.status <> 'COMPLETED')",
            {"t": task_id, "now": now, "a": agent_id})
        if not ready:
            if not self._rows("SELECT 1 FROM tasks WHERE task_id=%s", (task_id,)):
                raise errors.NotFound(f"task {task_id!r} does not exist")
            return None
        time.sleep(TOCTOU_WINDOW_S)
        token = str(uuid.uuid4())
        rows = self._rows(
            "UPDATE tasks SET status='CLAIMED', claimed_by=%(a)s, claim_token=%(tok)s,"
            " claimed_at=%(now)s, lease_expires_at=%(now)s + exec_ttl_ms,"
            " attempt=attempt + 1, extend_count=0"
            " WHERE task_id=%(t)s"  # BUG: no "AND status='SUBMITTED' AND <ready>"
            " RETURNING claimed_at, lease_expires_at, attempt",
            {"a": agent_id, "tok": token, "now": now, "t": task_id})
        claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)


class PgUnguardedFulfillStore(PgLeaseStore):
    """BUG: ``fulfill`` runs the guard, then writes by task id alone (no status or token
    in the WHERE clause): two concurrent fulfills with one token both succeed.
    Invariant: ``token-unique`` (as tests/broken_stores.py's ``double_finish``)."""

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        # check: the reference guard (and its late-result salvage), with no write of its
        # own (the bound first try declines, so the guard always runs)
        row_token, now = self._holder_write(
            "fulfill", task_id, agent_id, token,
            lambda conn, row_token, now, bound: None if bound else (row_token, now),
            late_result=result, has_late=True)
        time.sleep(TOCTOU_WINDOW_S)
        self._rows(
            "UPDATE tasks SET status='COMPLETED', result=%s, completed_at=%s,"
            " claim_token=NULL WHERE task_id=%s RETURNING 1",  # BUG: no guard repeated
            (_to_json("result", result), now, task_id))


class PgClosedLeaseStore(PgLeaseStore):
    """BUG: a holder write is accepted at ``lease_expires_at`` itself (``>=`` for ``>``):
    the lease is closed, not half-open. Invariant: ``lease-half-open``."""

    @staticmethod
    def _holder_where(bound: bool) -> str:
        where = (" WHERE task_id=%(task_id)s AND status='CLAIMED'"
                 " AND claim_token = %(row_token)s"
                 " AND lease_expires_at >= %(now)s")  # BUG: > is the half-open test
        return where + (" AND claimed_by=%(agent)s" if bound else "")


#: target -> the invariant a short fuzz must name
BROKEN_PG: dict[str, str] = {
    "HeartbeatPollStore": "idle-no-write",
    "OpenAfterReadStore": "wal-bounded",
    "PgCheckThenActStore": "single-winner",
    "PgUnguardedFulfillStore": "token-unique",
    "PgClosedLeaseStore": "lease-half-open",
}
