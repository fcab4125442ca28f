"""The checker stays decisive on wide races, incremental checks agree with full ones, and
recorded histories are checked offline (``ferry-harness check``, ``ferry_harness.tools.recorder``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferry_core import LeaseStore, ManualClock
from ferry_harness.check.checker import Checker
from ferry_harness.check.history import INFO, History
from ferry_harness.check.linearizability import check_history
from ferry_harness.tools.recorder import Recorder
from tests.benchmarks import races, synth


def _step_by_step(ops) -> tuple[list[str], Checker]:
    """Check ``ops`` one at a time, as a running campaign does: the invariants found, and
    the checker (for its ``unknown``)."""
    h, checker, found = History(), Checker(), []
    for o in ops:
        h.ops.append(o)
        found += checker.check(h, [o])
    return [v.invariant for v in found], checker


def _check(ops):
    c = Checker()
    start = time.perf_counter()
    found = c.check(History(ops))
    return [v.invariant for v in found], c.unknown, time.perf_counter() - start


@pytest.mark.parametrize("bad,want", [(None, []), ("refused", ["linearizable"]),
                                      ("attempt", ["single-winner"])])
def test_twenty_wide_claim_race_is_decided(bad, want):
    names, unknown, took = _check(races.claim_race(20, bad))
    assert sorted(set(names)) == want and not unknown
    assert took < 1.0


def test_twenty_wide_fulfil_race_with_two_winners_is_decided():
    names, unknown, took = _check(races.fulfill_race(20, True))
    assert names == ["token-unique"] and not unknown and took < 1.0
    assert _check(races.fulfill_race(20, False))[:2] == ([], [])


@pytest.mark.parametrize("lost", [0, 9, 15])
def test_four_rounds_of_four_racing_salvages_with_one_lost(lost):
    c = Checker()
    start = time.perf_counter()
    found = c.check(History(races.salvage_rounds(4, 4, lost=lost)))
    assert time.perf_counter() - start < 1.0 and not c.unknown
    assert [v.invariant for v in found] == ["no-lost-task"]
    assert "lost a partial" in found[0].message


def test_four_rounds_of_racing_salvages_any_order_within_a_round_is_legal():
    assert _check(races.salvage_rounds(4, 4))[:2] == ([], [])
    # within one round any order; across rounds the real-time order holds
    assert _check(races.salvage_rounds(4, 4, swap=(0, 3)))[:2] == ([], [])
    assert _check(races.salvage_rounds(4, 4, swap=(3, 4)))[0] == ["no-lost-task"]


@pytest.mark.parametrize("killed", ["extend", "salvage"])
@pytest.mark.parametrize("lost", [None, 4])
def test_a_killed_holder_op_carried_across_racing_salvages(killed, lost):
    """A killed op stays pending across chunks while a round of salvages collapses into
    one any-order state (the checker once raised on it: a fault campaign in CI)."""
    *body, read = races.salvage_rounds(2, 3, lost=lost)
    extra = {"ttl_ms": 100} if killed == "extend" else {"partial": {"killed": 1}}
    dead = races.op(0, 9, "alice", killed, {"task_id": races.T, "token": races.tok(1), **extra},
                    12, None, typ=INFO)
    ops = [*body[:3], dead, *body[3:], read]
    for i, o in enumerate(ops):
        o.index = i
    found, checker = _step_by_step(ops)
    assert found == ([] if lost is None else ["no-lost-task"])
    assert not checker.unknown


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounds=st.integers(1, 2), width=st.integers(2, 3), data=st.data())
def test_killed_ops_among_racing_salvages_never_break_the_checker(rounds, width, data):
    """Killed holder ops anywhere among rounds of racing salvages, and a read that may have
    lost an entry: the checker never raises, and a step-by-step check finds what one full
    check finds (the any-order collapse once raised on such a history)."""
    *body, read = races.salvage_rounds(rounds, width, lost=data.draw(
        st.none() | st.integers(0, rounds * width - 1), label="lost"))
    for k in range(data.draw(st.integers(1, 3), label="killed")):
        name = data.draw(st.sampled_from(["extend", "salvage", "fulfill", "release"]))
        extra = {"extend": {"ttl_ms": 100}, "salvage": {"partial": {"killed": k}},
                 "fulfill": {"result": {"killed": k}}, "release": {}}[name]
        at = data.draw(st.integers(2, len(body)), label="after op")
        start = body[at - 1].invoke_ns + 1
        body.insert(at, races.op(0, 20 + k, "alice", name,
                                 {"task_id": races.T, "token": races.tok(1), **extra},
                                 start, None, typ=INFO))
    ops = [*body, read]
    for i, o in enumerate(ops):
        o.index = i
    full = [v.invariant for v in Checker().check(History(list(ops)))]
    steps, _ = _step_by_step(ops)
    assert sorted(set(steps)) == sorted(set(full))


def test_free_order_is_fixed_by_the_first_read():
    """Two reads that disagree on the order of one round cannot both be right."""
    h = races.salvage_rounds(1, 3)
    first = h[-1]
    second = races.op(len(h), 0, "reader", "salvaged", {"task_id": races.T},
                      first.complete_ns + 10, first.complete_ns + 20,
                      value=list(reversed(first.value)))
    assert _check(h)[0] == []
    assert _check([*h, second])[0] == ["no-lost-task"]


def test_incremental_checks_agree_with_one_full_check():
    """Feeding a history step by step finds what one full check finds, and the
    partitions of closed prefixes are not searched again."""
    h, steps = synth.history(2_000, seed=3)
    full = Checker().check(h)
    inc, checker, prev = [], Checker(), 0
    grown = History()
    for end in steps:
        grown.ops.extend(h.ops[prev:end])
        inc += checker.check(grown, grown.ops[prev:end])
        prev = end
    assert full == [] and inc == [] and not checker.unknown
    # a broken step is found incrementally too
    assert _step_by_step(races.salvage_rounds(2, 3, lost=1))[0] == ["no-lost-task"]


def test_check_history_results_keep_their_ops():
    res = check_history(races.claim_race(4, None))
    assert res[0].ok and sorted(res[0].ops) == list(range(5))


def test_budget_exhaustion_is_reported_once_with_the_partition():
    checker = Checker(search_budget=5)
    h = History()
    for o in races.salvage_rounds(1, 6)[:-1]:
        h.ops.append(o)
        checker.check(h, [o])
    assert len(checker.unknown) == 1
    assert checker.unknown[0].startswith("task:task-1: search budget of 5 states exhausted")
    assert "linearized so far" in checker.unknown[0]


def _record(db, lose_result: bool):
    clock = ManualClock(1_000)
    rec = Recorder()
    store = LeaseStore(str(db), clock=clock)
    a = rec.wrap(store, agent="worker-1", clock=clock)
    tid = a.dispatch(None, title="t", queue_ttl_ms=10_000, exec_ttl_ms=100)
    c = a.poll_next("worker-1")
    a.fulfill(c.task_id, "worker-1", c.token, {"ok": 1})
    view = a.get(tid)
    if lose_result:
        rec.history.ops[-1].value = {**rec.history.ops[-1].value, "result": {"ok": 2}}
    return rec, view


def test_recorder_and_check_command(tmp_path):
    rec, view = _record(tmp_path / "ok.db", lose_result=False)
    assert view.status == "COMPLETED"
    assert [o.op for o in rec.history] == ["dispatch", "poll_next", "fulfill", "get"]
    assert rec.check() == []
    path = rec.write(tmp_path / "history.jsonl")
    run = subprocess.run([sys.executable, "-m", "ferry_harness", "check", str(path), "--report-dir",
                          str(tmp_path / "ok")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads((tmp_path / "ok" / "report.json").read_text())["verdict"] == "pass"

    bad, _ = _record(tmp_path / "bad.db", lose_result=True)
    assert [v.invariant for v in bad.check()] == ["no-lost-task"]
    path = bad.write(tmp_path / "bad.jsonl")
    run = subprocess.run([sys.executable, "-m", "ferry_harness", "check", str(path), "--report-dir",
                          str(tmp_path / "fail"), "--target-caps", "full"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((tmp_path / "fail" / "report.json").read_text())
    assert report["verdict"] == "fail"
    assert report["violations"][0]["invariant"] == "no-lost-task"
    assert report["violations"][0]["history"]
    assert (tmp_path / "fail" / "report.md").read_text().startswith("# ferry")


def test_check_command_rejects_an_unreadable_history(tmp_path):
    (tmp_path / "h.jsonl").write_text("not json\n")
    run = subprocess.run([sys.executable, "-m", "ferry_harness", "check", str(tmp_path / "h.jsonl")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "cannot read" in run.stderr
