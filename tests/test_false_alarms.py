"""Regression tests for false alarms and misnamed findings met on stores ferry did not write.

Each builds the history a correct store produced (hand-built: deterministic, and it pins the
exact fact) and asserts the checker accepts it; a paired history with the real bug must
still be caught, under the right name, with a message that says what to fix.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from ferry_harness.check.checker import Checker
from ferry_harness.check.history import FAIL, History, NotJson
from ferry_harness.check.model import ModelConfig
from ferry_harness.run.campaign import CampaignConfig, Runner
from ferry_harness.run.steps import Clock, Dispatch, IdlePoll
from tests.histories import DECLARED, SPEC_STORE, T0, TOKEN_A, TOKEN_B, Recorder


def check(rec: Recorder, cfg: ModelConfig = SPEC_STORE) -> list:
    return Checker(cfg).check(rec.history)


# ------------------------------------------------------------------ 1. bearer tokens
def _bearer_release() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("release", "mallory", {"task_id": "t1", "token": TOKEN_A, "reason": "x"})
    return rec


def test_another_agent_with_the_live_token_is_the_holder_by_default():
    assert check(_bearer_release()) == []


def test_a_store_declaring_holder_binding_must_refuse_another_agent():
    [v] = check(_bearer_release(), DECLARED)
    assert v.invariant == "holder-guard"
    assert "with the holder's token accepted" in v.message and "declares holder-binding" in v.message


def test_a_wrong_token_is_still_a_holder_guard_violation_for_bearer_stores():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("release", "mallory", {"task_id": "t1", "token": TOKEN_B, "reason": "x"})
    [v] = check(rec)
    assert v.invariant == "holder-guard" and "not the current one" in v.message


# ------------------------------------------------------------------ 2. salvage shapes
def _late_fulfill(entries: list) -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    result = {"by": 0, "step": 4}
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": result},
           now=T0 + 50, type=FAIL, error="LeaseExpired")
    rec.op("salvaged", "auditor", {"task_id": "t1"}, now=T0 + 50, value=entries)
    return rec


@pytest.mark.parametrize("entries", [
    [{"late_result": {"by": 0, "step": 4}}],
    [["late", "alice", {"by": 0, "step": 4}, T0 + 50]],
    [json.dumps({"late_result": {"by": 0, "step": 4}})],
    [{"task_id": "t1", "agent_id": "alice", "kind": "late_result", "data": {"by": 0, "step": 4},
      "created_at": T0 + 50}],
], ids=["one-key-dict", "list", "json-text", "ferry_core-records"])
def test_any_faithful_salvage_shape_is_accepted(entries):
    assert check(_late_fulfill(entries)) == []


def test_a_lost_late_result_is_caught():
    [v] = check(_late_fulfill([]))
    assert v.invariant == "no-lost-task" and "lost a late_result" in v.message


def test_a_late_result_that_is_no_json_need_not_be_kept():
    """The configurable store checks the lease before the arguments (refusal order is free):
    a late fulfill of a non-JSON result is refused LeaseExpired, and there is no valid result
    to keep (PROTOCOL.md#late-results; found by the covering matrix, combo_00)."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": {1, 2}},
           now=T0 + 50, type=FAIL, error="LeaseExpired")
    rec.op("salvaged", "auditor", {"task_id": "t1"}, now=T0 + 50, value=[])
    assert check(rec) == []
    # the same history read back from history.jsonl (ferry-harness check): still no JSON
    again = History.from_jsonl(rec.history.to_jsonl())
    assert isinstance(again.ops[2].args["result"], NotJson)
    assert Checker(SPEC_STORE).check(again) == []


def test_a_store_without_results_need_not_keep_a_late_result():
    """A store without ``results`` keeps no result, a late one included (combo_00, which
    also accepts a non-JSON result, as such a store may: PROTOCOL.md#late-results)."""
    no_results = dataclasses.replace(SPEC_STORE, results=False)
    assert check(_late_fulfill([]), no_results) == []
    [v] = check(_late_fulfill([]))  # with results it is still a lost late result
    assert "lost a late_result" in v.message


def test_an_entry_written_by_a_refused_call_is_caught():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("salvage", "mallory", {"task_id": "t1", "token": TOKEN_B, "partial": {"p": 1}},
           type=FAIL, error="InvalidToken")
    rec.op("salvaged", "auditor", {"task_id": "t1"}, value=[{"partial": {"p": 1}}])
    [v] = check(rec)
    assert v.invariant == "no-lost-task" and "written by a refused call" in v.message


def test_racing_late_fulfills_need_only_keep_what_the_first_saw():
    """Four holders race a late fulfill with one token: the first applies the expiry and
    keeps its result; the others met an expiry already applied (SPEC §9 freedom)."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    for i in range(4):
        rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": {"by": i}},
               now=T0 + 50, type=FAIL, error="LeaseExpired", concurrent=i > 0)
    rec.op("salvaged", "auditor", {"task_id": "t1"}, now=T0 + 50,
           value=[{"late_result": {"by": 2}}])
    assert check(rec) == []


# ------------------------------------------------------------------ 4. refusal classes
def _late_wrong_class() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": 1})
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": 2},
           type=FAIL, error="InvalidToken")
    return rec


def test_any_failing_check_may_name_the_refusal():
    assert check(_late_wrong_class()) == []


def test_an_order_difference_is_a_refusal_order_finding_only_when_declared():
    [v] = check(_late_wrong_class(), DECLARED)
    assert v.invariant == "refusal-order" and "WrongState" in v.message


def test_a_class_whose_check_passes_is_a_refusal_class_finding():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "mallory", {"task_id": "t1", "token": TOKEN_B, "result": 1},
           type=FAIL, error="LimitExceeded")
    [v] = check(rec)
    assert v.invariant == "refusal-class" and "InvalidToken" in v.message


# ------------------------------------------------------------------ 5. the right name
def test_two_concurrent_winners_are_single_winner_with_the_task_named():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, concurrent=True)
    found = check(rec)
    assert found[0].invariant == "single-winner"
    assert "task t1" in found[0].message and "atomic statement" in found[0].message


def test_a_due_window_without_the_expired_flag_is_named_and_explained():
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=500)
    view = {"task_id": "t1", "status": "SUBMITTED", "is_logically_expired": False,
            "attempt": 0, "queued_at": T0}
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 700, value=view)
    [v] = check(rec)
    assert v.invariant == "lease-half-open"
    assert "must say is_logically_expired" in v.message


def test_a_token_under_any_field_name_leaks():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    view = {"task_id": "t1", "status": "CLAIMED", "is_logically_expired": False, "attempt": 1,
            "lease_ref": TOKEN_A}
    rec.op("get", "reader", {"task_id": "t1"}, value=view)
    [v] = check(rec)
    assert v.invariant == "token-unique" and "lease_ref" not in v.message and "never carry" in v.message


def test_counters_a_refused_call_changed_are_caught():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    view = {"task_id": "t1", "status": "CLAIMED", "is_logically_expired": False, "attempt": 7,
            "lease_expires_at": T0 + 50}
    rec.op("get", "reader", {"task_id": "t1"}, value=view)
    [v] = check(rec)
    assert v.invariant == "no-lost-task" and "attempt is 7" in v.message


# ------------------------------------------------------------------ 3. idle polls
IDLE_AFTER_DUE = [
    Dispatch(target_agent=None, queue_ttl_ms=500, exec_ttl_ms=50, max_attempts=1),
    Clock(tick=700),
    IdlePoll(),
]


def test_a_poll_with_a_due_expiry_is_not_idle_for_a_store_without_sweep():
    with Runner(CampaignConfig(target="tests.variants.minimal_slow:make_store", workers=2)) as r:
        found, ex = r.run_steps(IDLE_AFTER_DUE)
    assert "sweep" not in ex.capabilities
    assert [o for o in ex.history if o.extra.get("idle")], "the idle probe measured nothing"
    assert found == []


def test_a_store_writing_on_idle_polls_is_still_caught():
    with Runner(CampaignConfig(target="tests.broken_stores:busy_idle_poll", workers=2)) as r:
        found, _ex = r.run_steps(IDLE_AFTER_DUE)
    assert found and found[0].invariant == "idle-no-write"


def test_a_token_whose_lease_ended_may_be_told_lease_expired_forever():
    """bearer_immediate answers LeaseExpired to a token retired by expiry, even after the
    task was claimed again and completed: that check really failed for this token."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, now=T0 + 50, attempt=2)
    rec.op("fulfill", "bob", {"task_id": "t1", "token": TOKEN_B, "result": 1}, now=T0 + 50)
    rec.op("release", "alice", {"task_id": "t1", "token": TOKEN_A, "reason": "x"},
           now=T0 + 50, type=FAIL, error="LeaseExpired")
    assert check(rec) == []
    rec.op("release", "alice", {"task_id": "t1", "token": TOKEN_B, "reason": "x"},
           now=T0 + 50, type=FAIL, error="LeaseExpired")
    [v] = check(rec)
    assert v.invariant == "refusal-class"


def test_a_refusal_that_treats_the_boundary_as_live_is_a_lease_finding():
    """A forged fulfill at exactly lease_expires_at refused with InvalidToken (the answer
    for a live lease): for a store declaring refusal-order it is the closed lease that
    shows, so it is named lease-half-open, not refusal-order."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_B, "result": 1},
           now=T0 + 50, type=FAIL, error="InvalidToken")
    assert check(rec) == []  # any failing check's class will do for an undeclared store
    [v] = check(rec, DECLARED)
    assert v.invariant == "lease-half-open" and "still running" in v.message


def test_an_expired_view_may_leave_out_the_lease_end():
    """A view that says ``is_logically_expired`` but omits ``lease_expires_at`` (fields a view
    leaves out are not compared, PROTOCOL.md#taskview-fields) is read with the model's lease
    end, not as a lease that never ends (met on the procrastinate adapter's first views)."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    view = {"task_id": "t1", "status": "CLAIMED", "is_logically_expired": True, "attempt": 1}
    rec.op("get", "auditor", {"task_id": "t1"}, now=T0 + 50, value=view)
    assert check(rec) == []
    rec.op("get", "auditor", {"task_id": "t1"}, now=T0 + 49, value=view)  # not yet ended
    [v] = check(rec)
    assert v.invariant == "lease-half-open"

