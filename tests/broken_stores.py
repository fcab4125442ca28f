"""Deliberately broken leasing stores: the harness must catch every one of them.

Each class below is ``ferry_core.LeaseStore`` with exactly ONE realistic bug, of a class
leasing stores are known for (CAS claim, lease tokens, holder guard, same-name
impersonation; TOCTOU, token history, half-open lease, DAG readiness; WAL, no long
transactions, daemon-lock UPSERT, two-phase sweep).
Everything else is inherited unchanged, so a report about one of these stores points at its
bug and nothing else. Where a method had to be changed in the middle, it is copied from
``LeaseStore`` and the broken line is marked ``# BUG``.

The harness loads them as ``tests.broken_stores:<factory>`` and calls
``factory(path, clock=shared_clock)`` in every worker process; ``BROKEN`` maps each factory
to the invariant id it must trip (PROTOCOL.md#invariants) and a one-line description.
"""

from __future__ import annotations

import dataclasses
import functools
import sqlite3
import time
import uuid
from typing import Any

from ferry_core import SCHEMA_VERSION, LeaseStore, errors
from ferry_core.store import _GUARD_COLUMNS, _name, _positive_int, _to_json
from ferry_core.types import CLAIMED, SUBMITTED, Claim, TaskView

# The racy stores sleep this long between their check and their write. On one machine the
# window between two autocommit statements is a few microseconds, so a stress run would need
# a very long time to land two workers inside it; 2 ms stands in for what makes it wide in
# real life (a network hop to the database, a GC pause, a busy CPU), so the bug shows up
# within a few races instead of a few million.
TOCTOU_WINDOW_S = 0.002


# ---------------------------------------------------------------------- 1. check_then_act
class CheckThenActStore(LeaseStore):
    """BUG: the claim is SELECT-then-UPDATE in two autocommit statements (check-then-act).

    Article ``000`` (section 2, the "wrong example" of poll_next_task) and ``001`` (the TOCTOU
    of "scan, then write owner"): the readiness check is a SELECT and the write is
    ``UPDATE tasks SET ... WHERE task_id=?`` with no status condition, so two claimers that
    both passed the check both "win". Used by both ``poll_next`` and ``claim``.
    Invariant: ``single-winner``.
    """

    toctou_window_s = TOCTOU_WINDOW_S

    def _cas_claim(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   now: int) -> Claim | None:
        ready = conn.execute(
            "SELECT 1 FROM tasks WHERE task_id=:task_id AND status='SUBMITTED'"
            " AND pending_deps=0 AND queue_deadline > :now"
            " AND (target_agent IS NULL OR target_agent = :agent)",
            {"task_id": task_id, "now": now, "agent": agent_id},
        ).fetchall()
        if not ready:
            return None
        time.sleep(self.toctou_window_s)  # widens the TOCTOU window (see TOCTOU_WINDOW_S)
        token = str(uuid.uuid4())
        rows = conn.execute(
            "UPDATE tasks SET status='CLAIMED', claimed_by=:agent, claim_token=:token,"
            " claimed_at=:now, lease_expires_at=:now + exec_ttl_ms, attempt=attempt + 1,"
            " extend_count=0"
            " WHERE task_id=:task_id"  # BUG: no "AND status='SUBMITTED' ..." and no changes==1
            " RETURNING claimed_at, lease_expires_at, attempt",
            {"agent": agent_id, "token": token, "now": now, "task_id": task_id},
        ).fetchall()
        claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)


def check_then_act(path: str, *, clock) -> CheckThenActStore:
    return CheckThenActStore(path, clock=clock)


# ---------------------------------------------------------------------- 2. token_not_retired
class TokenNotRetiredStore(LeaseStore):
    """BUG: the holder guard accepts any token ever issued for the task (no retirement).

    Article ``000`` (release must reset ``claim_token`` to NULL so the old one is dead) and
    ``001`` (the token history table makes a token unusable after completion or expiry):
    here the guard looks the token up in the ``claim_tokens`` history instead of comparing
    it with the row's current token, so after a release or an expiry, when the same agent
    claims the task again, the previous claim's token is still accepted (replay).
    Invariant: ``token-unique``.
    """

    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        if token is not None and not isinstance(token, str):
            raise errors.InvalidArgument(f"token must be a string or None, got {type(token).__name__}")
        rows = self._rows(f"SELECT {_GUARD_COLUMNS} FROM tasks WHERE task_id=?", (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        status, target, holder, expires, row_token = rows[0]
        if target is not None and target != agent_id:
            raise errors.PermissionDenied(f"task {task_id} is for agent {target!r}, not {agent_id!r}")
        if status != CLAIMED:
            raise errors.WrongState(f"task {task_id} is {status}, not CLAIMED; claim it first")
        if now >= expires:
            raise errors.LeaseExpired(
                f"lease on task {task_id} ended at {expires} (now {now}); poll for new work")
        if holder != agent_id:
            raise errors.PermissionDenied(f"task {task_id} is held by {holder!r}, not {agent_id!r}")
        if token is None:
            if self.strict_tokens:
                raise errors.TokenRequired(
                    f"task {task_id}: pass the claim token you got from claim/poll_next")
        elif not self._rows(  # BUG: "was it ever issued for this task", not "is it current"
                "SELECT 1 FROM claim_tokens WHERE token=? AND task_id=?", (token, task_id)):
            raise errors.InvalidToken(f"task {task_id}: token was never issued for this task")
        return rows[0]


def token_not_retired(path: str, *, clock) -> TokenNotRetiredStore:
    return TokenNotRetiredStore(path, clock=clock)


# ---------------------------------------------------------------------- 3. agent_only_guard
class AgentOnlyGuardStore(LeaseStore):
    """BUG: holder operations check only the agent name, never the claim token.

    Article ``000`` section 3, "same-name instance impersonation": two worker processes run
    under the same agent id; instance B (which never claimed) calls fulfill with no token or
    a wrong one and is accepted because ``claimed_by`` equals its name.
    Invariant: ``holder-guard``.
    """

    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        if token is not None and not isinstance(token, str):
            raise errors.InvalidArgument(f"token must be a string or None, got {type(token).__name__}")
        rows = self._rows(f"SELECT {_GUARD_COLUMNS} FROM tasks WHERE task_id=?", (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        status, target, holder, expires, row_token = rows[0]
        if target is not None and target != agent_id:
            raise errors.PermissionDenied(f"task {task_id} is for agent {target!r}, not {agent_id!r}")
        if status != CLAIMED:
            raise errors.WrongState(f"task {task_id} is {status}, not CLAIMED; claim it first")
        if now >= expires:
            raise errors.LeaseExpired(
                f"lease on task {task_id} ended at {expires} (now {now}); poll for new work")
        if holder != agent_id:
            raise errors.PermissionDenied(f"task {task_id} is held by {holder!r}, not {agent_id!r}")
        # BUG: the token checks (TokenRequired / InvalidToken) are missing: the name is proof.
        return rows[0]


def agent_only_guard(path: str, *, clock) -> AgentOnlyGuardStore:
    return AgentOnlyGuardStore(path, clock=clock)


# ---------------------------------------------------------------------- 4. closed_lease
class ClosedLeaseStore(LeaseStore):
    """BUG: the lease is the closed interval ``[claimed_at, lease_expires_at]``.

    Article ``001`` ("half-open interval [claimed_at, lease_expires_at): reclaim with <=,
    completion check with >=, the boundary is exactly one millisecond"): every lease test
    here uses ``now > lease_expires_at`` for "over", consistently (Python guard, the holder
    write's WHERE, the due-check read, the sweep, ``is_logically_expired``), so at
    ``t = lease_expires_at`` the holder is still accepted and nobody can reclaim; reclaim
    works from ``lease_expires_at + 1``. The queue window and daemon locks stay correct.
    Invariant: ``lease-half-open``.
    """

    _HOLDER_WHERE = (
        " WHERE task_id=:task_id AND status='CLAIMED' AND claim_token=:row_token"
        " AND lease_expires_at >= :now"  # BUG: > :now
    )
    _DUE_SQL = (
        "SELECT EXISTS(SELECT 1 FROM tasks WHERE status='CLAIMED' AND lease_expires_at < ?)"  # BUG
        " OR EXISTS(SELECT 1 FROM tasks WHERE status='SUBMITTED' AND queue_deadline <= ?)"
    )

    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        # BUG: the reference guard refuses when ``now >= expires``; judging the lease at
        # ``now - 1`` (``now`` is used for nothing else there) makes that ``now > expires``.
        return super()._guard(task_id, agent_id, token, now - 1)

    _NEXT_DUE_SQL = LeaseStore._NEXT_DUE_SQL.replace(
        "lease_expires_at <= ?1", "lease_expires_at < ?1")  # BUG: the sweep sees a lease end 1 ms late

    def _view(self, row: tuple, now: int) -> TaskView:
        view = super()._view(row, now)
        if view.status == CLAIMED:  # BUG: now > expires
            view = dataclasses.replace(view, is_logically_expired=now > view.lease_expires_at)
        return view


def closed_lease(path: str, *, clock) -> ClosedLeaseStore:
    return ClosedLeaseStore(path, clock=clock)


# ---------------------------------------------------------------------- 5. long_reader
def _ending_stale_read(method):
    @functools.wraps(method)
    def wrapper(self: LongReaderStore, *args: Any, **kwargs: Any) -> Any:
        self._end_stale_read()
        return method(self, *args, **kwargs)

    return wrapper


class LongReaderStore(LeaseStore):
    """BUG: ``get()`` and ``inspect()`` leave their read transaction open.

    Article ``003`` section 4 ("no long transactions": a long transaction stops the WAL
    checkpoint from writing the log back, and the -wal grows to hundreds of MB): the reads
    run in a ``BEGIN`` "for a consistent snapshot" that is never committed. It is ended only
    by the next other call on the same store (so this store's own writes and checkpoints
    still work), but between calls the snapshot pins the WAL: a ``TRUNCATE`` checkpoint from
    any other connection returns busy and leaves the -wal non-empty.
    Invariant: ``wal-bounded``.
    """

    def _end_stale_read(self) -> None:
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")

    def get(self, task_id: str) -> TaskView:
        self._end_stale_read()
        self._conn.execute("BEGIN")  # BUG: never committed by get()
        return super().get(task_id)

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        self._end_stale_read()
        self._conn.execute("BEGIN")  # BUG: never committed by inspect()
        return super().inspect(agent_id)

    dispatch = _ending_stale_read(LeaseStore.dispatch)
    poll_next = _ending_stale_read(LeaseStore.poll_next)
    claim = _ending_stale_read(LeaseStore.claim)
    fulfill = _ending_stale_read(LeaseStore.fulfill)
    fail = _ending_stale_read(LeaseStore.fail)
    release = _ending_stale_read(LeaseStore.release)
    extend = _ending_stale_read(LeaseStore.extend)
    salvage = _ending_stale_read(LeaseStore.salvage)
    sweep = _ending_stale_read(LeaseStore.sweep)
    salvaged = _ending_stale_read(LeaseStore.salvaged)
    acquire_lock = _ending_stale_read(LeaseStore.acquire_lock)
    release_lock = _ending_stale_read(LeaseStore.release_lock)
    lock_holder = _ending_stale_read(LeaseStore.lock_holder)
    checkpoint = _ending_stale_read(LeaseStore.checkpoint)


def long_reader(path: str, *, clock) -> LongReaderStore:
    return LongReaderStore(path, clock=clock)


# ---------------------------------------------------------------------- 6. dependency_ignored
class DependencyIgnoredStore(LeaseStore):
    """BUG: readiness ignores dependencies (``pending_deps`` is not checked when claiming).

    Article ``001`` (the claim transaction must "load and validate the DAG in the same
    snapshot" and only pick tasks whose dependencies are done): here both the pick of
    ``poll_next`` and the claiming UPDATE (used by ``claim`` too) drop the
    ``pending_deps=0`` condition, so a dependent task is handed out before its dependencies
    are COMPLETED. Invariant: ``dag-order``.
    """

    _CLAIM_SET = (
        "UPDATE tasks SET status='CLAIMED', claimed_by=:agent, claim_token=:token,"
        " claimed_at=:now, lease_expires_at=:now + exec_ttl_ms, attempt=attempt + 1,"
        " extend_count=0"
        " WHERE task_id=:task_id AND status='SUBMITTED'"  # BUG: no "AND pending_deps=0"
        " AND queue_deadline > :now AND (target_agent IS NULL OR target_agent = :agent)"
        " RETURNING claimed_at, lease_expires_at, attempt"
    )
    _PICK_SQL = (  # BUG: no "AND pending_deps=0" (and so no INDEXED BY tasks_ready)
        "SELECT queued_at, seq, task_id FROM tasks"
        " WHERE status='SUBMITTED' AND target_agent {} AND queue_deadline > ?"
        " ORDER BY queued_at, seq LIMIT 1"
    )
    _PICK_ANY = _PICK_SQL.format("IS NULL")
    _PICK_MINE = _PICK_SQL.format("= ?")


def dependency_ignored(path: str, *, clock) -> DependencyIgnoredStore:
    return DependencyIgnoredStore(path, clock=clock)


# ---------------------------------------------------------------------- 7. unconditional_lock
class UnconditionalLockStore(LeaseStore):
    """BUG: the daemon-lock UPSERT has no WHERE clause, so it always takes the lock.

    Article ``003`` (the ``daemon_locks`` UPSERT is only safe because its DO UPDATE is
    conditional on "expired or already mine"): without the condition a second daemon
    silently steals an unexpired lock. Invariant: ``lock-exclusive``.
    """

    _ACQUIRE_LOCK_SQL = LeaseStore._ACQUIRE_LOCK_SQL.replace(
        " WHERE daemon_locks.expires_at <= :now OR daemon_locks.owner = excluded.owner", "")  # BUG


def unconditional_lock(path: str, *, clock) -> UnconditionalLockStore:
    return UnconditionalLockStore(path, clock=clock)


# ---------------------------------------------------------------------- 8. busy_idle_poll
class BusyIdlePollStore(LeaseStore):
    """BUG: every ``poll_next`` runs an "ensure schema" step that writes, even when idle.

    Article ``003`` section 5 (the two-phase sweep: "a pointless write on every poll appends
    a transaction to the WAL even when nothing timed out"): this store calls a schema
    check copied into the hot path, which re-stamps ``PRAGMA user_version`` on every poll.
    Setting it, even to the value it already has, rewrites page 1 and appends a WAL frame,
    so an idle poll writes. (Subtler versions of the bug are invisible: a blind UPDATE that
    matches no row, or that rewrites a row with identical values, appends no frame, since
    SQLite skips identical cell overwrites; and ferry_core refuses files with extra tables,
    so a "last seen" heartbeat table is not an option.) Invariant: ``idle-no-write``.
    """

    def _ensure_schema(self) -> None:
        self._rows(f"PRAGMA user_version={SCHEMA_VERSION}")  # BUG: a write on every call

    def poll_next(self, agent_id: str) -> Claim | None:
        _name("agent_id", agent_id)
        self._ensure_schema()
        return super().poll_next(agent_id)


def busy_idle_poll(path: str, *, clock) -> BusyIdlePollStore:
    return BusyIdlePollStore(path, clock=clock)


# ---------------------------------------------------------------------- 9. dropped_late_result
class DroppedLateResultStore(LeaseStore):
    """BUG: a late ``fulfill`` (after the lease ended) is refused and its result thrown away.

    PROTOCOL.md#late-results ("a late fulfill is refused with LeaseExpired, but its result is kept as
    salvage: no delivered work is ever silently dropped"), from the salvage of article
    ``000``'s release/expiry cleanup: here the refusal is right but the late result is not
    kept. Invariant: ``no-lost-task``.
    """

    def _keep_late(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   token: str | None, result: Any, now: int) -> None:
        return  # BUG: the late result should be inserted into salvage as 'late_result'


def dropped_late_result(path: str, *, clock) -> DroppedLateResultStore:
    return DroppedLateResultStore(path, clock=clock)


# ---------------------------------------------------------------------- 10. double_finish
class DoubleFinishStore(LeaseStore):
    """BUG: fulfill checks the holder guard, then writes by primary key only.

    Articles ``000``/``001`` (a check in application code is a race; the final UPDATE must
    repeat the condition and check ``changes == 1``): fulfill runs the full guard in Python
    (in its own short statement), then, in a second transaction,
    ``UPDATE tasks SET status='COMPLETED', result=? ... WHERE task_id=?`` with no status or
    token condition. Two concurrent fulfills with the same token both succeed (the second
    overwrites the first's result), and a fulfill racing a release, an expiry or a
    re-claim completes a task its token no longer holds.

    Several invariant ids describe this: the second fulfill reuses a token the first one
    retired (``token-unique``, the id the harness reports and declared here), it changes a
    task nobody holds (``holder-guard``) and overwrites an accepted result (``no-lost-task``).
    """

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)
        # Check: the reference guard (and its late-result salvage), with no write of its own.
        row_token, now = self._holder_write(
            "fulfill", task_id, agent_id, token, lambda conn, row_token, now: (row_token, now),
            late_result=result, has_late=True)
        time.sleep(TOCTOU_WINDOW_S)  # widens the TOCTOU window (see TOCTOU_WINDOW_S)
        with self._tx() as conn:  # (triggers retire the token and unblock dependents once)
            conn.execute(  # BUG: should be "... AND status='CLAIMED' AND claim_token=?" + changes==1
                "UPDATE tasks SET status='COMPLETED', result=?, completed_at=?, claim_token=NULL"
                " WHERE task_id=?", (result_json, now, task_id))


def double_finish(path: str, *, clock) -> DoubleFinishStore:
    return DoubleFinishStore(path, clock=clock)


# ---------------------------------------------------------------------- 11. uncounted_extends
class UncountedExtendsStore(LeaseStore):
    """BUG: extend never counts, so the per-claim cap of max_extends never bites.

    A store that renews leases from a heartbeat loop and forgot the counter: a stuck worker
    keeps its task forever. Caught as ``holder-guard`` (an extend accepted past its limit),
    only when the generator extends one claim more than five times.
    """

    def __init__(self, path: str, **kw: Any) -> None:
        super().__init__(path, **kw)
        self.max_extends = 10**9  # the count is kept (views show it), the cap never checked


def uncounted_extends(path: str, *, clock) -> UncountedExtendsStore:
    return UncountedExtendsStore(path, clock=clock)


# ---------------------------------------------------------------------- 12. salvage_on_refusal
class SalvageOnRefusalStore(LeaseStore):
    """BUG: salvage() appends the partial before checking the guard, so a refused call
    (wrong token, expired lease) still leaves an entry: "refused and nothing changed" fails.
    Caught as ``no-lost-task`` by the exact salvaged() contents."""

    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        try:
            super().salvage(task_id, agent_id, token, partial)
        except errors.FerryError:
            with self._tx() as conn:
                conn.execute(
                    "INSERT INTO salvage(task_id, agent_id, kind, data, created_at)"
                    " VALUES (?, ?, 'partial', ?, ?)",
                    (task_id, agent_id, _to_json("partial", partial), self._now()))
            raise


def salvage_on_refusal(path: str, *, clock) -> SalvageOnRefusalStore:
    return SalvageOnRefusalStore(path, clock=clock)


# ---------------------------------------------------------------------- 13. token_in_view
class TokenInViewStore(LeaseStore):
    """BUG: get() shows the live claim token inside the title (``"… [lease <token>]"``, a
    debugging aid left in), so any reader can act as the holder. Caught as
    ``token-unique`` (no issued token anywhere in a read, whatever the field)."""

    def get(self, task_id: str) -> TaskView:
        view = super().get(task_id)
        row = self._rows("SELECT claim_token FROM tasks WHERE task_id=?", (task_id,))
        if not row or row[0][0] is None:
            return view
        return TaskView(**{**view.__dict__, "title": f"{view.title} [lease {row[0][0]}]"})


def token_in_view(path: str, *, clock) -> TokenInViewStore:
    return TokenInViewStore(path, clock=clock)


# ---------------------------------------------------------------------- 14. wrong_counters
class WrongCountersStore(LeaseStore):
    """BUG: views report ``attempt`` one too high once a task was claimed (an off-by-one
    in a view query). Caught as ``no-lost-task`` (a read's counters against the model)."""

    def get(self, task_id: str) -> TaskView:
        view = super().get(task_id)
        bump = 1 if view.attempt else 0
        return TaskView(**{**view.__dict__, "attempt": view.attempt + bump})


def wrong_counters(path: str, *, clock) -> WrongCountersStore:
    return WrongCountersStore(path, clock=clock)


# ---------------------------------------------------------------------- 15. refused_truncate
class RefusedTruncateStore(LeaseStore):
    """BUG: checkpoint() refuses TRUNCATE ("busy, try later") even with no reader open, so
    the -wal never shrinks under the store's own maintenance. Caught as ``wal-bounded``."""

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if isinstance(mode, str) and mode.upper() == "TRUNCATE":
            raise errors.StoreError("checkpoint busy: try again later")
        return super().checkpoint(mode)


def refused_truncate(path: str, *, clock) -> RefusedTruncateStore:
    return RefusedTruncateStore(path, clock=clock)


# ---------------------------------------------------------------------- 16. untyped_arguments
class UntypedArgumentsStore(LeaseStore):
    """BUG: dispatch trusts its arguments: ``depends_on=5`` raises TypeError and a huge TTL
    OverflowError from deep inside, instead of InvalidArgument. Caught as ``typed-errors``
    when the generator draws hostile arguments."""

    def dispatch(self, target_agent: str | None, **kw: Any) -> str:
        deps = kw.get("depends_on", ())
        kw["depends_on"] = [str(d) for d in deps]  # TypeError on a non-iterable
        ttl = kw.get("queue_ttl_ms", 1)
        if isinstance(ttl, int) and ttl > 2**62:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return super().dispatch(target_agent, **kw)


def untyped_arguments(path: str, *, clock) -> UntypedArgumentsStore:
    return UntypedArgumentsStore(path, clock=clock)


# ---------------------------------------------------------------------- 17. closed_queue_window
class ClosedQueueWindowStore(LeaseStore):
    """BUG: the queue window is the closed interval ``[queued_at, queued_at + queue_ttl_ms]``.

    The queue's twin of ``closed_lease``: every window test uses ``queue_deadline >= now``
    for "still waiting" (the claim's UPDATE, the poll's pick, the due-check read, the sweep,
    ``is_logically_expired``), consistently, so at exactly ``queued_at + queue_ttl_ms`` a
    claim still takes the task and a view shows it waiting; it times out from one
    millisecond later. Leases and daemon locks stay half-open.
    Invariant: ``lease-half-open`` (PROTOCOL.md#the-queue-window-is-half-open).
    """

    _CLAIM_SET = LeaseStore._CLAIM_SET.replace("queue_deadline > :now", "queue_deadline >= :now")  # BUG
    _PICK_SQL = LeaseStore._PICK_SQL.replace("queue_deadline > ?", "queue_deadline >= ?")  # BUG
    _PICK_ANY = _PICK_SQL.format("IS NULL")
    _PICK_MINE = _PICK_SQL.format("= ?")
    _DUE_SQL = LeaseStore._DUE_SQL.replace("queue_deadline <= ?", "queue_deadline < ?")  # BUG

    _NEXT_DUE_SQL = LeaseStore._NEXT_DUE_SQL.replace(
        "queue_deadline <= ?1", "queue_deadline < ?1")  # BUG: the sweep is 1 ms late for windows

    def _view(self, row: tuple, now: int) -> TaskView:
        view = super()._view(row, now)
        if view.status == SUBMITTED:  # BUG: now > queued_at + queue_ttl_ms
            view = dataclasses.replace(
                view, is_logically_expired=now > view.queued_at + view.queue_ttl_ms)
        return view


def closed_queue_window(path: str, *, clock) -> ClosedQueueWindowStore:
    return ClosedQueueWindowStore(path, clock=clock)


# ====================================================================== tight windows
# The racy stores above widen their check-then-act window with TOCTOU_WINDOW_S. The three
# below do not sleep: check and write are back to back, a window of tens of microseconds, as
# real bugs have. Only racers that reach the database together can land in it; ferry's race
# gate (ferry_harness.runtime.gate) releases them together at their first SQL statement.

# ---------------------------------------------------------------------- 18. tight_check_then_act
class TightCheckThenActStore(LeaseStore):
    """BUG: the claim is SELECT-then-UPDATE in two autocommit statements, back to back.

    ``check_then_act`` without the sleep: the readiness check is a SELECT and the write is
    ``UPDATE tasks SET ... WHERE task_id=?`` with no status condition and no ``changes == 1``,
    so two claimers whose SELECTs both ran before either UPDATE both "win". Used by both
    ``poll_next`` and ``claim``. Invariant: ``single-winner``.
    """

    def _cas_claim(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   now: int) -> Claim | None:
        ready = conn.execute(
            "SELECT 1 FROM tasks WHERE task_id=:task_id AND status='SUBMITTED'"
            " AND pending_deps=0 AND queue_deadline > :now"
            " AND (target_agent IS NULL OR target_agent = :agent)",
            {"task_id": task_id, "now": now, "agent": agent_id},
        ).fetchall()
        if not ready:
            return None
        token = str(uuid.uuid4())
        rows = conn.execute(
            "UPDATE tasks SET status='CLAIMED', claimed_by=:agent, claim_token=:token,"
            " claimed_at=:now, lease_expires_at=:now + exec_ttl_ms, attempt=attempt + 1,"
            " extend_count=0"
            " WHERE task_id=:task_id"  # BUG: no "AND status='SUBMITTED' ..." and no changes==1
            " RETURNING claimed_at, lease_expires_at, attempt",
            {"agent": agent_id, "token": token, "now": now, "task_id": task_id},
        ).fetchall()
        claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)


def tight_check_then_act(path: str, *, clock) -> TightCheckThenActStore:
    return TightCheckThenActStore(path, clock=clock)


# ---------------------------------------------------------------------- 19. tight_double_finish
class TightDoubleFinishStore(LeaseStore):
    """BUG: fulfill compares the token in Python, then UPDATEs without it, back to back.

    The guard (``_guard``: one SELECT, the token compared in Python) passes, then an
    autocommit ``UPDATE tasks SET status='COMPLETED' ... WHERE task_id=?`` repeats neither
    status nor token and ignores ``changes``. Two fulfills with the same token whose guards
    both ran before either write both succeed (the second overwrites the first's result).
    Invariant: ``token-unique`` (as ``double_finish``: the second reuses a retired token).
    """

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)
        now = self._now()
        try:
            self._guard(task_id, agent_id, token, now)
        except errors.FerryError:  # the reference refusal (and late-result salvage)
            return super().fulfill(task_id, agent_id, token, result)
        self._busy.run(lambda: self._conn.execute(  # BUG: no "AND claim_token=?" + changes==1
            "UPDATE tasks SET status='COMPLETED', result=?, completed_at=?, claim_token=NULL"
            " WHERE task_id=?", (result_json, now, task_id)))
        self._wrote()
        return None


def tight_double_finish(path: str, *, clock) -> TightDoubleFinishStore:
    return TightDoubleFinishStore(path, clock=clock)


# ---------------------------------------------------------------------- 20. tight_lock_takeover
class TightLockTakeoverStore(LeaseStore):
    """BUG: acquire_lock reads the lock row, decides in Python, then overwrites it blindly.

    The read (``SELECT owner, expires_at``) says the lock is free, expired or already ours;
    the write right after is ``INSERT OR REPLACE`` with no condition, so it does not re-check
    expiry or owner. Two daemons whose reads both ran before either write both take the
    lock. Invariant: ``lock-exclusive``.
    """

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        _name("lock name", name)
        _name("owner", owner)
        _positive_int("ttl_ms", ttl_ms)
        now = self._now()
        rows = self._rows("SELECT owner, expires_at FROM daemon_locks WHERE name=?", (name,))
        if rows and rows[0][1] > now and rows[0][0] != owner:
            return False  # held by someone else
        acquired = now if not rows or rows[0][0] != owner or rows[0][1] <= now else None
        self._busy.run(lambda: self._conn.execute(  # BUG: no re-check of expiry/owner
            "INSERT OR REPLACE INTO daemon_locks(name, owner, expires_at, acquired_at)"
            " VALUES (?, ?, ?, COALESCE(?, (SELECT acquired_at FROM daemon_locks WHERE name=?)))",
            (name, owner, now + ttl_ms, acquired, name)))
        self._wrote()
        return True


def tight_lock_takeover(path: str, *, clock) -> TightLockTakeoverStore:
    return TightLockTakeoverStore(path, clock=clock)


# ---------------------------------------------------------------------- registry
BROKEN: dict[str, tuple[str, str]] = {
    "check_then_act": (
        "single-winner", "claim is SELECT-then-unconditional-UPDATE: two racing claimers both win"),
    "token_not_retired": (
        "token-unique", "guard accepts any token ever issued for the task: old tokens replay"),
    "agent_only_guard": (
        "holder-guard", "guard checks only the agent name: a same-name instance needs no token"),
    "closed_lease": (
        "lease-half-open", "lease is [claimed_at, expires]: holder accepted AT expiry, reclaim from +1"),
    "long_reader": (
        "wal-bounded", "get()/inspect() leave a read transaction open: TRUNCATE cannot empty -wal"),
    "dependency_ignored": (
        "dag-order", "claim/poll_next ignore pending dependencies"),
    "unconditional_lock": (
        "lock-exclusive", "daemon-lock UPSERT without WHERE: always steals the lock"),
    "busy_idle_poll": (
        "idle-no-write", "every poll_next re-stamps PRAGMA user_version: idle polls write"),
    "dropped_late_result": (
        "no-lost-task", "late fulfill raises LeaseExpired and drops the result (no salvage)"),
    "double_finish": (
        "token-unique", "fulfill checks in Python then UPDATEs by task_id only: double finish"),
    "uncounted_extends": (
        "holder-guard", "extend never counts: the per-claim cap of 5 never bites"),
    "salvage_on_refusal": (
        "no-lost-task", "a refused salvage() still appends its partial"),
    "token_in_view": (
        "token-unique", "get() shows the live token under another field name"),
    "wrong_counters": (
        "no-lost-task", "views report attempt one too high"),
    "refused_truncate": (
        "wal-bounded", "checkpoint(TRUNCATE) is refused with no reader open"),
    "untyped_arguments": (
        "typed-errors", "dispatch lets TypeError/OverflowError escape on hostile arguments"),
    "closed_queue_window": (
        "lease-half-open", "queue window is [queued_at, deadline]: a claim is accepted AT the deadline"),
    "tight_check_then_act": (
        "single-winner", "check_then_act with no sleep: SELECT, then unconditional UPDATE, back to back"),
    "tight_double_finish": (
        "token-unique", "fulfill compares the token in Python, then UPDATEs by task_id, no sleep"),
    "tight_lock_takeover": (
        "lock-exclusive", "acquire_lock reads the row, then INSERT OR REPLACE with no re-check, no sleep"),
}



# ====================================================================== fault-only bugs
# The stores below behave correctly as long as no process dies or freezes mid-operation,
# so the default campaign (no faults) cannot see their bug; ``--faults`` (kill / pause) and
# ``ferry-harness crash`` can. ``FAULT_BROKEN`` maps each to (faults that catch it,
# invariant id, description).

# ---------------------------------------------------------------------- 11. pinned_lease
class PinnedLeaseStore(LeaseStore):
    """BUG: fulfill "pins" the lease in one transaction, then completes in a second one.

    A two-step finish that looks careful: the first transaction moves ``lease_expires_at``
    to a far-future sentinel "so the sweep cannot steal the task while the result
    uploads", the second writes ``COMPLETED`` and the result. Without faults the second
    always follows the first. A holder killed between them (article ``001`` section 3:
    the worker that dies holding a lease) leaves the task ``CLAIMED`` under a lease that
    never ends: no expiry ever requeues it, and the holder guard keeps refusing everyone
    else (``PermissionDenied`` / ``InvalidToken``). ``TOCTOU_WINDOW_S`` stands in for the
    upload between the two transactions. Invariant: ``lease-half-open`` (the dead
    holder's lease must end at ``lease_expires_at``); ``ferry-harness crash`` counts the
    task as lost.
    """

    PINNED = 2 ** 62

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)

        def pin(conn: sqlite3.Connection, row_token: str, now: int) -> tuple | None:
            n = conn.execute(
                "UPDATE tasks SET lease_expires_at=:pinned" + self._HOLDER_WHERE,
                {"task_id": task_id, "row_token": row_token, "now": now, "pinned": self.PINNED},
            ).rowcount
            return (row_token, now) if n == 1 else None

        row_token, now = self._holder_write("fulfill", task_id, agent_id, token, pin,
                                            late_result=result, has_late=True)
        time.sleep(TOCTOU_WINDOW_S)  # the result "uploads" (see TOCTOU_WINDOW_S)
        with self._tx() as conn:  # BUG: a second transaction; a death before it strands the task
            n = conn.execute(
                "UPDATE tasks SET status='COMPLETED', result=?, completed_at=?, claim_token=NULL"
                " WHERE task_id=? AND status='CLAIMED' AND claim_token=?",
                (result_json, now, task_id, row_token)).rowcount
        if n != 1:  # a racer with the same token finished first: the reference refusal
            super().fulfill(task_id, agent_id, token, result)


def pinned_lease(path: str, *, clock) -> PinnedLeaseStore:
    return PinnedLeaseStore(path, clock=clock)


# ---------------------------------------------------------------------- 12. unfenced_write
class UnfencedWriteStore(LeaseStore):
    """BUG: fulfill's final UPDATE repeats status and lease but not the claim token.

    Articles ``000`` section 3 and ``001`` ("the final write must repeat the guard"; the
    zombie worker that wakes after its lease was handed on): the guard compares the token
    in Python, then ``UPDATE … WHERE task_id=? AND status='CLAIMED' AND lease_expires_at >
    :now`` (``now`` read when the call began). Without faults nothing can reclaim a task
    between one fulfill's guard and its write (time only moves between steps, and racers
    with the same token are stopped by ``status='CLAIMED'``). A holder frozen in that gap
    (GC pause, SIGSTOP) past its lease wakes after a rescuer reclaimed the task, and its
    write completes the rescuer's claim with the zombie's result. ``TOCTOU_WINDOW_S``
    stands in for serialising the result between the guard and the write.
    Invariant: ``lease-half-open`` (a zombie's result must be refused).
    """

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        result_json = _to_json("result", result)
        now = self._now()
        try:
            self._guard(task_id, agent_id, token, now)
        except errors.FerryError:  # the reference refusal (and late-result salvage)
            return super().fulfill(task_id, agent_id, token, result)
        time.sleep(TOCTOU_WINDOW_S)  # serialising the result (see TOCTOU_WINDOW_S)
        with self._tx() as conn:
            n = conn.execute(
                "UPDATE tasks SET status='COMPLETED', result=?, completed_at=?, claim_token=NULL"
                " WHERE task_id=? AND status='CLAIMED' AND lease_expires_at > ?",  # BUG: no token
                (result_json, now, task_id, now)).rowcount
        if n != 1:
            return super().fulfill(task_id, agent_id, token, result)
        return None


def unfenced_write(path: str, *, clock) -> UnfencedWriteStore:
    return UnfencedWriteStore(path, clock=clock)


# ---------------------------------------------------------------------- 13. split_claim
class SplitClaimStore(LeaseStore):
    """BUG: a claim commits in two transactions: status and holder first, lease and token
    second.

    A claim that looks careful about contention: the first autocommit ``UPDATE`` wins the
    task (``status='CLAIMED'``, ``claimed_by``, ``attempt + 1``: the CAS), the second hands
    out the lease (``lease_expires_at``) and the fresh token. Without faults the second
    always follows the first, and a racer that reads between them sees a task already
    claimed. A claimer killed between them (the worker that dies mid-claim) leaves the task
    ``CLAIMED`` with no lease of its own: ``lease_expires_at`` still holds the first
    transaction's placeholder (the far future, "nobody may steal it before the lease is
    written"), so no expiry ever requeues it, no token can ever finish it, and every claim
    is refused — lost for ever.
    ``TOCTOU_WINDOW_S`` stands in for what separates the two (a network hop, a pause).
    Polls take the same path (a store with its own ``_cas_claim`` picks, then CASes).
    Invariant: ``lease-half-open`` (the lease a killed claim may have taken must end at
    claimed_at + exec_ttl_ms: at that instant a rescuer must win); ``ferry-harness crash``
    counts the task as lost, under the same id.
    """

    PLACEHOLDER = 2 ** 62  # the lease until the second transaction writes the real one

    def _cas_claim(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   now: int) -> Claim | None:
        self._claim_attempts += 1
        won = conn.execute(  # BUG: the first of two transactions
            "UPDATE tasks SET status='CLAIMED', claimed_by=:agent, claimed_at=:now,"
            " lease_expires_at=:placeholder, attempt=attempt + 1, extend_count=0"
            " WHERE task_id=:task_id AND status='SUBMITTED' AND pending_deps=0"
            " AND queue_deadline > :now AND (target_agent IS NULL OR target_agent = :agent)",
            {"agent": agent_id, "now": now, "task_id": task_id,
             "placeholder": self.PLACEHOLDER}).rowcount
        if won != 1:
            self._claim_misses += 1
            return None
        time.sleep(TOCTOU_WINDOW_S)  # (see TOCTOU_WINDOW_S)
        token = str(uuid.uuid4())
        # the second statement retries on its own when busy (the busy policy around this
        # method would run the first one again, which now matches nothing)
        rows = self._busy.run(lambda: conn.execute(
            "UPDATE tasks SET claim_token=:token, lease_expires_at=:now + exec_ttl_ms"
            " WHERE task_id=:task_id AND status='CLAIMED' AND claimed_by=:agent"
            " AND claim_token IS NULL RETURNING claimed_at, lease_expires_at, attempt",
            {"agent": agent_id, "token": token, "now": now, "task_id": task_id}).fetchall())
        if not conn.in_transaction:
            self._wrote()
        claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)


def split_claim(path: str, *, clock) -> SplitClaimStore:
    return SplitClaimStore(path, clock=clock)


FAULT_BROKEN: dict[str, tuple[tuple[str, ...], str, str]] = {
    "pinned_lease": (
        ("kill",), "lease-half-open",
        "fulfill pins the lease, then completes in a 2nd transaction: a death between strands it"),
    "unfenced_write": (
        ("pause",), "lease-half-open",
        "fulfill's final UPDATE lacks the token: a zombie woken after a reclaim completes it"),
    "split_claim": (
        ("kill",), "lease-half-open",
        "claim commits status first, lease and token second: a death between loses the task"),
}

__all__ = ["BROKEN", "FAULT_BROKEN", "TOCTOU_WINDOW_S", *BROKEN, *FAULT_BROKEN]


def closed_lease_declared(path: str, *, clock) -> ClosedLeaseStore:
    """The same closed-interval store, declaring its convention (PROTOCOL.md#lease-conventions):
    a queue may keep its own boundary if it says so, and is then held to consistency."""
    store = ClosedLeaseStore(path, clock=clock)
    store.ferry_declares = frozenset({*LeaseStore.ferry_declares, "lease-closed"})
    return store


class InconsistentClosedStore(LeaseStore):
    """BUG: declares the closed lease convention, and its holder check is closed (the holder
    still wins at ``lease_expires_at``), but its reaper is half-open (another worker may
    take the task at ``lease_expires_at`` too): at that instant two workers hold it.
    Declaring a convention buys consistency, not two holders: ``single-winner`` or
    ``lease-half-open``."""

    ferry_declares = frozenset({*LeaseStore.ferry_declares, "lease-closed"})
    _HOLDER_WHERE = ClosedLeaseStore._HOLDER_WHERE

    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        return super()._guard(task_id, agent_id, token, now - 1)


def inconsistent_closed(path: str, *, clock) -> InconsistentClosedStore:
    return InconsistentClosedStore(path, clock=clock)
