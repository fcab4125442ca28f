"""Daemon locks: one UPSERT, half-open [acquired, expires_at) (SPEC §4, §6 lock-exclusive)."""

from __future__ import annotations

import random

import pytest

from tests.ferry_core.backend import raw_rows

T0 = 1_000_000
TTL = 500


def _row(store, name):
    rows = raw_rows(store, "SELECT owner, expires_at, acquired_at FROM daemon_locks"
                           " WHERE name=?", (name,))
    return rows[0] if rows else None


def test_acquire_free_lock(store):
    assert store.lock_holder("sweeper") is None
    assert store.acquire_lock("sweeper", "d1", TTL) is True
    assert store.lock_holder("sweeper") == "d1"
    assert _row(store, "sweeper") == ("d1", T0 + TTL, T0)


def test_other_owner_refused_while_held(store, store_factory, clock, db_dump):
    other = store_factory()
    assert store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL - 1)
    before = db_dump()
    assert other.acquire_lock("L", "d2", TTL) is False
    assert store.acquire_lock("L", "d2", TTL) is False
    assert db_dump() == before
    assert other.lock_holder("L") == "d1"


@pytest.mark.parametrize("offset", [0, 1])
def test_other_owner_granted_at_and_after_expiry(store, store_factory, clock, offset):
    other = store_factory()
    assert store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL + offset)
    assert store.lock_holder("L") is None
    assert other.acquire_lock("L", "d2", TTL) is True
    assert store.lock_holder("L") == "d2"
    assert _row(store, "L") == ("d2", T0 + TTL + offset + TTL, T0 + TTL + offset)
    assert store.acquire_lock("L", "d1", TTL) is False


@pytest.mark.parametrize("offset,holder", [(-1, "d1"), (0, None), (1, None)])
def test_lock_holder_boundaries(store, clock, offset, holder):
    store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL + offset)
    assert store.lock_holder("L") == holder


def test_owner_renews_before_expiry_keeping_acquired_at(store, clock):
    store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL - 1)
    assert store.acquire_lock("L", "d1", TTL) is True
    assert _row(store, "L") == ("d1", T0 + TTL - 1 + TTL, T0)
    clock.set(T0 + TTL)  # the old expiry no longer applies
    assert store.lock_holder("L") == "d1"
    assert store.acquire_lock("L", "d2", TTL) is False


@pytest.mark.parametrize("offset", [0, 1])
def test_owner_reacquires_after_expiry_as_a_new_hold(store, clock, offset):
    store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL + offset)
    assert store.acquire_lock("L", "d1", TTL) is True
    assert _row(store, "L") == ("d1", T0 + TTL + offset + TTL, T0 + TTL + offset)


def test_release_lock_only_by_owner(store, store_factory, clock, db_dump):
    other = store_factory()
    store.acquire_lock("L", "d1", TTL)
    before = db_dump()
    assert other.release_lock("L", "d2") is False
    assert store.release_lock("L", "d2") is False
    assert store.release_lock("nope", "d1") is False
    assert db_dump() == before
    assert store.lock_holder("L") == "d1"
    clock.set(T0 + TTL - 1)
    assert store.release_lock("L", "d1") is True
    assert store.lock_holder("L") is None
    assert _row(store, "L") is None
    assert other.acquire_lock("L", "d2", TTL) is True
    assert store.release_lock("L", "d1") is False  # no longer ours


@pytest.mark.parametrize("offset", [0, 1])
def test_release_of_an_expired_lock_is_false_and_writes_nothing(store, clock, db_dump, offset):
    store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL + offset)
    before = db_dump()
    assert store.release_lock("L", "d1") is False
    assert db_dump() == before


def test_locks_are_independent_by_name(store):
    assert store.acquire_lock("a", "d1", TTL)
    assert store.acquire_lock("b", "d2", TTL)
    assert (store.lock_holder("a"), store.lock_holder("b")) == ("d1", "d2")
    assert store.acquire_lock("a", "d2", TTL) is False


def test_at_most_one_owner_at_every_instant(store, store_factory, clock):
    """Many contenders over a span of time: never two owners, never a gap while held."""
    contenders = [store, store_factory(), store_factory()]
    owner = None
    expires = None
    owners_seen = []
    rng = random.Random(1234)
    for t in range(T0, T0 + 3_000, 37):
        clock.set(t)
        for i, s in enumerate(contenders):
            if rng.random() < 0.6:  # a random subset tries: the owner sometimes lets it lapse
                continue
            got = s.acquire_lock("L", f"d{i}", 100)
            if expires is None or t >= expires or owner == f"d{i}":
                assert got, (t, i)
                owner, expires = f"d{i}", t + 100
                if not owners_seen or owners_seen[-1] != owner:
                    owners_seen.append(owner)
            else:
                assert not got, (t, i, owner, expires)
        holders = {s.lock_holder("L") for s in contenders}
        assert holders == {owner if t < expires else None}
    assert len(owners_seen) > 3  # the lock really changed hands


@pytest.mark.parametrize("race", ["taken-over", "expired"])
def test_release_lock_delete_repeats_its_conditions(store, store_factory, clock, monkeypatch,
                                                    race):
    """release_lock reads, then deletes: the DELETE must repeat owner and expiry, because
    the lock can change hands between the two statements."""
    store.acquire_lock("L", "d1", TTL)
    clock.set(T0 + TTL)
    if race == "taken-over":
        assert store_factory().acquire_lock("L", "d2", TTL)
    real_rows = store._rows

    def stale_check(sql, args=()):
        if sql.startswith("SELECT 1 FROM daemon_locks"):
            return [(1,)]  # what the read saw a moment earlier: d1 held it
        return real_rows(sql, args)

    monkeypatch.setattr(store, "_rows", stale_check)
    assert store.release_lock("L", "d1") is False
    monkeypatch.undo()
    if race == "taken-over":
        assert store.lock_holder("L") == "d2"
    else:
        assert _row(store, "L") == ("d1", T0 + TTL, T0)
