"""Races that really race (ferry_harness.runtime.gate): the overlap each race round records,
and the first-statement gate that makes racers overlap."""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any

import pytest

from ferry_core import LeaseStore
from ferry_harness.check.history import History
from ferry_harness.report.markdown import overlap_line, render_markdown
from ferry_harness.run.campaign import Campaign, CampaignConfig
from ferry_harness.runtime import gate
from ferry_harness.runtime.client import PlannedCall, WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.gate import Board, RacerSpan, overlapped

SERIAL_HOLD_S = 0.005  # the serialising store holds its process-wide lock this long


class SerialisedStore(LeaseStore):
    """A correct store whose every operation takes a process-wide file lock and holds it
    5 ms before its SQL: no two calls can be at the database at once."""

    def __init__(self, path: str, **kw: Any) -> None:
        super().__init__(path, **kw)
        self._lock = os.open(path + ".serial", os.O_RDWR | os.O_CREAT, 0o600)

    def close(self) -> None:
        os.close(self._lock)
        super().close()


def _serialised(name: str) -> Any:
    method = getattr(LeaseStore, name)

    def call(self: SerialisedStore, *args: Any, **kw: Any) -> Any:
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        try:
            time.sleep(SERIAL_HOLD_S)
            return method(self, *args, **kw)
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)

    return call


for _name in ("claim", "poll_next", "fulfill", "fail", "release", "extend", "salvage",
              "acquire_lock", "release_lock"):
    setattr(SerialisedStore, _name, _serialised(_name))


def serialised(path: str, *, clock: Any) -> SerialisedStore:
    return SerialisedStore(path, clock=clock)


def fuzz(target: str, tmp_path, examples: int) -> Any:
    cfg = CampaignConfig(target=target, budget_s=None, max_examples=examples, seed=3,
                         report_dir=str(tmp_path / "r"), shrink_budget_s=5)
    return Campaign(cfg).run().report


def _consistent(stats: Any) -> None:
    rows = stats.race_overlap
    assert rows and [r.racers for r in rows] == sorted({r.racers for r in rows})
    assert all(r.racers >= 2 and 0 <= r.overlapped <= r.rounds and 0 <= r.gated <= r.rounds
               for r in rows), rows
    assert sum(r.rounds for r in rows) == stats.race_rounds


# ------------------------------------------------------------------------- the definition
def test_overlap_needs_every_span_at_one_common_instant():
    a, b = RacerSpan(start_ns=0, end_ns=10), RacerSpan(start_ns=10, end_ns=20)
    assert overlapped([a, b])  # touching at t=10 counts: both were running then
    assert not overlapped([a, RacerSpan(start_ns=11, end_ns=20)])
    # pairwise overlapping is not enough: no instant has all three
    assert not overlapped([a, RacerSpan(start_ns=5, end_ns=15), RacerSpan(start_ns=12, end_ns=30)])
    assert not overlapped([a, None]), "a racer that never ran did not race"
    assert not overlapped([a]), "one call is no race"


def test_board_lets_racers_go_when_all_arrived_or_are_gone(monkeypatch):
    board = Board(3)
    rnd = board.next_round()
    board.cells[1] = rnd  # racer 1 stands at the gate
    assert board.wait(rnd, 0, (0, 1)), "the last to arrive goes at once, with everyone there"
    rnd = board.next_round()
    board.gone(1, rnd)  # racer 1's call ended before any SQL
    t = time.perf_counter()
    assert not board.wait(rnd, 0, (0, 1)) and time.perf_counter() - t < gate.SPIN_S
    board.gone(0, rnd)
    assert board.cells[0] == rnd, "an arrived racer is not marked gone"
    monkeypatch.setattr(gate, "SPIN_S", 0.01)
    rnd = board.next_round()  # racer 2 never comes (blocked outside SQLite): no stall
    t = time.perf_counter()
    assert not board.wait(rnd, 0, (0, 2)) and 0.01 <= time.perf_counter() - t < 1.0
    board.cells[2] = rnd  # it arrives after all, too late to meet racer 0
    assert not board.wait(rnd, 2, (0, 2)), "a racer that went on alone is not waited for"


# ------------------------------------------------------------------------- campaigns
def test_ferry_core_races_are_gated_and_overlap(tmp_path):
    stats = fuzz("ferry_core:LeaseStore", tmp_path, examples=3).stats
    _consistent(stats)
    two = next(r for r in stats.race_overlap if r.racers == 2)
    assert two.gated > 0 and two.overlapped > 0, stats.race_overlap
    assert "no round was gated" not in overlap_line(stats)


@pytest.mark.thorough
def test_ungated_ferry_core_still_counts_its_rounds(tmp_path, monkeypatch):
    monkeypatch.setattr(gate, "ENABLED", False)
    stats = fuzz("ferry_core:LeaseStore", tmp_path, examples=3).stats
    _consistent(stats)
    assert all(r.gated == 0 for r in stats.race_overlap)


def test_serialising_store_reports_almost_no_overlap(tmp_path):
    stats = fuzz("tests.harness.runtime.test_gate:serialised", tmp_path, examples=4).stats
    _consistent(stats)
    rounds = sum(r.rounds for r in stats.race_overlap)
    together = sum(r.overlapped for r in stats.race_overlap)
    # (a racer preempted for 5 ms between its call's end and its clock reading may overlap)
    assert rounds >= 5 and together <= max(2, rounds // 10), stats.race_overlap
    assert sum(r.gated for r in stats.race_overlap) <= max(2, rounds // 10)


def test_target_bypassing_sqlite3_connect_is_never_gated_and_the_report_says_so(tmp_path):
    report = fuzz("tests.targets:unscheduled_store", tmp_path, examples=3)
    _consistent(report.stats)
    assert all(r.gated == 0 for r in report.stats.race_overlap)
    md = render_markdown(report)
    assert "### Race overlap" in md and "no round was gated" in md


def test_an_ungated_schedule_mode_run_says_why_without_blaming_the_target():
    """Schedule mode never gates (its scheduler orders the statements): its line says so,
    instead of the stress-mode sentence about a target that bypasses sqlite3.connect."""
    from ferry_harness.report.schema import FuzzStats, RaceOverlap

    stats = FuzzStats(race_overlap=(RaceOverlap(racers=2, rounds=9, overlapped=3, gated=0),))
    scheduled = overlap_line(stats, "schedule")
    assert "schedule mode" in scheduled and "no round was gated" not in scheduled
    assert "no round was gated" in overlap_line(stats, "stress")
    assert "no round was gated" in overlap_line(stats)


@pytest.mark.parametrize("racers", [2, 4])
def test_pool_round_spans_come_from_the_workers(tmp_path, racers):
    with WorkerPool("ferry_core:LeaseStore", SharedClock(), racers) as pool:
        pool.open(str(tmp_path / "db.sqlite"))
        history = History()
        [d] = pool.run([PlannedCall(slot=0, op="dispatch", args={}, agent="c")], history)
        calls = [PlannedCall(slot=i, op="claim", args={"task_id": d.value}, agent=f"a{i}")
                 for i in range(racers)]
        gated = 0
        for _ in range(5):  # under load a racer may miss the gate's wait now and then
            ops = pool.run(calls, history)
            gated += pool.last_gated
            assert len(pool.last_spans) == racers
            for op, span in zip(ops, pool.last_spans, strict=True):
                assert op.invoke_ns <= span.start_ns <= span.end_ns == op.complete_ns
        assert gated > 0
        assert sum(op.value is not None for op in history.ops if op.op == "claim") == 1
