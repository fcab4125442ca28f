"""The harness on a Postgres target (PROTOCOL.md#postgres-targets): the backend a factory
declares, the URI it gets, the two probes (transaction ids, connections idle in
transaction) with a broken store that makes each fire and PgLeaseStore passing, and
(thorough) short fuzz runs of the broken Postgres stores (schedule mode:
test_pg_schedule.py)."""

from __future__ import annotations

import time

import pytest

from ferry_core import LeaseStore, ManualClock, PgLeaseStore
from ferry_harness.cli.main import main
from ferry_harness.errors import UsageError
from ferry_harness.run.campaign import Campaign, CampaignConfig, Runner
from ferry_harness.run.executor import Executor
from ferry_harness.run.steps import Dispatch, IdlePoll, Reads
from ferry_harness.runtime.backend import (
    PostgresBackend,
    backend_of,
    schema_of,
    with_database,
)
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.pgserver import schema_uri
from tests.pg.broken_pg_stores import BROKEN_PG, HeartbeatPollStore, OpenAfterReadStore

T0 = 1_000_000_000
PROBE_STEPS = [Dispatch(queue_ttl_ms=60_000, exec_ttl_ms=60_000), IdlePoll(), Reads()]


def test_a_factory_declares_its_backend_and_sqlite_is_the_default():
    assert backend_of(PgLeaseStore) == "postgres"
    assert backend_of(LeaseStore) == "sqlite"
    assert backend_of(lambda where, *, clock: None) == "sqlite"

    def odd(where, *, clock):
        return None

    odd.ferry_backend = "mysql"
    with pytest.raises(UsageError, match="ferry_backend"):
        backend_of(odd)


def test_the_run_database_replaces_the_uri_database_only():
    uri = "postgresql://postgres@/postgres?host=%2Ftmp%2Fs&port=5432&dbname=x"
    got = with_database(uri, "ferry_run_1")
    assert got.startswith("postgresql://postgres@/ferry_run_1?")
    assert "host=%2Ftmp%2Fs" in got and "port=5432" in got and "dbname" not in got
    assert schema_of(schema_uri(got, "ex_17")) == "ex_17" and schema_of(got) is None


def test_a_server_is_named_by_a_uri():
    with pytest.raises(UsageError, match="libpq URI"):
        PostgresBackend("host=/tmp dbname=postgres")


def test_the_backend_probes_see_a_transaction_id_and_an_open_transaction(pg_uri):
    """Direct: PgLeaseStore's idle poll and reads move nothing; the heartbeat poll moves
    the next transaction id; the read that leaves BEGIN open is seen idle in transaction."""
    pg = PostgresBackend(pg_uri)
    try:
        where = pg.fresh(1)
        assert "search_path%3Dex_1" in where and pg.dbname in where
        clock = ManualClock(T0)
        with PgLeaseStore(where, clock=clock) as good:
            tid = good.dispatch(None)
            before = pg.next_xid()
            assert good.claim(tid, "a") is not None
            assert pg.next_xid() > before  # the probe does see a write
            before = pg.next_xid()
            assert good.poll_next("a") is None
            good.get(tid)
            good.inspect()
            assert pg.next_xid() == before
            assert pg.open_transactions() == []
        where = pg.fresh(2)
        pg.opened(where)  # drops ex_1
        with HeartbeatPollStore(where, clock=clock) as beat:
            before = pg.next_xid()
            assert beat.poll_next("a") is None
            assert pg.next_xid() > before
        with OpenAfterReadStore(where, clock=clock) as lingering:
            tid = lingering.dispatch(None)
            lingering.get(tid)
            seen = pg.open_transactions()
            assert len(seen) == 1 and seen[0].query == "SELECT 1"
            lingering.inspect()  # the next call commits it
            assert pg.open_transactions() == []
        schemas = {r[0] for r in pg.admin.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ex_%'").fetchall()}
        assert schemas == {"ex_2"}
    finally:
        pg.close()
    import psycopg  # the pg_uri fixture skipped already when it is missing

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (pg.dbname,)).fetchall()
    assert left == [], "the run's database outlived close()"


@pytest.mark.parametrize("target, invariant", [
    ("ferry_core:PgLeaseStore", None),
    ("tests.pg.broken_pg_stores:HeartbeatPollStore", "idle-no-write"),
    ("tests.pg.broken_pg_stores:OpenAfterReadStore", "wal-bounded"),
    # a connection psycopg did not make: only the server's pg_stat_activity shows it
    ("tests.pg.broken_pg_stores:OpenSideConnectionStore", "wal-bounded"),
])
def test_the_executor_files_the_postgres_meanings(pg_uri, target, invariant):
    with Runner(CampaignConfig(target=target, workers=2, pg_uri=pg_uri)) as r:
        found, ex = r.run_steps(PROBE_STEPS)
    assert "pg-probes" in ex.capabilities and "wal-file" not in ex.capabilities
    assert any(o.extra.get("xid_before") is not None for o in ex.history), "nothing measured"
    if invariant is None:
        assert found == []
    else:
        assert found and found[0].invariant == invariant
        assert found[0].protocol == "PROTOCOL.md#postgres-targets"


@pytest.mark.thorough
@pytest.mark.parametrize("target", sorted(BROKEN_PG))
def test_a_short_fuzz_names_each_broken_postgres_store(pg_uri, tmp_path, target):
    # a failing search stops at its first find: the budget is only an upper bound
    cfg = CampaignConfig(target=f"tests.pg.broken_pg_stores:{target}", budget_s=15,
                         seed=0, report_dir=str(tmp_path), pg_uri=pg_uri)
    out = Campaign(cfg).run()
    assert out.verdict == "fail"
    assert out.report.violations[0].invariant == BROKEN_PG[target]


@pytest.mark.thorough
def test_pg_lease_store_passes_a_short_fuzz_and_the_report_names_the_backend(pg_uri, tmp_path,
                                                                             ferry_budget):
    cfg = CampaignConfig(target="ferry_core:PgLeaseStore", budget_s=8 * ferry_budget, seed=0,
                         report_dir=str(tmp_path), pg_uri=pg_uri)
    out = Campaign(cfg).run()
    assert out.verdict == "pass", [str(v.message) for v in out.report.violations]
    rep = out.report
    assert rep.backend is not None and rep.backend.name == "postgres"
    assert rep.invariants["integrity"].startswith("skipped (SQLite only")
    assert rep.invariants["idle-no-write"].startswith("checked (")
    assert rep.invariants["wal-bounded"].startswith("checked (")
    assert "wal-bounded (-wal file)" in rep.backend.skipped


@pytest.mark.parametrize("server_side", [False, True])
def test_a_frozen_holders_accepted_fulfill_explains_rescuers_finding_nothing(server_side):
    """The pause probe: rescuers at ``expires`` find nothing to claim while the frozen
    holder's fulfill was in flight and then accepted. On SQLite (the client frozen, its
    write not started) that is a late lease; on Postgres the statement may have finished
    the task in the server meanwhile (PROTOCOL.md#postgres-targets), so it is no finding."""
    from ferry_harness.check.annotations import Probe, mark
    from ferry_harness.check.checker import Checker
    from tests.histories import SPEC_STORE, TOKEN_A, Recorder

    r = Recorder()
    r.dispatch()
    r.claim("alice", TOKEN_A)  # lease [T0, T0 + 50)
    zombie = r.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": 1},
                  now=T0 + 10)
    info = dict(task="t1", expires=T0 + 50, attempts_left=True, cause="paused",
                holder_op=zombie.index, server_side=server_side)
    for at, now in (("expires-1", T0 + 49), ("expires", T0 + 50)):
        for n in range(3):
            mark(r.op("claim", "alice", {"task_id": "t1"}, now=now, value=None,
                      concurrent=n > 0), Probe(**info, at=at))
    zombie.complete_ns = r._ns + 1_000  # frozen in flight across the rescuers' races
    found = [v for v in Checker(SPEC_STORE).check(r.history) if "rescuers could" in v.message]
    assert bool(found) is not server_side


def test_scenarios_refuse_a_postgres_target(capsys):
    """They make a SQLite file (crash runs on Postgres: tests/pg/test_pg_crash.py)."""
    assert main(["scenarios", "--target", "ferry_core:PgLeaseStore"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs SQLite targets only" in err


def test_a_run_without_a_server_starts_a_cluster_and_removes_it_even_after_an_error(
        pg_uri, monkeypatch):
    """No --pg-uri, no FERRY_PG_URI: the run starts its own throwaway cluster, and ends it
    however the run ends (pg_uri only skips the test where PostgreSQL is missing)."""
    import os

    from ferry_harness.runtime.pgserver import ENV_URI

    monkeypatch.delenv(ENV_URI, raising=False)
    with pytest.raises(RuntimeError, match="boom"):
        with Runner(CampaignConfig(target="ferry_core:PgLeaseStore", workers=2)) as r:
            assert r.backend.server is not None
            directory = r.backend.server.directory
            assert os.path.isdir(directory)
            raise RuntimeError("boom")
    assert not os.path.exists(directory)


@pytest.mark.thorough
def test_kills_and_pauses_on_a_postgres_target_end_in_a_pass(pg_uri, tmp_path, ferry_budget):
    """--faults kill,pause against PgLeaseStore: no harness error and no false alarm (the
    frozen holder's statement may finish in the server: see the pause probe)."""
    cfg = CampaignConfig(target="ferry_core:PgLeaseStore", budget_s=10 * ferry_budget, seed=1,
                         faults=("kill", "pause"), report_dir=str(tmp_path), pg_uri=pg_uri)
    out = Campaign(cfg).run()
    assert out.verdict == "pass", [str(v.message) for v in out.report.violations]
    faults = out.report.stats.faults
    assert faults.get("kill", 0) and faults.get("pause", 0), faults


def test_a_sqlite_target_runs_as_before():
    """The default backend: a file path, the -wal probes, no backend section in the report."""
    with Runner(CampaignConfig(target="ferry_core:LeaseStore", workers=2)) as r:
        found, ex = r.run_steps(PROBE_STEPS)
        assert r.backend_info() is None and "integrity" not in r.skips()
    assert found == []
    assert ex.path.endswith("ferry.db") and ex.pg is None
    assert "wal-file" in ex.capabilities and "pg-probes" not in ex.capabilities
    extra = [o.extra for o in ex.history]
    assert any("wal_before" in e for e in extra)
    assert not any(k in e for e in extra for k in ("xid_before", "open_tx_after_step"))


def _schemas(pg: PostgresBackend) -> set[str]:
    return {r[0] for r in pg.admin.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ex_%'").fetchall()}


def test_an_old_schema_is_dropped_in_the_background_never_inside_a_probe(pg_uri):
    """A fresh schema is empty; the previous one is dropped off the setup's path, and
    finished before a transaction-id probe (the drop assigns one); a schema still locked
    is given up on (the background connection never counts as the target's), and close()
    drops the run's database all the same."""
    import psycopg  # the pg_uri fixture skipped already when it is missing

    pg = PostgresBackend(pg_uri)
    blocker = None
    try:
        w1 = pg.fresh(1)
        with PgLeaseStore(w1, clock=ManualClock(T0)) as store:
            store.dispatch(None)
        w2 = pg.fresh(2)
        tables = pg.admin.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'ex_2'")
        assert tables.fetchone()[0] == 0
        pg.opened(w2)  # ex_1 goes to the background
        before = pg.next_xid()  # waits for the drop
        assert _schemas(pg) == {"ex_2"}
        assert pg.next_xid() == before
        PgLeaseStore(w2, clock=ManualClock(T0)).close()
        blocker = psycopg.connect(w2, autocommit=True)
        blocker.execute("BEGIN")
        blocker.execute("SELECT count(*) FROM tasks")  # holds a lock on ex_2.tasks
        pg.opened(pg.fresh(3))
        pg.settle()  # the drop gave up at its lock_timeout
        assert _schemas(pg) == {"ex_2", "ex_3"}
        assert [o.query for o in pg.open_transactions()] == ["SELECT count(*) FROM tasks"]
    finally:
        pg.close()
        if blocker is not None:
            blocker.close()
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (pg.dbname,)).fetchall()
    assert left == [], "the run's database outlived close()"


class OneAtATime:
    """A Postgres factory that refuses to open beside another (it records every try in
    the test's ``tries`` table): shows the workers of a Postgres run open at once, and
    that one whose factory raised then opens again alone."""

    ferry_backend = "postgres"

    def __init__(self, where: str, *, clock: object) -> None:
        import psycopg

        self.conn = psycopg.connect(where, autocommit=True)
        alone = self.conn.execute("SELECT pg_try_advisory_lock(4242)").fetchone()[0]
        self.conn.execute("INSERT INTO tries VALUES (%s)", (alone,))
        if not alone:
            self.conn.close()
            raise RuntimeError("another worker is opening")
        time.sleep(0.3)
        self.conn.execute("SELECT pg_advisory_unlock(4242)")

    def close(self) -> None:
        self.conn.close()


def test_the_workers_of_a_postgres_run_open_their_stores_at_once(pg_uri):
    pg = PostgresBackend(pg_uri)
    clock = SharedClock()
    pool = WorkerPool("tests.pg.test_pg_backend:OneAtATime", clock, 2)
    try:
        pool.start()
        where = pg.fresh(1)
        pg.admin.execute("CREATE TABLE ex_1.tries (alone boolean)")
        Executor(pool, clock, where, backend=pg)
        tries = sorted(r[0] for r in pg.admin.execute("SELECT alone FROM ex_1.tries"))
        assert tries == [False, True, True]  # side by side, then the refused one alone
    finally:
        pool.close()
        pg.close()


def test_a_worker_reads_its_psycopg_connections_state_without_asking_the_server(pg_uri):
    """ferry_harness.runtime.pgconns: every psycopg connection made after install() is
    seen; an open transaction is reported; the server pids only when they changed."""
    import psycopg

    from ferry_harness.runtime import pgconns

    assert pgconns.install()
    pgconns.report(force=True)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        pid = conn.info.backend_pid
        in_tx, pids = pgconns.report()
        assert not in_tx and pids is not None and pid in pids
        assert pgconns.report() == (False, None)  # unchanged: no pids sent again
        conn.execute("BEGIN")
        conn.execute("SELECT 1")
        assert pgconns.report() == (True, None)
        conn.execute("COMMIT")
        assert pgconns.report() == (False, None)
    in_tx, pids = pgconns.report()
    assert not in_tx and pids is not None and pid not in pids  # closed: gone from the list


RESET_STEPS = [Dispatch(queue_ttl_ms=60_000, exec_ttl_ms=60_000),
               Dispatch(queue_ttl_ms=60_000, exec_ttl_ms=60_000, depends_on=(0,)), Reads()]


@pytest.mark.parametrize("target, resets", [
    ("ferry_core:PgLeaseStore", 2),  # ferry_reset: one schema, emptied twice
    ("tests.pg.broken_pg_stores:FailingResetStore", 0),  # its reset raises: fresh schemas
])
def test_a_target_that_resets_its_schema_gets_it_back_empty(pg_uri, target, resets):
    """PROTOCOL.md#postgres-targets: with ferry_reset the next example reuses the schema,
    emptied by the target, and sees nothing of the one before; a reset that raises is
    rolled back and the example gets a fresh schema."""
    with Runner(CampaignConfig(target=target, workers=2, pg_uri=pg_uri)) as r:
        runs = [r.run_steps(RESET_STEPS) for _ in range(3)]
        b = r.backend
        assert isinstance(b, PostgresBackend)
        assert (b.resets, b.schemas_made) == (resets, 3 - resets)
        assert (b.reset_failed is None) == (resets > 0)
    for found, ex in runs:
        assert found == []
        listed = [o for o in ex.history.ops if o.op == "inspect" and o.type == "ok"]
        assert listed, "Reads ran no inspect"
        assert sorted(v["task_id"] for v in listed[-1].value) == sorted(ex.tasks)


def test_pg_lease_store_reset_empties_every_table_and_keeps_the_schema(pg_uri):
    pg = PostgresBackend(pg_uri)
    try:
        where = pg.fresh(1)
        clock = ManualClock(T0)
        with PgLeaseStore(where, clock=clock) as s:
            parent = s.dispatch(None)
            s.dispatch(None, depends_on=[parent])
            c = s.claim(parent, "a")
            s.salvage(parent, "a", c.token, {"part": 1})
            assert s.acquire_lock("daemon", "a", 1000)
        with pg.admin.transaction():
            PgLeaseStore.ferry_reset(pg.admin, "ex_1")
        counts = pg.admin.execute(
            "SELECT (SELECT count(*) FROM ex_1.tasks), (SELECT count(*) FROM ex_1.task_deps),"
            " (SELECT count(*) FROM ex_1.claim_tokens), (SELECT count(*) FROM ex_1.salvage),"
            " (SELECT count(*) FROM ex_1.daemon_locks), (SELECT count(*) FROM ex_1.ferry_meta)"
        ).fetchone()
        assert counts == (0, 0, 0, 0, 0, 1)
        with PgLeaseStore(where, clock=clock) as again:  # opens without making anything
            assert again.inspect() == [] and again.lock_holder("daemon") is None
        with pytest.raises(Exception, match="identifier"):
            PgLeaseStore.ferry_reset(pg.admin, 'ex_1"; DROP TABLE x; --')
    finally:
        pg.close()
