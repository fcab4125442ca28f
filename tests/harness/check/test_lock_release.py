"""``release_lock`` by the owner of a lock that expired and that nobody has taken since is a
freedom (PROTOCOL.md#release_lock-on-an-expired-lock): True (dropped) and False both pass;
dropping a lock another owner holds is still caught."""

from __future__ import annotations

import pytest

from ferry_harness.check.checker import Checker
from tests.histories import SPEC_STORE, T0, Recorder


def _acquire(rec: Recorder, owner: str, now: int, got: bool = True) -> None:
    rec.op("acquire_lock", owner, {"name": "l", "owner": owner, "ttl_ms": 30}, now=now, value=got)


def _check(rec: Recorder) -> list:
    return Checker(SPEC_STORE).check(rec.history)


@pytest.mark.parametrize("answer", [True, False])
def test_an_expired_lock_nobody_took_may_be_released_or_not(answer):
    rec = Recorder()
    _acquire(rec, "d1", T0)
    rec.op("release_lock", "d1", {"name": "l", "owner": "d1"}, now=T0 + 30, value=answer)
    rec.op("lock_holder", "obs", {"name": "l"}, now=T0 + 31, value=None)
    _acquire(rec, "d2", T0 + 31)
    assert _check(rec) == []


def test_releasing_a_lock_another_owner_took_is_still_caught():
    rec = Recorder()
    _acquire(rec, "d1", T0)
    _acquire(rec, "d2", T0 + 30)
    rec.op("release_lock", "d1", {"name": "l", "owner": "d1"}, now=T0 + 31, value=True)
    found = _check(rec)
    assert found and found[0].invariant == "lock-exclusive", found


def test_a_live_lock_released_by_its_owner_must_say_true():
    rec = Recorder()
    _acquire(rec, "d1", T0)
    rec.op("release_lock", "d1", {"name": "l", "owner": "d1"}, now=T0 + 29, value=False)
    assert [v.invariant for v in _check(rec)] == ["lock-exclusive"]
