"""The fuzzer end to end: every broken store is caught under its invariant id, and the
reference store passes with both claim strategies. Budgets are small; the
``--ferry-thorough`` option (see conftest) multiplies them for long runs."""

from __future__ import annotations

import json

import pytest

from ferry_harness.check.checker import invariant_kind
from ferry_harness.run.campaign import Campaign, CampaignConfig, write_report
from tests.broken_stores import BROKEN
from tests.reproduction import MIN_HITS, hits


def run(target: str, tmp_path, budget: float, seed: int = 0, **kw):
    cfg = CampaignConfig(target=target, budget_s=budget, seed=seed, report_dir=str(tmp_path / "r"),
                         shrink_budget_s=5.0, **kw)
    outcome = Campaign(cfg).run()
    write_report(outcome)
    return outcome


# the tight-window stores (no sleep in their window, caught by the race gate) cost a
# campaign each on top of their wide-window twins: run with --ferry-thorough
@pytest.mark.parametrize("factory", [
    pytest.param(f, marks=pytest.mark.thorough) if f.startswith("tight_") else f
    for f in sorted(BROKEN)])
def test_broken_store_is_caught_with_its_invariant(factory, tmp_path, ferry_budget):
    invariant, _why = BROKEN[factory]
    # a robustness finding never ends the search (PROTOCOL.md#several-findings): such a
    # store is searched for safety violations to the end of its budget, so keep it short
    budget = 60 if invariant_kind(invariant) != "robustness" else 5
    outcome = run(f"tests.broken_stores:{factory}", tmp_path, budget=budget * ferry_budget)
    assert outcome.verdict == "fail", f"{factory} ({invariant}) was not caught"
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["violations"][0]["invariant"] == invariant, report["violations"][0]["message"]
    v = report["violations"][0]
    assert v["steps"] and v["history"], "a violation carries its minimal steps and history lines"
    assert hits(v["reproduced"]) >= MIN_HITS, v["reproduced"]  # the rate README.md states
    for name in ("report.json", "report.md", "history.jsonl", "timeline.html"):
        assert (tmp_path / "r" / name).stat().st_size > 0


@pytest.mark.parametrize("target", [
    "ferry_core:cas_store", pytest.param("ferry_core:immediate_store", marks=pytest.mark.thorough)])
def test_reference_store_passes(target, tmp_path, ferry_budget):
    # a count, not seconds: on a loaded machine 6 s may not reach a DAG step, and "every
    # invariant checked" must not depend on the machine's load
    outcome = run(target, tmp_path, budget=None, seed=7, max_examples=int(60 * ferry_budget))
    assert outcome.verdict == "pass", outcome.report.violations[:1]
    stats = outcome.report.stats
    assert stats.examples > 5 and stats.race_rounds > 20
    assert all(v.startswith("checked (") for v in outcome.report.invariants.values()), \
        outcome.report.invariants
