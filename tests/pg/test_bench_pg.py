"""``ferry-harness bench`` on a Postgres target: each run in a fresh schema of one server,
drained exactly once, checked against the store's own tables, and no SQLite ratio claimed."""

from __future__ import annotations

import os

import pytest

from ferry_core import ManualClock, PgLeaseStore
from ferry_harness.runtime import pgserver
from ferry_harness.tools.bench import matrix
from ferry_harness.tools.bench.report import summary_table
from ferry_harness.tools.bench.runner import verify_pg_lease_store
from ferry_harness.tools.bench.targets import ferry_core_only, resolve_target
from tests.procs import assert_no_children_left, children_of


def test_a_postgres_target_is_known_by_its_factory():
    assert resolve_target("ferry_core:PgLeaseStore").backend == "postgres"
    assert resolve_target("ferry_core:LeaseStore").backend == "sqlite"


def test_the_database_check_fails_when_a_task_is_not_completed(pg_uri, pg_schema):
    uri = pgserver.schema_uri(pg_uri, pg_schema)
    with PgLeaseStore(uri, clock=ManualClock(1_000_000)) as store:
        for _ in range(3):
            store.dispatch(None, title="t")
        for _ in range(2):
            claim = store.poll_next("w")
            store.fulfill(claim.task_id, "w", claim.token, "ok")
        left = verify_pg_lease_store(pg_uri, pg_schema, 3)
        assert not left["ok"] and left["completed"] == 2 and left["tokens_issued"] == 2
        claim = store.poll_next("w")
        store.fulfill(claim.task_id, "w", claim.token, "ok")
    assert verify_pg_lease_store(pg_uri, pg_schema, 3)["ok"]


def test_bench_compares_sqlite_and_postgres_in_one_run(pg_uri):
    before = set(children_of(os.getpid()))
    res = matrix.run_bench("ferry_core:LeaseStore,ferry_core:PgLeaseStore", workers=[1, 2],
                           strategies=["cas"], policies=["hybrid"], tasks=60,
                           ceiling_updates=500, ceiling_samples=1, timeout_s=60,
                           pg_uri=pg_uri)  # the session's server, not one more
    assert_no_children_left(before)
    pg = [r for r in res["runs"] if r["backend"] == "postgres"]
    assert [r["workers"] for r in pg] == [1, 2]
    for r in pg:
        assert r["verified"]["ok"] and r["verified"]["db_tokens_issued"] == 60, r["verified"]
        assert "lifecycle_ratio" not in r and "same_sql_ratio" not in r  # SQLite ceilings
        assert r["cas_attempts"] >= 60  # PgLeaseStore counts its claims as ferry_core does
    assert not ferry_core_only(res)  # issue 19's goal lines are about SQLite
    assert all(g["target"] != "ferry_core:PgLeaseStore" for g in res["goal"])
    assert any(line.startswith("| ferry_core:PgLeaseStore | 1 | as-is | as-is |")
               and "| — | — |" in line for line in summary_table(res))
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:  # every run's schema dropped
        left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_%'")
        assert left.fetchall() == []


@pytest.mark.parametrize("spec", ["ferry_core:PgLeaseStore"])
def test_a_postgres_run_needs_a_server(spec, tmp_path):
    from ferry_harness.errors import BenchUsageError
    from ferry_harness.tools.bench.runner import run_one

    with pytest.raises(BenchUsageError, match="Postgres target"):
        run_one(resolve_target(spec), 1, "as-is", "as-is", 1, str(tmp_path))


def test_sigterm_stops_the_bench_and_removes_its_cluster(pg_uri, tmp_path):
    """SIGTERM mid-run (a CI runner stopping the job) unwinds like Ctrl-C: exit 130, the
    workers gone, the throwaway cluster stopped and its directory removed."""
    import glob
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    pattern = os.path.join(tempfile.gettempdir(), "ferry-pg-*", ".s.PGSQL.*")
    before = set(glob.glob(pattern))
    # the session's own cluster (the fixture) and any other test process's are not the bench's
    before |= {p for p in glob.glob(pattern) if os.path.dirname(p) in pg_uri}
    env = {k: v for k, v in os.environ.items() if k != pgserver.ENV_URI}  # its own cluster
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferry_harness", "bench", "--target", "ferry_core:PgLeaseStore",
         "--workers", "1", "--tasks", "200000", "--quiet"], env=env, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (set(glob.glob(pattern)) - before) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.1)
        new = set(glob.glob(pattern)) - before  # the bench's cluster is up
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:  # a failure above: still stop it the way under test
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, out
    assert new, "no cluster of the bench's was seen"
    assert not [p for p in new if os.path.exists(os.path.dirname(p))], "a cluster was left"
