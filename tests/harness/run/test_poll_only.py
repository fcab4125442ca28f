"""Poll-only targets (no ``claim``) get the depth claim-by-id targets get.

The stores are ``tests/poll_only_stores.py``: ``ferry_core.LeaseStore`` with ``claim``
hidden, correct or with one bug (an expired lease requeued late; a fulfill whose final
write forgets the token). Scenarios must run on them rather than skip, and the nemesis's
rescuers must poll, so that a late reclaim and a zombie holder are caught under
``--faults kill,pause`` while the correct store passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry_harness.check.history import FAIL, OK
from ferry_harness.run.campaign import Campaign, CampaignConfig
from ferry_harness.run.executor import Executor, Stats
from ferry_harness.run.nemesis import Nemesis
from ferry_harness.run.steps import Dispatch, Fault
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.target import load_factory
from ferry_scenarios import SCENARIOS, ScenarioContext
from tests import broken_stores
from tests.poll_only_stores import POLL_ONLY_BROKEN, SLOW_S

WORKERS = 4
HALF_US = int(SLOW_S * 1e6 / 2)
STORES = "tests.poll_only_stores"


def routed(path: str, *, clock):
    """Test-only factory: the target is named by the database's directory (``~`` for ``:``)."""
    return load_factory(Path(path).parent.name.replace("~", ":"))(path, clock=clock)


@pytest.fixture(scope="module")
def scenario_pool(tmp_path_factory):
    """One pool for every scenario run here; ``run(name, factory)`` runs one scenario."""
    root = tmp_path_factory.mktemp("poll-only")
    clock = SharedClock()
    pool = WorkerPool("tests.harness.run.test_poll_only:routed", clock, WORKERS)
    try:
        pool.start()

        def run(name: str, factory: str):
            workdir = root / f"{STORES}~{factory}"
            workdir.mkdir(exist_ok=True)
            return SCENARIOS[name].run(ScenarioContext(pool, clock, str(workdir)))

        yield run
    finally:
        pool.close()


def _explain(result) -> str:
    lines = [f"{result.name}: {result.status} [{result.invariant}] {result.explanation}"]
    lines += [f"  {o.describe()}" for o in list(result.history)[-12:]]
    return "\n".join(lines)


# ---------------------------------------------------------------------- scenarios
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_runs_and_passes_on_a_correct_poll_only_store(scenario_pool, name):
    result = scenario_pool(name, "poll_only")
    assert result.status == "pass", _explain(result)  # not "skip": nothing needs claim(id)
    assert "claim" not in result.capabilities
    assert not any(o.op == "claim" for o in result.history)


def test_rescuers_poll_and_catch_a_late_reclaim(scenario_pool):
    result = scenario_pool("zombie-holder", "late_reclaim")
    assert (result.status, result.invariant) == ("fail", "lease-half-open"), _explain(result)
    empty = [o for o in result.history if o.op == "poll_next" and o.type == OK and o.value is None]
    assert empty and set(result.violations[0].ops) <= {o.index for o in empty}


def test_the_boundary_race_polls_on_a_poll_only_store(scenario_pool):
    result = scenario_pool("lease-boundary", "poll_only")
    polls = [o for o in result.history if o.op == "poll_next" and o.round is not None
             and any(p.round == o.round and p.op == "fulfill" for p in result.history)]
    assert len(polls) == 9  # 3 TTLs x expires-1, expires, expires+1
    assert sum(1 for o in polls if o.value) == 6  # won at expires and expires+1, not before


# ---------------------------------------------------------------------- the nemesis
@pytest.fixture
def rig(tmp_path):
    """rig(factory) -> an Executor on a fresh 3-worker pool with a kill/pause nemesis."""
    pools = []

    def make(factory: str) -> Executor:
        clock = SharedClock()
        pool = WorkerPool(f"{STORES}:{factory}", clock, 3)
        pool.start()
        pools.append(pool)
        stats = Stats()
        return Executor(pool, clock, str(tmp_path / "p.db"), stats=stats,
                        nemesis=Nemesis(("kill", "pause")))

    yield make
    for pool in pools:
        pool.close()


def _probes(ex: Executor, at: str, key: str = "probe"):
    return [o for o in ex.history if o.extra.get(key, {}).get("at") == at]


def _queue(ex: Executor, n: int) -> None:
    for _ in range(n):  # ready tasks a polling rescuer may be handed instead of the orphan
        ex.run_step(Dispatch(target_agent=None, queue_ttl_ms=60_000, exec_ttl_ms=300,
                             max_attempts=2))


def test_kill_probe_polls_past_other_ready_tasks_to_the_orphan(rig):
    ex = rig("slow_poll_only")
    _queue(ex, 5)
    step = Fault(fault="kill", aim="random", delay_us=HALF_US, slot=0)
    assert ex.run_step(step) == [], ex.violations
    [note] = [o for o in ex.history if o.op == "nemesis" and o.args["fault"] == "kill"]
    assert note.args["landed"] == "mid-op"
    assert _probes(ex, "expires-1", "probe_other")  # rescuers were handed other tasks first
    assert all(o.value is None for o in _probes(ex, "expires-1"))
    won = [o for o in _probes(ex, "expires") if o.value]
    assert len(won) == 1 and won[0].op == "poll_next"
    assert won[0].value["task_id"] == note.args["task"]
    assert won[0].now == won[0].extra["probe"]["expires"]
    view = ex._one(0, "get", "auditor", task_id=note.args["task"]).value
    assert view["status"] == "COMPLETED" and view["result"]["rescued_by"] == won[0].agent


def test_kill_probe_catches_a_late_reclaim_by_polling(rig):
    ex = rig("slow_late_reclaim")
    _queue(ex, 5)
    found = ex.run_step(Fault(fault="kill", aim="random", delay_us=HALF_US, slot=0))
    assert found and found[0].invariant == "lease-half-open", found
    assert "none of" in found[0].message
    flagged = [o for o in ex.history if o.index in found[0].ops and o.op == "poll_next"]
    assert flagged and all(o.value is None and o.extra["probe"]["at"] == "expires"
                           for o in flagged)


def test_pause_catches_a_zombie_on_a_poll_only_store(rig, monkeypatch):
    monkeypatch.setattr(broken_stores, "TOCTOU_WINDOW_S", SLOW_S)  # inherited by the forks
    ex = rig("zombie_write")
    found = ex.run_step(Fault(fault="pause", delay_us=HALF_US, slot=0))
    assert found and found[0].invariant == "lease-half-open", found
    assert "zombie" in found[0].message
    zombie = [o for o in ex.history if o.op == "fulfill" and "zombie" in o.extra]
    assert zombie[0].extra["zombie"]["rescued_by"] is not None  # a poll rescued the task


def test_pause_on_a_correct_poll_only_store_refuses_the_zombie(rig):
    ex = rig("slow_poll_only")
    assert ex.run_step(Fault(fault="pause", delay_us=HALF_US, slot=0)) == [], ex.violations
    zombie = [o for o in ex.history if o.op == "fulfill" and "zombie" in o.extra]
    assert [o.type for o in zombie] == [FAIL, FAIL]
    assert zombie[0].extra["zombie"]["rescued_by"] is not None


# ---------------------------------------------------------------------- campaigns
def _campaign(factory: str, budget: float, tmp_path, seed: int = 0):
    cfg = CampaignConfig(target=f"{STORES}:{factory}", faults=("kill", "pause"),
                         budget_s=budget, seed=seed, report_dir=str(tmp_path / "r"),
                         shrink_budget_s=3.0, workers=3)
    return Campaign(cfg).run()


@pytest.mark.parametrize("factory", sorted(POLL_ONLY_BROKEN))
def test_poll_only_bug_is_caught_under_kill_and_pause(factory, tmp_path, ferry_budget):
    faults, invariant = POLL_ONLY_BROKEN[factory]
    out = _campaign(factory, 20 * ferry_budget, tmp_path)
    assert out.verdict == "fail", f"{factory} was not caught by {faults}"
    v = out.report.violations[0]
    assert v.invariant == invariant, v.message
    assert v.steps[-1]["kind"] == "fault" and v.steps[-1]["fault"] in faults


def test_correct_poll_only_store_passes_kill_and_pause(tmp_path, ferry_budget):
    out = _campaign("poll_only", 6 * ferry_budget, tmp_path, seed=1)
    assert out.verdict == "pass", out.report.violations[:1]
    faults = out.report.stats.faults
    assert faults.get("kill", 0) > 0 and faults.get("pause", 0) > 0
