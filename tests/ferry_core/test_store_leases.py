"""Half-open leases and queue windows, max_attempts, extend and release limits (SPEC §3, §4)."""

from __future__ import annotations

import pytest

from ferry_core import (
    CLAIMED,
    COMPLETED,
    FAILED,
    SUBMITTED,
    TIMED_OUT,
    LeaseExpired,
    LimitExceeded,
    PermissionDenied,
)

T0 = 1_000_000
EXEC = 1_000

HOLDER_OPS = {
    "fulfill": lambda s, t, a, k: s.fulfill(t, a, k, {"r": 1}),
    "fail": lambda s, t, a, k: s.fail(t, a, k, "it broke"),
    "release": lambda s, t, a, k: s.release(t, a, k, "busy"),
    "extend": lambda s, t, a, k: s.extend(t, a, k),
    "salvage": lambda s, t, a, k: s.salvage(t, a, k, {"part": 1}),
}
ops = pytest.mark.parametrize("op", list(HOLDER_OPS))


def _claimed(store, agent="A", **kw):
    kw.setdefault("exec_ttl_ms", EXEC)
    tid = store.dispatch(None, **kw)
    c = store.poll_next(agent)
    assert c is not None and c.task_id == tid
    return tid, c


# ----------------------------------------------------------------- lease boundaries
@ops
def test_holder_wins_at_expiry_minus_one(store, clock, op):
    tid, c = _claimed(store)
    assert c.lease_expires_at == T0 + EXEC
    clock.set(c.lease_expires_at - 1)
    assert store.get(tid).is_logically_expired is False
    assert store.poll_next("B") is None  # nobody can reclaim
    assert store.claim(tid, "B") is None
    out = HOLDER_OPS[op](store, tid, "A", c.token)
    v = store.get(tid)
    expected = {"fulfill": COMPLETED, "fail": FAILED, "release": SUBMITTED}.get(op, CLAIMED)
    assert v.status == expected
    if op == "extend":
        assert out == v.lease_expires_at == c.lease_expires_at - 1 + EXEC
    if op == "salvage":
        assert [s.data for s in store.salvaged(tid)] == [{"part": 1}]
    if op == "fulfill":
        assert (v.result, v.completed_at) == ({"r": 1}, c.lease_expires_at - 1)


@ops
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("attempts", [1, 2])
def test_holder_loses_at_and_after_expiry(store, clock, op, offset, attempts):
    tid, c = _claimed(store, max_attempts=attempts)
    clock.set(c.lease_expires_at + offset)
    assert store.get(tid).is_logically_expired is True
    assert store.get(tid).status == CLAIMED  # reads never apply expiries
    with pytest.raises(LeaseExpired) as info:
        HOLDER_OPS[op](store, tid, "A", c.token)
    assert str(c.lease_expires_at) in str(info.value)
    v = store.get(tid)
    if attempts == 1:
        assert (v.status, v.completed_at) == (TIMED_OUT, c.lease_expires_at)
        assert v.error_reason and "lease expired" in v.error_reason
        assert store.poll_next("B") is None
    else:
        assert (v.status, v.queued_at, v.claimed_by) == (SUBMITTED, c.lease_expires_at, None)
        c2 = store.poll_next("B")
        assert (c2.task_id, c2.attempt, c2.claimed_at) == (tid, 2, c.lease_expires_at + offset)
    assert v.result is None


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("how", ["poll_next", "claim"])
def test_another_agent_claims_at_and_after_expiry(store, clock, offset, how):
    tid, c = _claimed(store, max_attempts=2)
    clock.set(c.lease_expires_at + offset)
    c2 = store.poll_next("B") if how == "poll_next" else store.claim(tid, "B")
    assert c2 is not None
    assert (c2.task_id, c2.agent_id, c2.attempt) == (tid, "B", 2)
    assert c2.token != c.token
    assert c2.lease_expires_at == c.lease_expires_at + offset + EXEC
    with pytest.raises(PermissionDenied):  # B holds it now
        store.fulfill(tid, "A", c.token, "late")
    store.fulfill(tid, "B", c2.token, "ok")
    assert store.get(tid).result == "ok"


def test_extend_moves_the_boundary(store, clock):
    tid, c = _claimed(store)
    clock.advance(400)
    new = store.extend(tid, "A", c.token)
    assert new == T0 + 400 + EXEC
    v = store.get(tid)
    assert (v.lease_expires_at, v.extend_count) == (new, 1)
    clock.set(new - 1)
    store.salvage(tid, "A", c.token, "still mine")
    assert store.poll_next("B") is None
    clock.set(new)
    with pytest.raises(LeaseExpired):
        store.salvage(tid, "A", c.token, "too late")
    assert store.poll_next("B") is None  # max_attempts=1: it timed out
    assert store.get(tid).status == TIMED_OUT


# ----------------------------------------------------------------- queue window
@pytest.mark.parametrize("how", ["poll_next", "claim"])
def test_claimable_at_queue_deadline_minus_one(store, clock, how):
    tid = store.dispatch(None, queue_ttl_ms=500)
    clock.set(T0 + 499)
    assert store.get(tid).is_logically_expired is False
    c = store.poll_next("A") if how == "poll_next" else store.claim(tid, "A")
    assert c is not None and c.task_id == tid


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("how", ["poll_next", "claim", "sweep"])
def test_timed_out_at_queue_deadline(store, clock, offset, how):
    tid = store.dispatch(None, queue_ttl_ms=500)
    clock.set(T0 + 500 + offset)
    v = store.get(tid)
    assert (v.status, v.is_logically_expired) == (SUBMITTED, True)  # reads never sweep
    if how == "poll_next":
        assert store.poll_next("A") is None
    elif how == "claim":
        assert store.claim(tid, "A") is None
    else:
        assert store.sweep() == 1
    v = store.get(tid)
    assert (v.status, v.completed_at, v.attempt) == (TIMED_OUT, T0 + 500, 0)
    assert v.error_reason
    assert store.sweep() == 0


def test_requeued_task_gets_a_new_queue_window_from_the_old_expiry(store, clock):
    tid, c = _claimed(store, max_attempts=2, queue_ttl_ms=5_000)
    clock.set(c.lease_expires_at + 4_999)  # requeued at lease_expires_at, window 5000
    c2 = store.poll_next("B")
    assert c2 is not None and c2.task_id == tid and c2.attempt == 2
    tid2, d = _claimed(store, agent="C", max_attempts=2, queue_ttl_ms=5_000)
    clock.set(d.lease_expires_at + 5_000)
    assert store.poll_next("B") is None
    v = store.get(tid2)
    assert (v.status, v.completed_at) == (TIMED_OUT, d.lease_expires_at + 5_000)


# ----------------------------------------------------------------- max_attempts
def test_max_attempts_requeue_then_time_out(store, clock):
    tid, c1 = _claimed(store, max_attempts=3)
    seen = [c1.attempt]
    for expected_attempt in (2, 3):
        clock.set(store.get(tid).lease_expires_at)
        assert store.sweep() == 1
        v = store.get(tid)
        assert v.status == SUBMITTED and v.attempt == expected_attempt - 1
        assert v.queued_at == clock() and v.claimed_by is None and v.lease_expires_at is None
        c = store.poll_next("A")
        seen.append(c.attempt)
    assert seen == [1, 2, 3]
    last = store.get(tid).lease_expires_at
    clock.set(last)
    assert store.sweep() == 1
    v = store.get(tid)
    assert (v.status, v.attempt, v.completed_at) == (TIMED_OUT, 3, last)
    assert "3" in v.error_reason


def test_sweep_counts_what_it_changed(store, clock):
    for _ in range(3):
        _claimed(store)
    store.dispatch(None, queue_ttl_ms=10)
    store.dispatch(None, queue_ttl_ms=10_000)
    assert store.sweep() == 0
    clock.advance(EXEC)
    assert store.sweep() == 4
    assert store.sweep() == 0
    assert sorted(v.status for v in store.inspect()) == [SUBMITTED] + [TIMED_OUT] * 4


def test_due_expiries_apply_at_their_own_instant_in_time_order(store, clock):
    """Applied lazily, but with the logical time they happened, whoever notices first."""
    a, ca = _claimed(store, max_attempts=2)
    clock.advance(100)
    b, cb = _claimed(store, agent="B", max_attempts=2)
    clock.advance(10 * EXEC)
    store.sweep()
    va, vb = store.get(a), store.get(b)
    assert (va.queued_at, vb.queued_at) == (ca.lease_expires_at, cb.lease_expires_at)
    assert store.poll_next("C").task_id == a  # a expired first, so it queued first


# ----------------------------------------------------------------- extend limits
def test_extend_limit_per_claim(store_factory, clock, assert_refused):
    store = store_factory(max_extends=2)
    tid, c = _claimed(store, max_attempts=2)
    for n in (1, 2):
        clock.advance(10)
        assert store.extend(tid, "A", c.token) == clock() + EXEC
        assert store.get(tid).extend_count == n
    clock.advance(10)
    info = assert_refused(store, LimitExceeded, store.extend, tid, "A", c.token)
    assert "max_extends" in str(info.value)
    store.salvage(tid, "A", c.token, "still the holder")
    # a new claim starts a new count
    store.release(tid, "A", c.token)
    c2 = store.poll_next("A")
    assert store.get(tid).extend_count == 0
    assert store.extend(tid, "A", c2.token) == clock() + EXEC


def test_extend_default_limit_is_five(store, clock, assert_refused):
    tid, c = _claimed(store)
    for _ in range(5):
        clock.advance(1)
        store.extend(tid, "A", c.token)
    assert_refused(store, LimitExceeded, store.extend, tid, "A", c.token)


def test_extend_hard_cap_created_plus_four_queue_ttl(store, clock, assert_refused):
    qttl, ettl = 1_000, 900
    tid, c = _claimed(store, queue_ttl_ms=qttl, exec_ttl_ms=ettl)
    cap = T0 + 4 * qttl
    for at in (800, 1_600, 2_400):
        clock.set(T0 + at)
        assert store.extend(tid, "A", c.token) == T0 + at + ettl
    clock.set(cap - ettl)  # new expiry exactly at the cap: allowed
    assert store.extend(tid, "A", c.token) == cap
    clock.set(cap - ettl + 1)  # one more ms would pass it
    info = assert_refused(store, LimitExceeded, store.extend, tid, "A", c.token)
    assert str(cap) in str(info.value)
    assert store.get(tid).lease_expires_at == cap
    store.fulfill(tid, "A", c.token, "done")


# ----------------------------------------------------------------- release
def test_release_returns_task_to_the_tail_of_the_queue(store, clock):
    first = store.dispatch(None)
    clock.advance(1)
    second = store.dispatch(None)
    c = store.poll_next("A")
    assert c.task_id == first
    clock.advance(5)
    store.release(first, "A", c.token, "need a bigger machine")
    v = store.get(first)
    assert (v.status, v.queued_at, v.release_count) == (SUBMITTED, T0 + 6, 1)
    assert (v.claimed_by, v.claimed_at, v.lease_expires_at, v.extend_count) == (None,) * 3 + (0,)
    assert v.attempt == 1
    assert [store.poll_next("B").task_id, store.poll_next("B").task_id] == [second, first]


def test_release_limit(store, clock, assert_refused):
    tid = store.dispatch(None)
    for n in range(3):  # default max_releases = 3
        c = store.poll_next("A")
        store.release(tid, "A", c.token)
        assert store.get(tid).release_count == n + 1
    c = store.poll_next("A")
    info = assert_refused(store, LimitExceeded, store.release, tid, "A", c.token)
    assert "max_releases" in str(info.value)
    assert store.get(tid).status == CLAIMED
    store.fulfill(tid, "A", c.token, "did it anyway")
    assert store.get(tid).status == COMPLETED


def test_release_limit_zero(store_factory, assert_refused):
    store = store_factory(max_releases=0)
    tid, c = _claimed(store)
    assert_refused(store, LimitExceeded, store.release, tid, "A", c.token)
