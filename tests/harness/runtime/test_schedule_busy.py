"""Schedule mode and a store's busy timeout (false alarm FA-9): while one worker waits
inside SQLite's busy handler, the paused worker holding the write lock must run on, or
a correct store with a 1 s timeout fails with "database is locked" that ferry caused."""

from __future__ import annotations

import sqlite3
import threading
from multiprocessing import Pipe

import pytest

from ferry_harness.runtime.schedule import Chooser, run_round
from ferry_harness.runtime.wire import AtSchedulePoint, OpDone, Proceed, receive, send


def _done(pipe, i: int, type_: str = "ok", error: str | None = None) -> None:
    send(pipe, OpDone(op_index=i, type=type_, value=None, error=error, message=None,
                      invoke_ns=1, complete_ns=2, now_ms=0))


def _point(pipe, i: int, sql: str, con: sqlite3.Connection | None = None) -> None:
    send(pipe, AtSchedulePoint(op_index=i, sql=sql, retry=False,
                               in_tx=bool(con is not None and con.in_transaction)))
    assert isinstance(receive(pipe), Proceed)


@pytest.mark.parametrize(("free_points", "holder_points"), [(30, 0), (0, 30)],
                         ids=["holder-paused-for-others", "holder-with-many-statements"])
def test_a_worker_in_the_busy_handler_gets_the_lock_before_its_timeout(
        tmp_path, free_points: int, holder_points: int):
    """Worker 0 has cheap statements (the default chooser would run it on), worker 1 holds
    BEGIN IMMEDIATE at a schedule point and may run more statements in its transaction,
    worker 2 waits in SQLite's busy handler (1 s). 30 points at one quiescence window
    (50 ms) each would outlast that timeout."""
    db = str(tmp_path / "busy.db")
    sqlite3.connect(db, isolation_level=None).execute("PRAGMA journal_mode=WAL").fetchall()
    began = threading.Event()
    pipes = [Pipe() for _ in range(3)]

    def free(pipe) -> None:
        for n in range(free_points):
            _point(pipe, 0, f"SELECT {n}")
        _done(pipe, 0)

    def holder(pipe) -> None:
        con = sqlite3.connect(db, isolation_level=None, timeout=1.0)
        con.execute("BEGIN IMMEDIATE")
        began.set()
        for n in range(holder_points):
            _point(pipe, 1, f"SELECT {n}", con)
            con.execute(f"SELECT {n}").fetchall()
        _point(pipe, 1, "COMMIT", con)
        con.execute("COMMIT")
        con.close()
        _done(pipe, 1)

    def waiter(pipe) -> None:
        began.wait(5)
        con = sqlite3.connect(db, isolation_level=None, timeout=1.0)
        try:
            con.execute("BEGIN IMMEDIATE")  # blocks in the busy handler, silent
            con.execute("COMMIT")
            _done(pipe, 2)
        except sqlite3.OperationalError as exc:
            _done(pipe, 2, "info", str(exc))
        finally:
            con.close()

    threads = [threading.Thread(target=f, args=(p[1],), daemon=True)
               for f, p in zip((free, holder, waiter), pipes, strict=True)]
    for t in threads:
        t.start()
    try:
        out = run_round([p[0] for p in pipes], [0, 1, 2], Chooser(), stall_s=10.0)
    finally:
        for t in threads:
            t.join(10)
    assert out.replies[2].type == "ok", out.replies[2].error
    if free_points:
        assert out.trace[0][0] == 1  # the lock holder went first: someone was blocked on it


def test_the_chooser_prefers_transaction_holders_only_when_asked():
    c = Chooser()
    c.start(3)
    assert c.pick([0, 1], set()) == 0
    assert c.pick([0, 1], set(), {1}) == 1
    assert c.pick([0, 1], {1}, {1}) == 0  # a busy retrier still waits for the others
    replay = Chooser(explicit=[0])
    replay.start(2)
    assert replay.pick([0, 1], set(), {1}) == 0  # a replay follows its recorded decisions


def test_a_worker_reports_whether_one_of_its_connections_is_in_a_transaction():
    from ferry_harness.runtime import schedule

    con = schedule._connect(":memory:", isolation_level=None)
    other = schedule._connect(":memory:", isolation_level=None)
    try:
        assert not schedule._in_transaction()
        other.execute("BEGIN IMMEDIATE")
        assert schedule._in_transaction()
        other.execute("COMMIT")
        assert not schedule._in_transaction()
    finally:
        con.close()
        other.close()
    assert not schedule._in_transaction()  # closed connections hold nothing


def test_a_round_that_keeps_reporting_still_ends_at_the_runs_deadline():
    """A worker that keeps reaching points (a store retrying a lock timeout for ever)
    resets the stall timer every time; the run's deadline (``until``) ends the round
    anyway, marked as cut by the deadline, not as a stall (the budget is a promise:
    a Postgres schedule run once took 34.5 s against a 26.5 s limit)."""
    import time

    pipes = [Pipe() for _ in range(2)]
    stop = threading.Event()

    def chatty(pipe, i: int) -> None:
        give_up = time.monotonic() + 4  # without the deadline the test fails, not hangs
        while not stop.is_set() and time.monotonic() < give_up:
            send(pipe, AtSchedulePoint(op_index=i, sql="SELECT 1", retry=True, in_tx=False))
            if not pipe.poll(2):
                return
            msg = receive(pipe)
            if not isinstance(msg, Proceed):
                return

    threads = [threading.Thread(target=chatty, args=(p[1], i), daemon=True)
               for i, p in enumerate(pipes)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    try:
        out = run_round([p[0] for p in pipes], [0, 1], Chooser(), stall_s=5.0, until=t0 + 0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    took = time.monotonic() - t0
    assert out.at_deadline and sorted(out.stalled) == [0, 1], out
    assert took < 3.0, took  # the stall timer (5 s, reset by every point) did not decide
    assert "time limit" in (out.note or "")


def test_a_worker_spinning_past_a_held_row_yields_to_the_holder():
    """A claimer that never blocks (SKIP LOCKED) but keeps retrying while another worker
    waits inside its transaction: after SPIN statements in a row the holder goes, also
    under PCT priorities that favour the spinner; a recorded schedule still replays as
    recorded."""
    from ferry_harness.runtime.schedule import SPIN

    for chooser in (Chooser(), Chooser(seed=3)):
        chooser.start(2)
        spinner = chooser.pick([0, 1], set(), holding={1})  # whoever PCT favours
        holder = 1 - spinner
        picks = [chooser.pick([0, 1], set(), holding={holder}) for _ in range(SPIN * 2)]
        assert holder in picks, picks
        assert picks.index(holder) <= SPIN  # within SPIN statements of the spinner
    replay = Chooser(explicit=[0] * (SPIN * 2))
    replay.start(2)
    assert [replay.pick([0, 1], set(), holding={1}) for _ in range(SPIN * 2)] == [0] * (SPIN * 2)
