"""PgLeaseStore beyond the shared store tests (tests/ferry_core runs those on both
backends): how it finds its schema, what it refuses to open, the token history's primary
key, and real processes racing for the same tasks."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from ferry_core import (
    COMPLETED,
    FerryError,
    InvalidArgument,
    LeaseExpired,
    ManualClock,
    PgLeaseStore,
    StoreError,
)
from ferry_core.pgstore import PG_SCHEMA_VERSION
from ferry_harness.runtime.pgserver import schema_uri

T0 = 1_000_000


def test_the_schema_comes_from_the_uri_search_path_and_is_created(pg_uri, pg_admin, pg_schema):
    uri = schema_uri(pg_uri, f"{pg_schema},public")
    with PgLeaseStore(uri, clock=ManualClock(T0)) as s:
        assert s.schema == pg_schema
        tid = s.dispatch(None)
    tables = {r[0] for r in pg_admin.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname=%s", (pg_schema,)).fetchall()}
    assert {"tasks", "claim_tokens", "daemon_locks"} <= tables
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as again:
        assert [v.task_id for v in again.inspect()] == [tid]  # the same schema, reopened


def test_two_schemas_are_two_stores(pg_uri, pg_schema):
    other = pg_schema + "_b"
    try:
        with PgLeaseStore(pg_uri, schema=pg_schema) as a, \
                PgLeaseStore(pg_uri, schema=other) as b:
            a.dispatch(None)
            assert b.inspect() == [] and len(a.inspect()) == 1
    finally:
        with PgLeaseStore(pg_uri, schema=other) as b:
            b._conn.execute(f'DROP SCHEMA "{other}" CASCADE')


def test_a_schema_of_another_application_is_refused(pg_admin, pg_uri, pg_schema):
    pg_admin.execute(f'CREATE SCHEMA "{pg_schema}"')
    pg_admin.execute(f'CREATE TABLE "{pg_schema}".invoices (id int)')
    with pytest.raises(StoreError, match="another application"):
        PgLeaseStore(pg_uri, schema=pg_schema)


def test_a_newer_schema_version_is_refused(pg_admin, pg_uri, pg_schema):
    PgLeaseStore(pg_uri, schema=pg_schema).close()
    pg_admin.execute(f'UPDATE "{pg_schema}".ferry_meta SET version = version + 1')
    with pytest.raises(StoreError, match="newer than this ferry_core"):
        PgLeaseStore(pg_uri, schema=pg_schema)


@pytest.mark.parametrize("kw", [{"schema": "no-dashes"}, {"schema": "x; DROP TABLE t"},
                                {"claim_strategy": "immediate"}, {"max_extends": -1}])
def test_bad_arguments_are_invalid(pg_uri, kw):
    with pytest.raises(InvalidArgument):
        PgLeaseStore(pg_uri, **kw)


def test_an_unreachable_server_is_a_store_error(tmp_path):
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError, match="cannot connect"):
        PgLeaseStore(f"postgresql://postgres@/postgres?host={tmp_path}&connect_timeout=2")


def test_concurrent_first_opens_of_one_schema_all_succeed(pg_uri, pg_schema):
    outcomes: list = []

    def open_one() -> None:
        try:
            PgLeaseStore(pg_uri, schema=pg_schema).close()
            outcomes.append("ok")
        except Exception as exc:  # the assertion below names it
            outcomes.append(repr(exc))

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcomes == ["ok"] * 6


def test_an_open_waiting_for_a_maker_that_gives_up_makes_the_tables_itself(
        pg_uri, pg_admin, pg_schema):
    """An open that finds the schema's advisory lock held waits for it; when the holder
    ends without making the tables, the open makes them (and the store works)."""
    import psycopg

    opened: list = []
    with psycopg.connect(pg_uri) as maker:  # not autocommit: the lock lasts its transaction
        maker.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("ferry_core:" + pg_schema,))
        t = threading.Thread(target=lambda: opened.append(PgLeaseStore(pg_uri, schema=pg_schema)))
        t.start()
        t.join(0.3)
        assert t.is_alive(), "the open did not wait for the lock's holder"
        maker.rollback()
    t.join(30)
    assert len(opened) == 1
    with opened[0] as store:
        assert store.get(store.dispatch(None)).status == "SUBMITTED"


def test_history_primary_key_makes_a_reissued_token_impossible(pg_uri, pg_admin, pg_schema):
    import psycopg

    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        a, b = s.dispatch(None), s.dispatch(None)
        ca = s.claim(a, "A")
        s.release(a, "A", ca.token)
        with pytest.raises(psycopg.errors.UniqueViolation):
            pg_admin.execute(
                f'UPDATE "{pg_schema}".tasks SET status=\'CLAIMED\', claim_token=%s,'
                " claimed_by='B', claimed_at=1, lease_expires_at=2 WHERE task_id=%s",
                (ca.token, b))
        assert s.get(b).status == "SUBMITTED"


def test_time_is_the_clock_not_the_server(pg_uri, pg_schema):
    """The clock starts far from the server's wall time; every instant the store records
    is the clock's, and the half-open lease boundary is the clock's millisecond."""
    clock = ManualClock(5_000)
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=clock) as s:
        tid = s.dispatch(None, exec_ttl_ms=100)
        c = s.poll_next("A")
        assert (c.claimed_at, c.lease_expires_at) == (5_000, 5_100)
        clock.set(5_099)
        assert s.extend(tid, "A", c.token) == 5_199
        clock.set(5_199)
        with pytest.raises(LeaseExpired):
            s.fulfill(tid, "A", c.token, "late")
        assert s.get(tid).completed_at == 5_199


# ---------------------------------------------------------------- processes racing
N_TASKS, N_PROCS = 200, 8


def _racer(uri: str, schema: str, name: str, start, out) -> None:
    """Claim until the queue is empty; complete each claim, then try to complete it once
    more with the same (now retired) token and with a stale token of another claim.
    Reports (name, tasks won, stale completions accepted, own completions refused)."""
    won, stale_accepted, refused = [], 0, []
    try:
        with PgLeaseStore(uri, schema=schema, clock=ManualClock(T0)) as s:
            start.wait()
            previous = None
            while (c := s.poll_next(name)) is not None:
                won.append(c.task_id)
                if previous is not None:  # a token of an earlier, finished claim
                    try:
                        s.fulfill(c.task_id, name, previous.token, "stale")
                        stale_accepted += 1
                    except FerryError:
                        pass
                try:
                    s.fulfill(c.task_id, name, c.token, name)
                except FerryError as exc:  # someone else holds "my" task: a double claim
                    refused.append(repr(exc))
                try:
                    s.fulfill(c.task_id, name, c.token, "again")
                    stale_accepted += 1
                except FerryError:
                    pass
                previous = c
    except BaseException as exc:  # reported, so the test names it instead of timing out
        refused.append(repr(exc))
    out.put((name, won, stale_accepted, refused))


def test_racing_processes_one_winner_per_task_and_no_stale_completion(pg_uri, pg_schema):
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        ids = s.dispatch_many(list(range(N_TASKS)), exec_ttl_ms=600_000)
    # fork: a child ends with os._exit, so it never uses or closes the connections it inherits
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(pg_uri, pg_schema, f"w{i}", start, out))
             for i in range(N_PROCS)]
    for p in procs:
        p.start()
    try:
        start.set()
        results = [out.get(timeout=60) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    assert [r for *_, refused in results for r in refused] == []
    won = [t for _, w, _, _ in results for t in w]
    assert sorted(won) == sorted(ids), "every task claimed exactly once"
    assert sum(stale for _, _, stale, _ in results) == 0, "a retired token completed a task"
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        views = s.inspect()
    winner = {t: name for name, w, _, _ in results for t in w}
    assert all(v.status == COMPLETED and v.result == winner[v.task_id] for v in views)
    assert sum(1 for _, w, _, _ in results if w) >= 2, "the race had more than one claimer"


# ------------------------------------------- a dispatch still uncommitted meets the world
class _PausedStore(PgLeaseStore):
    """Holds each write transaction open after its last statement until ``go`` is set:
    the window in which another process's commit cannot be seen by it."""

    reached: threading.Event
    go: threading.Event

    def _in_tx(self, body):
        def run():
            with self._conn.transaction():
                out = body(self._conn)
                self.reached.set()
                assert self.go.wait(20)
                return out
        return self._retrying(run)


def _paused_dispatch(pg_uri, schema, **kw):
    """Start ``dispatch(None, **kw)`` in a thread, held open before its commit."""
    paused = _PausedStore(pg_uri, schema=schema, clock=ManualClock(T0 + 1))
    paused.reached, paused.go = threading.Event(), threading.Event()
    out: list = []
    thread = threading.Thread(target=lambda: out.append(paused.dispatch(None, **kw)))
    thread.start()
    assert paused.reached.wait(20)
    return paused, thread, out


def _finish(paused, thread) -> None:
    paused.go.set()
    thread.join(20)
    paused.close()


def test_a_dependency_completing_during_the_dispatch_still_frees_the_dependent(
        pg_uri, pg_schema):
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0), busy_timeout_ms=3000) as s:
        dep = s.dispatch(None)
        c = s.poll_next("A")
        paused, thread, out = _paused_dispatch(pg_uri, pg_schema, depends_on=[dep])
        try:
            s.fulfill(dep, "A", c.token, "done")  # must not wait for the dispatch
        finally:
            _finish(paused, thread)
        (child,) = out
        nxt = s.poll_next("B")
        assert nxt is not None and nxt.task_id == child


def test_a_dependency_failing_during_the_dispatch_fails_the_dependent_at_the_next_sweep(
        pg_uri, pg_schema):
    clock = ManualClock(T0)
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=clock, busy_timeout_ms=3000) as s:
        dep = s.dispatch(None)
        c = s.poll_next("A")
        paused, thread, out = _paused_dispatch(pg_uri, pg_schema, depends_on=[dep])
        try:
            s.fail(dep, "A", c.token, "broken")
        finally:
            _finish(paused, thread)
        (child,) = out
        assert s.poll_next("B") is None  # never ready
        clock.set(T0 + 1)  # the dispatch's instant (its store's clock is one ahead)
        assert s.sweep() == 1
        v = s.get(child)
        assert (v.status, v.error_reason) == ("FAILED", f"dependency {dep} ended FAILED")


def test_a_poll_during_a_dispatch_onto_the_oldest_task_still_takes_the_oldest(
        pg_uri, pg_schema):
    """The dispatch reads its dependency without locking it, so a SKIP LOCKED claim
    never passes over a ready task only because a dispatch depends on it."""
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0), busy_timeout_ms=3000) as s:
        oldest = s.dispatch(None)
        s.dispatch(None)
        paused, thread, _ = _paused_dispatch(pg_uri, pg_schema, depends_on=[oldest])
        try:
            c = s.poll_next("A")
        finally:
            _finish(paused, thread)
        assert c.task_id == oldest


# ------------------------------------------------- what "writes nothing" means on Postgres
def _next_xid(admin) -> int:
    """The next transaction id the server will assign (reading it assigns none)."""
    return int(admin.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
               .fetchall()[0][0])


def _quiet_calls(s: PgLeaseStore, tid: str) -> None:
    """An idle poll (nothing ready for this agent, nothing due) and every read."""
    assert s.poll_next("nobody-has-work-for-me") is None
    s.get(tid)
    s.inspect()
    s.salvaged(tid)
    s.lock_holder("sweeper")
    assert s.sweep() == 0


class _HeartbeatPoll(PgLeaseStore):
    """Broken on purpose: every poll records the poller's heartbeat, a write."""

    def poll_next(self, agent_id):
        self.acquire_lock(f"heartbeat-{agent_id}", agent_id, 1_000)
        return super().poll_next(agent_id)


@pytest.mark.parametrize("store_class, writes", [(PgLeaseStore, False), (_HeartbeatPoll, True)])
def test_an_idle_poll_and_reads_assign_no_transaction_id(pg_uri, pg_admin, pg_schema,
                                                         store_class, writes):
    if pg_admin.execute("SHOW autovacuum").fetchall()[0][0] != "off":
        pytest.skip("the server runs autovacuum, whose analyzes assign transaction ids")
    clock = ManualClock(T0)
    with store_class(pg_uri, schema=pg_schema, clock=clock) as s:
        tid = s.dispatch("someone-else")  # ready, but not for the idle poller
        c = s.claim(s.dispatch(None), "A")
        s.salvage(c.task_id, "A", c.token, "part")
        before = _next_xid(pg_admin)
        _quiet_calls(s, tid)
        after = _next_xid(pg_admin)
    assert (after != before) is writes, f"transaction ids {before} -> {after}"


def _backend_state(admin, store: PgLeaseStore) -> str:
    return admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s",
                         (store._conn.info.backend_pid,)).fetchall()[0][0]


def test_no_call_leaves_its_connection_idle_in_transaction(pg_uri, pg_admin, pg_schema):
    """Every call ends its transaction, refusals included (the Postgres side of "no
    long transactions"): between calls the store's backend is ``idle``."""
    clock = ManualClock(T0)
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=clock, max_releases=0) as s:
        dep = s.dispatch(None, exec_ttl_ms=100)
        calls = [
            lambda: s.dispatch(None, depends_on=[dep]),
            lambda: s.poll_next("A"),
            lambda: s.poll_next("A"),
            lambda: s.extend(dep, "A", "forged"),
            lambda: s.release(dep, "A", s._rows("SELECT claim_token FROM tasks WHERE task_id=%s",
                                                 (dep,))[0][0]),
            lambda: clock.advance(100),
            lambda: s.fulfill(dep, "A", "late"),
            lambda: s.dispatch(None, depends_on=["missing"]),
            lambda: s.acquire_lock("l", "o", 10),
            lambda: s.sweep(),
        ]
        states = []
        for call in calls:
            try:
                call()
            except FerryError:
                pass
            states.append(_backend_state(pg_admin, s))
    assert states == ["idle"] * len(calls)


def test_a_raced_dependent_fails_at_the_cascade_instant_even_after_its_window(
        pg_uri, pg_schema):
    """The dependency failed while the dispatch was open; no sweep ran until after the
    dependent's queue window ended: the cascade was in effect from the dependent's
    dispatch on (its window still open), so the sweep fails it then, not TIMED_OUT."""
    clock = ManualClock(T0)
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=clock, busy_timeout_ms=3000) as s:
        dep = s.dispatch(None)
        c = s.poll_next("A")
        paused, thread, out = _paused_dispatch(pg_uri, pg_schema, depends_on=[dep],
                                               queue_ttl_ms=50)
        try:
            s.fail(dep, "A", c.token, "broken")
        finally:
            _finish(paused, thread)
        (child,) = out
        clock.set(T0 + 1_000)  # long past the dependent's window [T0 + 1, T0 + 51)
        s.sweep()
        v = s.get(child)
        assert (v.status, v.completed_at, v.error_reason) == (
            "FAILED", T0 + 1, f"dependency {dep} ended FAILED")


def test_an_older_schema_is_brought_up_to_date_on_open(pg_uri, pg_schema, pg_admin):
    """Opening a schema of an older version runs the DDL again (all IF NOT EXISTS) and
    records this version: the index of version 2 appears, nothing is lost."""
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        tid = s.dispatch(None, title="kept")
    pg_admin.execute(f'DROP INDEX "{pg_schema}".tasks_ready_order')
    pg_admin.execute(f'UPDATE "{pg_schema}".ferry_meta SET version = 1')
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        assert s.get(tid).title == "kept"
    names = {r[0] for r in pg_admin.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = %s", (pg_schema,)).fetchall()}
    assert "tasks_ready_order" in names
    version = pg_admin.execute(f'SELECT max(version) FROM "{pg_schema}".ferry_meta').fetchone()
    assert version[0] == PG_SCHEMA_VERSION


def test_a_version_2_schema_gets_the_retiring_trigger_of_version_3(pg_uri, pg_schema, pg_admin):
    """Version 3: a fulfill leaves the token history be (the COMPLETED row records it); a
    version-2 schema, whose trigger retired every token, gets the new one on open."""
    q = f'"{pg_schema}"'
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        s.dispatch(None)
    pg_admin.execute(f"DROP TRIGGER claim_token_retired ON {q}.tasks")
    pg_admin.execute(f"CREATE TRIGGER claim_token_retired AFTER UPDATE OF claim_token ON {q}.tasks"
                     " FOR EACH ROW WHEN (OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL)"
                     f" EXECUTE FUNCTION {q}.ferry_token_retired()")
    pg_admin.execute(f"UPDATE {q}.ferry_meta SET version = 2")
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=ManualClock(T0)) as s:
        c = s.poll_next("A")
        s.fulfill(c.task_id, "A", c.token, 1)
    why = pg_admin.execute(f"SELECT retired_why FROM {q}.claim_tokens").fetchall()
    assert why == [(None,)]
    version = pg_admin.execute(f"SELECT max(version) FROM {q}.ferry_meta").fetchone()
    assert version[0] == PG_SCHEMA_VERSION == 3



def test_a_claim_whose_due_sweep_another_store_ran_first_still_claims(pg_uri, pg_schema):
    """claim's one-statement path skips a task while a sweep is due; if another process
    sweeps before the claim looks again, the claim must still take the ready task (a
    claim that then returned None lost it: found by fuzz at seed 2, no-lost-task)."""
    from ferry_core.pgstore import _CLAIM_ONE_OR_WHY

    clock = ManualClock(T0)
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=clock) as other:
        expiring = other.dispatch(None, exec_ttl_ms=10)
        assert other.claim(expiring, "x") is not None
        ready = other.dispatch(None)
        clock.set(T0 + 10)  # the lease ends: a sweep is due

        class SweptMeanwhile(PgLeaseStore):
            def _rows(self, sql, args=None):
                rows = super()._rows(sql, args)
                if sql == _CLAIM_ONE_OR_WHY:
                    assert rows[0][0] is None and rows[0][3]  # skipped: a sweep was due
                    other.sweep()  # another process sweeps before this one looks again
                return rows

        with SweptMeanwhile(pg_uri, schema=pg_schema, clock=clock) as s:
            got = s.claim(ready, "a")
        assert got is not None and got.task_id == ready


def test_a_one_statement_dispatch_still_applies_a_due_expiry_first(pg_uri, pg_schema, pg_admin):
    """dispatch writes in one statement only when no sweep is due; when one is, the
    expiry is applied first, in the dispatch's own transaction, as before."""
    clock = ManualClock(T0)
    with PgLeaseStore(pg_uri, schema=pg_schema, clock=clock) as s:
        held = s.dispatch(None, exec_ttl_ms=10, max_attempts=2)
        assert s.claim(held, "a") is not None
        quick = s.dispatch(None)  # nothing due: the one-statement path
        clock.set(T0 + 10)  # the lease ends
        late = s.dispatch(None)
    rows = dict(pg_admin.execute(
        f'SELECT task_id, status FROM "{pg_schema}".tasks').fetchall())
    assert rows == {held: "SUBMITTED", quick: "SUBMITTED", late: "SUBMITTED"}
    queued = pg_admin.execute(f'SELECT queued_at FROM "{pg_schema}".tasks WHERE task_id=%s',
                              (held,)).fetchone()[0]
    assert queued == T0 + 10  # requeued at its lease's end, by the dispatch
