"""False alarms the configurable store's pairwise matrix found (FA-4..FA-7), pinned on
hand-built histories: what a target without a feature (or declaring refusal-order) may do
passes, and the real bug next to it is still caught under its name."""

from __future__ import annotations

from ferry_harness.check.checker import Checker
from ferry_harness.check.history import FAIL
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.ops import FEATURES
from tests.histories import DECLARED, SPEC_STORE, T0, TOKEN_A, Recorder


def check(rec: Recorder, cfg: ModelConfig = SPEC_STORE) -> list:
    return Checker(cfg).check(rec.history)


def without(*features: str) -> ModelConfig:
    return ModelConfig().for_capabilities(set(FEATURES) - set(features))


def ids(found: list) -> list[str]:
    return [v.invariant for v in found]


def _claimed(**dispatch) -> Recorder:
    rec = Recorder()
    rec.dispatch(**dispatch)
    rec.claim("alice", TOKEN_A)
    return rec


def _fulfill(rec: Recorder, token, result, **kw) -> None:
    rec.op("fulfill", "alice", {"task_id": "t1", "token": token, "result": result},
           now=T0 + 1, **kw)


# ------------------------------------------- FA-4: a non-JSON result, target without results
def test_a_target_without_results_may_refuse_a_non_json_result():
    rec = _claimed()
    _fulfill(rec, TOKEN_A, {1, 2}, type=FAIL, error="InvalidArgument")
    assert check(rec, without("results")) == []


def test_a_target_without_results_may_accept_a_non_json_result():
    rec = _claimed()
    _fulfill(rec, TOKEN_A, {1, 2})
    assert check(rec, without("results")) == []


def test_a_store_with_results_must_refuse_a_non_json_result():
    rec = _claimed()
    _fulfill(rec, TOKEN_A, {1, 2})
    assert "typed-errors" in ids(check(rec))


def test_without_results_a_refusal_naming_a_passing_check_is_still_found():
    rec = _claimed()
    _fulfill(rec, TOKEN_A, {1, 2}, type=FAIL, error="WrongState")
    assert "holder-guard" in ids(check(rec, without("results")))


# ------------------------------------ FA-5: a non-string token, refusal-order declared
def test_a_non_string_token_may_be_refused_as_not_the_live_one_under_refusal_order():
    rec = _claimed()
    _fulfill(rec, 123, 1, type=FAIL, error="InvalidToken")
    assert check(rec, DECLARED) == []


def test_a_non_string_token_may_be_refused_as_a_bad_argument_under_refusal_order():
    rec = _claimed()
    _fulfill(rec, 123, 1, type=FAIL, error="InvalidArgument")
    assert check(rec, DECLARED) == []


def test_a_non_string_token_on_a_finished_task_names_the_state_first_under_refusal_order():
    """The token step comes after the state step: InvalidToken is out of order there."""
    rec = _claimed()
    _fulfill(rec, TOKEN_A, 1)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": 123, "result": 1}, now=T0 + 2,
           type=FAIL, error="InvalidToken")
    assert "refusal-order" in ids(check(rec, DECLARED))


def test_a_non_string_token_must_still_be_refused():
    rec = _claimed()
    _fulfill(rec, 123, 1)
    assert "typed-errors" in ids(check(rec, DECLARED))


# --------------------------------- FA-6: an unknown task, target without typed-refusals
def test_a_target_without_typed_refusals_may_refuse_an_unknown_task_with_any_class():
    rec = Recorder()
    rec.op("salvaged", "reader", {"task_id": 123}, type=FAIL, error="WrongState")
    rec.op("fulfill", "alice", {"task_id": "nope", "token": TOKEN_A, "result": 1},
           type=FAIL, error="WrongState")
    assert check(rec, without("typed-refusals")) == []


def test_a_typed_target_must_name_an_unknown_task_not_found():
    rec = Recorder()
    rec.op("salvaged", "reader", {"task_id": 123}, type=FAIL, error="WrongState")
    assert "linearizable" in ids(check(rec))


# ------------------------------- FA-7: the extend cap, target without lease or queue-ttl
def _extend(rec: Recorder, **kw) -> None:
    rec.op("extend", "alice", {"task_id": "t1", "token": TOKEN_A},
           now=T0 + 1, **kw)


def test_without_lease_the_extend_cap_may_be_applied():
    for missing in ("lease", "queue-ttl"):
        rec = _claimed(queue_ttl_ms=10, exec_ttl_ms=50)
        _extend(rec, type=FAIL, error="LimitExceeded")
        assert check(rec, without(missing)) == [], missing


def test_without_lease_the_extend_cap_may_be_left_out():
    for missing in ("lease", "queue-ttl"):
        rec = _claimed(queue_ttl_ms=10, exec_ttl_ms=50)
        _extend(rec)
        assert check(rec, without(missing)) == [], missing


def test_without_lease_limit_exceeded_below_the_cap_is_still_holder_guard():
    rec = _claimed(queue_ttl_ms=10_000, exec_ttl_ms=50)
    _extend(rec, type=FAIL, error="LimitExceeded")
    assert "holder-guard" in ids(check(rec, without("lease")))


def test_without_typed_refusals_an_allowed_refusal_may_name_any_class():
    """A store binding claims to agents (a freedom) refuses another agent holding the live
    token; with one catch-all class that refusal is WrongState."""
    rec = _claimed()
    rec.op("fulfill", "mallory", {"task_id": "t1", "token": TOKEN_A, "result": 1},
           now=T0 + 1, type=FAIL, error="WrongState")
    assert check(rec, without("typed-refusals")) == []
    assert "holder-guard" in ids(check(rec))  # typed: WrongState names a passing check
