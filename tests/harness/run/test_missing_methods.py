"""PROTOCOL.md#missing-methods: ferry never generates a call to an operation the target
lacks. Correct stores without some operations (``tests/capability_stores.py``) pass a short
campaign (each in one mode; both with --ferry-thorough); the report says which invariants were skipped and why."""

from __future__ import annotations

import pytest

from ferry_harness.run.campaign import Campaign, CampaignConfig
from tests.capability_stores import MISSING
from tests.conftest import one_mode_each


@pytest.mark.parametrize(("name", "mode"), one_mode_each(MISSING))
def test_a_target_without_some_operations_passes(name, mode, tmp_path, ferry_budget):
    cfg = CampaignConfig(target=f"tests.capability_stores:{name}", budget_s=3.0 * ferry_budget,
                         seed=0, mode=mode, report_dir=str(tmp_path / "r"))
    outcome = Campaign(cfg).run()
    found = outcome.report.violations
    assert outcome.verdict == "pass", found[0].message if found else outcome.report.unknown
    called = set(outcome.report.stats.coverage.ops)
    assert not called & MISSING[name], f"called {sorted(called & MISSING[name])}"
    assert called, "the campaign ran nothing at all"
    status = outcome.report.invariants
    if name == "locks_only":
        assert status["single-winner"].startswith("skipped (target lacks dispatch")
        assert status["lock-exclusive"].startswith("checked (")
        assert status["lease-half-open"].startswith("checked (")  # lock boundaries
    if name == "no_sweep_no_reads":  # no get: inspect() and every claim or poll still judged
        assert status["no-lost-task"].startswith("checked ("), status["no-lost-task"]
