"""The checker's precision on freedoms PROTOCOL.md grants, pinned on hand-built histories.

Each false alarm a correct store met gets a history that store produces (it must pass) and
a paired history with the real bug next to it (it must still be caught, under its name).
"""

from __future__ import annotations

from ferry_harness.check.checker import Checker
from ferry_harness.check.history import FAIL, Op
from ferry_harness.check.model import ModelConfig, bad_arguments
from ferry_harness.check.ops import FEATURES
from tests.histories import DECLARED, SPEC_STORE, T0, TOKEN_A, TOKEN_B, Recorder

QTTL = 100  # queue window of the tasks below; their lease ends at T0 + 50


def check(rec: Recorder, cfg: ModelConfig = SPEC_STORE) -> list:
    return Checker(cfg).check(rec.history)


def view(status: str, **kw) -> dict:
    return {"task_id": "t1", "status": status, "is_logically_expired": False, **kw}


# ----------------------------------------------- queued_at after a lease expiry (a range)
def _lapsed() -> Recorder:
    """t1's lease ends at T0 + 50 with an attempt left; nobody looks until much later."""
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=QTTL)
    rec.claim("alice", TOKEN_A)
    return rec


def test_a_claim_long_after_the_lease_ended_is_legal_when_the_requeue_may_start_late():
    """A store that re-queues with queued_at = now (the claim applies the expiry at T0 + 500)
    gives bob a fresh window: not "claimed a TIMED_OUT task"."""
    rec = _lapsed()
    rec.claim("bob", TOKEN_B, now=T0 + 500, attempt=2)
    assert check(rec) == []


def test_a_view_of_the_late_requeue_is_judged_against_the_range():
    rec = _lapsed()
    rec.op("sweep", "janitor", {}, now=T0 + 400)
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 450,
           value=view("SUBMITTED", attempt=1, queued_at=T0 + 400))
    rec.claim("bob", TOKEN_B, now=T0 + 499, attempt=2)
    assert check(rec) == []


def test_the_requeue_at_lease_expires_at_is_still_legal():
    """The other end of the range (ferry_core's choice): timed out at T0 + 50 + QTTL."""
    rec = _lapsed()
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 500,
           value=view("TIMED_OUT", attempt=1, queued_at=T0 + 50))
    rec.op("claim", "bob", {"task_id": "t1"}, now=T0 + 500, value=None)
    assert check(rec) == []


def test_a_row_that_pins_queued_at_narrows_the_window():
    """Once a view showed queued_at = T0 + 400, the window ends at T0 + 500 exactly."""
    rec = _lapsed()
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 450,
           value=view("SUBMITTED", attempt=1, queued_at=T0 + 400))
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 500,
           value=view("SUBMITTED", attempt=1, queued_at=T0 + 400))
    [v] = check(rec)
    assert v.invariant == "lease-half-open" and "must say is_logically_expired" in v.message
    assert f"ended at {T0 + 500}" in v.message


def test_what_a_read_saw_narrows_the_range_without_a_queued_at_field():
    """Open at T0 + 400 means queued_at >= T0 + 301; a claim at T0 + 401 + QTTL is then
    past every window the store could have opened (queued_at <= T0 + 400)."""
    rec = _lapsed()
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 400, value=view("SUBMITTED", attempt=1))
    rec.claim("bob", TOKEN_B, now=T0 + 400 + QTTL, attempt=2)
    [v] = check(rec)
    assert v.invariant == "lease-half-open" and "queue window ended" in v.message


def test_an_empty_claim_pins_the_early_end():
    """bob's claim at T0 + 200 found it TIMED_OUT (queued_at <= T0 + 100): a later view
    cannot show it waiting."""
    rec = _lapsed()
    rec.op("claim", "bob", {"task_id": "t1"}, now=T0 + 200, value=None)
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 210, value=view("SUBMITTED", attempt=1))
    [v] = check(rec)
    assert v.invariant == "lease-half-open" and "must say is_logically_expired" in v.message


def test_a_flagged_row_is_read_as_what_it_becomes():
    rec = _lapsed()
    rec.op("get", "reader", {"task_id": "t1"}, now=T0 + 500,
           value=view("CLAIMED", attempt=1, lease_expires_at=T0 + 50, is_logically_expired=True))
    rec.claim("bob", TOKEN_B, now=T0 + 600, attempt=2)
    assert check(rec) == []


# ----------------------------------------------- a closed queue window is lease-half-open
def test_a_claim_at_the_end_of_the_queue_window_is_lease_half_open():
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=QTTL)
    rec.claim("alice", TOKEN_A, now=T0 + QTTL)
    [v] = check(rec)
    assert v.invariant == "lease-half-open"
    assert "queue window ended" in v.message and "half-open" in v.message


def test_a_claim_one_ms_before_the_window_ends_is_legal():
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=QTTL)
    rec.claim("alice", TOKEN_A, now=T0 + QTTL - 1)
    assert check(rec) == []


def test_a_claim_after_the_last_lease_is_still_no_lost_task():
    """A task whose last attempt's lease ran out is final: claiming it is no queue window."""
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=10_000, max_attempts=1)
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, now=T0 + 60, attempt=2)
    [v] = check(rec)
    assert v.invariant == "no-lost-task" and "claimed a TIMED_OUT task" in v.message


# ----------------------------------------------- a declared lease-closed late holder
LEASE_CLOSED = ModelConfig().for_capabilities(set(FEATURES) | {"lease-closed"})


def test_a_late_holder_message_follows_the_declared_convention():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": 1}, now=T0 + 51)
    [v] = check(rec, LEASE_CLOSED)
    assert v.invariant == "lease-half-open"
    assert "half-open" not in v.message and "lease-closed" in v.message
    [v] = check(_late_accepted())
    assert "(half-open: the holder loses at lease_expires_at)" in v.message


def _late_accepted() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("fulfill", "alice", {"task_id": "t1", "token": TOKEN_A, "result": 1}, now=T0 + 50)
    return rec


# ----------------------------------------------- one race, one single-winner finding
def test_one_race_is_one_single_winner_finding():
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, concurrent=True)
    found = check(rec)
    assert [v.invariant for v in found] == ["single-winner"]


def test_a_reclaim_during_the_lease_is_still_found_by_the_model():
    """Not concurrent, so no two-live-holders finding: the model names it."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, now=T0 + 10, attempt=2)
    [v] = check(rec)
    assert v.invariant == "single-winner" and "while 'alice' holds it" in v.message


# ----------------------------------------------- TTL bounds (PROTOCOL.md#limits)
def _dispatch(**kw) -> Op:
    args = {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": 50, **kw}
    return Op(index=0, process=0, agent="c", op="dispatch", args=args, invoke_ns=0, now=T0,
              complete_ns=1, type="ok", value="t1")


def test_a_huge_ttl_may_be_accepted_and_then_works_like_any_other():
    assert bad_arguments(_dispatch(queue_ttl_ms=2**63 - 1)) is None
    assert bad_arguments(_dispatch(exec_ttl_ms=2**62)) is None
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=2**63 - 1)
    rec.claim("alice", TOKEN_A, now=T0 + 10**9)
    assert check(rec) == []


def test_a_huge_ttl_may_be_refused():
    rec = Recorder()
    rec.op("dispatch", "client", {"target_agent": None, "queue_ttl_ms": 2**63 - 1,
                                  "exec_ttl_ms": 50}, type=FAIL, error="InvalidArgument")
    assert check(rec) == []


def test_a_non_positive_ttl_must_be_refused_and_the_message_says_why():
    for bad in (0, -5, "50", True, 1.5):
        why = bad_arguments(_dispatch(queue_ttl_ms=bad))
        assert why and "is not a positive integer" in why, bad
        assert "int64" not in why
    rec = Recorder()
    rec.dispatch(queue_ttl_ms=-5)
    [v] = check(rec, DECLARED)
    assert v.invariant == "typed-errors" and "queue_ttl_ms -5 is not a positive integer" in v.message


# ----------------------------------------------- a dependent dispatched onto a dead task
def _dead_dependency(*, sweep_after: bool) -> Recorder:
    """t1 fails and a sweep runs; only then t2 is dispatched onto it (and read SUBMITTED)."""
    rec = Recorder()
    rec.dispatch("t1", max_attempts=1)
    rec.claim("alice", TOKEN_A, tid="t1")
    rec.op("fail", "alice", {"task_id": "t1", "token": TOKEN_A, "reason": "broken"})
    rec.op("sweep", "janitor", {}, now=T0 + 10, value=0)
    rec.op("dispatch", "client", {"target_agent": None, "queue_ttl_ms": 10_000,
                                  "exec_ttl_ms": 50, "depends_on": ["t1"]},
           now=T0 + 300, value="t2")
    if sweep_after:
        rec.op("sweep", "janitor", {}, now=T0 + 400, value=0)
    rec.op("get", "reader", {"task_id": "t2"}, now=T0 + 500,
           value={"task_id": "t2", "status": "SUBMITTED", "is_logically_expired": False,
                  "attempt": 0, "depends_on": ["t1"]})
    return rec


def test_a_dependent_dispatched_after_the_last_sweep_may_wait_for_the_next():
    assert check(_dead_dependency(sweep_after=False)) == []


def test_the_first_sweep_after_its_dispatch_must_fail_it():
    [v] = check(_dead_dependency(sweep_after=True))
    assert v.invariant == "dag-order" and "must cascade" in v.message
    assert "after this task's dispatch" in v.message


def test_a_sweep_running_while_the_dependent_was_dispatched_does_not_count():
    rec = Recorder()
    rec.dispatch("t1", max_attempts=1)
    rec.claim("alice", TOKEN_A, tid="t1")
    rec.op("fail", "alice", {"task_id": "t1", "token": TOKEN_A, "reason": "broken"})
    rec.op("dispatch", "client", {"target_agent": None, "queue_ttl_ms": 10_000,
                                  "exec_ttl_ms": 50, "depends_on": ["t1"]}, value="t2")
    rec.op("sweep", "janitor", {}, value=0, concurrent=True)  # began before it returned
    rec.op("get", "reader", {"task_id": "t2"},
           value={"task_id": "t2", "status": "SUBMITTED", "is_logically_expired": False,
                  "attempt": 0, "depends_on": ["t1"]})
    assert check(rec) == []
