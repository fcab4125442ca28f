"""dispatch, the read APIs and argument validation (SPEC §2, §4, §7)."""

from __future__ import annotations

import json
import os

import pytest

from ferry_core import (
    CLAIMED,
    SUBMITTED,
    InvalidArgument,
    LeaseStore,
    NotFound,
    Salvage,
    TaskView,
)
from ferry_core.store import DEFAULT_EXEC_TTL_MS, DEFAULT_QUEUE_TTL_MS

T0 = 1_000_000


def test_dispatch_inserts_submitted_task_with_every_field(store, clock):
    dep = store.dispatch(None)
    clock.advance(7)
    tid = store.dispatch(
        "agent-a", title="build", payload={"n": [1, 2.5, None, "x"]}, requester="boss",
        depends_on=[dep], queue_ttl_ms=5_000, exec_ttl_ms=700, max_attempts=3,
    )
    v = store.get(tid)
    assert isinstance(v, TaskView)
    assert v.task_id == tid
    assert v.status == SUBMITTED
    assert v.target_agent == "agent-a"
    assert v.title == "build"
    assert v.payload == {"n": [1, 2.5, None, "x"]}
    assert v.requester == "boss"
    assert v.depends_on == (dep,)
    assert (v.queue_ttl_ms, v.exec_ttl_ms, v.max_attempts) == (5_000, 700, 3)
    assert v.created_at == v.queued_at == T0 + 7
    assert v.claimed_by is v.claimed_at is v.lease_expires_at is v.completed_at is None
    assert (v.attempt, v.extend_count, v.release_count) == (0, 0, 0)
    assert v.result is None and v.error_reason is None
    assert v.is_logically_expired is False


def test_dispatch_defaults(store):
    tid = store.dispatch(None)
    v = store.get(tid)
    assert v.target_agent is None
    assert (v.title, v.payload, v.requester, v.depends_on) == ("", None, "", ())
    assert v.queue_ttl_ms == DEFAULT_QUEUE_TTL_MS
    assert v.exec_ttl_ms == DEFAULT_EXEC_TTL_MS
    assert v.max_attempts == 1


def test_dispatch_ids_are_unique_strings(store):
    ids = [store.dispatch(None) for _ in range(50)]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == 50
    assert [v.task_id for v in store.inspect()] == ids


def test_duplicate_dependencies_are_recorded_once(store):
    a = store.dispatch(None)
    b = store.dispatch(None)
    tid = store.dispatch(None, depends_on=[a, b, a])
    assert store.get(tid).depends_on == (a, b)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"queue_ttl_ms": 0}, id="queue_ttl-0"),
        pytest.param({"queue_ttl_ms": -5}, id="queue_ttl-negative"),
        pytest.param({"queue_ttl_ms": True}, id="queue_ttl-bool"),
        pytest.param({"queue_ttl_ms": 1.5}, id="queue_ttl-float"),
        pytest.param({"queue_ttl_ms": "100"}, id="queue_ttl-str"),
        pytest.param({"exec_ttl_ms": 0}, id="exec_ttl-0"),
        pytest.param({"exec_ttl_ms": -1}, id="exec_ttl-negative"),
        pytest.param({"exec_ttl_ms": False}, id="exec_ttl-bool"),
        pytest.param({"exec_ttl_ms": None}, id="exec_ttl-none"),
        pytest.param({"max_attempts": 0}, id="max_attempts-0"),
        pytest.param({"max_attempts": True}, id="max_attempts-bool"),
        pytest.param({"payload": object()}, id="payload-object"),
        pytest.param({"payload": float("nan")}, id="payload-nan"),
        pytest.param({"payload": float("inf")}, id="payload-inf"),
        pytest.param({"payload": {"x": {1, 2}}}, id="payload-set"),
        pytest.param({"payload": b"bytes"}, id="payload-bytes"),
        pytest.param({"depends_on": "a-string"}, id="depends_on-string"),
        pytest.param({"depends_on": [""]}, id="depends_on-empty-id"),
        pytest.param({"depends_on": [5]}, id="depends_on-int-id"),
        pytest.param({"title": None}, id="title-none"),
        pytest.param({"requester": 3}, id="requester-int"),
    ],
)
def test_dispatch_bad_arguments_are_invalid_and_change_nothing(store, assert_refused, kwargs):
    store.dispatch(None)  # something in the database to compare
    assert_refused(store, InvalidArgument, store.dispatch, None, **kwargs)
    assert len(store.inspect()) == 1


@pytest.mark.parametrize("target", ["", 5, b"agent"])
def test_dispatch_bad_target_agent_is_invalid(store, assert_refused, target):
    assert_refused(store, InvalidArgument, store.dispatch, target)


def test_dispatch_unknown_dependency_is_not_found_and_changes_nothing(store, assert_refused):
    known = store.dispatch(None)
    info = assert_refused(store, NotFound, store.dispatch, None, depends_on=[known, "ghost"])
    assert "ghost" in str(info.value)
    assert [v.task_id for v in store.inspect()] == [known]


def test_dispatch_refusal_rolls_back_a_due_sweep(store, clock, assert_refused):
    """The refused dispatch sweeps inside its transaction; the rollback undoes that too."""
    due = store.dispatch(None, queue_ttl_ms=10)
    clock.advance(10)
    assert_refused(store, NotFound, store.dispatch, None, depends_on=["ghost"])
    assert store.get(due).status == SUBMITTED  # the sweep did not survive the refusal


def test_get_and_salvaged_unknown_task_is_not_found(store, assert_refused):
    store.dispatch(None)
    assert_refused(store, NotFound, store.get, "nope")
    assert_refused(store, NotFound, store.salvaged, "nope")


@pytest.mark.parametrize("bad", ["", None, 7])
def test_read_apis_validate_task_id(store, assert_refused, bad):
    assert_refused(store, InvalidArgument, store.get, bad)
    assert_refused(store, InvalidArgument, store.salvaged, bad)


def test_inspect_filters_by_target_or_holder(store):
    a = store.dispatch("A")
    b = store.dispatch("B")
    anyone = store.dispatch(None)
    assert [v.task_id for v in store.inspect()] == [a, b, anyone]
    assert [v.task_id for v in store.inspect("A")] == [a]
    c = store.claim(anyone, "A")
    assert c is not None
    assert [v.task_id for v in store.inspect("A")] == [a, anyone]
    assert [v.task_id for v in store.inspect("B")] == [b]
    assert store.inspect("nobody") == []


def test_views_never_carry_the_token(store):
    tid = store.dispatch(None, payload={"p": 1})
    c = store.poll_next("A")
    store.salvage(tid, "A", c.token, {"partial": True})
    views = [store.get(tid), *store.inspect(), *store.inspect("A")]
    for v in views:
        assert v.status == CLAIMED
        d = v.to_dict()
        assert not any("token" in k for k in d)
        assert c.token not in json.dumps(d)
    for s in store.salvaged(tid):
        assert isinstance(s, Salvage)
        assert c.token not in json.dumps(s.to_dict())


def test_fail_with_empty_reason_is_invalid(store, assert_refused):
    tid = store.dispatch(None)
    c = store.poll_next("A")
    for reason in ("", "   ", None):
        assert_refused(store, InvalidArgument, store.fail, tid, "A", c.token, reason)
    assert store.get(tid).status == CLAIMED


@pytest.mark.parametrize(
    "op",
    ["fulfill-result", "salvage-partial", "release-reason", "token-type", "agent-empty"],
)
def test_holder_ops_validate_their_arguments(store, assert_refused, op):
    tid = store.dispatch(None)
    c = store.poll_next("A")
    calls = {
        "fulfill-result": (store.fulfill, tid, "A", c.token, object()),
        "salvage-partial": (store.salvage, tid, "A", c.token, float("nan")),
        "release-reason": (store.release, tid, "A", c.token, 5),
        "token-type": (store.extend, tid, "A", 12345),
        "agent-empty": (store.extend, tid, "", c.token),
    }
    fn, *args = calls[op]
    assert_refused(store, InvalidArgument, fn, *args)
    assert store.get(tid).status == CLAIMED


def test_fulfill_with_an_object_token_is_invalid_argument(store, assert_refused):
    """Not a StoreError from binding the object into SQL: the caller passed a bad value."""
    tid = store.dispatch(None)
    c = store.poll_next("A")
    assert_refused(store, InvalidArgument, store.fulfill, tid, "A", object(), {"r": 1})
    store.fulfill(tid, "A", c.token, 1)


@pytest.mark.parametrize("agent", ["", None, 3])
def test_poll_and_claim_validate_agent(store, assert_refused, agent):
    tid = store.dispatch(None)
    assert_refused(store, InvalidArgument, store.poll_next, agent)
    assert_refused(store, InvalidArgument, store.claim, tid, agent)


def test_lock_and_checkpoint_arguments_are_validated(store, assert_refused):
    assert_refused(store, InvalidArgument, store.acquire_lock, "L", "o", 0)
    assert_refused(store, InvalidArgument, store.acquire_lock, "L", "o", True)
    assert_refused(store, InvalidArgument, store.acquire_lock, "", "o", 10)
    assert_refused(store, InvalidArgument, store.acquire_lock, "L", "", 10)
    assert_refused(store, InvalidArgument, store.release_lock, "L", "")
    assert_refused(store, InvalidArgument, store.lock_holder, "")
    assert_refused(store, InvalidArgument, store.checkpoint, "NOPE")
    assert_refused(store, InvalidArgument, store.checkpoint, 3)


def test_clock_must_return_int_milliseconds(store_factory, assert_refused):
    s = store_factory(clock=lambda: 1.5)
    assert_refused(s, InvalidArgument, s.dispatch, None)
    s2 = store_factory(clock=lambda: True)
    assert_refused(s2, InvalidArgument, s2.dispatch, None)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"claim_strategy": "x"}, id="claim_strategy"),
        pytest.param({"busy_policy": "x"}, id="busy_policy"),
        pytest.param({"max_extends": -1}, id="max_extends"),
        pytest.param({"max_releases": -1}, id="max_releases"),
        pytest.param({"busy_timeout_ms": -1}, id="busy_timeout"),
        pytest.param({"max_releases": 1.0}, id="max_releases-float"),
    ],
)
def test_bad_constructor_arguments_are_invalid_and_create_no_file(tmp_path, clock, kwargs):
    path = tmp_path / "new.db"
    with pytest.raises(InvalidArgument):
        LeaseStore(str(path), clock=clock, **kwargs)
    assert sorted(os.listdir(tmp_path)) == [], "a refused constructor created files"


def test_bad_constructor_arguments_leave_an_existing_store_unchanged(db_path, clock, db_dump):
    with LeaseStore(db_path, clock=clock) as s:
        s.dispatch(None)
    before = db_dump()
    for kwargs in ({"claim_strategy": "x"}, {"busy_policy": "x"}):
        with pytest.raises(InvalidArgument):
            LeaseStore(db_path, clock=clock, **kwargs)
    assert db_dump() == before


def test_store_is_usable_as_context_manager_and_data_persists(db_path, clock, claim_strategy):
    with LeaseStore(db_path, clock=clock, claim_strategy=claim_strategy) as s:
        tid = s.dispatch("A", payload=[1])
    with LeaseStore(db_path, clock=clock, claim_strategy=claim_strategy) as s:
        assert s.get(tid).payload == [1]
        assert s.poll_next("A").task_id == tid
