"""A search example checks each step while the workers run the next step's first round
(``Executor(defer_checks=True)``): the check must see no op in flight, and must find what
the immediate check finds, one step later at most, the last step included."""

from __future__ import annotations

import os

import pytest

from ferry_core import LeaseStore
from ferry_harness.run.executor import Executor
from ferry_harness.run.steps import Dispatch, RaceClaim, Reads
from ferry_harness.runtime.client import PlannedCall, WorkerPool
from ferry_harness.runtime.clock import SharedClock

BROKEN = "tests.broken_stores:token_in_view"  # a get shows the live token: token-unique


@pytest.fixture
def rig(tmp_path):
    """rig(target, defer) -> an Executor on a fresh 2-worker pool."""
    pools = []

    def make(target: str, defer: bool) -> Executor:
        clock = SharedClock()
        pool = WorkerPool(target, clock, 2)
        pool.start()
        pools.append(pool)
        return Executor(pool, clock, str(tmp_path / f"d{len(pools)}.db"), defer_checks=defer)

    yield make
    for pool in pools:
        pool.close()


def test_what_runs_meanwhile_sees_no_op_of_the_round_in_flight(rig):
    ex = rig("ferry_core:LeaseStore", False)
    before = len(ex.history)
    seen: list[int] = []
    ops = ex.pool.run([PlannedCall(slot=0, op="dispatch", args={}, agent="client"),
                       PlannedCall(slot=1, op="get", args={"task_id": "nope"}, agent="a")],
                      ex.history, meanwhile=lambda: seen.append(len(ex.history)))
    assert seen == [before]  # the round's two ops were not in the history yet
    assert [o.index for o in ex.history.ops[before:]] == [o.index for o in ops]
    assert all(o.complete_ns for o in ops)


def test_a_raising_meanwhile_still_collects_the_round(rig):
    ex = rig("ferry_core:LeaseStore", False)

    def boom() -> None:
        raise RuntimeError("checker broke")

    with pytest.raises(RuntimeError):
        ex.pool.run([PlannedCall(slot=0, op="dispatch", args={}, agent="client")],
                    ex.history, meanwhile=boom)
    assert ex.history.ops[-1].complete_ns  # answered and recorded, no reply left unread
    [op] = ex.pool.run([PlannedCall(slot=0, op="get", args={"task_id": "x"}, agent="a")],
                       ex.history)
    assert op.error == "NotFound"  # the next round reads its own answer, not the old one


def _run(ex: Executor, steps) -> list[tuple[int, str]]:
    """(index of the step that returned it, invariant) for every violation returned,
    the closing audit as step len(steps)."""
    out = []
    for i, step in enumerate(steps):
        out += [(i, v.invariant) for v in ex.run_step(step)]
        if out:
            return out
    return out + [(len(steps), v.invariant) for v in ex.finish()]


@pytest.mark.parametrize("then_dispatch", [False, True], ids=["last-step", "then-a-round"])
def test_a_deferred_check_finds_what_the_immediate_one_finds(rig, then_dispatch):
    steps = [Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=300), RaceClaim(task=0, agents=("alice", "bob")), Reads()]
    if then_dispatch:
        steps.append(Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=300))
    now = _run(rig(BROKEN, False), steps)
    late = _run(rig(BROKEN, True), steps)
    assert now == [(2, "token-unique")]  # the Reads step's get showed the token
    # deferred: returned by the step after (its first round ran meanwhile), or by finish()
    assert late == [(3, "token-unique")]


def test_a_correct_store_passes_with_deferred_checks(rig):
    ex = rig("ferry_core:LeaseStore", True)
    steps = [Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=300), RaceClaim(task=0, agents=("alice", "bob")), Reads(), Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=300)]
    assert _run(ex, steps) == []
    assert ex.violations == [] and not ex._unchecked  # every step was checked


class _DiesOnGet(LeaseStore):
    """get("die") ends the worker process: a sequence must not wait for the rest."""

    def get(self, task_id):
        if task_id == "die":
            os._exit(3)
        return super().get(task_id)


def dies_on_get(path: str, *, clock) -> _DiesOnGet:
    return _DiesOnGet(path, clock=clock)


def _gets(*task_ids: str) -> list[PlannedCall]:
    return [PlannedCall(slot=1, op="get", args={"task_id": t}, agent="auditor")
            for t in task_ids]


def test_a_sequence_runs_its_calls_one_after_another_each_its_own_round(rig):
    ex = rig("ferry_core:LeaseStore", False)
    ops = ex.pool.run_sequence(_gets("a", "b", "c"), ex.history, first_round=7)
    assert [o.round for o in ops] == [7, 8, 9]
    assert [o.error for o in ops] == ["NotFound"] * 3
    assert all(a.complete_ns <= b.invoke_ns for a, b in zip(ops, ops[1:], strict=False))
    assert ex.history.ops[-3:] == ops


def test_a_sequence_whose_worker_dies_records_the_rest_as_never_run(rig):
    ex = rig("tests.harness.run.test_deferred_check:dies_on_get", False)
    before = ex.pool.slots[1].id
    ops = ex.pool.run_sequence(_gets("a", "die", "b"), ex.history)
    assert ops[0].error == "NotFound"
    assert "died" in ops[1].note
    assert "replaced before the call" in ops[2].note and ops[2].complete_ns
    assert ex.pool.slots[1].id != before  # a fresh worker took the slot
    [op] = ex.pool.run([PlannedCall(slot=1, op="get", args={"task_id": "x"}, agent="a")],
                       ex.history)
    assert op.error == "NotFound"  # the new worker answers its own call, on an open store
