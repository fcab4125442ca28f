"""Every check can fail, and each one is needed.

For every check of :class:`ferry_harness.check.checker.Checker` there is a history with the bug only it
sees. With all checks on, the history is reported under the right invariant, with the
message that explains it; with that one check removed, the finding is gone (the meta-test).
A check that nothing needs would show up here as a case that still fails without it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ferry_harness.check.checker import Checker, fuzz_invariants
from ferry_harness.check.history import INFO
from tests.histories import SPEC_STORE, T0, TOKEN_A, TOKEN_B, Recorder


def _probe_win() -> Recorder:
    """A frozen holder's task reclaimed one ms before its lease ends (nemesis probe)."""
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    probe = {"holder_op": 1, "at": "expires-1", "task": "t1", "expires": T0 + 50,
             "cause": "frozen", "attempts_left": True}
    o = rec.op("claim", "bob", {"task_id": "t1"}, now=T0 + 49,
               value={"task_id": "t1", "agent_id": "bob", "token": TOKEN_B,
                      "claimed_at": T0 + 49, "lease_expires_at": T0 + 99, "attempt": 2})
    o.extra["probe"] = probe
    return rec


def _hung() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    o = rec.op("claim", "alice", {"task_id": "t1"}, type=INFO)
    o.note, o.extra["hung_s"] = "no answer within 3.0s; worker killed", 3.0
    return rec


def _double_win() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, concurrent=True)
    return rec


def _leaked_token() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("get", "reader", {"task_id": "t1"},
           value={"task_id": "t1", "status": "CLAIMED", "is_logically_expired": False,
                  "attempt": 1, "title": f"build [lease {TOKEN_A}]"})
    return rec


def _wrong_token_accepted() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.op("release", "mallory", {"task_id": "t1", "token": TOKEN_B, "reason": "x"})
    return rec


def _token_twice_across_tasks() -> Recorder:
    rec = Recorder()
    rec.dispatch("t1")
    rec.dispatch("t2")
    rec.claim("alice", TOKEN_A, tid="t1")
    rec.claim("bob", TOKEN_A, tid="t2")
    return rec


def _claim_before_dependency() -> Recorder:
    rec = Recorder()
    rec.dispatch("t1")
    rec.op("dispatch", "client", {"target_agent": None, "queue_ttl_ms": 10_000,
                                  "exec_ttl_ms": 50, "max_attempts": 1,
                                  "depends_on": ["t1"]}, value="t2")
    rec.claim("alice", TOKEN_A, tid="t2")
    return rec


def _truncate_left_frames() -> Recorder:
    rec = Recorder()
    o = rec.op("checkpoint", "janitor", {"mode": "TRUNCATE"}, value=[0, 10, 10])
    o.extra.update(reader=False, wal_after=41_232)
    return rec


def _untyped_exception() -> Recorder:
    rec = Recorder()
    o = rec.op("dispatch", "client", {"target_agent": None}, type=INFO)
    o.error, o.message = "TypeError", "'int' object is not iterable"
    return rec


def _missing_from_inspect() -> Recorder:
    rec = Recorder()
    rec.dispatch("t1")
    rec.op("inspect", "reader", {}, value=[])
    return rec


def _ready_but_refused() -> Recorder:
    rec = Recorder()
    rec.dispatch("t1")
    rec.op("poll_next", "alice", {}, value=None)
    return rec


def _no_cascade() -> Recorder:
    rec = Recorder()
    rec.dispatch("t1")
    rec.op("dispatch", "client", {"target_agent": None, "queue_ttl_ms": 10_000,
                                  "exec_ttl_ms": 50, "max_attempts": 1,
                                  "depends_on": ["t1"]}, value="t2")
    rec.claim("alice", TOKEN_A, tid="t1")
    rec.op("fail", "alice", {"task_id": "t1", "token": TOKEN_A, "reason": "broken"})
    rec.op("sweep", "janitor", {}, value=0)
    rec.op("get", "reader", {"task_id": "t2"},
           value={"task_id": "t2", "status": "SUBMITTED", "is_logically_expired": False,
                  "attempt": 0, "depends_on": ["t1"]})
    return rec


# check (Invariant.name) -> (history, invariant named first, a fragment of its message)
CASES: dict[str, tuple[Callable[[], Recorder], str, str]] = {
    "fault-probes": (_probe_win, "lease-half-open", "still held"),
    "liveness": (_hung, "liveness", "did not return within"),
    "two-live-holders": (_double_win, "single-winner", "two live holders"),
    "tokens-never-shown": (_leaked_token, "token-unique", "never carry a token"),
    "per-object-search": (_wrong_token_accepted, "holder-guard", "not the current one"),
    "tokens-issued-once": (_token_twice_across_tasks, "token-unique", "issued twice"),
    "dependencies-first": (_claim_before_dependency, "dag-order", "before its dependency"),
    "wal-rules": (_truncate_left_frames, "wal-bounded", "left the -wal"),
    "typed-errors": (_untyped_exception, "typed-errors", "TypeError"),
    "inspect-shows-all": (_missing_from_inspect, "no-lost-task", "missing from inspect"),
    "ready-not-refused": (_ready_but_refused, "no-lost-task", "was ready"),
    "failure-cascades": (_no_cascade, "dag-order", "must cascade"),
}


def _found(case: str, without: str | None = None) -> list:
    make, _inv, _frag = CASES[case]
    checks = [inv for inv in fuzz_invariants() if inv.name != without]
    return Checker(SPEC_STORE, invariants=checks).check(make().history)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_check_catches_its_bug_under_its_name(case):
    _make, inv, frag = CASES[case]
    found = _found(case)
    assert found, f"{case}: nothing found"
    assert any(v.invariant == inv and frag in v.message for v in found), [str(v) for v in found]


@pytest.mark.parametrize("case", sorted(CASES))
def test_removing_the_check_loses_the_finding(case):
    _make, inv, frag = CASES[case]
    found = _found(case, without=case)
    assert not any(v.invariant == inv and frag in v.message for v in found), (
        f"{case} is not needed: without it the finding is still made by "
        f"{[str(v) for v in found]}")


def test_every_check_of_the_checker_has_a_case():
    checks = {inv.name for inv in fuzz_invariants()}
    assert checks == set(CASES), checks ^ set(CASES)
    assert [inv.name for inv in Checker().invariants] == [inv.name for inv in fuzz_invariants()]

