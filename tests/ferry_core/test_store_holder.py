"""The holder guard (SPEC §5) in its exact order, and claim tokens."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from ferry_core import (
    CLAIMED,
    COMPLETED,
    FAILED,
    SUBMITTED,
    TIMED_OUT,
    InvalidToken,
    LeaseExpired,
    NotFound,
    PermissionDenied,
    TokenRequired,
    WrongState,
)
from tests.ferry_core.backend import open_transaction, raw_rows

T0 = 1_000_000

# Every holder operation, called the same way: (store, task_id, agent, token).
HOLDER_OPS = {
    "fulfill": lambda s, t, a, k: s.fulfill(t, a, k, {"r": 1}),
    "fail": lambda s, t, a, k: s.fail(t, a, k, "it broke"),
    "release": lambda s, t, a, k: s.release(t, a, k, "busy"),
    "extend": lambda s, t, a, k: s.extend(t, a, k),
    "salvage": lambda s, t, a, k: s.salvage(t, a, k, {"part": 1}),
}
# What each successful op leaves behind.
AFTER_OK = {"fulfill": COMPLETED, "fail": FAILED, "release": SUBMITTED, "extend": CLAIMED,
            "salvage": CLAIMED}

ops = pytest.mark.parametrize("op", list(HOLDER_OPS))


def _claimed(store, target=None, agent="A", **kw):
    tid = store.dispatch(target, exec_ttl_ms=1_000, **kw)
    c = store.claim(tid, agent)
    assert c is not None
    return tid, c


@ops
def test_holder_with_token_succeeds(store, op):
    tid, c = _claimed(store)
    HOLDER_OPS[op](store, tid, "A", c.token)
    assert store.get(tid).status == AFTER_OK[op]


# ----------------------------------------------------------------- guard order, one step each
@ops
def test_1_not_found(store, assert_refused, op):
    _claimed(store)
    assert_refused(store, NotFound, HOLDER_OPS[op], store, "ghost", "A", "tok")


@ops
def test_2_target_mismatch_is_permission_denied_even_with_the_valid_token(
        store, assert_refused, op):
    tid, c = _claimed(store, target="A")
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", c.token)


@ops
def test_2_target_mismatch_comes_before_wrong_state(store, assert_refused, op):
    tid = store.dispatch("A")  # SUBMITTED: for A that is WrongState, for B it is not theirs
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", None)
    assert_refused(store, WrongState, HOLDER_OPS[op], store, tid, "A", None)


@ops
def test_2_target_mismatch_comes_before_lease_expired(store, clock, assert_refused, op):
    tid, c = _claimed(store, target="A")
    clock.set(c.lease_expires_at)
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", c.token)
    assert store.get(tid).status == CLAIMED  # not even the due expiry was applied


@ops
@pytest.mark.parametrize("final", [SUBMITTED, COMPLETED, FAILED, TIMED_OUT])
def test_3_wrong_state(store, clock, assert_refused, op, final):
    tid, c = _claimed(store)
    if final == SUBMITTED:
        store.release(tid, "A", c.token)
    elif final == COMPLETED:
        store.fulfill(tid, "A", c.token, 1)
    elif final == FAILED:
        store.fail(tid, "A", c.token, "no")
    else:
        clock.set(c.lease_expires_at)
        assert store.sweep() == 1
    assert store.get(tid).status == final
    # WrongState comes before any token check: none, forged and the old token alike
    for token in (None, "forged", c.token):
        if op == "fulfill" and final == TIMED_OUT and token == c.token:
            continue  # a late result is kept as salvage: tested in test_store_salvage
        assert_refused(store, WrongState, HOLDER_OPS[op], store, tid, "A", token)


@ops
@pytest.mark.parametrize("caller,token", [("A", None), ("A", "forged"), ("B", "holder"),
                                          ("B", None)])
@pytest.mark.parametrize("offset", [0, 1])
def test_4_lease_expired_comes_before_holder_and_token_checks(
        store, clock, db_dump, op, caller, token, offset):
    tid, c = _claimed(store, max_attempts=2)
    clock.set(c.lease_expires_at + offset)
    with pytest.raises(LeaseExpired):
        HOLDER_OPS[op](store, tid, caller, c.token if token == "holder" else token)
    assert not open_transaction(store)
    v = store.get(tid)  # the due expiry was applied (SPEC §3), nothing else changed
    assert (v.status, v.claimed_by, v.attempt) == (SUBMITTED, None, 1)
    assert v.queued_at == c.lease_expires_at
    assert store.salvaged(tid) == []


@ops
def test_5_other_agent_is_permission_denied(store, assert_refused, op):
    tid, c = _claimed(store)
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", c.token)
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", None)
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", "forged")


@ops
def test_6_missing_token_is_token_required(store, assert_refused, op):
    tid, c = _claimed(store)
    assert_refused(store, TokenRequired, HOLDER_OPS[op], store, tid, "A", None)
    HOLDER_OPS[op](store, tid, "A", c.token)  # the holder still holds it


@ops
def test_6_lenient_store_accepts_a_missing_token_from_the_holding_agent(
        store_factory, assert_refused, op):
    store = store_factory(strict_tokens=False)
    tid, c = _claimed(store)
    # still only the holding agent, and a token given must still be right
    assert_refused(store, PermissionDenied, HOLDER_OPS[op], store, tid, "B", None)
    assert_refused(store, InvalidToken, HOLDER_OPS[op], store, tid, "A", "forged")
    HOLDER_OPS[op](store, tid, "A", None)
    assert store.get(tid).status == AFTER_OK[op]


@ops
@pytest.mark.parametrize("kind", ["forged", "uuid4", "empty", "other-task", "case", "non-ascii"])
def test_7_wrong_token_is_invalid_token(store, assert_refused, op, kind):
    tid, c = _claimed(store)
    _, other = _claimed(store)
    token = {
        "forged": "not-a-token",
        "uuid4": str(uuid.uuid4()),
        "empty": "",
        "other-task": other.token,
        "case": c.token.upper(),
        "non-ascii": c.token[:-1] + "é",
    }[kind]
    assert_refused(store, InvalidToken, HOLDER_OPS[op], store, tid, "A", token)
    HOLDER_OPS[op](store, tid, "A", c.token)
    assert store.get(tid).status == AFTER_OK[op]


@ops
def test_same_name_impersonation_from_another_instance(store, store_factory, assert_refused, op):
    tid, c = _claimed(store)
    impostor = store_factory()  # another process on the same file, same agent id
    assert_refused(impostor, TokenRequired, HOLDER_OPS[op], impostor, tid, "A", None)
    assert_refused(impostor, InvalidToken, HOLDER_OPS[op], impostor, tid, "A", str(uuid.uuid4()))
    assert store.get(tid).status == CLAIMED
    HOLDER_OPS[op](store, tid, "A", c.token)
    assert store.get(tid).status == AFTER_OK[op]


def test_the_token_is_the_authority_across_instances(store, store_factory):
    tid, c = _claimed(store)
    same_agent_elsewhere = store_factory()
    same_agent_elsewhere.fulfill(tid, "A", c.token, "from the other instance")
    assert store.get(tid).result == "from the other instance"


# ----------------------------------------------------------------- tokens
def _token_rows(store):
    return raw_rows(store, "SELECT token, task_id, agent_id, issued_at, retired_at, retired_why"
                           " FROM claim_tokens ORDER BY issued_at, task_id")


def test_token_is_a_fresh_uuid4_recorded_in_history(store, clock):
    tid = store.dispatch(None)
    clock.advance(5)
    c = store.poll_next("A")
    u = uuid.UUID(c.token)
    assert u.version == 4 and str(u) == c.token
    assert _token_rows(store) == [(c.token, tid, "A", T0 + 5, None, None)]


@pytest.mark.parametrize("how", ["release", "expiry", "fulfill", "fail"])
def test_token_is_retired_and_then_refused_forever(store, clock, assert_refused, how):
    tid = store.dispatch(None, exec_ttl_ms=100, max_attempts=2)
    c = store.poll_next("A")
    clock.advance(10)
    if how == "release":
        store.release(tid, "A", c.token)
        retired_at, why = T0 + 10, "release"
    elif how == "expiry":
        clock.set(c.lease_expires_at)
        assert store.sweep() == 1
        retired_at, why = c.lease_expires_at, "expiry"
    elif how == "fulfill":
        store.fulfill(tid, "A", c.token, 1)
        # the COMPLETED row records this retirement; the history row is left be
        retired_at, why = None, None
        assert (store.get(tid).status, store.get(tid).completed_at) == (COMPLETED, T0 + 10)
    else:
        store.fail(tid, "A", c.token, "x")
        retired_at, why = T0 + 10, "fail"
    assert _token_rows(store) == [(c.token, tid, "A", T0, retired_at, why)]
    # while the task is not CLAIMED the old token meets WrongState ...
    op = store.extend  # extend/salvage/release: no late-result salvage involved
    assert_refused(store, WrongState, op, tid, "A", c.token)
    if how in ("fulfill", "fail"):
        return
    # ... and once it is claimed again, even by the same agent, InvalidToken
    c2 = store.poll_next("A")
    assert c2.task_id == tid and c2.token != c.token
    for name in ("extend", "salvage", "release", "fail"):
        assert_refused(store, InvalidToken, HOLDER_OPS[name], store, tid, "A", c.token)
    store.fulfill(tid, "A", c2.token, "done")
    assert store.get(tid).status == COMPLETED


def test_tokens_never_repeat(store_factory, clock):
    store = store_factory(max_releases=1_000)
    ids = [store.dispatch(None, exec_ttl_ms=10, max_attempts=1_000) for _ in range(5)]
    tokens = []
    for round_ in range(20):
        for _ in ids:
            c = store.poll_next(f"w{round_ % 3}")
            tokens.append(c.token)
            if round_ % 2:
                store.release(c.task_id, c.agent_id, c.token)
        clock.advance(10)  # expire the rest
    assert len(tokens) == 100 and len(set(tokens)) == 100
    rows = _token_rows(store)
    assert len(rows) == 100 and {r[0] for r in rows} == set(tokens)


def test_history_primary_key_makes_a_reissued_token_impossible(store, db_path):
    a = store.dispatch(None)
    b = store.dispatch(None)
    ca = store.claim(a, "A")
    store.release(a, "A", ca.token)
    conn = sqlite3.connect(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "UPDATE tasks SET status='CLAIMED', claim_token=?, claimed_by='B',"
                " claimed_at=1, lease_expires_at=2 WHERE task_id=?", (ca.token, b))
        conn.rollback()
    finally:
        conn.close()
    assert store.get(b).status == SUBMITTED


# ----------------------------------------------------------------- the final write repeats the guard
@ops
@pytest.mark.parametrize("race", ["lease-ended", "released-and-reclaimed"])
def test_final_write_repeats_the_guard(store, store_factory, clock, monkeypatch, op, race):
    """SPEC §5: a check in Python alone is a race. Let the first guard pass on a stale row
    (as if the world changed between the guard's read and the write): the write's own WHERE
    clause must refuse, and the retry names the refusal."""
    tid, c = _claimed(store, max_attempts=2)
    clock.set(c.lease_expires_at - 1)
    stale_row = store._guard(tid, "A", c.token, clock())
    if race == "lease-ended":
        clock.set(c.lease_expires_at)
        expected, holder = LeaseExpired, None
    else:
        store.release(tid, "A", c.token)
        c2 = store_factory().claim(tid, "B")
        assert c2 is not None
        expected, holder = PermissionDenied, "B"
    real_guard = store._guard
    calls = []

    def stale_first(*args):
        calls.append(args)
        return stale_row if len(calls) == 1 else real_guard(*args)

    monkeypatch.setattr(store, "_guard", stale_first)
    with pytest.raises(expected):
        HOLDER_OPS[op](store, tid, "A", c.token)
    assert len(calls) == 2  # the stale pass, then the re-read that named the refusal
    v = store.get(tid)
    assert v.claimed_by == holder and v.result is None and v.extend_count == 0
    assert v.status == (SUBMITTED if holder is None else CLAIMED)
    assert [s.kind for s in store.salvaged(tid)] == (
        ["late_result"] if op == "fulfill" and race == "lease-ended" else [])
