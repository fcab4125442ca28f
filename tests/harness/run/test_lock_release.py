"""An owner's ``release_lock`` of its own lock that ran out, nobody having taken it since:
the generator reaches it (``LockOp.offset``) and both answers PROTOCOL.md allows pass
(PROTOCOL.md#release_lock-on-an-expired-lock). An independent store that drops the lock
showed the fuzzer had never drawn this case."""

from __future__ import annotations

import pytest

from ferry_harness.run.campaign import CampaignConfig, Runner
from ferry_harness.run.steps import LockOp, LockRace
from tests.steps import via_json
from tests.variants.configurable import Config, make_factory

#: the configurable store with each answer (its ``lock_release`` switch)
drop_expired = make_factory(Config(lock_release="drop_expired"))  # True: dropped
keep_expired = make_factory(Config(lock_release="keep_expired"))  # False: left to expire

STEPS = [LockRace(owners=("daemon-1",), ttl_ms=5),
         LockOp(op="release_lock", owner="daemon-1", offset=1)]


@pytest.mark.parametrize(("target", "answer"), [
    ("ferry_core:LeaseStore", False),
    (f"{__name__}:keep_expired", False),
    (f"{__name__}:drop_expired", True),
])
def test_an_owner_releasing_its_run_out_lock_passes_either_way(target, answer):
    with Runner(CampaignConfig(target=target, workers=2)) as runner:
        found, ex = runner.run_steps(via_json(STEPS))
    assert not found, [v.message for v in found]
    acquire, release = (op for op in ex.history.ops if "lock" in op.op)
    assert acquire.value is True and release.args["owner"] == acquire.args["owner"]
    assert release.now == acquire.now + 5 + 1  # after the lock ran out, nobody took it
    assert release.value is answer
