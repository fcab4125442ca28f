"""A store that declares ``lease-closed`` but refuses its holder at ``lease_expires_at``
(its holder check and its reaper disagree) is a ``lease-half-open`` finding
(PROTOCOL.md#lease-conventions), not a ``holder-guard`` one."""

from __future__ import annotations

from ferry_harness.check.checker import Checker
from ferry_harness.check.history import FAIL
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.ops import FEATURES
from tests.histories import T0, TOKEN_A, Recorder

CLOSED = ModelConfig().for_capabilities(set(FEATURES) | {"lease-closed"})


def _refused_at(now: int) -> list:
    rec = Recorder()
    rec.dispatch(max_attempts=1)
    rec.claim("alice", TOKEN_A)  # lease_expires_at = T0 + 50
    rec.op("release", "alice", {"task_id": "t1", "token": TOKEN_A, "reason": "x"}, now=now,
           type=FAIL, error="WrongState")
    return Checker(CLOSED).check(rec.history)


def test_the_holder_refused_at_expires_under_lease_closed_is_a_lease_finding():
    found = _refused_at(T0 + 50)
    assert found and found[0].invariant == "lease-half-open", found
    assert "declares lease-closed" in found[0].message
    assert found[0].protocol == "PROTOCOL.md#lease-conventions"


def test_the_holder_refused_inside_its_lease_is_still_holder_guard():
    found = _refused_at(T0 + 10)
    assert found and found[0].invariant == "holder-guard", found
