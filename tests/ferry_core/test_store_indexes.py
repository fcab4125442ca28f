"""The hot queries use their indexes (EXPLAIN QUERY PLAN), not full scans of tasks."""

from __future__ import annotations

import pytest

from ferry_core.store import LeaseStore

#: the SQLite file, its WAL, PRAGMAs and statements: not run against PgLeaseStore
pytestmark = pytest.mark.sqlite_only

NOW = 1_000_000


def _plan(conn, sql, args=()) -> list[str]:
    return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, args).fetchall()]


def _full_scans_of_tasks(plan: list[str]) -> list[str]:
    return [step for step in plan if step.strip() == "SCAN tasks"]


@pytest.fixture
def populated(store, clock):
    """Enough varied rows that the planner has real choices (and ANALYZE statistics)."""
    ids = [store.dispatch(None if i % 3 else "A", queue_ttl_ms=50 + i) for i in range(60)]
    for i in range(10):
        store.dispatch(None, depends_on=[ids[i]])
    for _ in range(5):
        store.poll_next("B")
    store._conn.execute("ANALYZE")
    return store


@pytest.mark.parametrize("query,args", [
    (LeaseStore._PICK_ANY, (NOW,)),
    (LeaseStore._PICK_MINE, ("A", NOW)),
])
def test_poll_pick_uses_tasks_ready(populated, query, args):
    plan = _plan(populated._conn, query, args)
    assert any("USING INDEX tasks_ready" in step for step in plan), plan
    assert not _full_scans_of_tasks(plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan  # the index gives the order


def test_sweep_due_check_uses_the_due_indexes(populated):
    plan = _plan(populated._conn, LeaseStore._DUE_SQL, (NOW, NOW))
    assert any("USING INDEX tasks_lease_due" in step for step in plan), plan
    assert any("USING INDEX tasks_queue_due" in step for step in plan), plan
    assert not _full_scans_of_tasks(plan), plan


def test_claim_update_finds_the_row_by_task_id(populated):
    plan = _plan(populated._conn, LeaseStore._CLAIM_SET,
                 {"agent": "A", "token": "t", "now": NOW, "task_id": "x"})
    assert any("sqlite_autoindex_tasks" in step for step in plan), plan
    assert not _full_scans_of_tasks(plan), plan


def test_statements_run_by_a_sweeping_poll_use_indexes(populated, clock):
    """Trace every statement a poll runs while expiries are due: none scans all of tasks."""
    clock.advance(10_000)  # leases and queue windows are due now
    seen: list[str] = []
    conn = populated._conn
    conn.set_trace_callback(seen.append)
    try:
        populated.poll_next("C")
    finally:
        conn.set_trace_callback(None)
    stmts = [s for s in seen if s.split()[0].upper() in ("SELECT", "UPDATE", "INSERT")]
    assert any("lease_expires_at <=" in s for s in stmts)  # the sweep really ran
    for sql in stmts:
        if sql.startswith("UPDATE tasks SET status='FAILED'"):
            # The dependency-failure cascade has no index of its own: it visits every
            # SUBMITTED task (or all of tasks, after ANALYZE). Known cost, not a SPEC rule.
            continue
        plan = _plan(conn, sql)
        assert not _full_scans_of_tasks(plan), (sql, plan)
    due_min = [s for s in stmts if s.startswith("SELECT min(t)")]
    assert due_min, stmts
    for sql in due_min:
        plan = _plan(conn, sql)
        assert any("tasks_lease_due" in p for p in plan) and any("tasks_queue_due" in p
                                                                  for p in plan), plan
