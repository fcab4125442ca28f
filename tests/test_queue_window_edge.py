"""A closed queue window is found at its edge and filed under ``lease-half-open``.

The generator aims race claims at a task's ``queued_at + queue_ttl_ms - 1 / +0 / +1`` (as
it does for lease ends); these fixed step lists pin that the executor really goes there.
"""

from __future__ import annotations

import pytest

from ferry_harness.run.campaign import CampaignConfig, Runner
from ferry_harness.run.steps import Dispatch, RaceClaim


def _claim_at_edge(target: str, window: int) -> tuple[list, list]:
    steps = [Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=50),
             RaceClaim(task=0, agents=("alice", "bob"), window=window)]
    with Runner(CampaignConfig(target=target, workers=2)) as r:
        found, ex = r.run_steps(steps)
    start = next(o.now for o in ex.history if o.op == "dispatch")
    claims = [o for o in ex.history if o.op == "claim"]
    assert {c.now for c in claims} == {start + 10_000 + window}  # the clock went to the edge
    return found, claims


def test_a_claim_accepted_at_the_window_end_is_lease_half_open():
    found, _claims = _claim_at_edge("tests.broken_stores:closed_queue_window", 0)
    assert found and found[0].invariant == "lease-half-open", [str(v) for v in found]
    assert "queue window ended" in found[0].message


@pytest.mark.parametrize("target, window", [
    ("tests.broken_stores:closed_queue_window", -1),  # one ms before: the bug does not show
    ("ferry_core:LeaseStore", 0),  # a correct store refuses at the edge
])
def test_the_edge_of_a_correct_window_passes(target, window):
    found, claims = _claim_at_edge(target, window)
    assert found == [], found[0]
    won = [c for c in claims if c.type == "ok" and c.value]
    assert len(won) == (1 if window < 0 else 0)
