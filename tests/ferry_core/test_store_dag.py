"""Task DAG: dependencies gate claims, failures cascade (SPEC §4 dag-order)."""

from __future__ import annotations

import pytest

from ferry_core import COMPLETED, FAILED, SUBMITTED, TIMED_OUT, NotFound

T0 = 1_000_000


def _run(store, tid, agent="A", result="ok"):
    c = store.claim(tid, agent)
    assert c is not None, f"{tid} should be claimable"
    store.fulfill(tid, agent, c.token, result)


def test_unknown_dependency_is_not_found(store, assert_refused):
    a = store.dispatch(None)
    info = assert_refused(store, NotFound, store.dispatch, None, depends_on=[a, "missing-id"])
    assert "missing-id" in str(info.value)


def test_dependent_waits_for_every_dependency(store):
    a = store.dispatch(None)
    b = store.dispatch(None)
    child = store.dispatch(None, depends_on=[a, b])
    assert store.get(child).depends_on == (a, b)

    def nothing_for_child():
        assert store.claim(child, "X") is None
        for v in store.inspect():
            assert v.status != "CLAIMED" or v.task_id != child

    nothing_for_child()
    ca = store.poll_next("A")
    assert ca.task_id == a
    cb = store.poll_next("B")
    assert cb.task_id == b
    assert store.poll_next("C") is None  # child is not ready while deps are CLAIMED
    nothing_for_child()
    store.fulfill(a, "A", ca.token, 1)
    assert store.poll_next("C") is None  # one of two deps done is not enough
    nothing_for_child()
    store.fulfill(b, "B", cb.token, 2)
    c = store.poll_next("C")
    assert c is not None and c.task_id == child


def test_dependency_already_completed_is_ready_at_once(store):
    a = store.dispatch(None)
    _run(store, a)
    child = store.dispatch(None, depends_on=[a])
    assert store.poll_next("A").task_id == child


def test_dependencies_are_respected_in_poll_order(store, clock):
    """The oldest task is skipped while blocked; younger ready tasks go first."""
    a = store.dispatch(None)
    blocked = store.dispatch(None, depends_on=[a])
    clock.advance(1)
    later = store.dispatch(None)
    assert store.poll_next("A").task_id == a
    assert store.poll_next("A").task_id == later
    assert store.poll_next("A") is None
    assert store.get(blocked).status == SUBMITTED


def test_failure_cascades_transitively_with_reason_naming_the_dependency(store, clock):
    root = store.dispatch(None)
    other = store.dispatch(None)
    mid = store.dispatch(None, depends_on=[root])
    leaf = store.dispatch(None, depends_on=[mid])
    both = store.dispatch(None, depends_on=[other, root])
    unrelated = store.dispatch(None, depends_on=[other])
    c = store.claim(root, "A")
    clock.advance(3)
    store.fail(root, "A", c.token, "disk full")
    v = {t: store.get(t) for t in (root, mid, leaf, both, unrelated, other)}
    assert (v[root].status, v[root].error_reason) == (FAILED, "disk full")
    assert v[mid].status == FAILED and root in v[mid].error_reason
    assert "FAILED" in v[mid].error_reason
    assert v[leaf].status == FAILED and mid in v[leaf].error_reason
    assert v[both].status == FAILED and root in v[both].error_reason
    for t in (mid, leaf, both):
        assert v[t].completed_at == T0 + 3
        assert store.claim(t, "B") is None
    assert v[unrelated].status == SUBMITTED and v[other].status == SUBMITTED
    _run(store, other)
    assert store.poll_next("B").task_id == unrelated


@pytest.mark.parametrize("how", ["queue-window", "lease-expiry"])
def test_timed_out_dependency_cascades(store, clock, how):
    dep = store.dispatch(None, queue_ttl_ms=100, exec_ttl_ms=50)
    child = store.dispatch(None, queue_ttl_ms=10_000)
    grandchild = store.dispatch(None, depends_on=[child])
    child2 = store.dispatch(None, depends_on=[dep], queue_ttl_ms=10_000)
    if how == "queue-window":
        clock.set(T0 + 100)
    else:
        c = store.claim(dep, "A")
        clock.set(c.lease_expires_at)
    # child (independent) stays, child2 fails with a reason naming dep
    assert store.poll_next("B").task_id == child
    v = store.get(child2)
    assert v.status == FAILED
    assert dep in v.error_reason and "TIMED_OUT" in v.error_reason
    assert store.get(dep).status == TIMED_OUT
    assert store.get(grandchild).status == SUBMITTED


def test_requeued_dependency_does_not_cascade(store, clock):
    dep = store.dispatch(None, exec_ttl_ms=50, max_attempts=2)
    child = store.dispatch(None, depends_on=[dep])
    c = store.claim(dep, "A")
    clock.set(c.lease_expires_at)
    assert store.sweep() == 1
    assert store.get(child).status == SUBMITTED
    _run(store, dep)
    assert store.poll_next("B").task_id == child


@pytest.mark.parametrize("dead_state", [FAILED, TIMED_OUT])
def test_dispatch_depending_on_a_dead_task_is_failed_at_once(store, clock, dead_state):
    dead = store.dispatch(None, queue_ttl_ms=10)
    if dead_state == FAILED:
        c = store.claim(dead, "A")
        store.fail(dead, "A", c.token, "nope")
    else:
        clock.advance(10)
        store.sweep()
    assert store.get(dead).status == dead_state
    ok = store.dispatch(None)
    tid = store.dispatch(None, depends_on=[ok, dead])
    v = store.get(tid)
    assert v.status == FAILED
    assert dead in v.error_reason and dead_state in v.error_reason
    assert v.completed_at == clock()
    assert store.claim(tid, "A") is None


def test_dispatch_sees_a_due_but_unswept_timeout_of_its_dependency(store, clock):
    dep = store.dispatch(None, queue_ttl_ms=10)
    clock.advance(10)  # nobody swept yet
    tid = store.dispatch(None, depends_on=[dep])
    assert store.get(tid).status == FAILED
    assert store.get(dep).status == TIMED_OUT


def test_diamond_completes_in_order(store):
    top = store.dispatch(None)
    left = store.dispatch(None, depends_on=[top])
    right = store.dispatch(None, depends_on=[top])
    bottom = store.dispatch(None, depends_on=[left, right])
    order = []
    while (c := store.poll_next("A")) is not None:
        order.append(c.task_id)
        store.fulfill(c.task_id, "A", c.token, None)
    assert order == [top, left, right, bottom]
    assert all(v.status == COMPLETED for v in store.inspect())
