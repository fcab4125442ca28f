"""The shrinker tries the sequential form of a failing example first (every round's calls
one after another): a bug that needs no race is reported as sequential and replays every
time; a race stays a race."""

from __future__ import annotations

import pytest

from ferry_core import LeaseStore
from ferry_harness.run.campaign import Campaign, CampaignConfig
from tests.reproduction import REPLAYS, hits


class ClosedLockStore(LeaseStore):
    """BUG: the daemon lock's take-over condition is ``expires_at < now``: at exactly
    ``expires_at`` nobody may take the lock (the boundary is closed). One call shows it."""

    _ACQUIRE_LOCK_SQL = LeaseStore._ACQUIRE_LOCK_SQL.replace(
        "WHERE daemon_locks.expires_at <= :now", "WHERE daemon_locks.expires_at < :now")  # BUG


def closed_lock(path: str, *, clock) -> ClosedLockStore:
    return ClosedLockStore(path, clock=clock)


def _first_finding(target: str, tmp_path, examples: int):
    # a count, not seconds: on a loaded machine a late find would leave the shrinker too
    # little of a time limit to try the sequential form (then it has shrink_budget_s)
    cfg = CampaignConfig(target=target, budget_s=None, max_examples=examples, seed=1,
                         report_dir=str(tmp_path / "r"))
    out = Campaign(cfg).run()
    assert out.verdict == "fail", f"{target} was not caught"
    return out.report.violations[0]


def test_a_sequential_bug_is_reported_as_sequential_and_replays_every_time(tmp_path, ferry_budget):
    v = _first_finding("tests.harness.run.test_sequential_shrink:closed_lock", tmp_path,
                       int(200 * ferry_budget))
    assert v.invariant == "lease-half-open", v.message
    assert v.sequential is True, v.steps
    assert v.reproduction and "sequential" in v.reproduction
    assert hits(v.reproduced) == REPLAYS, v.reproduced
    races = [s for s in v.steps if s["kind"] in ("lock_race", "race_claim", "race_poll", "holder")]
    assert races and all(s.get("sequential") in ("in-order", "reversed") for s in races), v.steps


@pytest.mark.parametrize("factory", ["check_then_act"])
def test_a_race_is_not_reported_as_sequential(factory, tmp_path, ferry_budget):
    v = _first_finding(f"tests.broken_stores:{factory}", tmp_path, int(200 * ferry_budget))
    assert v.invariant == "single-winner", v.message
    assert v.sequential is False
    assert "sequential" not in (v.reproduction or "")
