"""Deliberately broken Postgres stores: ``ferry_core.PgLeaseStore`` with ONE bug each.

They are Postgres targets (``ferry_backend = "postgres"``, inherited), loaded by the
harness as ``tests.pg.broken_pg_stores:<Class>`` and called ``Class(uri, clock=clock)``
with the example's schema in the URI (PROTOCOL.md#postgres-targets). ``BROKEN_PG`` maps
each to the invariant id it must trip.

The first three break the Postgres meanings of the WAL invariants (the third,
``OpenSideConnectionStore``, on a connection psycopg did not make, for the server-side
look; it twins nothing and is exercised by tests/pg/test_pg_backend.py only); the others are
tests/broken_stores.py's bugs re-based on PgLeaseStore. ``PG_BROKEN`` (name -> (invariant,
why)) and ``PG_FAULT_BROKEN`` (name -> (faults, invariant, why)) register every one,
``TWIN`` names the Postgres store of each entry of tests/broken_stores.py's ``BROKEN`` and
``FAULT_BROKEN``, and ``NOT_APPLICABLE`` says why the rest have none:

- refused_truncate: its bug is ``checkpoint(TRUNCATE)`` refusing to reset the ``-wal``
  file; Postgres has no ``-wal`` to reset (``PgLeaseStore.checkpoint`` validates the mode
  and returns (0, 0, 0)) and a Postgres run never calls ``checkpoint``.

The SQLite-file bugs that do apply take their Postgres meaning: ``long_reader`` (a read
transaction pinning the -wal) is ``OpenAfterReadStore`` (a connection idle in
transaction), ``busy_idle_poll`` (a PRAGMA re-stamped on every poll) is
``HeartbeatPollStore`` (a poll that assigns a transaction id).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from ferry_core import PgLeaseStore, errors, pgstore
from ferry_core.pgstore import (
    _CLAIM_NEXT,
    _CLAIM_NEXT_UNLESS_DUE,
    _CLAIM_ONE,
    _CLAIM_ONE_OR_WHY,
)
from ferry_core.store import _name, _positive_int, _to_json
from ferry_core.types import SUBMITTED, Claim, TaskView

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


class OpenSideConnectionStore(PgLeaseStore):
    """BUG: as ``OpenAfterReadStore``, but the transaction left open is on a second
    connection made with libpq directly (``psycopg.pq.PGconn``, not a
    ``psycopg.Connection``: as another driver's would be), which the workers' own
    connection reports cannot see (ferry_harness.runtime.pgconns): only the server's
    ``pg_stat_activity`` shows it. Invariant: ``wal-bounded`` (its Postgres meaning)."""

    _side: Any = None

    def get(self, task_id: str) -> Any:
        view = super().get(task_id)
        pq = self._psycopg.pq
        if self._side is None:
            self._side = pq.PGconn.connect(self.uri.encode())
        if self._side.transaction_status == pq.TransactionStatus.IDLE:
            self._side.exec_(b"BEGIN")  # BUG: never committed by this call
            self._side.exec_(b"SELECT 1")
        return view

    def _now(self) -> int:
        side = self._side
        if side is not None and side.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
            side.exec_(b"COMMIT")  # the next call ends what get left open
        return super()._now()

    def close(self) -> None:
        if self._side is not None:
            self._side.finish()
        super().close()


class FailingResetStore(PgLeaseStore):
    """Not a broken store: PgLeaseStore whose ``ferry_reset`` raises, so the harness must
    fall back to a fresh schema per example (tests/pg/test_pg_backend.py)."""

    @staticmethod
    def ferry_reset(conn: Any, schema: str) -> None:
        conn.execute(f'DELETE FROM "{schema}".tasks')  # undone: the reset fails after it
        raise RuntimeError("this reset always fails")


class PgCheckThenActStore(PgLeaseStore):
    """BUG: ``claim`` checks readiness with a SELECT, then writes
    ``UPDATE … WHERE task_id = …`` with no readiness condition: two claimers that both
    passed the check both win. Invariant: ``single-winner``."""

    toctou_window_s = TOCTOU_WINDOW_S

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
        if self.toctou_window_s:
            time.sleep(self.toctou_window_s)
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



class _RewritingConn:
    """The store's connection, with fixed text replaced in every statement it executes:
    a bug that is one changed condition of PgLeaseStore's SQL, wherever it is used."""

    def __init__(self, conn: Any, rewrite: tuple[tuple[str, str], ...]) -> None:
        self._c, self._rewrite = conn, rewrite

    def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(sql, str):
            for old, new in self._rewrite:
                sql = sql.replace(old, new)
        return self._c.execute(sql, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


class _Rewriting(PgLeaseStore):
    REWRITE: tuple[tuple[str, str], ...] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        sql = [v for v in vars(pgstore).values() if isinstance(v, str)]
        for old, _ in cls.REWRITE:  # a rewrite that matches nothing would be no bug at all
            assert any(old in s for s in sql), f"{cls.__name__}: {old!r} is in no statement"

    def _open(self, set_path: bool) -> Any:
        return _RewritingConn(super()._open(set_path), self.REWRITE)


class PgTokenNotRetiredStore(PgLeaseStore):
    """BUG: the guard accepts any token ever issued for the task (the token history, not
    the row's current token): a retired token replays. Invariant: ``token-unique``."""

    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        if isinstance(token, str) and isinstance(task_id, str) and task_id and self._rows(
                "SELECT 1 FROM claim_tokens WHERE token=%s AND task_id=%s", (token, task_id)):
            row = self._rows("SELECT claim_token FROM tasks WHERE task_id=%s", (task_id,))
            if row and row[0][0] is not None:
                token = row[0][0]  # BUG: "was it ever issued", not "is it current"
        return super()._guard(task_id, agent_id, token, now)


class PgAgentOnlyGuardStore(PgLeaseStore):
    """BUG: holder operations check only the agent name, never the token: a same-name
    instance with no token or a wrong one is accepted. Invariant: ``holder-guard``."""

    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        if (token is None or isinstance(token, str)) and isinstance(task_id, str) and task_id:
            row = self._rows("SELECT claim_token FROM tasks WHERE task_id=%s", (task_id,))
            if row and row[0][0] is not None:
                token = row[0][0]  # BUG: the token checks pass whatever was presented
        return super()._guard(task_id, agent_id, token, now)


class PgDependencyIgnoredStore(_Rewriting):
    """BUG: readiness ignores dependencies (the claim's and the poll's ``NOT EXISTS`` over
    unfinished dependencies is dropped): a dependent is handed out before its
    dependencies are COMPLETED. Invariant: ``dag-order``."""

    REWRITE = ((" AND NOT EXISTS(SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.depends_on"
                "  WHERE d.task_id = tasks.task_id AND p.status <> 'COMPLETED')", ""),)  # BUG


class PgUnconditionalLockStore(PgLeaseStore):
    """BUG: the daemon-lock UPSERT has no WHERE clause: a second daemon steals an
    unexpired lock. Invariant: ``lock-exclusive``."""

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        _name("lock name", name)
        _name("owner", owner)
        _positive_int("ttl_ms", ttl_ms)
        now = self._now()
        rows = self._rows(
            "INSERT INTO daemon_locks AS l (name, owner, expires_at, acquired_at)"
            " VALUES (%(name)s, %(owner)s, %(now)s::bigint + %(ttl)s::bigint, %(now)s)"
            " ON CONFLICT (name) DO UPDATE SET owner=excluded.owner,"
            "  expires_at=excluded.expires_at,"
            "  acquired_at=CASE WHEN l.owner = excluded.owner"
            "   AND l.expires_at > %(now)s THEN l.acquired_at ELSE excluded.acquired_at END"
            " RETURNING owner",  # BUG: no "WHERE l.expires_at <= now OR l.owner = excluded.owner"
            {"name": name, "owner": owner, "now": now, "ttl": ttl_ms})
        return len(rows) == 1


class PgDroppedLateResultStore(PgLeaseStore):
    """BUG: a late ``fulfill`` is refused with LeaseExpired and its result thrown away (no
    salvage). Invariant: ``no-lost-task``."""

    def _keep_late(self, conn: Any, task_id: str, agent_id: str, token: str | None,
                   result: Any, now: int) -> None:
        return  # BUG: the late result should be inserted into salvage as 'late_result'


class PgUncountedExtendsStore(PgLeaseStore):
    """BUG: the per-claim cap of max_extends never bites (a heartbeat loop that forgot the
    counter). Invariant: ``holder-guard`` (an extend accepted past its limit)."""

    def __init__(self, uri: str, **kw: Any) -> None:
        super().__init__(uri, **kw)
        self.max_extends = 10**9  # BUG: the count is kept (views show it), never capped


class PgSalvageOnRefusalStore(PgLeaseStore):
    """BUG: a refused ``salvage`` (wrong token, expired lease) still appends its partial.
    Invariant: ``no-lost-task`` (the exact salvaged() contents)."""

    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        try:
            super().salvage(task_id, agent_id, token, partial)
        except errors.FerryError:
            self._rows(  # BUG: refused, yet kept
                "INSERT INTO salvage(task_id, agent_id, kind, data, created_at)"
                " VALUES (%s, %s, 'partial', %s, %s) RETURNING 1",
                (task_id, agent_id, _to_json("partial", partial), self._now()))
            raise


class PgTokenInViewStore(PgLeaseStore):
    """BUG: ``get`` shows the live claim token in the title (a debugging aid left in).
    Invariant: ``token-unique`` (no issued token anywhere in a read)."""

    def get(self, task_id: str) -> TaskView:
        view = super().get(task_id)
        row = self._rows("SELECT claim_token FROM tasks WHERE task_id=%s", (task_id,))
        if not row or row[0][0] is None:
            return view
        return dataclasses.replace(view, title=f"{view.title} [lease {row[0][0]}]")  # BUG


class PgWrongCountersStore(PgLeaseStore):
    """BUG: views report ``attempt`` one too high once a task was claimed.
    Invariant: ``no-lost-task`` (a read's counters against the model)."""

    def get(self, task_id: str) -> TaskView:
        view = super().get(task_id)
        return dataclasses.replace(view, attempt=view.attempt + (1 if view.attempt else 0))


class PgUntypedArgumentsStore(PgLeaseStore):
    """BUG: dispatch trusts its arguments: ``depends_on=5`` raises TypeError and a huge TTL
    OverflowError instead of InvalidArgument. Invariant: ``typed-errors``."""

    def dispatch(self, target_agent: str | None, **kw: Any) -> str:
        deps = kw.get("depends_on", ())
        kw["depends_on"] = [str(d) for d in deps]  # BUG: TypeError on a non-iterable
        ttl = kw.get("queue_ttl_ms", 1)
        if isinstance(ttl, int) and ttl > 2**62:
            raise OverflowError("Python int too large to convert to C long")  # BUG
        return super().dispatch(target_agent, **kw)


class PgClosedQueueWindowStore(_Rewriting):
    """BUG: the queue window is closed, ``[queued_at, queue_deadline]``, consistently (the
    claim, the poll's pick and due check, the sweep, the view): a claim AT the deadline is
    accepted; the task times out 1 ms later. Invariant: ``lease-half-open``."""

    REWRITE = (("queue_deadline > %(now)s", "queue_deadline >= %(now)s"),  # BUG
               ("queue_deadline <= %(now)s", "queue_deadline < %(now)s"))  # BUG

    @staticmethod
    def _view(row: tuple, now: int) -> TaskView:
        view = PgLeaseStore._view(row, now)
        if view.status == SUBMITTED:  # BUG: now > queued_at + queue_ttl_ms
            view = dataclasses.replace(
                view, is_logically_expired=now > view.queued_at + view.queue_ttl_ms)
        return view


# ---------------------------------------------------------------- tight windows (no sleep)
class PgTightCheckThenActStore(PgCheckThenActStore):
    """BUG: ``PgCheckThenActStore`` with no sleep: SELECT, then an UPDATE with no
    readiness condition, back to back. Invariant: ``single-winner``."""

    toctou_window_s = 0.0


class PgTightDoubleFinishStore(PgLeaseStore):
    """BUG: fulfill compares the token in Python (``_guard``), then UPDATEs by task id
    alone, back to back. Invariant: ``token-unique``."""

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)
        now = self._now()
        try:
            self._guard(task_id, agent_id, token, now)
        except errors.FerryError:  # the reference refusal (and late-result salvage)
            return super().fulfill(task_id, agent_id, token, result)
        self._rows(  # BUG: no "AND status='CLAIMED' AND claim_token=…", rowcount unchecked
            "UPDATE tasks SET status='COMPLETED', result=%s, completed_at=%s, claim_token=NULL"
            " WHERE task_id=%s RETURNING 1", (result_json, now, task_id))
        return None


class PgTightLockTakeoverStore(PgLeaseStore):
    """BUG: acquire_lock reads the lock row, decides in Python, then UPSERTs with no
    re-check of expiry or owner. Invariant: ``lock-exclusive``."""

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        _name("lock name", name)
        _name("owner", owner)
        _positive_int("ttl_ms", ttl_ms)
        now = self._now()
        rows = self._rows("SELECT owner, expires_at FROM daemon_locks WHERE name=%s", (name,))
        if rows and rows[0][1] > now and rows[0][0] != owner:
            return False  # held by someone else
        acquired = now if not rows or rows[0][0] != owner or rows[0][1] <= now else None
        self._rows(  # BUG: no re-check of expiry/owner
            "INSERT INTO daemon_locks AS l (name, owner, expires_at, acquired_at)"
            " VALUES (%(n)s, %(o)s, %(e)s, COALESCE(%(a)s::bigint, %(now)s::bigint))"
            " ON CONFLICT (name) DO UPDATE SET owner=excluded.owner,"
            " expires_at=excluded.expires_at, acquired_at=COALESCE(%(a)s::bigint, l.acquired_at)"
            " RETURNING 1", {"n": name, "o": owner, "e": now + ttl_ms, "a": acquired, "now": now})
        return True


# ---------------------------------------------------------------- fault-only bugs
class PgPinnedLeaseStore(PgLeaseStore):
    """BUG: fulfill pins the lease far in the future in one statement, then completes in a
    second: a holder killed between them strands the task CLAIMED for ever.
    ``TOCTOU_WINDOW_S`` stands in for the result upload between. Invariant:
    ``lease-half-open`` (with ``--faults kill``)."""

    PINNED = 2 ** 62

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)

        def pin(conn: Any, row_token: str, now: int, bound: bool) -> tuple | None:
            n = conn.execute(
                "UPDATE tasks SET lease_expires_at=%(pinned)s" + self._holder_where(bound),
                {"task_id": task_id, "row_token": row_token, "now": now, "agent": agent_id,
                 "pinned": self.PINNED}).rowcount
            return (row_token, now) if n == 1 else None

        row_token, now = self._holder_write("fulfill", task_id, agent_id, token, pin,
                                            late_result=result, has_late=True)
        time.sleep(TOCTOU_WINDOW_S)  # the result "uploads"
        if not self._rows(  # BUG: a second statement; a death before it strands the task
                "UPDATE tasks SET status='COMPLETED', result=%s, completed_at=%s,"
                " claim_token=NULL WHERE task_id=%s AND status='CLAIMED' AND claim_token=%s"
                " RETURNING 1", (result_json, now, task_id, row_token)):
            super().fulfill(task_id, agent_id, token, result)  # a racer finished first


class PgUnfencedWriteStore(PgLeaseStore):
    """BUG: fulfill's final UPDATE repeats status and lease (``now`` of the call's start)
    but not the token: a holder frozen between guard and write past its lease completes
    the rescuer's claim. ``TOCTOU_WINDOW_S`` stands in for serialising the result.
    Invariant: ``lease-half-open`` (with ``--faults pause``)."""

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)
        now = self._now()
        try:
            self._guard(task_id, agent_id, token, now)
        except errors.FerryError:  # the reference refusal (and late-result salvage)
            return super().fulfill(task_id, agent_id, token, result)
        time.sleep(TOCTOU_WINDOW_S)
        if not self._rows(
                "UPDATE tasks SET status='COMPLETED', result=%s, completed_at=%s,"
                " claim_token=NULL WHERE task_id=%s AND status='CLAIMED'"
                " AND lease_expires_at > %s RETURNING 1",  # BUG: no token
                (result_json, now, task_id, now)):
            return super().fulfill(task_id, agent_id, token, result)
        return None


class PgSplitClaimStore(PgLeaseStore):
    """BUG: a claim (``claim`` and ``poll_next``) commits in two statements: status and
    holder under a far-future placeholder lease first, the lease and token second. A
    claimer killed between them leaves the task CLAIMED with no lease of its own: lost.
    ``TOCTOU_WINDOW_S`` separates the two. ``claim``'s one-statement path (the claim
    and the sweep check together) answers "a sweep may be due", so every claim takes the
    sweep-then-``_CLAIM_ONE`` path, which it splits. Invariant: ``lease-half-open`` (with
    ``--faults kill``)."""

    PLACEHOLDER = 2 ** 62

    def _rows(self, sql: str, args: Any = None) -> list[tuple]:
        if sql == _CLAIM_ONE_OR_WHY:  # "a sweep may be due": claim() sweeps, then _CLAIM_ONE
            return [(None, None, None, True, True)]
        if sql not in (_CLAIM_ONE, _CLAIM_NEXT, _CLAIM_NEXT_UNLESS_DUE):
            return super()._rows(sql, args)
        won = super()._rows(sql.replace(" claim_token=%(token)s,", "").replace(  # BUG: 1 of 2
            "lease_expires_at=%(now)s + exec_ttl_ms", f"lease_expires_at={self.PLACEHOLDER}"),
            args)
        if not won:
            return won
        time.sleep(TOCTOU_WINDOW_S)
        one = sql == _CLAIM_ONE
        task_id = args["task_id"] if one else won[0][0]
        rows = super()._rows(
            "UPDATE tasks SET claim_token=%(token)s, lease_expires_at=%(now)s + exec_ttl_ms"
            " WHERE task_id=%(t)s AND status='CLAIMED' AND claimed_by=%(agent)s"
            " AND claim_token IS NULL RETURNING claimed_at, lease_expires_at, attempt",
            {**args, "t": task_id})
        return rows if one else [(task_id, *rows[0])]


#: target -> the invariant a short fuzz must name
BROKEN_PG: dict[str, str] = {
    "HeartbeatPollStore": "idle-no-write",
    "OpenAfterReadStore": "wal-bounded",
    "PgCheckThenActStore": "single-winner",
    "PgUnguardedFulfillStore": "token-unique",
    "PgClosedLeaseStore": "lease-half-open",
}

#: every broken Postgres store found without faults -> (invariant, why)
PG_BROKEN: dict[str, tuple[str, str]] = {
    "HeartbeatPollStore": ("idle-no-write", "every poll UPDATEs ferry_meta: an idle poll takes a xid"),
    "OpenAfterReadStore": ("wal-bounded", "get() leaves BEGIN open: idle in transaction between calls"),
    "PgCheckThenActStore": ("single-winner", "claim is SELECT-then-unconditional-UPDATE (2 ms window)"),
    "PgUnguardedFulfillStore": ("token-unique", "fulfill guards, then UPDATEs by task_id only (2 ms)"),
    "PgClosedLeaseStore": ("lease-half-open", "holder writes accepted AT lease_expires_at (>=)"),
    "PgTokenNotRetiredStore": ("token-unique", "guard accepts any token in the history: replay"),
    "PgAgentOnlyGuardStore": ("holder-guard", "guard checks only the agent name, never the token"),
    "PgDependencyIgnoredStore": ("dag-order", "claims and polls ignore unfinished dependencies"),
    "PgUnconditionalLockStore": ("lock-exclusive", "lock UPSERT without WHERE: always steals"),
    "PgDroppedLateResultStore": ("no-lost-task", "late fulfill refused and its result dropped"),
    "PgUncountedExtendsStore": ("holder-guard", "extend never capped at max_extends"),
    "PgSalvageOnRefusalStore": ("no-lost-task", "a refused salvage() still appends its partial"),
    "PgTokenInViewStore": ("token-unique", "get() shows the live token in the title"),
    "PgWrongCountersStore": ("no-lost-task", "views report attempt one too high"),
    "PgUntypedArgumentsStore": ("typed-errors", "dispatch lets TypeError/OverflowError escape"),
    "PgClosedQueueWindowStore": ("lease-half-open", "queue window closed: a claim AT the deadline"),
    "PgTightCheckThenActStore": ("single-winner", "check-then-act claim, no sleep"),
    "PgTightDoubleFinishStore": ("token-unique", "fulfill guard in Python, UPDATE by task_id, no sleep"),
    "PgTightLockTakeoverStore": ("lock-exclusive", "lock read, then unconditional UPSERT, no sleep"),
}

#: the fault-only ones -> (faults that catch them, invariant, why)
PG_FAULT_BROKEN: dict[str, tuple[tuple[str, ...], str, str]] = {
    "PgPinnedLeaseStore": (("kill",), "lease-half-open",
                           "fulfill pins the lease, completes in a 2nd statement"),
    "PgUnfencedWriteStore": (("pause",), "lease-half-open",
                             "fulfill's final UPDATE lacks the token: a woken zombie completes"),
    "PgSplitClaimStore": (("kill",), "lease-half-open",
                          "claim writes status first, lease and token second"),
}

#: tests/broken_stores.py name -> its Postgres twin here
TWIN: dict[str, str] = {
    "check_then_act": "PgCheckThenActStore",
    "token_not_retired": "PgTokenNotRetiredStore",
    "agent_only_guard": "PgAgentOnlyGuardStore",
    "closed_lease": "PgClosedLeaseStore",
    "long_reader": "OpenAfterReadStore",
    "dependency_ignored": "PgDependencyIgnoredStore",
    "unconditional_lock": "PgUnconditionalLockStore",
    "busy_idle_poll": "HeartbeatPollStore",
    "dropped_late_result": "PgDroppedLateResultStore",
    "double_finish": "PgUnguardedFulfillStore",
    "uncounted_extends": "PgUncountedExtendsStore",
    "salvage_on_refusal": "PgSalvageOnRefusalStore",
    "token_in_view": "PgTokenInViewStore",
    "wrong_counters": "PgWrongCountersStore",
    "untyped_arguments": "PgUntypedArgumentsStore",
    "closed_queue_window": "PgClosedQueueWindowStore",
    "tight_check_then_act": "PgTightCheckThenActStore",
    "tight_double_finish": "PgTightDoubleFinishStore",
    "tight_lock_takeover": "PgTightLockTakeoverStore",
    "pinned_lease": "PgPinnedLeaseStore",
    "unfenced_write": "PgUnfencedWriteStore",
    "split_claim": "PgSplitClaimStore",
}

#: tests/broken_stores.py name -> why its bug has no Postgres form (see the module doc)
NOT_APPLICABLE: dict[str, str] = {
    "refused_truncate": "no -wal file to reset; a Postgres run never calls checkpoint()",
}
