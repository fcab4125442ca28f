"""Deliberately broken *slow* stores: ``tests/broken_stores.py``'s bugs, in another store.

Issue 13 asks that every broken store be caught on ``ferry_core``-like stores and on slow
base stores alike. ``tests/broken_stores.py`` injects its bugs into ``ferry_core``; this
module injects the same classes of bug into ``tests/variants/bearer_immediate.py``, an
independently written SPEC store with SQLite's *default* busy handler (10 s timeout),
``BEGIN IMMEDIATE`` for every write, bearer tokens (an untargeted claim is not bound to the
claiming agent's name) and a one-late-result-per-token salvage. Its structure differs from
``ferry_core`` (no triggers, a Python holder guard inside the write transaction, a read
probe before every poll), so each bug is re-expressed where that store would have it.

Each class below is ``BearerImmediateStore`` with exactly ONE bug; everything else is
inherited. Where a method had to change in the middle it is copied and the broken line is
marked ``# BUG``. The three guard bugs share ``_HookedGuardStore``: a verbatim copy of the
base store's holder guard split into three tiny hooks, so each bug overrides one hook.

Factories have the names of their ``ferry_core`` counterparts (``factory(path, *,
clock)``); ``BROKEN_SLOW`` maps each to the invariant id that must catch it (the same id as
the counterpart's ``BROKEN`` / ``FAULT_BROKEN`` entry) and, for the fault-only ones, the
faults that reach it. The last five are issue 13's holes, with no ``ferry_core`` twin here.
"""

from __future__ import annotations

import dataclasses
import functools
import sqlite3
import time
import uuid
from typing import Any, Callable

from ferry_core.errors import (
    InvalidToken,
    LeaseExpired,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    TokenRequired,
    WrongState,
)
from tests.variants.bearer_immediate import (
    _DUE_EXISTS,
    _READY_WHERE,
    BUSY_TIMEOUT_S,
    CLAIMED,
    MAX_TTL_MS,
    SCHEMA_VERSION,
    BearerImmediateStore,
    Claim,
    TaskView,
    _api,
    _check_id,
    _check_int,
    _check_token,
    _CommitThenRaise,
    _dump_json,
    _tokens_equal,
)

# Same role as tests/broken_stores.py:TOCTOU_WINDOW_S: the racy stores sleep this long
# between their check and their act, standing in for a network hop or a GC pause, so a
# stress run lands two workers in the window within a few races.
TOCTOU_WINDOW_S = 0.002

Factory = Callable[..., BearerImmediateStore]


# ====================================================================== shared guard copy
class _HookedGuardStore(BearerImmediateStore):
    """Not broken: ``BearerImmediateStore._holder`` copied verbatim, with three of its
    expressions moved into hooks (``_presented_is_live``, ``_lease_over``,
    ``_check_holder_token``) so that a guard bug is a one-hook override."""

    def _presented_is_live(self, conn: sqlite3.Connection, task_id: str, token: str | None,
                           live: str | None) -> bool:
        return bool(token) and live is not None and _tokens_equal(token, live)

    @staticmethod
    def _lease_over(now: int, expires: int) -> bool:
        return now >= expires

    def _check_holder_token(self, op: str, task_id: str, agent_id: str, token: str | None,
                            presented_is_live: bool, row: sqlite3.Row) -> None:
        if not token:
            if self._strict:
                raise TokenRequired(
                    f"{op}: task {task_id} needs the claim token returned by the claim")
        elif not presented_is_live:
            raise InvalidToken(
                f"{op}: that token is not the current claim token of task {task_id} "
                "(wrong, forged or retired)"
            )

    def _holder(self, op: str, task_id: Any, agent_id: Any, token: Any,
                late_result: str | None, body: Callable[..., Any]) -> Any:
        task_id = _check_id(task_id, "task_id")
        agent_id = _check_id(agent_id, "agent_id")
        token = _check_token(token)

        def tx(conn: sqlite3.Connection, now: int) -> Any:
            row = self._one(conn, "SELECT * FROM tasks WHERE task_id = ?", (task_id,))
            if row is None:
                raise NotFound(f"{op}: no task {task_id!r}")
            if row["target_agent"] is not None and row["target_agent"] != agent_id:
                raise PermissionDenied(
                    f"{op}: task {task_id} is for agent {row['target_agent']!r}, not {agent_id!r}"
                )
            live = row["claim_token"]
            presented_is_live = self._presented_is_live(conn, task_id, token, live)  # hook
            expired_earlier = False
            if token and not presented_is_live:
                expired_earlier = self._one(
                    conn,
                    "SELECT 1 FROM claim_tokens WHERE token = ? AND task_id = ?"
                    " AND retired_why = 'expired'",
                    (token, task_id),
                ) is not None
            if row["status"] == CLAIMED and self._lease_over(now, row["lease_expires_at"]):  # hook
                e = row["lease_expires_at"]
                self._expire_task(conn, task_id, now)
                kept = ""
                if late_result is not None and (presented_is_live or expired_earlier):
                    kept = self._keep_late(conn, task_id, agent_id, token, late_result, now)
                raise _CommitThenRaise(LeaseExpired(
                    f"{op}: the lease on task {task_id} ended at {e} (now {now}); the expiry has "
                    f"been applied{kept}"))
            if expired_earlier:
                kept = ""
                if late_result is not None:
                    kept = self._keep_late(conn, task_id, agent_id, token, late_result, now)
                raise _CommitThenRaise(LeaseExpired(
                    f"{op}: your claim on task {task_id} already expired (the task is now "
                    f"{row['status']}){kept}"))
            if row["status"] != CLAIMED:
                raise WrongState(f"{op}: task {task_id} is {row['status']}, not CLAIMED")
            self._check_holder_token(op, task_id, agent_id, token, presented_is_live, row)  # hook
            return body(conn, now, row)

        return self._write(tx)


# ---------------------------------------------------------------------- 1. check_then_act
# The reference's readiness condition, for the plain read that precedes the write here.
_PICK_ANY = (f"SELECT t.task_id FROM tasks t WHERE {_READY_WHERE}"
             " ORDER BY t.queued_at, t.seq LIMIT 1")
_PICK_ONE = f"SELECT t.task_id FROM tasks t WHERE t.task_id = :task_id AND {_READY_WHERE}"


class CheckThenActStore(BearerImmediateStore):
    """BUG: the claim checks readiness in a plain read, then writes by primary key only.

    ``poll_next``/``claim`` apply due expiries, pick the task with an autocommit SELECT
    ("cheap: no write lock for the search"), and only then open ``BEGIN IMMEDIATE`` to
    claim it with ``UPDATE tasks ... WHERE task_id = ?`` -- no status or readiness
    condition, so every claimer that passed the check overwrites the claim and "wins".
    Same class as ``broken_stores.CheckThenActStore``. Invariant: ``single-winner``.
    """

    def _claim_row(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   now: int) -> Claim:
        row = self._one(conn, "SELECT exec_ttl_ms, attempt FROM tasks WHERE task_id = ?",
                        (task_id,))
        token = str(uuid.uuid4())
        expires = now + row["exec_ttl_ms"]
        conn.execute(
            "INSERT INTO claim_tokens (token, task_id, agent_id, issued_at) VALUES (?,?,?,?)",
            (token, task_id, agent_id, now),
        )
        cur = conn.execute(
            "UPDATE tasks SET status = 'CLAIMED', claim_token = :token, claimed_by = :agent, "
            "claimed_at = :now, lease_expires_at = :exp, attempt = attempt + 1, extend_count = 0 "
            "WHERE task_id = :task_id",  # BUG: no "AND status = 'SUBMITTED' AND <still ready>"
            {"token": token, "agent": agent_id, "now": now, "exp": expires, "task_id": task_id},
        )
        self._changed(cur, "claim")
        return Claim(task_id=task_id, agent_id=agent_id, token=token, claimed_at=now,
                     lease_expires_at=expires, attempt=row["attempt"] + 1)

    def _check_then_claim(self, agent_id: str, pick_sql: str,
                          params: dict[str, Any]) -> Claim | None:
        now = self._now()
        if self._one(self._conn, f"SELECT ({_DUE_EXISTS}) AS due", {"now": now})["due"]:
            self._write(self._sweep_tx)
            now = self._now()
        r = self._one(self._conn, pick_sql, {**params, "now": now, "agent": agent_id})
        if r is None:
            return None
        time.sleep(TOCTOU_WINDOW_S)  # widens the check-to-act window (see TOCTOU_WINDOW_S)
        # BUG: the check above ran outside this write transaction
        return self._write(lambda conn, now: self._claim_row(conn, r["task_id"], agent_id, now))

    @_api
    def poll_next(self, agent_id: str) -> Claim | None:
        agent_id = _check_id(agent_id, "agent_id")
        return self._check_then_claim(agent_id, _PICK_ANY, {})

    @_api
    def claim(self, task_id: str, agent_id: str) -> Claim | None:
        task_id = _check_id(task_id, "task_id")
        agent_id = _check_id(agent_id, "agent_id")
        if self._one(self._conn, "SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)) is None:
            raise NotFound(f"claim: no task {task_id!r}")
        return self._check_then_claim(agent_id, _PICK_ONE, {"task_id": task_id})


def check_then_act(path: str, *, clock: Callable[[], int]) -> CheckThenActStore:
    return CheckThenActStore(path, clock=clock)


# ---------------------------------------------------------------------- 2. token_not_retired
class TokenNotRetiredStore(_HookedGuardStore):
    """BUG: the guard accepts any token ever issued for the task, not just the live one.

    "Is this token live?" is answered from the ``claim_tokens`` history ("issued for this
    task") instead of comparing it with the row's ``claim_token``, so after a release or an
    expiry and a new claim, the old claim's token is accepted again (replay). A token
    retired *by expiry* now counts as live too, so it no longer gets ``LeaseExpired``.
    Same class as ``broken_stores.TokenNotRetiredStore``. Invariant: ``token-unique``.
    """

    def _presented_is_live(self, conn: sqlite3.Connection, task_id: str, token: str | None,
                           live: str | None) -> bool:
        return bool(token) and live is not None and self._one(  # BUG: "ever issued", not "== live"
            conn, "SELECT 1 FROM claim_tokens WHERE token = ? AND task_id = ?", (token, task_id)
        ) is not None


def token_not_retired(path: str, *, clock: Callable[[], int]) -> TokenNotRetiredStore:
    return TokenNotRetiredStore(path, clock=clock)


# ---------------------------------------------------------------------- 3. agent_only_guard
class AgentOnlyGuardStore(_HookedGuardStore):
    """BUG: the agent that claimed the task skips the token checks ("its name is proof").

    A convenience for workers that lost their token: when ``agent_id`` equals the row's
    ``claimed_by`` the TokenRequired / InvalidToken checks are skipped. A second process
    running under the same agent name (article 000 section 3, same-name impersonation)
    fulfils, fails or releases the claim with no token or a wrong one. Other agents still
    need the live token (the store's bearer rule). Same class as
    ``broken_stores.AgentOnlyGuardStore``. Invariant: ``holder-guard``.
    """

    def _check_holder_token(self, op: str, task_id: str, agent_id: str, token: str | None,
                            presented_is_live: bool, row: sqlite3.Row) -> None:
        if agent_id == row["claimed_by"]:
            return  # BUG: the name is taken as proof; the token is never looked at
        super()._check_holder_token(op, task_id, agent_id, token, presented_is_live, row)


def agent_only_guard(path: str, *, clock: Callable[[], int]) -> AgentOnlyGuardStore:
    return AgentOnlyGuardStore(path, clock=clock)


# ---------------------------------------------------------------------- 4. closed_lease
_DUE_LIST_CLOSED = """
    SELECT task_id, due, seq FROM (
        SELECT task_id, lease_expires_at AS due, seq FROM tasks
         WHERE status = 'CLAIMED' AND lease_expires_at < :now
        UNION ALL
        SELECT task_id, queue_expires_at AS due, seq FROM tasks
         WHERE status = 'SUBMITTED' AND queue_expires_at <= :now
    ) ORDER BY due, seq
"""  # BUG (first WHERE): lease_expires_at < :now, the reference has <=


class ClosedLeaseStore(_HookedGuardStore):
    """BUG: the lease is the closed interval ``[claimed_at, lease_expires_at]``.

    Every lease test says "over" only when ``now > lease_expires_at``, consistently: the
    holder guard, the guarded holder writes (``lease_expires_at >= now``), the salvage
    write, the sweep's due list and ``is_logically_expired``. At ``t = lease_expires_at``
    the holder is still accepted and nobody can reclaim; reclaim works from ``+1``. The
    queue window and daemon locks stay half-open. (The poll's read probe is left as is: at
    the boundary it opens a write that then finds nothing due -- no frames, no effect.)
    Same class as ``broken_stores.ClosedLeaseStore``. Invariant: ``lease-half-open``.
    """

    @staticmethod
    def _lease_over(now: int, expires: int) -> bool:
        return now > expires  # BUG: >=

    @staticmethod
    def _guarded_update(conn: sqlite3.Connection, sql_set: str, params: tuple, task_id: str,
                        live: str, now: int, what: str) -> None:
        cur = conn.execute(
            f"UPDATE tasks SET {sql_set} WHERE task_id = ? AND status = 'CLAIMED'"
            " AND claim_token = ? AND lease_expires_at >= ?",  # BUG: > ?
            (*params, task_id, live, now),
        )
        BearerImmediateStore._changed(cur, what)

    @_api
    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        partial_json = _dump_json(partial, "partial")

        def body(conn: sqlite3.Connection, now: int, row: sqlite3.Row) -> None:
            cur = conn.execute(
                "INSERT INTO salvage (task_id, kind, data, token, agent_id, created_at) "
                "SELECT task_id, 'partial', ?, claim_token, ?, ? FROM tasks "
                "WHERE task_id = ? AND status = 'CLAIMED' AND claim_token = ?"
                " AND lease_expires_at >= ?",  # BUG: > ?
                (partial_json, agent_id, now, row["task_id"], row["claim_token"], now),
            )
            self._changed(cur, "salvage")

        return self._holder("salvage", task_id, agent_id, token, None, body)

    def _sweep_tx(self, conn: sqlite3.Connection, now: int) -> int:
        changed = 0
        while True:
            due = self._rows(conn, _DUE_LIST_CLOSED, {"now": now})  # BUG: see _DUE_LIST_CLOSED
            if not due:
                return changed
            for r in due:
                changed += self._expire_task(conn, r["task_id"], now)

    def _view(self, row: sqlite3.Row, now: int) -> TaskView:
        view = super()._view(row, now)
        if view.status == CLAIMED:
            # BUG: "now > expires" (the reference: now >= expires)
            view = dataclasses.replace(view, is_logically_expired=now > view.lease_expires_at)
        return view


def closed_lease(path: str, *, clock: Callable[[], int]) -> ClosedLeaseStore:
    return ClosedLeaseStore(path, clock=clock)


# ---------------------------------------------------------------------- 5. long_reader
def _ending_stale_read(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: LongReaderStore, *args: Any, **kwargs: Any) -> Any:
        self._end_stale_read()
        return method(self, *args, **kwargs)

    return wrapper


class LongReaderStore(BearerImmediateStore):
    """BUG: ``get()`` and ``inspect()`` leave their read transaction open.

    The reads run in a ``BEGIN`` "for a consistent snapshot" that they never commit
    (article 003 section 4, no long transactions). The next call on the same store ends it
    first (so this store's own writes and checkpoints work), but between calls the snapshot
    pins the WAL: a ``TRUNCATE`` checkpoint from any other connection waits out its busy
    timeout and leaves the -wal non-empty. Same class as
    ``broken_stores.LongReaderStore``. Invariant: ``wal-bounded``.
    """

    def _end_stale_read(self) -> None:
        if self._conn is not None and self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def get(self, task_id: str) -> TaskView:
        self._end_stale_read()
        self._conn.execute("BEGIN")  # BUG: never committed by get()
        return super().get(task_id)

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        self._end_stale_read()
        self._conn.execute("BEGIN")  # BUG: never committed by inspect()
        return super().inspect(agent_id)

    dispatch = _ending_stale_read(BearerImmediateStore.dispatch)
    poll_next = _ending_stale_read(BearerImmediateStore.poll_next)
    claim = _ending_stale_read(BearerImmediateStore.claim)
    fulfill = _ending_stale_read(BearerImmediateStore.fulfill)
    fail = _ending_stale_read(BearerImmediateStore.fail)
    release = _ending_stale_read(BearerImmediateStore.release)
    extend = _ending_stale_read(BearerImmediateStore.extend)
    salvage = _ending_stale_read(BearerImmediateStore.salvage)
    sweep = _ending_stale_read(BearerImmediateStore.sweep)
    salvaged = _ending_stale_read(BearerImmediateStore.salvaged)
    acquire_lock = _ending_stale_read(BearerImmediateStore.acquire_lock)
    release_lock = _ending_stale_read(BearerImmediateStore.release_lock)
    lock_holder = _ending_stale_read(BearerImmediateStore.lock_holder)
    checkpoint = _ending_stale_read(BearerImmediateStore.checkpoint)


def long_reader(path: str, *, clock: Callable[[], int]) -> LongReaderStore:
    return LongReaderStore(path, clock=clock)


# ---------------------------------------------------------------------- 6. dependency_ignored
# BUG: the reference's readiness condition without its "AND NOT EXISTS (unfinished dependency)"
_READY_NO_DEPS = """
    t.status = 'SUBMITTED'
    AND t.queue_expires_at > :now
    AND (t.target_agent IS NULL OR t.target_agent = :agent)
"""


class DependencyIgnoredStore(BearerImmediateStore):
    """BUG: readiness ignores dependencies when claiming.

    The poll's probe and pick, ``claim``'s readiness check and the claiming UPDATE all use
    a readiness condition without the "no unfinished dependency" clause, so a dependent is
    handed out before its dependencies are COMPLETED (the cascade that fails dependents of
    a failed task still works). Same class as ``broken_stores.DependencyIgnoredStore``.
    Invariant: ``dag-order``.
    """

    def _claim_row(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   now: int) -> Claim:
        row = self._one(conn, "SELECT exec_ttl_ms, attempt FROM tasks WHERE task_id = ?",
                        (task_id,))
        token = str(uuid.uuid4())
        expires = now + row["exec_ttl_ms"]
        conn.execute(
            "INSERT INTO claim_tokens (token, task_id, agent_id, issued_at) VALUES (?,?,?,?)",
            (token, task_id, agent_id, now),
        )
        cur = conn.execute(
            "UPDATE tasks SET status = 'CLAIMED', claim_token = :token, claimed_by = :agent, "
            "claimed_at = :now, lease_expires_at = :exp, attempt = attempt + 1, extend_count = 0 "
            "WHERE task_id = :task_id AND status = 'SUBMITTED' AND task_id IN "
            # BUG: _READY_NO_DEPS (the reference: _READY_WHERE)
            f"(SELECT t.task_id FROM tasks t WHERE t.task_id = :task_id AND {_READY_NO_DEPS})",
            {"token": token, "agent": agent_id, "now": now, "exp": expires, "task_id": task_id},
        )
        self._changed(cur, "claim")
        return Claim(task_id=task_id, agent_id=agent_id, token=token, claimed_at=now,
                     lease_expires_at=expires, attempt=row["attempt"] + 1)

    @_api
    def poll_next(self, agent_id: str) -> Claim | None:
        agent_id = _check_id(agent_id, "agent_id")
        now = self._now()
        probe = self._one(
            self._conn,
            f"SELECT ({_DUE_EXISTS}) AS due,"
            f" EXISTS (SELECT 1 FROM tasks t WHERE {_READY_NO_DEPS}) AS ready",  # BUG
            {"now": now, "agent": agent_id},
        )
        if not probe["due"] and not probe["ready"]:
            return None

        def tx(conn: sqlite3.Connection, now: int) -> Claim | None:
            self._sweep_tx(conn, now)
            r = self._one(
                conn,
                f"SELECT t.task_id FROM tasks t WHERE {_READY_NO_DEPS}"  # BUG
                " ORDER BY t.queued_at, t.seq LIMIT 1",
                {"now": now, "agent": agent_id},
            )
            return None if r is None else self._claim_row(conn, r["task_id"], agent_id, now)

        return self._write(tx)

    @_api
    def claim(self, task_id: str, agent_id: str) -> Claim | None:
        task_id = _check_id(task_id, "task_id")
        agent_id = _check_id(agent_id, "agent_id")

        def tx(conn: sqlite3.Connection, now: int) -> Claim | None:
            if self._one(conn, "SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)) is None:
                raise NotFound(f"claim: no task {task_id!r}")
            self._sweep_tx(conn, now)
            r = self._one(
                conn,
                # BUG: _READY_NO_DEPS (the reference: _READY_WHERE)
                f"SELECT t.task_id FROM tasks t WHERE t.task_id = :task_id AND {_READY_NO_DEPS}",
                {"now": now, "agent": agent_id, "task_id": task_id},
            )
            return None if r is None else self._claim_row(conn, task_id, agent_id, now)

        return self._write(tx)


def dependency_ignored(path: str, *, clock: Callable[[], int]) -> DependencyIgnoredStore:
    return DependencyIgnoredStore(path, clock=clock)


# ---------------------------------------------------------------------- 7. unconditional_lock
class UnconditionalLockStore(BearerImmediateStore):
    """BUG: the daemon-lock UPSERT has no WHERE clause, so it always takes the lock.

    Article 003: the UPSERT's DO UPDATE is only safe when conditional on "expired or
    already mine"; without it a second daemon silently steals an unexpired lock. Same class
    as ``broken_stores.UnconditionalLockStore``. Invariant: ``lock-exclusive``.
    """

    @_api
    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        name = _check_id(name, "lock name")
        owner = _check_id(owner, "lock owner")
        ttl_ms = _check_int(ttl_ms, "ttl_ms", 1, MAX_TTL_MS)

        def tx(conn: sqlite3.Connection, now: int) -> bool:
            conn.execute(
                "INSERT INTO daemon_locks (name, owner, expires_at, acquired_at) "
                "VALUES (:name, :owner, :exp, :now) "
                "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner,"
                " expires_at = excluded.expires_at,"
                " acquired_at = CASE WHEN daemon_locks.owner = excluded.owner"
                " AND daemon_locks.expires_at > :now"
                " THEN daemon_locks.acquired_at ELSE excluded.acquired_at END",
                # BUG: missing "WHERE daemon_locks.expires_at <= :now
                #               OR daemon_locks.owner = excluded.owner"
                {"name": name, "owner": owner, "exp": now + ttl_ms, "now": now},
            )
            return self._one(conn, "SELECT changes()")[0] == 1

        return self._write(tx)


def unconditional_lock(path: str, *, clock: Callable[[], int]) -> UnconditionalLockStore:
    return UnconditionalLockStore(path, clock=clock)


# ---------------------------------------------------------------------- 8. busy_idle_poll
class BusyIdlePollStore(BearerImmediateStore):
    """BUG: every ``poll_next`` re-stamps the schema version, so an idle poll writes.

    An "ensure schema" step copied from ``_setup`` into the hot path sets ``PRAGMA
    user_version`` (to the value it already has) before the store's careful read probe;
    that rewrites page 1 and appends a WAL frame on every poll (article 003 section 5: a
    pointless write on every poll). Same class as ``broken_stores.BusyIdlePollStore``.
    Invariant: ``idle-no-write``.
    """

    @_api
    def poll_next(self, agent_id: str) -> Claim | None:
        agent_id = _check_id(agent_id, "agent_id")
        self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # BUG: a write on every poll
        return super().poll_next(agent_id)


def busy_idle_poll(path: str, *, clock: Callable[[], int]) -> BusyIdlePollStore:
    return BusyIdlePollStore(path, clock=clock)


# ---------------------------------------------------------------------- 9. dropped_late_result
class DroppedLateResultStore(BearerImmediateStore):
    """BUG: a late ``fulfill`` is refused with LeaseExpired but its result is thrown away.

    SPEC section 4: a late result is kept as salvage, no delivered work is silently
    dropped. Here the refusal is right and the message even says nothing was kept, but no
    ``late_result`` row is written. Same class as ``broken_stores.DroppedLateResultStore``.
    Invariant: ``no-lost-task``.
    """

    def _keep_late(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   token: str | None, result_json: str, now: int) -> str:
        return ""  # BUG: the late result should be inserted into salvage as 'late_result'


def dropped_late_result(path: str, *, clock: Callable[[], int]) -> DroppedLateResultStore:
    return DroppedLateResultStore(path, clock=clock)


# ---------------------------------------------------------------------- 10. double_finish
class DoubleFinishStore(BearerImmediateStore):
    """BUG: fulfill runs the holder guard in one transaction, then writes by primary key.

    The guard (with its late-result salvage) runs in a BEGIN IMMEDIATE that writes
    nothing; a second transaction then runs ``UPDATE tasks SET status='COMPLETED' ...
    WHERE task_id = ?`` with no status or token condition and no row-count check. Two
    concurrent fulfills with one token both succeed (the second overwrites the first's
    result); a fulfill racing a release or a re-claim completes a task its token no longer
    holds. Same class as ``broken_stores.DoubleFinishStore``. Invariant: ``token-unique``
    (also ``holder-guard`` / ``no-lost-task``; the harness reports the first).
    """

    @_api
    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any) -> None:
        result_json = _dump_json(result, "result")
        live, now = self._holder("fulfill", task_id, agent_id, token, result_json,
                                 lambda conn, now, row: (row["claim_token"], now))
        time.sleep(TOCTOU_WINDOW_S)  # widens the check-to-act window (see TOCTOU_WINDOW_S)

        def write(conn: sqlite3.Connection, _now: int) -> None:
            conn.execute(  # BUG: no "AND status = 'CLAIMED' AND claim_token = ?" and no changes==1
                "UPDATE tasks SET status = 'COMPLETED', result = ?, completed_at = ?,"
                " claim_token = NULL "
                "WHERE task_id = ?",
                (result_json, now, task_id),
            )
            self._retire(conn, live, now, "completed")

        self._write(write)


def double_finish(path: str, *, clock: Callable[[], int]) -> DoubleFinishStore:
    return DoubleFinishStore(path, clock=clock)


# ====================================================================== fault-only bugs
# ---------------------------------------------------------------------- 11. pinned_lease
class PinnedLeaseStore(BearerImmediateStore):
    """BUG: fulfill pins the lease in one transaction and completes in a second one.

    The first transaction (the reference guard) moves ``lease_expires_at`` to a far-future
    sentinel "so no sweep steals the task while the result uploads"; the second writes
    COMPLETED. Without faults the second always follows. A holder killed between them
    leaves the task CLAIMED under a lease that never ends: nobody can reclaim it.
    Same class as ``broken_stores.PinnedLeaseStore``. Faults: ``kill``. Invariant:
    ``lease-half-open``.
    """

    PINNED = 2**62

    @_api
    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any) -> None:
        result_json = _dump_json(result, "result")

        def pin(conn: sqlite3.Connection, now: int, row: sqlite3.Row) -> tuple[str, int]:
            self._guarded_update(conn, "lease_expires_at = ?", (self.PINNED,), row["task_id"],
                                 row["claim_token"], now, "fulfill (pin)")
            return row["claim_token"], now

        live, now = self._holder("fulfill", task_id, agent_id, token, result_json, pin)
        time.sleep(TOCTOU_WINDOW_S)  # the result "uploads" (see TOCTOU_WINDOW_S)

        def finish(conn: sqlite3.Connection, _now: int) -> int:  # BUG: a second transaction
            cur = conn.execute(
                "UPDATE tasks SET status = 'COMPLETED', result = ?, completed_at = ?,"
                " claim_token = NULL "
                "WHERE task_id = ? AND status = 'CLAIMED' AND claim_token = ?",
                (result_json, now, task_id, live),
            )
            if cur.rowcount == 1:
                self._retire(conn, live, now, "completed")
            return cur.rowcount

        if self._write(finish) != 1:  # a racer with the same token finished first
            super().fulfill(task_id, agent_id, token, result)


def pinned_lease(path: str, *, clock: Callable[[], int]) -> PinnedLeaseStore:
    return PinnedLeaseStore(path, clock=clock)


# ---------------------------------------------------------------------- 12. unfenced_write
class UnfencedWriteStore(BearerImmediateStore):
    """BUG: fulfill's final UPDATE repeats status and lease but not the claim token.

    The reference guard runs in its own transaction (refusals and late salvage as usual)
    and returns its ``now``; the write then runs ``UPDATE ... WHERE task_id = ? AND status =
    'CLAIMED' AND lease_expires_at > :now``. Without faults nothing reclaims a task between
    the two. A holder frozen in the gap past its lease wakes after a rescuer reclaimed the
    task, and its write completes the rescuer's claim with the zombie's result.
    Same class as ``broken_stores.UnfencedWriteStore``. Faults: ``pause``. Invariant:
    ``lease-half-open``.
    """

    @_api
    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any) -> None:
        result_json = _dump_json(result, "result")
        now = self._holder("fulfill", task_id, agent_id, token, result_json,
                           lambda conn, now, row: now)
        time.sleep(TOCTOU_WINDOW_S)  # serialising the result (see TOCTOU_WINDOW_S)

        def write(conn: sqlite3.Connection, _now: int) -> bool:
            row = self._one(conn, "SELECT claim_token FROM tasks WHERE task_id = ?"
                            " AND status = 'CLAIMED' AND lease_expires_at > ?", (task_id, now))
            if row is None:
                return False
            conn.execute(
                "UPDATE tasks SET status = 'COMPLETED', result = ?, completed_at = ?,"
                " claim_token = NULL "
                # BUG: no "AND claim_token = ?" -- any live claim of the task is completed
                "WHERE task_id = ? AND status = 'CLAIMED' AND lease_expires_at > ?",
                (result_json, now, task_id, now),
            )
            self._retire(conn, row["claim_token"], now, "completed")
            return True

        if not self._write(write):
            super().fulfill(task_id, agent_id, token, result)


def unfenced_write(path: str, *, clock: Callable[[], int]) -> UnfencedWriteStore:
    return UnfencedWriteStore(path, clock=clock)


# ====================================================================== issue 13's holes
# ---------------------------------------------------------------------- 13. uncounted_extends
class UncountedExtendsStore(BearerImmediateStore):
    """BUG: ``extend`` counts, but never checks the count, so the per-claim cap never bites.

    The guard before the UPDATE forgot ``extend_count >= max_extends``: views show the
    right count, and a holder extends forever (the 4 x queue_ttl cap still applies).
    Invariant: ``holder-guard`` (a sixth extend of one claim must be refused with
    LimitExceeded), seen only when the generator extends one claim more than five times.
    """

    @_api
    def extend(self, task_id: str, agent_id: str, token: str | None) -> int:
        def body(conn: sqlite3.Connection, now: int, row: sqlite3.Row) -> int:
            # BUG: no "if row['extend_count'] >= self._max_extends: raise LimitExceeded"
            new_exp = now + row["exec_ttl_ms"]
            cap = row["created_at"] + 4 * row["queue_ttl_ms"]
            if new_exp > cap:
                raise LimitExceeded(
                    f"extend: the new expiry {new_exp} would pass created_at + 4*queue_ttl_ms = "
                    f"{cap} for task {row['task_id']}")
            self._guarded_update(
                conn, "lease_expires_at = ?, extend_count = extend_count + 1",
                (new_exp,), row["task_id"], row["claim_token"], now, "extend")
            return new_exp

        return self._holder("extend", task_id, agent_id, token, None, body)


def uncounted_extends(path: str, *, clock: Callable[[], int]) -> UncountedExtendsStore:
    return UncountedExtendsStore(path, clock=clock)


# ---------------------------------------------------------- 14. extra_salvage_on_refusal
class ExtraSalvageOnRefusalStore(BearerImmediateStore):
    """BUG: ``salvage`` appends the partial *before* the holder guard, in its own transaction.

    "Never lose a partial": the partial is inserted first and the guard runs afterwards,
    so a refused salvage (wrong or retired token, wrong agent, expired lease, task not
    CLAIMED) raises the right error but leaves its partial in ``salvaged()``. A refusal
    must change nothing (SPEC section 7). Invariant: ``no-lost-task`` (``salvaged()``
    holds an entry no accepted call wrote).
    """

    @_api
    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        partial_json = _dump_json(partial, "partial")
        task_id = _check_id(task_id, "task_id")
        agent_id = _check_id(agent_id, "agent_id")

        def keep(conn: sqlite3.Connection, now: int) -> None:
            conn.execute(
                "INSERT INTO salvage (task_id, kind, data, token, agent_id, created_at) "
                "SELECT task_id, 'partial', ?, claim_token, ?, ? FROM tasks WHERE task_id = ?",
                (partial_json, agent_id, now, task_id),
            )

        self._write(keep)  # BUG: committed before (and whatever) the guard below decides
        return self._holder("salvage", task_id, agent_id, token, None, lambda conn, now, row: None)


def extra_salvage_on_refusal(path: str, *, clock: Callable[[], int]) -> ExtraSalvageOnRefusalStore:
    return ExtraSalvageOnRefusalStore(path, clock=clock)


# ---------------------------------------------------------------------- 15. token_in_view
@dataclasses.dataclass(frozen=True)
class LeakyTaskView(TaskView):
    """The base view plus a "debugging aid": the live claim token under another name."""

    lease_ref: str | None = None


class TokenInViewStore(BearerImmediateStore):
    """BUG: views (``get()``, ``inspect()``) carry the live claim token as ``lease_ref``.

    Added "so operators can correlate a view with worker logs"; anyone who can read the
    queue can now act as the holder (bearer tokens). SPEC section 4: views never carry a
    token. Invariant: ``token-unique`` (the secrecy check, under any field name).
    """

    def _view(self, row: sqlite3.Row, now: int) -> TaskView:
        view = super()._view(row, now)
        return LeakyTaskView(**dataclasses.asdict(view), lease_ref=row["claim_token"])  # BUG


def token_in_view(path: str, *, clock: Callable[[], int]) -> TokenInViewStore:
    return TokenInViewStore(path, clock=clock)


# ---------------------------------------------------------------------- 16. wrong_counters
class WrongCountersStore(BearerImmediateStore):
    """BUG: views report ``attempt`` one too high (the number the *next* claim would get).

    ``attempt`` counts claims (the first claim has attempt 1); the view builder shows
    ``attempt + 1`` ("the attempt a worker would be on"), in ``get()`` and ``inspect()``
    alike; claims still report the right attempt. Invariant: ``no-lost-task`` -- the model
    compares a read's counters in ``_counters_differ`` and names ``no-lost-task`` (not
    ``linearizable``, which is for a status no sequential order explains).
    """

    def _view(self, row: sqlite3.Row, now: int) -> TaskView:
        view = super()._view(row, now)
        return dataclasses.replace(view, attempt=view.attempt + 1)  # BUG: off by one


def wrong_counters(path: str, *, clock: Callable[[], int]) -> WrongCountersStore:
    return WrongCountersStore(path, clock=clock)


# ---------------------------------------------------------------------- 17. refused_truncate
class RefusedTruncateStore(BearerImmediateStore):
    """BUG: ``checkpoint('TRUNCATE')`` opens a read transaction of its own before checkpointing.

    To log "how big is the queue now" the store opens a second connection, runs ``BEGIN``
    and a ``SELECT count(*)``, and checkpoints while that snapshot is still open (it is
    closed afterwards). The checkpoint waits out its 10 s busy timeout for that reader and
    returns busy: the -wal is never truncated although no outside reader is open. Other
    modes are unchanged. Invariant: ``wal-bounded``.
    """

    @_api
    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if not (isinstance(mode, str) and mode.upper() == "TRUNCATE"):
            return super().checkpoint(mode)
        snap = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            snap.execute("BEGIN")
            snap.execute("SELECT count(*) FROM tasks").fetchall()  # BUG: snapshot still open below
            return super().checkpoint(mode)
        finally:
            snap.close()


def refused_truncate(path: str, *, clock: Callable[[], int]) -> RefusedTruncateStore:
    return RefusedTruncateStore(path, clock=clock)


# ---------------------------------------------------------------------- registry
# factory -> (faults that reach the bug, invariant id that must catch it, one-line bug)
BROKEN_SLOW: dict[str, tuple[tuple[str, ...], str, str]] = {
    "check_then_act": ((), "single-winner",
                       "readiness read outside the write tx, then UPDATE by task_id only"),
    "token_not_retired": ((), "token-unique", "guard accepts any token ever issued for the task"),
    "agent_only_guard": ((), "holder-guard", "the claiming agent's name skips the token checks"),
    "closed_lease": ((), "lease-half-open",
                     "lease is [claimed_at, expires]: holder wins AT expiry"),
    "long_reader": ((), "wal-bounded", "get()/inspect() leave a read transaction open"),
    "dependency_ignored": ((), "dag-order", "claim readiness ignores dependencies"),
    "unconditional_lock": ((), "lock-exclusive", "daemon-lock UPSERT without WHERE"),
    "busy_idle_poll": ((), "idle-no-write", "every poll re-stamps PRAGMA user_version"),
    "dropped_late_result": ((), "no-lost-task", "late fulfill refused and its result dropped"),
    "double_finish": ((), "token-unique", "fulfill guards in one tx, UPDATEs by task_id in a 2nd"),
    "pinned_lease": (("kill",), "lease-half-open",
                     "fulfill pins the lease, completes in a 2nd tx: a death between strands it"),
    "unfenced_write": (("pause",), "lease-half-open",
                       "fulfill's final UPDATE lacks the token: a zombie completes a reclaim"),
    "uncounted_extends": ((), "holder-guard", "extend never checks its count: no cap of 5"),
    "extra_salvage_on_refusal": ((), "no-lost-task", "a refused salvage still appends its partial"),
    "token_in_view": ((), "token-unique", "views carry the live token as 'lease_ref'"),
    "wrong_counters": ((), "no-lost-task", "views report attempt + 1"),
    "refused_truncate": ((), "wal-bounded",
                         "TRUNCATE checkpoints under its own open read tx: -wal never emptied"),
}

__all__ = ["BROKEN_SLOW", "TOCTOU_WINDOW_S", *BROKEN_SLOW]
