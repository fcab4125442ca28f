"""``no-lost-task`` through ``inspect()``: what a view must show depends on the target's
features (PROTOCOL.md#taskview-fields: ``result`` is compared only for a store with
``results``)."""

from __future__ import annotations

from ferry_harness.check.checker import Checker
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.ops import FEATURES, PROTOCOL
from tests.histories import SPEC_STORE, TOKEN_A, Recorder

# a sound queue that keeps no results: every operation, every feature but ``results``
NO_RESULTS = ModelConfig().for_capabilities(set(PROTOCOL) | set(FEATURES) - {"results"})


def _fulfilled_then_inspected(shown_result) -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": {"out": 1}})
    view = {"task_id": "t1", "status": "COMPLETED", "is_logically_expired": False}
    if shown_result is not None:
        view["result"] = shown_result
    rec.op("inspect", "auditor", {}, value=[view])
    return rec


def _lost(rec: Recorder, cfg: ModelConfig) -> list:
    return [v for v in Checker(cfg).check(rec.history) if v.invariant == "no-lost-task"]


def test_a_target_without_results_may_show_no_result_in_inspect():
    assert _lost(_fulfilled_then_inspected(None), NO_RESULTS) == []
    assert _lost(_fulfilled_then_inspected("something else"), NO_RESULTS) == []


def test_a_target_with_results_must_show_the_accepted_result():
    found = _lost(_fulfilled_then_inspected(None), SPEC_STORE)
    assert found and "inspect() shows COMPLETED with null" in found[0].message
    assert _lost(_fulfilled_then_inspected({"out": 1}), SPEC_STORE) == []


def test_a_fulfilled_task_must_still_read_completed_without_results():
    rec = _fulfilled_then_inspected(None)
    rec.history.ops[-1].value[0]["status"] = "SUBMITTED"
    found = _lost(rec, NO_RESULTS)
    assert found and "inspect() shows SUBMITTED" in found[0].message
