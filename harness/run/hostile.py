"""The hostile-argument cases a ``Hostile`` step names (:class:`ferry_harness.run.steps.Hostile`):
each builds its call's arguments from what the run has (its newest claim), so one name
replays the same hostile call."""

from __future__ import annotations

from typing import Any, Protocol

from ferry_harness.check.history import Op
from ferry_harness.check.ops import CallArgs
from ferry_harness.run.faults import KnownClaim
from ferry_harness.runtime.client import PlannedCall, WorkerPool


class HasClaims(Protocol):
    """What a case builder reads of the executor, and how it runs the call."""

    claims: list[KnownClaim]
    capabilities: set[str]
    pool: WorkerPool

    def run_calls(self, calls: list[PlannedCall]) -> list[Op]: ...


def _holder_hostile(field: str, value: Any) -> Any:
    def make(ex: HasClaims) -> CallArgs | None:
        if not ex.claims:
            return None
        c = ex.claims[-1]
        args = {"task_id": c.task_id, "token": c.token, "_agent": c.agent,
                "result": {"ok": 1}, "partial": {"p": 1}}
        args[field] = value
        return args
    return make


def _dispatch_hostile(**bad: Any) -> Any:
    def make(ex: HasClaims) -> CallArgs:
        args = {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": 50,
                "max_attempts": 1, "payload": {"n": -1}}
        args.update(bad)
        return args
    return make


# name -> (op, args builder). Every one must end in a typed refusal (InvalidArgument or
# NotFound) or, where the protocol allows it, a plain answer: never a raw exception.
HOSTILE_CASES: dict[str, tuple[str, Any]] = {
    "dispatch-depends-on-int": ("dispatch", _dispatch_hostile(depends_on=5)),
    "dispatch-unknown-dependency": ("dispatch", _dispatch_hostile(depends_on=["no-such-task"])),
    "dispatch-huge-queue-ttl": ("dispatch", _dispatch_hostile(queue_ttl_ms=2**63 - 1)),
    "dispatch-huge-exec-ttl": ("dispatch", _dispatch_hostile(exec_ttl_ms=2**63 - 2)),
    "dispatch-negative-ttl": ("dispatch", _dispatch_hostile(queue_ttl_ms=-5)),
    "dispatch-ttl-as-text": ("dispatch", _dispatch_hostile(exec_ttl_ms="50")),
    "dispatch-non-json-payload": ("dispatch", _dispatch_hostile(payload={1, 2})),
    "claim-unknown-id": ("claim", lambda ex: {"task_id": "no-such-task"}),
    "claim-int-id": ("claim", lambda ex: {"task_id": 123}),
    "get-unknown-id": ("get", lambda ex: {"task_id": "no-such-task"}),
    "get-none-id": ("get", lambda ex: {"task_id": None}),
    "salvaged-int-id": ("salvaged", lambda ex: {"task_id": 123}),
    "fulfill-int-token": ("fulfill", _holder_hostile("token", 123)),
    "fulfill-non-json-result": ("fulfill", _holder_hostile("result", {1, 2})),
    "salvage-non-json-partial": ("salvage", _holder_hostile("partial", {3})),
}


def hostile_call(ex: HasClaims, name: str) -> Op | None:
    """Run the case ``name`` once, if the target has its operation (and the case can be
    built: a holder case needs a claim); the op, or None."""
    case = HOSTILE_CASES.get(name)
    if case is None:
        return None
    op, make = case
    if op not in ex.capabilities:
        return None
    args = make(ex)
    if args is None:
        return None
    if op == "dispatch" and "dag" not in ex.capabilities:
        args.pop("depends_on", None)
    agent = args.pop("_agent", "mallory")
    return ex.run_calls([PlannedCall(slot=1 % ex.pool.size, op=op, args=args, agent=agent)])[0]
