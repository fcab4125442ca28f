"""The store protocol as data: its operations and their arguments, the protocol features a
queue may lack (PROTOCOL.md#capability-declarations), the stricter choices and lease
conventions a store may declare.

Pure vocabulary shared by the model and the checker; running an operation on a live store
is :mod:`ferry_harness.runtime.calls`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# An operation's arguments by the protocol's parameter names (``task_id``, ``token``, ...;
# ``dispatch``'s keywords): JSON values, deliberately ill-typed ones included (the hostile
# calls), so no narrower type would be true.
CallArgs = dict[str, Any]
# A JSON object as read or written: a history line, a report, a step, a violation's detail.
JSONObject = dict[str, Any]

# op name -> (method, positional arg names); the agent is passed where the protocol wants it.
PROTOCOL: dict[str, tuple[str, ...]] = {
    "dispatch": ("target_agent",),
    "poll_next": ("agent",),
    "claim": ("task_id", "agent"),
    "fulfill": ("task_id", "agent", "token", "result"),
    "fail": ("task_id", "agent", "token", "reason"),
    "release": ("task_id", "agent", "token", "reason"),
    "extend": ("task_id", "agent", "token"),
    "salvage": ("task_id", "agent", "token", "partial"),
    "sweep": (),
    "get": ("task_id",),
    "inspect": (),
    "salvaged": ("task_id",),
    "acquire_lock": ("name", "owner", "ttl_ms"),
    "release_lock": ("name", "owner"),
    "lock_holder": ("name",),
    "checkpoint": ("mode",),
}
DISPATCH_KWARGS = ("title", "payload", "requester", "depends_on", "queue_ttl_ms",
                   "exec_ttl_ms", "max_attempts")


def plain(value: Any) -> Any:
    """Dataclasses (Claim, TaskView, Salvage), tuples and lists -> JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


# Protocol behaviours that a job queue may lack even when it has the operation. The model holds
# a target only to those it has: a store that declares ``ferry_capabilities`` lists the ones
# it really implements; a store that declares nothing is taken to be a full protocol store
# (PROTOCOL.md#ferry_capabilities).
FEATURES: dict[str, str] = {
    "lease": "a claim expires at claimed_at + exec_ttl_ms on the harness clock (PROTOCOL.md#leases-are-half-open)",
    "queue-ttl": "a waiting task times out queue_ttl_ms after it was queued (PROTOCOL.md#leases-are-half-open)",
    "targets": "dispatch(target_agent) reserves a task for one agent",
    "results": "fulfill's result is kept and shown by get",
    "limits": "max_releases / max_extends / the extend cap of PROTOCOL.md#operations",
    "typed-refusals": "a refusal's class names a guard that really failed (PROTOCOL.md#which-refusal-class)",
}

# Stricter choices than the protocol (PROTOCOL.md#freedoms-a-correct-store-may-take leaves them free). A store is held to one only when it
# lists it in ``ferry_declares``; ferry_core declares all of them.
STRICT_CHOICES: dict[str, str] = {
    "holder-binding": "a claim is bound to the claiming agent: another agent is refused "
                      "(PermissionDenied) even with the holder's token",
    "refusal-order": "a refusal names the FIRST failing check in the PROTOCOL.md#the-holder-guard order",
}


# Lease conventions of third-party queues (PROTOCOL.md#lease-conventions). A protocol store
# is half-open and declares none; a queue that differs declares its own and is held to
# consistency (never two holders; the holder is refused exactly when another may take it).
CONVENTIONS: dict[str, str] = {
    "lease-closed": "the lease holds through lease_expires_at itself: the holder still wins "
                    "at expires, another may take the task from expires+1",
    "lease-at-claim": "the lease length is decided at claim time (per call or per worker), "
                      "not by dispatch's exec_ttl_ms: each claim's lease_expires_at is taken "
                      "as given",
}
