"""Classic leasing-store races as named, runnable reproductions.

Each module is one short script of one race (check-then-act claims, impersonation, token
replay, zombie holders, lease and lock boundaries, long readers, idle writes, DAG unlocks,
late results), written against the harness: it acts through the worker pool (so
everything lands in a History) and lets the harness Checker judge, under the invariant ids
of PROTOCOL.md#invariants. Run them with ``ferry-harness scenarios``, or::

    from ferry_harness.runtime.client import WorkerPool
    from ferry_harness.runtime.clock import SharedClock
    from ferry_scenarios import SCENARIOS, ScenarioContext

    clock = SharedClock()
    with WorkerPool("ferry_core:LeaseStore", clock, 4) as pool:
        result = SCENARIOS["thundering-herd"].run(ScenarioContext(pool, clock, "/tmp"))
        print(result.passed, result.invariant, result.explanation)
"""

from __future__ import annotations

from . import (
    checkpoint_starvation,
    daemon_lock_takeover,
    dag_unlock,
    double_finish,
    idle_poll_quiet,
    impersonation,
    late_fulfill_salvage,
    lease_boundary,
    stale_holder_replay,
    thundering_herd,
    zombie_holder,
)
from .base import MAX_ROUNDS, Scenario, ScenarioContext, ScenarioResult, Session

SCENARIOS: dict[str, Scenario] = {
    m.SCENARIO.name: m.SCENARIO
    for m in (
        thundering_herd,
        impersonation,
        stale_holder_replay,
        zombie_holder,
        lease_boundary,
        daemon_lock_takeover,
        checkpoint_starvation,
        idle_poll_quiet,
        dag_unlock,
        late_fulfill_salvage,
        double_finish,
    )
}

__all__ = ["MAX_ROUNDS", "SCENARIOS", "Scenario", "ScenarioContext", "ScenarioResult", "Session"]
