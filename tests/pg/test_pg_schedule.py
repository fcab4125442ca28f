"""Schedule mode on Postgres targets (issue 28): psycopg 3's statements pass the same
schedule points as sqlite3's, a row lock shows as a silent worker, ferry_core's
PgLeaseStore passes, the check-then-act twin is caught with a minimal schedule that
replays, and a target on an async driver falls back to stress mode, saying so."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import multiprocess as mp
import pytest

from ferry_core import PgLeaseStore
from ferry_core.types import Claim
from ferry_harness.check.annotations import Statements, fact
from ferry_harness.cli.main import main
from ferry_harness.run.campaign import Campaign, CampaignConfig, Runner, write_report
from ferry_harness.run.steps import Dispatch, RaceClaim
from ferry_harness.runtime.pgserver import ENV_URI

TASK = Dispatch(queue_ttl_ms=60_000, exec_ttl_ms=60_000)
CHECK_THEN_ACT = "tests.pg.broken_pg_stores:PgCheckThenActStore"


class LockingClaimStore(PgLeaseStore):
    """Correct, and slow on purpose: ``claim`` is one transaction, ``SELECT … FOR UPDATE``
    then ``UPDATE``, so a second claimer waits on the first one's row lock inside the
    server (up to ``busy_timeout_ms``, then StoreError)."""

    def __init__(self, uri: str, *, clock: Any) -> None:
        super().__init__(uri, clock=clock, busy_timeout_ms=1000)

    def claim(self, task_id: str, agent_id: str, *, sweep: bool = True) -> Claim | None:
        now, token = self._now(), str(uuid.uuid4())

        def body(conn: Any) -> Any:
            if conn.execute("SELECT 1 FROM tasks WHERE task_id=%s AND status='SUBMITTED'"
                            " AND queue_deadline > %s FOR UPDATE", (task_id, now)).fetchone():
                return conn.execute(
                    "UPDATE tasks SET status='CLAIMED', claimed_by=%(a)s, claim_token=%(tok)s,"
                    " claimed_at=%(now)s, lease_expires_at=%(now)s + exec_ttl_ms,"
                    " attempt=attempt + 1, extend_count=0 WHERE task_id=%(t)s"
                    " RETURNING claimed_at, lease_expires_at, attempt",
                    {"a": agent_id, "tok": token, "now": now, "t": task_id}).fetchone()
            return None

        row = self._in_tx(body)
        return None if row is None else Claim(task_id, agent_id, token, *row)


def _runner(target: str, pg_uri: str, **kw: Any) -> Runner:
    return Runner(CampaignConfig(target=target, workers=2, mode="schedule", pg_uri=pg_uri, **kw))


def _trace(ex: Any) -> list[tuple[int, int, str]]:
    """(seq, worker process, sql) of every scheduled statement, in the order they ran."""
    ran = [(seq, op.process, sql) for op in ex.history if (f := fact(op, Statements))
           for seq, sql, _switch in f.ran]
    return sorted(ran)


def _claim_race(schedule: tuple[int, ...]) -> list:
    return [TASK, RaceClaim(task=0, agents=("alice", "bob"), schedules=(schedule,))]


def test_psycopg_connections_report_their_transaction_and_busy_errors(pg_uri):
    """In a forked worker (psycopg is patched there only): every statement counts its
    connection, ``in_tx`` follows the transaction status (a closed connection holds
    nothing), ``psycopg.sql`` objects are shown as SQL, and a lock timeout marks the
    next point a retry."""

    def body() -> tuple:
        import psycopg
        from psycopg import sql

        from ferry_harness.runtime import schedule

        schedule._install_psycopg()
        before = schedule.connections()  # sqlite3 ones of earlier tests in this process
        seen: list[Any] = []
        schedule.on_statement(lambda: seen.append(schedule._in_transaction()))
        auto = psycopg.connect(pg_uri, autocommit=True)
        other = psycopg.connect(pg_uri)
        auto.execute("SELECT 1")  # outside a transaction
        with auto.transaction():
            auto.execute("SELECT 2")  # BEGIN was sent: in a transaction
        other.execute("SELECT 3")  # implicit BEGIN comes after the point
        other.execute("SELECT 4")  # ... and is open at the next one
        other.rollback()
        other.execute(sql.SQL("SELECT {}").format(sql.Literal(5)))
        texts = [schedule._pg_text(other.cursor(), sql.SQL("SELECT {}").format(
            sql.Identifier("x")))]
        other.close()
        auto.execute("SELECT 6")  # the closed one's open transaction is gone
        with auto.transaction():
            auto.execute("SELECT 7")
        locker = psycopg.connect(pg_uri, autocommit=True)
        auto.execute("SET lock_timeout = 1")
        with locker.transaction():
            locker.execute("SELECT pg_advisory_xact_lock(4242)")
            try:
                auto.execute("SELECT pg_advisory_xact_lock(4242)")  # waits, times out
            except psycopg.errors.LockNotAvailable:
                pass
        return seen, schedule.connections() - before, texts, schedule._state["busy"]

    def child(pipe: Any) -> None:
        try:
            pipe.send(body())
        except BaseException as exc:  # the assertion below shows it
            pipe.send(repr(exc))

    a, b = mp.get_context("fork").Pipe()
    p = mp.get_context("fork").Process(target=child, args=(b,))
    p.start()
    try:
        assert a.poll(30), "the child did not answer"
        got = a.recv()
    finally:
        p.join(10)
    assert isinstance(got, tuple), got
    seen, connections, texts, busy = got
    assert seen[:7] == [False, True, False, True, False, False, True], seen
    assert connections == 3 and texts == ['SELECT "x"']
    assert busy  # the lock timeout (55P03) made the next point a retry


def test_a_row_lock_is_a_silent_worker_and_the_holder_runs_on(pg_uri):
    """Worker 0 takes the task's row lock (SELECT … FOR UPDATE, in its transaction) and
    is paused; worker 1's SELECT … FOR UPDATE then waits inside the server. After one
    quiescence window the holder goes on and commits, well before the 1 s lock timeout."""
    with _runner("tests.pg.test_pg_schedule:LockingClaimStore", pg_uri) as r:
        t0 = time.perf_counter()
        found, ex = r.run_steps(_claim_race((0, 1)))
        took = time.perf_counter() - t0
    assert found == [] and "schedule-points" in ex.capabilities
    claims = [o for o in ex.history if o.op == "claim"]
    assert [o.type for o in claims] == ["ok", "ok"], [(o.error, o.message) for o in claims]
    assert sum(o.value is not None for o in claims) == 1  # one winner, the other got None
    (_, first, lock0), (_, second, lock1), (_, third, update) = _trace(ex)[:3]
    assert "FOR UPDATE" in lock0 and "FOR UPDATE" in lock1 and update.startswith("UPDATE")
    assert first != second and third == first  # the blocked one did not stall the holder
    assert took < 1.0


def test_the_check_then_act_twin_fails_in_its_schedule_and_passes_in_order(pg_uri):
    """The minimal schedule ``1.1`` (worker 1 checks, worker 0 runs to its end, worker 1
    writes) shows single-winner every time; the same race run in order does not."""
    with _runner(CHECK_THEN_ACT, pg_uri) as r:
        runs = [r.run_steps(_claim_race((1, 1))) for _ in range(3)]
        in_order, _ = r.run_steps(_claim_race((0, 0, 0, 0)))
    for found, ex in runs:
        assert [v.invariant for v in found][:1] == ["single-winner"]
        assert len({p for _s, p, _q in _trace(ex)}) == 2
    assert in_order == []


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.thorough),
                                  pytest.param(3, marks=pytest.mark.thorough)])
def test_pg_lease_store_passes_schedule_mode(pg_uri, tmp_path, ferry_budget, seed):
    # a count, not seconds: 1.5 s under load once ended before the first race round
    cfg = CampaignConfig(target="ferry_core:PgLeaseStore", budget_s=None,
                         max_examples=int(2 * ferry_budget), seed=seed, mode="schedule",
                         report_dir=str(tmp_path), pg_uri=pg_uri)
    rep = Campaign(cfg).run().report
    assert rep.verdict == "pass", rep.violations[:1]
    assert rep.mode == "schedule" and rep.stats.race_rounds > 0
    assert not any("fell back" in f for f in rep.findings)


@pytest.mark.thorough
def test_check_then_act_minimal_schedule_replays_every_time(pg_uri, tmp_path, capsys,
                                                            monkeypatch):
    """test_schedule.py's two-statement test on the Postgres twin: found by the fuzz,
    shrunk to two racers and a short schedule, 10/10, and ``ferry-harness replay``."""
    cfg = CampaignConfig(target=CHECK_THEN_ACT, budget_s=30, seed=1, mode="schedule",
                         report_dir=str(tmp_path / "r"), shrink_budget_s=40, pg_uri=pg_uri)
    write_report(Campaign(cfg).run())
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["mode"] == "schedule"
    v = report["violations"][0]
    assert v["invariant"] == "single-winner"
    racing = [s for s in v["steps"] if s.get("schedules")]
    assert racing and all(len(s.get("agents", [])) <= 2 for s in racing)
    assert 1 <= v["schedule_steps"] <= 4, v["schedule"]
    assert v["reproduced"] == "10/10"
    assert len({t["worker"] for t in v["schedule_trace"]}) == 2
    capsys.readouterr()
    monkeypatch.setenv(ENV_URI, pg_uri)  # replay's server: the same one
    assert main(["replay", str(tmp_path / "r")]) == 1
    assert "reproduced 10/10" in capsys.readouterr().out


@pytest.mark.thorough
@pytest.mark.parametrize("target", ["ferry_harness.adapters.procrastinate:make_store",
                                    "ferry_harness.adapters.pgqueuer:make_store"])
def test_an_async_driver_falls_back_to_stress_mode(pg_uri, tmp_path, target):
    pytest.importorskip(target.split(".")[2].split(":")[0])
    cfg = CampaignConfig(target=target, budget_s=3, seed=1, mode="schedule",
                         report_dir=str(tmp_path), pg_uri=pg_uri)
    rep = Campaign(cfg).run().report
    assert rep.mode == "stress"
    assert any("psycopg 3's sync API" in f and "fell back to stress" in f for f in rep.findings)

