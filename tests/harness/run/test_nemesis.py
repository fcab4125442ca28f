"""The nemesis: kill -9 and SIGSTOP inside operations, and what must hold afterwards.

Deterministic tests use stores (defined here, loaded by the workers as
``tests.harness.run.test_nemesis:<factory>``) that hold one spot of ``fulfill`` open for SLOW_S, so a
fault fired after half of that lands exactly there: inside the write transaction, or
between the holder guard and the write. The campaign tests use the real fault rules.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import pytest

from ferry_core import LeaseStore
from ferry_harness.check.history import FAIL, INFO, OK
from ferry_harness.run.campaign import Campaign, CampaignConfig
from ferry_harness.run.executor import Executor, Stats
from ferry_harness.run.nemesis import FAULTS, Nemesis, wal_writer
from ferry_harness.run.steps import Fault
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from tests import broken_stores
from tests.broken_stores import FAULT_BROKEN
from tests.procs import children_of
from tests.reproduction import FAULT_ONLY_MIN_HITS, hits

SLOW_S = 0.3
HALF_US = int(SLOW_S * 1e6 / 2)


class SlowCommitStore(LeaseStore):
    """fulfill holds its write transaction open SLOW_S before COMMIT (otherwise correct)."""

    def fulfill(self, task_id, agent_id, token, result=None):
        plain_tx = self._tx

        @contextmanager
        def slow_tx():
            with plain_tx() as conn:
                yield conn
                time.sleep(SLOW_S)

        plain_write = self._holder_write

        def in_a_transaction(*args, **kw):  # fulfill is one autocommit UPDATE in LeaseStore
            return plain_write(*args, **{**kw, "autocommit": False})

        self._tx, self._holder_write = slow_tx, in_a_transaction
        try:
            return super().fulfill(task_id, agent_id, token, result)
        finally:
            del self._tx, self._holder_write


class SlowAfterGuardStore(LeaseStore):
    """fulfill pauses SLOW_S between its holder guard and its write (otherwise correct)."""

    _slow = False

    def fulfill(self, task_id, agent_id, token, result=None):
        self._slow = True
        try:
            return super().fulfill(task_id, agent_id, token, result)
        finally:
            self._slow = False

    def _guard(self, *args):
        row = super()._guard(*args)
        if self._slow:
            time.sleep(SLOW_S)
        return row


def slow_commit(path, *, clock):
    return SlowCommitStore(path, clock=clock)


def slow_after_guard(path, *, clock):
    return SlowAfterGuardStore(path, clock=clock)


@pytest.fixture
def rig(tmp_path):
    """rig(target) -> an Executor on a fresh 3-worker pool with a kill/pause nemesis."""
    pools = []

    def make(target: str) -> Executor:
        clock = SharedClock()
        pool = WorkerPool(target, clock, 3)
        pool.start()
        pools.append(pool)
        stats = Stats()
        return Executor(pool, clock, str(tmp_path / "n.db"), stats=stats,
                        nemesis=Nemesis(("kill", "pause")))

    yield make
    for pool in pools:
        pool.close()


def probes(ex, at):
    return [o for o in ex.history if o.extra.get("probe", {}).get("at") == at]


def final_get(ex, task_id):
    return ex._one(0, "get", "auditor", task_id=task_id).value


@pytest.mark.parametrize("aim", ["random", "write-tx"])
def test_kill_inside_the_write_transaction(rig, aim):
    """The killed fulfill is info; the worker id is retired and a fresh worker takes the
    slot; nothing was committed; the orphan is claimable at expires, not at expires-1."""
    ex = rig("tests.harness.run.test_nemesis:slow_commit")
    ids_before = {w.id for w in ex.pool.slots}
    assert ex.run_step(Fault(fault="kill", aim=aim, delay_us=HALF_US)) == []
    [killed] = [o for o in ex.history if o.op == "fulfill" and "killed" in o.extra]
    assert killed.type == INFO and "died" in killed.note
    [note] = [o for o in ex.history if o.op == "nemesis" and o.args["fault"] == "kill"]
    assert note.args["landed"] == "mid-op" and note.args["in_write_tx"] is True
    assert note.args["worker"] in ids_before
    assert note.args["worker"] not in {w.id for w in ex.pool.slots}  # retired for good
    assert note.args["new_worker"] in {w.id for w in ex.pool.slots} - ids_before
    assert ex.stats.faults["kill"] == 1 and ex.stats.faults["kill:in-write-tx"] == 1
    assert wal_writer(ex.path) is None  # the kernel dropped the dead writer's lock
    task, expires = note.args["task"], probes(ex, "expires")[0].extra["probe"]["expires"]
    assert all(o.type == OK and o.value is None and o.now == expires - 1
               for o in probes(ex, "expires-1"))
    won = [o for o in probes(ex, "expires") if o.value]
    assert len(won) == 1 and won[0].now == expires and won[0].value["attempt"] == 2
    view = final_get(ex, task)
    assert view["status"] == "COMPLETED" and view["result"]["rescued_by"] == won[0].agent
    assert [o.value for o in ex.history if o.op == "integrity_check"] == ["ok"]
    [ckpt] = [o for o in ex.history if o.op == "checkpoint"]
    assert ckpt.extra["wal_after"] == 0
    assert ex.violations == []


def test_pause_the_zombie_is_refused(rig):
    """SIGSTOP between the guard and the write, past the lease: a rescuer reclaims at
    exactly expires; the woken zombie's write and its later retry are both refused."""
    ex = rig("tests.harness.run.test_nemesis:slow_after_guard")
    assert ex.run_step(Fault(fault="pause", delay_us=HALF_US)) == []
    zombie = [o for o in ex.history if o.op == "fulfill" and "zombie" in o.extra]
    assert [o.type for o in zombie] == [FAIL, FAIL], [o.describe() for o in zombie]
    assert zombie[0].extra["zombie"]["landed"] == "mid-op"
    assert zombie[0].extra["zombie"]["rescued_by"] is not None
    expires = zombie[0].extra["zombie"]["expires"]
    assert all(o.value is None for o in probes(ex, "expires-1"))
    [won] = [o for o in probes(ex, "expires") if o.value]
    assert won.now == expires
    view = final_get(ex, won.value["task_id"])
    assert view["status"] == "COMPLETED" and view["result"]["rescued_by"] == won.agent
    assert ex.stats.faults["pause"] == 1 and ex.stats.faults["pause:mid-op"] == 1
    assert ex.violations == []


def test_pause_catches_an_unfenced_write(rig, monkeypatch):
    """The same pause against a store whose write forgets the token: caught, by id."""
    monkeypatch.setattr(broken_stores, "TOCTOU_WINDOW_S", SLOW_S)  # inherited by the forks
    ex = rig("tests.broken_stores:unfenced_write")
    found = ex.run_step(Fault(fault="pause", delay_us=HALF_US))
    assert found and found[0].invariant == "lease-half-open", found
    assert "zombie" in found[0].message


FAULT_WINDOW_S = 0.010  # the fault-broken stores' window in the campaign tests, s


def _campaign(target, faults, budget, tmp_path, seed=0):
    cfg = CampaignConfig(target=target, faults=faults, budget_s=budget, seed=seed,
                         report_dir=str(tmp_path / "r"), shrink_budget_s=3.0, workers=3)
    return Campaign(cfg).run()


# pinned_lease is the second kill-only store (split_claim is the first): --ferry-thorough
@pytest.mark.parametrize("factory", [
    pytest.param(f, marks=pytest.mark.thorough) if f == "pinned_lease" else f
    for f in sorted(FAULT_BROKEN)])
def test_fault_broken_store_is_caught_by_its_fault(factory, tmp_path, ferry_budget, monkeypatch):
    faults, invariant, _why = FAULT_BROKEN[factory]
    # a pause replays at its recorded delay; on a loaded machine (CI: two xdist workers on
    # two cores) the victim's progress at that delay jitters by more than the default 2 ms
    # window (0/10 replays seen): a wider one keeps it on target more often (a kill is shrunk
    # to aim after-commit, which does not depend on timing)
    monkeypatch.setattr(broken_stores, "TOCTOU_WINDOW_S", FAULT_WINDOW_S)  # inherited by the forks
    t0 = time.perf_counter()
    out = _campaign(f"tests.broken_stores:{factory}", faults, 20 * ferry_budget, tmp_path)
    assert out.verdict == "fail", f"{factory} was not caught by {faults}"
    v = out.report.violations[0]
    assert v.invariant == invariant, v.message
    assert v.steps[-1]["kind"] == "fault" and v.steps[-1]["fault"] in faults
    if "kill" in faults:  # shrunk to aim after-commit: the rate README.md states
        assert hits(v.reproduced) >= FAULT_ONLY_MIN_HITS, v.reproduced
    else:  # a pause lands by its delay: README.md promises the count as measured, no rate
        hits(v.reproduced)  # (out of REPLAYS: hits() checks the count was taken in full)
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("target", [
    "ferry_core:cas_store", pytest.param("ferry_core:immediate_store", marks=pytest.mark.thorough)])
def test_reference_store_passes_a_fault_campaign(target, tmp_path, ferry_budget):
    out = _campaign(target, FAULTS, 8 * ferry_budget, tmp_path, seed=3)  # 4 s saw 0 pauses under load
    assert out.verdict == "pass", out.report.violations[:1]
    faults = out.report.stats.faults
    assert faults.get("kill", 0) > 0 and faults.get("pause", 0) > 0 and faults.get("clock", 0) > 0
    assert out.report.invariants["integrity"].startswith("checked (")
    assert children_of(os.getpid()) == []  # every worker, replacement and reader is gone


def test_kill_between_a_claims_two_transactions_loses_the_task(rig, monkeypatch):
    """A kill aimed into the claim (``during="claim"``) lands between split_claim's two
    commits: the task stays CLAIMED with no lease of its own, and at expires no rescuer can
    take it; the same kill on the reference store is only an indeterminate claim."""
    monkeypatch.setattr(broken_stores, "TOCTOU_WINDOW_S", SLOW_S)  # inherited by the forks
    ex = rig("tests.broken_stores:split_claim")
    found = ex.run_step(Fault(fault="kill", during="claim", aim="random", delay_us=HALF_US))
    assert found and found[0].invariant == "lease-half-open", found
    [killed] = [o for o in ex.history if "killed" in o.extra]
    assert killed.op == "claim" and killed.type == INFO
    assert ex.stats.faults["kill-in:claim"] == 1


@pytest.mark.parametrize("during", ["claim", "release", "extend", "salvage", "acquire_lock",
                                    "release_lock", "checkpoint"])
def test_kills_anywhere_leave_the_reference_store_correct(rig, during):
    """Kills in every kind of write (timer anywhere in the call, or hunting the write
    transaction): whatever committed, nothing the checker can fault."""
    ex = rig("ferry_core:cas_store")
    for aim in ("random", "write-tx"):
        for delay in (0, 150, 400):
            ex.run_step(Fault(fault="kill", during=during, aim=aim, delay_us=delay))
    assert ex.finish() == [] and ex.violations == []
    kinds = {o.args.get("during") for o in ex.history if o.op == "nemesis"}
    assert kinds == {during}
