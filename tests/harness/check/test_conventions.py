"""Declared lease conventions (PROTOCOL.md#lease-conventions): a queue may keep its own
boundary if it declares it, and is then held to consistency — never two holders, the
holder refused exactly when another may take the task. Protocol stores stay half-open."""

from __future__ import annotations

import pytest

from ferry_harness.run.campaign import Campaign, CampaignConfig


def _run(target: str, tmp_path, budget: float, seed: int = 0):
    cfg = CampaignConfig(target=target, budget_s=budget, seed=seed, report_dir=str(tmp_path))
    return Campaign(cfg).run()


def test_a_closed_lease_store_that_declares_it_passes(tmp_path, ferry_budget):
    out = _run("tests.broken_stores:closed_lease_declared", tmp_path, 5 * ferry_budget)
    assert out.verdict == "pass", out.report.violations[:1]
    assert out.report.stats.race_rounds > 10


def test_the_same_store_held_to_half_open_fails(tmp_path, ferry_budget):
    out = _run("tests.broken_stores:closed_lease", tmp_path, 20 * ferry_budget)
    assert out.verdict == "fail"
    assert out.report.violations[0].invariant == "lease-half-open"


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.thorough)])
def test_a_declared_convention_the_store_does_not_keep_fails(tmp_path, ferry_budget, seed):
    out = _run("tests.broken_stores:inconsistent_closed", tmp_path, 20 * ferry_budget, seed)
    assert out.verdict == "fail"
    assert out.report.violations[0].invariant in ("single-winner", "lease-half-open")
