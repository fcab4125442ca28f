"""Salvage and late results: delivered work is never silently dropped (SPEC §4 no-lost-task)."""

from __future__ import annotations

import pytest

from ferry_core import (
    COMPLETED,
    FAILED,
    SUBMITTED,
    TIMED_OUT,
    InvalidToken,
    LeaseExpired,
    PermissionDenied,
    Salvage,
    WrongState,
)
from tests.ferry_core.backend import open_transaction

T0 = 1_000_000


def _claimed(store, agent="A", **kw):
    kw.setdefault("exec_ttl_ms", 100)
    tid = store.dispatch(None, **kw)
    c = store.claim(tid, agent)
    assert c is not None
    return tid, c


def test_salvage_appends_partials_in_order(store, clock):
    tid, c = _claimed(store)
    store.salvage(tid, "A", c.token, {"step": 1})
    clock.advance(1)
    store.salvage(tid, "A", c.token, [2, "two"])
    got = store.salvaged(tid)
    assert got == [
        Salvage(tid, "A", "partial", {"step": 1}, T0),
        Salvage(tid, "A", "partial", [2, "two"], T0 + 1),
    ]
    assert store.get(tid).status == "CLAIMED"


def test_salvaged_of_a_task_without_salvage_is_empty(store):
    tid = store.dispatch(None)
    assert store.salvaged(tid) == []


@pytest.mark.parametrize("end", [COMPLETED, FAILED, TIMED_OUT, "released-and-reclaimed"])
def test_partials_survive_whatever_happens_to_the_task(store, clock, end):
    tid, c = _claimed(store)
    store.salvage(tid, "A", c.token, "half done")
    if end == COMPLETED:
        store.fulfill(tid, "A", c.token, "all done")
    elif end == FAILED:
        store.fail(tid, "A", c.token, "gave up")
    elif end == TIMED_OUT:
        clock.set(c.lease_expires_at)
        assert store.sweep() == 1
    else:
        store.release(tid, "A", c.token)
        c2 = store.poll_next("B")
        store.salvage(tid, "B", c2.token, "B's part")
        store.fulfill(tid, "B", c2.token, "B finished")
    parts = [(s.agent_id, s.kind, s.data) for s in store.salvaged(tid)]
    assert parts[0] == ("A", "partial", "half done")
    if end == "released-and-reclaimed":
        assert parts[1:] == [("B", "partial", "B's part")]
    else:
        assert len(parts) == 1


@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("attempts", [1, 2])
def test_late_fulfill_is_refused_but_kept(store, clock, offset, attempts):
    tid, c = _claimed(store, max_attempts=attempts)
    store.salvage(tid, "A", c.token, "partial")
    clock.set(c.lease_expires_at + offset)
    with pytest.raises(LeaseExpired):
        store.fulfill(tid, "A", c.token, {"answer": 42})
    assert not open_transaction(store)
    v = store.get(tid)
    assert v.status == (TIMED_OUT if attempts == 1 else SUBMITTED)
    assert v.result is None
    assert store.salvaged(tid) == [
        Salvage(tid, "A", "partial", "partial", T0),
        Salvage(tid, "A", "late_result", {"answer": 42}, c.lease_expires_at + offset),
    ]


@pytest.mark.parametrize("after", ["swept-requeued", "swept-timed-out", "reclaimed-by-other",
                                   "reclaimed-by-self", "reclaimed-and-completed"])
def test_late_fulfill_after_the_expiry_was_applied_is_kept_too(store, clock, after):
    tid, c = _claimed(store, max_attempts=1 if after == "swept-timed-out" else 2)
    clock.set(c.lease_expires_at + 5)
    store.sweep()
    expected = {"swept-requeued": WrongState, "swept-timed-out": WrongState,
                "reclaimed-by-other": PermissionDenied, "reclaimed-by-self": InvalidToken,
                "reclaimed-and-completed": WrongState}[after]
    if after.startswith("reclaimed"):
        agent = "A" if after == "reclaimed-by-self" else "B"
        c2 = store.poll_next(agent)
        assert c2.task_id == tid
        if after == "reclaimed-and-completed":
            store.fulfill(tid, agent, c2.token, "the accepted result")
    clock.advance(1)
    with pytest.raises(expected):
        store.fulfill(tid, "A", c.token, "late work")
    late = [s for s in store.salvaged(tid) if s.kind == "late_result"]
    assert late == [Salvage(tid, "A", "late_result", "late work", clock())]
    if after == "reclaimed-and-completed":
        assert store.get(tid).result == "the accepted result"


@pytest.mark.parametrize("caller,token", [("A", None), ("A", "forged"), ("B", "holder")])
def test_late_fulfill_is_only_kept_for_the_tokens_own_holder(store, clock, caller, token):
    tid, c = _claimed(store, max_attempts=2)
    clock.set(c.lease_expires_at)
    with pytest.raises(LeaseExpired):
        store.fulfill(tid, caller, c.token if token == "holder" else token, "junk")
    assert store.salvaged(tid) == []
    # after the expiry was applied: WrongState for everybody, and still nothing kept
    with pytest.raises(WrongState):
        store.fulfill(tid, caller, c.token if token == "holder" else token, "junk")
    assert store.salvaged(tid) == []


def test_fulfill_with_a_released_token_is_not_a_late_result(store, assert_refused):
    """The holder gave the task back: a result after that is not delivered work."""
    tid, c = _claimed(store)
    store.release(tid, "A", c.token)
    assert_refused(store, WrongState, store.fulfill, tid, "A", c.token, "x")
    assert store.salvaged(tid) == []
