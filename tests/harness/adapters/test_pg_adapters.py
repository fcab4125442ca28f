"""procrastinate and pgqueuer through harness/adapters, in-process, on the session cluster.

Two store objects on one example schema are two workers. The clock is a ManualClock the
test moves; the libraries' SQL reads it through ferry_clock.now() (_pgclock). Each test
asserts what the library really does: claiming is sound, but a worker whose stall timeout
passed still completes the job after another worker took it over, and the live holder's
own completion is then refused (procrastinate) or silently dropped (pgqueuer).

Skips when PostgreSQL (the ``pg_uri`` fixture) or the library is missing.
"""

from __future__ import annotations

import importlib
import itertools
import os

import pytest

from ferry_core import ManualClock
from ferry_core.errors import InvalidToken, TokenRequired, WrongState
from ferry_harness.adapters import _pgclock

LIBRARIES = {"procrastinate": ("procrastinate",), "pgqueuer": ("pgqueuer", "asyncpg")}
_ids = itertools.count()


def _adapter(lib: str):
    for dist in LIBRARIES[lib]:
        pytest.importorskip(dist, reason=f"{dist} not installed (pip install -e '.[adapters]')")
    return importlib.import_module(f"ferry_harness.adapters.{lib}")


@pytest.fixture
def where(pg_uri):
    import psycopg  # pg_uri skipped already when it is missing

    from ferry_harness.runtime.pgserver import schema_uri

    name = f"ferry_ad{os.getpid()}_{next(_ids)}"
    yield schema_uri(pg_uri, name)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def workers(where):
    """``open(lib, n)`` -> (adapter module, clock, n stores on one schema); all closed after."""
    opened = []

    def open_(lib: str, n: int = 2):
        mod = _adapter(lib)
        clock = ManualClock(1_000_000_000)
        stores = [mod.make_store(where, clock=clock) for _ in range(n)]
        opened.extend(stores)
        return mod, clock, stores

    yield open_
    for s in opened:
        s.close()


def _status(store, task_id):
    return store.get(task_id)["status"]


@pytest.fixture
def next_xid(pg_uri):
    """The server's next transaction id, read on a connection of the test's own."""
    import psycopg

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        yield lambda: conn.execute("SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()[0]


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_round_trip(workers, next_xid, lib):
    mod, clock, (a, b) = workers(lib)
    assert mod.make_store.ferry_backend == "postgres"
    before = next_xid()
    assert a.poll_next("alice") is None  # nothing queued: an idle poll assigns no xid
    assert next_xid() == before
    t = a.dispatch(None, title="t", payload={"n": 1}, queue_ttl_ms=10_000, exec_ttl_ms=50)
    assert _status(b, t) == "SUBMITTED"
    c = b.poll_next("bob")  # claimable at its dispatch instant
    assert (c.task_id, c.claimed_at, c.lease_expires_at) == (t, clock(), clock() + mod.STALL_MS + 1)
    assert a.poll_next("alice") is None  # taken
    assert _status(a, t) == "CLAIMED" and not a.get(t)["is_logically_expired"]
    with pytest.raises(InvalidToken):
        b.fulfill(t, "bob", "forged", "r")
    with pytest.raises(TokenRequired):
        b.fulfill(t, "bob", None, "r")
    before = next_xid()
    assert a.poll_next("alice") is None and _status(a, t) == "CLAIMED"  # reads write nothing
    assert next_xid() == before
    b.fulfill(t, "bob", c.token, "r")
    assert _status(a, t) == "COMPLETED"


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_a_stalled_holder_completes_over_the_live_one(workers, lib):
    mod, clock, (a, b) = workers(lib)
    t = a.dispatch(None, queue_ttl_ms=10_000, exec_ttl_ms=50, max_attempts=2)
    ca = a.poll_next("alice")
    clock.set(ca.lease_expires_at - 1)  # the stall timeout has not passed: A still holds it
    assert b.poll_next("bob") is None
    clock.set(ca.lease_expires_at)  # now it has: the row is logically expired
    assert a.get(t)["is_logically_expired"]
    cb = b.poll_next("bob")  # B takes it over
    assert cb is not None and cb.task_id == t and cb.token != ca.token
    assert _status(a, t) == "CLAIMED"
    # the library's defect: A's late completion (a retired claim) is accepted while B runs
    a.fulfill(t, "alice", ca.token, "late")
    assert _status(b, t) == "COMPLETED"
    if lib == "procrastinate":  # the live holder is refused: procrastinate_finish_job_v1's RAISE
        with pytest.raises(WrongState, match="not in \"doing\""):
            b.fulfill(t, "bob", cb.token, "live")
    else:  # pgqueuer: log_jobs deletes no row and says nothing; the result is dropped
        b.fulfill(t, "bob", cb.token, "live")
    assert _status(b, t) == "COMPLETED"


def test_procrastinate_stall_recipe_honours_max_attempts(workers):
    mod, clock, (a,) = workers("procrastinate", 1)
    t = a.dispatch(None, queue_ttl_ms=10_000, exec_ttl_ms=50, max_attempts=1)
    c = a.poll_next("alice")
    clock.set(c.lease_expires_at)
    assert a.sweep() == 1 and _status(a, t) == "TIMED_OUT"
    assert a.poll_next("alice") is None
    assert [v["task_id"] for v in a.inspect()] == [t]


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_server_time_is_the_harness_clock(workers, where, lib):
    import psycopg

    _mod, clock, (a,) = workers(lib, 1)
    where_ = _pgclock.parse_where(where)
    with psycopg.connect(where_.uri, options=where_.libpq_options, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedObject):  # unset: an error, never wall time
            conn.execute("SELECT now()")
        conn.execute("SELECT set_config('ferry.now_ms', '1000000007', false)")
        for fn in _pgclock.FUNCTIONS:
            got = conn.execute(f"SELECT {fn}()").fetchone()[0]
            assert _pgclock.to_ms(got) == 1_000_000_007, fn
        # the library's column defaults were bound to ferry_clock.now() at install (deparsed
        # outside our search_path, so that the function's schema is spelled out)
        conn.execute("SET search_path = pg_catalog")
        defaults = [r[0] for r in conn.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_class c "
            "ON c.oid = d.adrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s", (where_.schema,)).fetchall() if "now()" in r[0]]
        assert defaults and all("ferry_clock.now()" in d for d in defaults), defaults


def test_parse_where_and_conversions():
    w = _pgclock.parse_where("postgresql://postgres@/db?host=%2Ftmp%2Fs&options=-c%20search_path%3Dex_1")
    assert (w.schema, w.params) == ("ex_1", {"host": "/tmp/s"})
    assert w.search_path == '"ex_1", ferry_clock, pg_catalog'
    assert _pgclock.parse_where("postgresql:///db").schema == "public"
    for ms in (0, 1, 999, 1_000_000_007, 2**41 + 3):
        assert _pgclock.to_ms(_pgclock.to_datetime(ms)) == ms
    assert _pgclock.unmovable_time("SELECT now(), CURRENT_TIMESTAMP, 'now'::date") == [
        "'NOW'", "CURRENT_TIMESTAMP"]


@pytest.mark.thorough
@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_the_harness_names_the_stale_completion(pg_uri, lib):
    """The same story through the harness's Postgres backend (worker processes, a schema
    per example): the stalled holder's completion over the live claim is token-unique."""
    _adapter(lib)
    from ferry_harness.run.campaign import CampaignConfig, Runner
    from ferry_harness.run.steps import Clock, Dispatch
    from tests.steps import claim, holder, via_json

    steps = [Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50, max_attempts=2),
             claim("alice"), Clock(claim=0, offset=0), claim("bob"),
             holder("fulfill", claim=1), holder("fulfill", claim=0)]
    with Runner(CampaignConfig(target=f"ferry_harness.adapters.{lib}:make_store",
                               workers=2, pg_uri=pg_uri)) as runner:
        for _ in range(2):
            found, _ex = runner.run_steps(via_json(steps))
            assert [v.invariant for v in found] == ["token-unique"], found
            assert "accepted a retired token" in found[0].message
            assert "current holder 'bob', status CLAIMED" in found[0].message


@pytest.mark.parametrize("lib", sorted(LIBRARIES))
def test_the_fenced_control_refuses_the_stalled_holder(where, lib):
    """The control (tests/harness/adapters/fenced_pg.py: the library's statement plus the
    guard) on the same story: A's late completion is refused, B's is kept. What the
    adapters' test above sees is therefore the libraries' unguarded completion."""
    _adapter(lib)
    from tests.harness.adapters import fenced_pg

    clock = ManualClock(1_000_000_000)
    make = getattr(fenced_pg, f"make_{lib}")
    a, b = make(where, clock=clock), make(where, clock=clock)
    try:
        t = a.dispatch(None, queue_ttl_ms=10_000, exec_ttl_ms=50, max_attempts=2)
        ca = a.poll_next("alice")
        clock.set(ca.lease_expires_at)
        cb = b.poll_next("bob")
        with pytest.raises(WrongState):
            a.fulfill(t, "alice", ca.token, "late")
        assert _status(a, t) == "CLAIMED"
        b.fulfill(t, "bob", cb.token, "live")
        assert _status(a, t) == "COMPLETED"
        with pytest.raises(WrongState):
            b.fulfill(t, "bob", cb.token, "again")
    finally:
        a.close()
        b.close()


@pytest.mark.thorough
def test_the_fenced_procrastinate_control_passes_a_fuzz(pg_uri, tmp_path):
    """The whole mapping (clock, stall lease, views, idle polls) raises no finding of its own."""
    _adapter("procrastinate")
    from ferry_harness.run.campaign import Campaign, CampaignConfig

    cfg = CampaignConfig(target="tests.harness.adapters.fenced_pg:make_procrastinate",
                         budget_s=15, seed=0, report_dir=str(tmp_path / "r"), pg_uri=pg_uri)
    outcome = Campaign(cfg).run()
    assert outcome.verdict == "pass", outcome.failure and outcome.failure.violations[0].message
