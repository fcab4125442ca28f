"""Correct stores taking a freedom ferry_core does not (``tests/freedom_stores.py``) pass.

Each first runs a fixed step list that makes the store take its freedom where the checker
once raised a false alarm (and shows the freedom was really taken), then a short fuzz
campaign in both modes.
"""

from __future__ import annotations

import pytest

from ferry_harness.run.campaign import Campaign, CampaignConfig, Runner
from ferry_harness.run.steps import Clock, Dispatch, IdlePoll, RaceClaim, Reads
from tests.conftest import one_mode_each
from tests.freedom_stores import FREEDOM_STORES

# a lease ends at +50; a sweep applies it at +700, long after the window ferry_core would
# have given it (+50 .. +550): this store's new window is +700 .. +1200. The task is for
# alice only, so the idle probe's polls leave it alone.
ALICE = ("alice", "alice")
LATE_REQUEUE = [
    Dispatch(target_agent="alice", queue_ttl_ms=500, exec_ttl_ms=50, max_attempts=3),
    RaceClaim(task=0, agents=ALICE),
    Clock(tick=700),
    IdlePoll(),  # sweeps: queued_at = now
    Clock(tick=60),
    Reads(),  # SUBMITTED, not expired, queued_at = +700
    RaceClaim(task=0, agents=ALICE),  # inside the new window
    Clock(tick=700),
    RaceClaim(task=0, agents=ALICE),  # the claim itself applies it: queued_at = now
]

# t0 times out and a sweep runs; only then t1 is dispatched onto it (it stays SUBMITTED
# until the next sweep fails it)
DEAD_DEPENDENCY = [
    Dispatch(queue_ttl_ms=60, exec_ttl_ms=50),
    Clock(tick=700),
    IdlePoll(),  # the sweep times t0 out
    Reads(),  # t0 TIMED_OUT
    IdlePoll(),  # another sweep, after that
    Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=50, depends_on=(0,)),
    Reads(),  # t1 SUBMITTED: no sweep has started since its dispatch
    IdlePoll(),
    Reads(),  # t1 FAILED
]


def _statuses(ex, tid: str) -> list[str]:
    return [o.value["status"] for o in ex.history
            if o.op == "get" and o.type == "ok" and o.args.get("task_id") == tid]


def test_a_late_requeue_is_accepted():
    with Runner(CampaignConfig(target=FREEDOM_STORES["late_requeue"], workers=2)) as r:
        found, ex = r.run_steps(LATE_REQUEUE)
    assert found == [], found[0]
    view = next(o.value for o in ex.history if o.op == "get" and o.type == "ok")
    assert (view["status"], view["is_logically_expired"]) == ("SUBMITTED", False)
    assert view["queued_at"] == ex.history.ops[0].now + 700  # not lease_expires_at (+50)
    won = [o for o in ex.history if o.op == "claim" and o.type == "ok" and o.value]
    assert [c.value["attempt"] for c in won] == [1, 2, 3]  # both late claims got it


def test_a_dependent_of_a_dead_task_may_wait_for_the_next_sweep():
    with Runner(CampaignConfig(target=FREEDOM_STORES["dead_dependency_waits"], workers=2)) as r:
        found, ex = r.run_steps(DEAD_DEPENDENCY)
    assert found == [], found[0]
    assert _statuses(ex, ex.tasks[1])[:2] == ["SUBMITTED", "FAILED"]


@pytest.mark.parametrize(("name", "mode"), one_mode_each(FREEDOM_STORES))
def test_freedom_store_passes_a_short_campaign(name, mode, tmp_path, ferry_budget):
    cfg = CampaignConfig(target=FREEDOM_STORES[name], budget_s=3.0 * ferry_budget, seed=1,
                         mode=mode, report_dir=str(tmp_path / "r"))
    outcome = Campaign(cfg).run()
    found = outcome.report.violations
    assert outcome.verdict == "pass", found[0].message if found else outcome.report.unknown
