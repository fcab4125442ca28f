"""The linearizability checker on hand-written histories: legal, illegal, and with ``info``."""

from __future__ import annotations

from ferry_harness.check.checker import Checker
from ferry_harness.check.history import FAIL, INFO, OK, History, Op
from ferry_harness.check.linearizability import check_history

T = "task-1"
TOK_A = "aaaaaaaa-0000-4000-8000-000000000001"
TOK_B = "bbbbbbbb-0000-4000-8000-000000000002"


def op(i, proc, agent, name, args, start, end, typ=OK, value=None, error=None, now=1000):
    return Op(index=i, process=proc, agent=agent, op=name, args=args, invoke_ns=start,
              complete_ns=end, now=now, type=typ, value=value, error=error)


def dispatch(i=0, ettl=100):
    return op(i, 0, "client", "dispatch",
              {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": ettl}, 0, 1, value=T)


def claim_ok(i, proc, agent, token, start, end, now=1000, ettl=100, attempt=1):
    return op(i, proc, agent, "claim", {"task_id": T}, start, end, now=now, value={
        "task_id": T, "agent_id": agent, "token": token, "claimed_at": now,
        "lease_expires_at": now + ettl, "attempt": attempt})


def claim_none(i, proc, agent, start, end, now=1000):
    return op(i, proc, agent, "claim", {"task_id": T}, start, end, now=now, value=None)


def verdicts(ops):
    return [r for r in check_history(ops) if r.key == f"task:{T}"][0]


def test_race_with_one_winner_is_linearizable():
    h = [dispatch(), claim_ok(1, 1, "alice", TOK_A, 10, 50), claim_none(2, 2, "bob", 10, 40)]
    res = verdicts(h)
    assert res.ok, res.why


def test_loser_that_finished_first_still_linearizes_before_the_winner_commits():
    # bob's None completes before alice's claim even starts: then alice must have won later,
    # so bob saw a ready task and returned nothing -> illegal (no-lost-task)
    h = [dispatch(), claim_none(1, 2, "bob", 10, 20), claim_ok(2, 1, "alice", TOK_A, 30, 40)]
    res = verdicts(h)
    assert res.ok is False
    assert res.invariant == "no-lost-task"
    assert res.culprit == 1


def test_two_winners_are_a_single_winner_violation():
    h = [dispatch(), claim_ok(1, 1, "alice", TOK_A, 10, 50), claim_ok(2, 2, "bob", TOK_B, 10, 50)]
    res = verdicts(h)
    assert res.ok is False
    assert res.invariant == "single-winner"
    assert len(res.linearized) == 2  # dispatch + one claim is the longest legal prefix


def test_fulfill_after_expiry_accepted_is_lease_half_open():
    h = [dispatch(), claim_ok(1, 1, "alice", TOK_A, 10, 20),
         op(2, 1, "alice", "fulfill", {"task_id": T, "token": TOK_A, "result": 1}, 30, 40, now=1100)]
    res = verdicts(h)
    assert res.ok is False and res.invariant == "lease-half-open"
    # one millisecond earlier it is legal
    h[2].now = 1099
    assert verdicts(h).ok


def test_refusal_must_be_a_guard_that_fails():
    refused = op(2, 1, "alice", "fulfill", {"task_id": T, "token": TOK_A, "result": 1}, 30, 40,
                 typ=FAIL, error="InvalidToken")
    res = verdicts([dispatch(), claim_ok(1, 1, "alice", TOK_A, 10, 20), refused])
    assert res.ok is False and res.invariant == "holder-guard"


def test_replayed_token_after_release_is_token_unique():
    h = [dispatch(), claim_ok(1, 1, "alice", TOK_A, 10, 20),
         op(2, 1, "alice", "release", {"task_id": T, "token": TOK_A}, 30, 40),
         claim_ok(3, 2, "alice", TOK_B, 50, 60, attempt=2),
         op(4, 1, "alice", "fulfill", {"task_id": T, "token": TOK_A, "result": 1}, 70, 80)]
    res = verdicts(h)
    assert res.ok is False and res.invariant == "token-unique"


def test_info_claim_may_or_may_not_have_happened():
    crashed = op(1, 1, "alice", "claim", {"task_id": T}, 10, None, typ=INFO)
    # the crashed claim did not happen: bob may win
    assert verdicts([dispatch(), crashed, claim_ok(2, 2, "bob", TOK_B, 30, 40)]).ok
    # the crashed claim did happen: bob's None is then legal too
    assert verdicts([dispatch(), crashed, claim_none(2, 2, "bob", 30, 40)]).ok


def test_info_cannot_explain_an_impossible_history():
    crashed = op(1, 1, "alice", "claim", {"task_id": T}, 10, None, typ=INFO)
    # two ok claims stay illegal whatever the crashed op did
    h = [dispatch(), crashed, claim_ok(2, 2, "bob", TOK_B, 30, 40), claim_ok(3, 3, "carol", TOK_A, 50, 60)]
    assert verdicts(h).ok is False


def test_lock_partition():
    acq = lambda i, owner, value, now, s, e: op(  # noqa: E731
        i, i, owner, "acquire_lock", {"name": "L", "owner": owner, "ttl_ms": 10}, s, e, value=value, now=now)
    legal = [acq(0, "d1", True, 0, 0, 5), acq(1, "d2", False, 9, 10, 15), acq(2, "d2", True, 10, 20, 25)]
    assert all(r.ok for r in check_history(legal))
    both = [acq(0, "d1", True, 0, 0, 5), acq(1, "d2", True, 9, 10, 15)]
    res = check_history(both)[0]
    assert res.ok is False and res.invariant == "lease-half-open"  # at expires-1
    early = [acq(0, "d1", True, 0, 0, 5), acq(1, "d2", True, 5, 10, 15)]
    assert check_history(early)[0].invariant == "lock-exclusive"


def test_checker_global_rules():
    h = History([
        dispatch(0),
        op(1, 0, "client", "dispatch", {"target_agent": None, "queue_ttl_ms": 10_000,
                                         "exec_ttl_ms": 100, "depends_on": [T]}, 2, 3, value="task-2"),
        op(2, 1, "bob", "claim", {"task_id": "task-2"}, 10, 20, value={
            "task_id": "task-2", "agent_id": "bob", "token": TOK_B, "claimed_at": 1000,
            "lease_expires_at": 1100, "attempt": 1}),
    ])
    ids = {v.invariant for v in Checker().check(h)}
    assert "dag-order" in ids
    idle = op(3, 1, "p", "poll_next", {}, 30, 40, value=None)
    idle.extra = {"wal_before": 100, "wal_after": 4096, "idle": True}
    assert [v.invariant for v in Checker().check(History([idle]))] == ["idle-no-write"]
    idle.extra["wal_after"] = 100
    assert Checker().check(History([idle])) == []
    ckpt = op(4, 0, "j", "checkpoint", {"mode": "TRUNCATE"}, 50, 60, value=[0, 3, 3])
    ckpt.extra = {"reader": False, "wal_after": 8192}
    assert [v.invariant for v in Checker().check(History([ckpt]))] == ["wal-bounded"]
    ckpt.extra["reader"] = True  # an outside reader excuses it
    assert Checker().check(History([ckpt])) == []


def test_empty_poll_while_a_task_is_certainly_ready_is_a_lost_task():
    d = dispatch(0)
    d.args["queue_ttl_ms"] = 10_000
    empty = op(1, 1, "bob", "poll_next", {}, 10, 20, value=None)
    assert [v.invariant for v in Checker().check(History([d, empty]))] == ["no-lost-task"]
    # a concurrent claim by someone else explains it
    other = claim_ok(2, 2, "carol", TOK_A, 5, 30)
    assert Checker().check(History([d, empty, other])) == []
    # so does an indeterminate poll (it may have taken the task)
    crashed = op(2, 2, "carol", "poll_next", {}, 5, None, typ=INFO)
    assert Checker().check(History([d, empty, crashed])) == []
    # and a task for another agent is not ready for bob
    d.args["target_agent"] = "alice"
    assert Checker().check(History([d, empty])) == []


def test_dependency_failed_and_swept_but_dependent_still_submitted():
    h = [dispatch(0),
         op(1, 0, "client", "dispatch", {"target_agent": None, "queue_ttl_ms": 10_000,
                                          "exec_ttl_ms": 100, "depends_on": [T]}, 2, 3, value="task-2"),
         claim_ok(2, 1, "alice", TOK_A, 10, 20),
         op(3, 1, "alice", "fail", {"task_id": T, "token": TOK_A, "reason": "boom"}, 30, 40),
         op(4, 0, "janitor", "sweep", {}, 50, 60, value=0),
         op(5, 1, "auditor", "get", {"task_id": "task-2"}, 70, 80, value={
             "task_id": "task-2", "status": "SUBMITTED", "depends_on": [T], "attempt": 0})]
    assert "dag-order" in {v.invariant for v in Checker().check(History(h))}
    h[5].value["status"] = "FAILED"
    assert "dag-order" not in {v.invariant for v in Checker().check(History(h))}


def _view(status, holder=None, now=1000, ettl=100):
    return {"task_id": T, "status": status, "claimed_by": holder, "attempt": int(bool(holder)),
            "lease_expires_at": now + ettl if holder else None, "max_attempts": 3}


def test_killed_poll_may_have_claimed_any_open_task():
    """A poll_next whose worker was killed names no task; if it committed, a read shows the
    task CLAIMED by the dead worker, and nothing else explains it (the crash campaign's
    false ``linearizable`` findings): it joins every open task's search as ``info``."""
    killed = op(1, 1, "w1", "poll_next", {}, 10, None, typ=INFO)
    read = op(2, 2, "auditor", "get", {"task_id": T}, 30, 40, value=_view("CLAIMED", "w1"))
    assert Checker().check(History([dispatch(), killed, read])) == []
    # still only what the dead poll could have done: another holder is unexplained
    wrong = op(2, 2, "auditor", "get", {"task_id": T}, 30, 40, value=_view("CLAIMED", "w9"))
    assert Checker().check(History([dispatch(), killed, wrong]))
    # and a poll that did not commit leaves the task as it was
    free = op(2, 2, "auditor", "get", {"task_id": T}, 30, 40, value=_view("SUBMITTED"))
    assert Checker().check(History([dispatch(), killed, free])) == []
