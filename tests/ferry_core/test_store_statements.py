"""What a lifecycle costs, counted in SQL statements (not timed), and the one-statement claim.

The claim picks and takes in one UPDATE under the write lock (it cannot lose a race), and a
holder operation that succeeds is one guarded statement with no read before it.
"""

from __future__ import annotations

import os
import sqlite3

import pytest

from ferry_core import LeaseStore, PermissionDenied, WrongState
from ferry_core.types import Claim

#: the SQLite file, its WAL, PRAGMAs and statements: not run against PgLeaseStore
pytestmark = pytest.mark.sqlite_only


def _traced(store: LeaseStore, fn) -> list[str]:
    """The statements ``fn()`` ran on the store's connection. SQLite reports a statement
    again for every trigger program it runs, so consecutive repeats are one statement."""
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        store._conn.set_trace_callback(None)
    out: list[str] = []
    for sql in seen:
        if not sql.lstrip().startswith("--") and (not out or out[-1] != sql.strip()):
            out.append(sql.strip())
    return out


def _kinds(stmts: list[str]) -> list[str]:
    return [s.split()[0].upper() for s in stmts]


def test_a_cas_lifecycle_is_one_read_and_two_writes(store_factory, clock):
    store = store_factory(claim_strategy="cas")
    tid = store.dispatch(None)
    out: list[Claim] = []
    poll = _traced(store, lambda: out.append(store.poll_next("A")))
    assert _kinds(poll) == ["SELECT", "UPDATE"], poll
    assert "WHERE seq=(SELECT seq FROM" in poll[1]  # pick and take: one statement
    fulfill = _traced(store, lambda: store.fulfill(tid, "A", out[0].token, {"ok": 1}))
    assert _kinds(fulfill) == ["UPDATE"], fulfill
    assert store.get(tid).status == "COMPLETED"
    tokens = store._conn.execute("SELECT task_id, retired_why FROM claim_tokens").fetchall()
    # the claim's trigger wrote the history; the fulfill left it be (schema version 3: the
    # COMPLETED row records that retirement, and a lifecycle writes one WAL page less)
    assert tokens == [(tid, None)]


def test_an_immediate_poll_is_one_short_transaction(store_factory):
    store = store_factory(claim_strategy="immediate")
    store.dispatch(None)
    poll = _traced(store, lambda: store.poll_next("A"))
    assert _kinds(poll) == ["SELECT", "BEGIN", "SELECT", "UPDATE", "COMMIT"], poll


@pytest.mark.parametrize("strategy", ["cas", "immediate"])
def test_an_idle_poll_is_one_read(store_factory, strategy):
    store = store_factory(claim_strategy=strategy)
    assert _kinds(_traced(store, lambda: store.poll_next("A"))) == ["SELECT"]


@pytest.mark.parametrize("op", ["extend", "release", "salvage", "fail", "fulfill"])
def test_a_holder_op_that_succeeds_reads_nothing_first(store, op):
    tid = store.dispatch(None, exec_ttl_ms=1_000, queue_ttl_ms=10_000)
    c = store.claim(tid, "A")
    calls = {
        "extend": lambda: store.extend(tid, "A", c.token),
        "release": lambda: store.release(tid, "A", c.token),
        "salvage": lambda: store.salvage(tid, "A", c.token, {"part": 1}),
        "fail": lambda: store.fail(tid, "A", c.token, "broken"),
        "fulfill": lambda: store.fulfill(tid, "A", c.token, 1),
    }
    stmts = _traced(store, calls[op])
    assert "SELECT" not in _kinds(stmts), stmts
    assert len([k for k in _kinds(stmts) if k in ("UPDATE", "INSERT")]) >= 1


def test_a_refused_holder_op_still_names_its_refusal(store):
    tid = store.dispatch(None)
    c = store.claim(tid, "A")
    with pytest.raises(PermissionDenied):
        store.fulfill(tid, "B", c.token, 1)  # the token alone is not enough here
    store.fulfill(tid, "A", c.token, 1)
    with pytest.raises(WrongState):
        store.fulfill(tid, "A", c.token, 2)
    assert store.get(tid).result == 1


def test_the_claim_picks_under_the_write_lock(store_factory, clock):
    """B's read says 'ready', then A takes the oldest task before B's write: B's claim
    still succeeds, on the next task (a pick-then-CAS would have lost the race)."""
    a, b = store_factory(claim_strategy="cas"), store_factory(claim_strategy="cas")
    first = a.dispatch(None)
    clock.advance(1)
    second = a.dispatch(None)
    real_check = b._poll_check
    got: list[Claim] = []

    def check_then_let_a_in(agent_id, now):
        out = real_check(agent_id, now)
        got.append(a.poll_next("A"))
        return out

    b._poll_check = check_then_let_a_in
    cb = b.poll_next("B")
    assert got[0].task_id == first and cb is not None and cb.task_id == second


def test_an_idle_poll_takes_no_write_lock(store_factory, db_path):
    store = store_factory(busy_timeout_ms=100)
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        wal = os.path.getsize(db_path + "-wal")
        got: list[Claim | None] = []
        stmts = _traced(store, lambda: got.append(store.poll_next("A")))
        assert got == [None]
        assert _kinds(stmts) == ["SELECT"], stmts  # one read: nothing that waits for the lock
        assert os.path.getsize(db_path + "-wal") == wal
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_the_claim_next_statement_uses_the_ready_index_and_the_rowid(store):
    for i in range(30):
        store.dispatch(None if i % 2 else "A")
    store._conn.execute("ANALYZE")
    plan = [r[3] for r in store._conn.execute(
        "EXPLAIN QUERY PLAN " + LeaseStore._CLAIM_NEXT,
        {"agent": "A", "token": "t", "now": 1}).fetchall()]
    assert any("tasks_ready" in p for p in plan), plan
    assert any("INTEGER PRIMARY KEY" in p for p in plan), plan
    assert not any(p.strip() == "SCAN tasks" for p in plan), plan


def test_subclasses_that_replace_a_hook_keep_the_path_that_calls_it():
    class OwnCas(LeaseStore):
        def _cas_claim(self, conn, task_id, agent_id, now):
            return super()._cas_claim(conn, task_id, agent_id, now)

    class OwnGuard(LeaseStore):
        def _guard(self, task_id, agent_id, token, now):
            return super()._guard(task_id, agent_id, token, now)

    assert LeaseStore._CLAIM_NEXT and LeaseStore._FAST_HOLDER
    assert OwnCas._CLAIM_NEXT is None and OwnCas._FAST_HOLDER
    assert OwnGuard._CLAIM_NEXT and not OwnGuard._FAST_HOLDER


@pytest.mark.parametrize("strategy", ["cas", "immediate"])
def test_a_poll_after_a_claim_skips_the_read(store_factory, strategy):
    """A busy worker's next poll starts with the claim itself: for cas one UPDATE (the
    claim that changes nothing while an expiry is due), no read before it."""
    store = store_factory(claim_strategy=strategy)
    first, second = store.dispatch(None), store.dispatch(None)
    assert store.poll_next("A").task_id == first
    out: list[Claim] = []
    stmts = _traced(store, lambda: out.append(store.poll_next("A")))
    assert out[0].task_id == second
    want = ["UPDATE"] if strategy == "cas" else ["BEGIN", "SELECT", "UPDATE", "COMMIT"]
    assert _kinds(stmts) == want, stmts
    if strategy == "cas":
        assert "AND NOT (EXISTS(" in stmts[0]  # refuses while an expiry is due


@pytest.mark.parametrize("strategy", ["cas", "immediate"])
def test_a_poll_after_a_claim_still_sweeps_first(store_factory, clock, strategy):
    """The skipped read must not skip the sweep: a lease that ended is applied by the
    poll (token retired as expired, task requeued) even though another task is ready."""
    store = store_factory(claim_strategy=strategy)
    old = store.dispatch(None, exec_ttl_ms=100, max_attempts=2)
    clock.advance(1)
    assert store.poll_next("A").task_id == old
    clock.advance(50)
    ready = store.dispatch(None)  # dispatch sweeps too: nothing is due yet
    clock.advance(100)  # old's lease ended at claimed_at + 100
    c = store.poll_next("A")
    assert c is not None and c.task_id == ready
    view = store.get(old)
    assert view.status == "SUBMITTED" and view.queued_at == 1_000_101
    assert store._conn.execute(
        "SELECT retired_why FROM claim_tokens WHERE task_id=?", (old,)).fetchall() == [("expiry",)]


@pytest.mark.parametrize("strategy", ["cas", "immediate"])
def test_an_idle_poll_after_a_claim_appends_nothing(store_factory, db_path, strategy):
    """The claim-first poll that finds nothing ready takes the write lock but writes no
    page: the -wal file (size and header) is unchanged, and the next idle poll only reads."""
    store = store_factory(claim_strategy=strategy)
    store.dispatch(None)
    assert store.poll_next("A") is not None

    def mark() -> tuple[int, bytes]:
        with open(db_path + "-wal", "rb") as fh:
            return os.path.getsize(db_path + "-wal"), fh.read(32)

    before = mark()
    assert store.poll_next("A") is None
    assert mark() == before
    assert _kinds(_traced(store, lambda: store.poll_next("A"))) == ["SELECT"]
    assert mark() == before
