"""The worker protocol's messages: typed, immutable, and unchanged by a trip over a pipe."""

from __future__ import annotations

import dataclasses
import inspect

import multiprocess as mp
import pytest

from ferry_harness.runtime import wire

MESSAGES = [cls for _name, cls in inspect.getmembers(wire, inspect.isclass)
            if cls.__module__ == wire.__name__]
SAMPLES = {
    wire.OpenStore: {"path": "/tmp/x.db"},
    wire.CallOp: {"op_index": 3, "op": "claim", "args": {"task_id": "t1", "bad": {1, 2}},
                  "agent": "alice", "barrier": True, "barrier_timeout_s": 3.0, "scheduled": False,
                  "race": True, "gate_round": 7, "gate_slot": 1, "gate_slots": (0, 1)},
    wire.StoreOpened: {"capabilities": ("claim", "dispatch"), "skips": {"integrity": "why"}},
    wire.StoreOpenFailed: {"error": "ValueError: no"},
    wire.AtBarrier: {"op_index": 3},
    wire.OpDone: {"op_index": 3, "type": "ok", "value": {"task_id": "t1"}, "error": None,
                  "message": None, "invoke_ns": 1, "complete_ns": 2, "now_ms": 1000,
                  "sql_start_ns": 1, "gated": True},
    wire.HoldSnapshot: {"path": "/tmp/x.db"},
    wire.CheckIntegrity: {"path": "/tmp/x.db"},
    wire.IntegrityResult: {"result": "ok"},
    wire.AtSchedulePoint: {"op_index": 3, "sql": "BEGIN IMMEDIATE", "retry": True},
}


def test_every_message_is_a_frozen_keyword_only_dataclass() -> None:
    assert len(MESSAGES) >= 17
    for cls in MESSAGES:
        params = cls.__dataclass_params__
        assert params.frozen, cls
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
        if dataclasses.fields(cls):
            assert cls in SAMPLES, f"add a sample of {cls.__name__}"


@pytest.mark.parametrize("cls", MESSAGES, ids=lambda c: c.__name__)
def test_a_message_crosses_a_pipe_unchanged(cls: type) -> None:
    a, b = mp.get_context("fork").Pipe()
    try:
        message = cls(**SAMPLES.get(cls, {}))
        wire.send(a, message)
        assert b.poll(5)
        got = wire.receive(b)
        assert type(got) is cls and got == message
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.__setattr__("x", 1)
    finally:
        a.close()
        b.close()
