"""The configurable store's four latest switches do what their names say (the matrix then
holds ferry to accepting each choice: ``python -m tests.matrix --only combos``)."""

from __future__ import annotations

import pytest

from ferry_core import ManualClock
from ferry_core.errors import InvalidArgument, InvalidToken, LimitExceeded
from tests.variants.configurable import Config, make_factory


def _store(tmp_path, clock, **switches):
    store = make_factory(Config(**switches))(str(tmp_path / "c.db"), clock=clock)
    return store


@pytest.fixture
def clock():
    return ManualClock(1_000_000)


@pytest.mark.parametrize(("choice", "released"), [("keep_expired", False), ("drop_expired", True)])
def test_lock_release_of_an_expired_lock(tmp_path, clock, choice, released):
    s = _store(tmp_path, clock, lock_release=choice)
    assert s.acquire_lock("L", "a", 10)
    clock.advance(10)  # run out, nobody took it since
    assert s.release_lock("L", "a") is released
    assert s.acquire_lock("L", "b", 10) and s.release_lock("L", "a") is False  # another's


@pytest.mark.parametrize("choice", ["refuse", "accept"])
def test_a_non_json_result_without_results(tmp_path, clock, choice):
    s = _store(tmp_path, clock, bad_result=choice, caps="no_results")
    task = s.dispatch(None)
    claim = s.claim(task, "w")
    token = claim["token"] if isinstance(claim, dict) else claim.token
    if choice == "refuse":
        with pytest.raises(InvalidArgument):
            s.fulfill(task, "w", token, {1, 2})
    else:
        s.fulfill(task, "w", token, {1, 2})
        assert s.get(task)["status"] == "COMPLETED"


@pytest.mark.parametrize(("choice", "refused"), [("guard", InvalidToken), ("argument", InvalidArgument)])
def test_a_token_that_is_not_a_string(tmp_path, clock, choice, refused):
    s = _store(tmp_path, clock, token_type=choice)
    task = s.dispatch(None)
    s.claim(task, "w")
    with pytest.raises(refused):
        s.fulfill(task, "w", 123, None)


@pytest.mark.parametrize("choice", ["apply", "skip"])
def test_the_extend_cap_without_a_queue_window(tmp_path, clock, choice):
    s = _store(tmp_path, clock, extend_cap=choice, caps="no_queue_ttl")
    task = s.dispatch(None, queue_ttl_ms=60, exec_ttl_ms=300)  # past the cap at once
    claim = s.claim(task, "w")
    token = claim["token"] if isinstance(claim, dict) else claim.token
    if choice == "apply":
        with pytest.raises(LimitExceeded):
            s.extend(task, "w", token)
    else:
        assert s.extend(task, "w", token) == clock() + 300


def test_with_both_timing_features_the_cap_always_applies(tmp_path, clock):
    s = _store(tmp_path, clock, extend_cap="skip")
    task = s.dispatch(None, queue_ttl_ms=60, exec_ttl_ms=300)
    claim = s.claim(task, "w")
    with pytest.raises(LimitExceeded):
        s.extend(task, "w", claim["token"] if isinstance(claim, dict) else claim.token)
