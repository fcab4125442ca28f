"""Run one named operation on a store and turn the outcome into plain data.

The single place where the store protocol (PROTOCOL.md#operations) meets the history: workers, the
sequential state-machine test and the scenarios all call :func:`execute`.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from ferry_core.errors import FerryError
from harness.check.history import FAIL, OK

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


def call(store: Any, op: str, args: dict[str, Any], agent: str) -> Any:
    """Invoke ``op`` on ``store``; raises whatever the store raises."""
    if op not in PROTOCOL:
        raise ValueError(f"unknown operation {op!r}; known: {sorted(PROTOCOL)}")
    method = getattr(store, op)
    if op == "dispatch":
        kwargs = {k: args[k] for k in DISPATCH_KWARGS if k in args}
        if isinstance(kwargs.get("depends_on"), tuple):  # JSON round trips make lists anyway
            kwargs["depends_on"] = list(kwargs["depends_on"])
        return method(args.get("target_agent"), **kwargs)
    positional = [agent if name == "agent" else args.get(name) for name in PROTOCOL[op]]
    if op in ("release",) and args.get("reason") is None:
        positional = positional[:3]
    if op == "checkpoint" and args.get("mode") is None:
        positional = []
    return method(*positional)


def execute(store: Any, op: str, args: dict[str, Any], agent: str) -> tuple[str, Any, str | None, str | None]:
    """Run and classify: (``ok``, value, None, None) or (``fail``, None, error class, message).

    Any exception that is not a typed refusal propagates: the caller records it as
    ``info`` (indeterminate) and the report lists it as a finding about the store.
    """
    try:
        value = call(store, op, args, agent)
    except FerryError as exc:
        return FAIL, None, type(exc).__name__, str(exc)
    return OK, plain(value), None, None


# SPEC behaviours that a job queue may lack even when it has the operation. The model holds
# a target only to those it has: a store that declares ``ferry_capabilities`` lists the ones
# it really implements; a store that declares nothing is taken to be a full SPEC store.
FEATURES: dict[str, str] = {
    "lease": "a claim expires at claimed_at + exec_ttl_ms on the harness clock (PROTOCOL.md#leases-are-half-open)",
    "queue-ttl": "a waiting task times out queue_ttl_ms after it was queued (PROTOCOL.md#leases-are-half-open)",
    "targets": "dispatch(target_agent) reserves a task for one agent",
    "results": "fulfill's result is kept and shown by get",
    "limits": "max_releases / max_extends / the extend cap of PROTOCOL.md#operations",
    "typed-refusals": "a refusal's class names a guard that really failed (PROTOCOL.md#which-refusal-class)",
}

# Stricter choices than SPEC (PROTOCOL.md#freedoms-a-correct-store-may-take leaves them free). A store is held to one only when it
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


def capabilities(store: Any) -> frozenset[str]:
    """What the model may hold ``store`` to: its operations, the SPEC :data:`FEATURES` it
    implements, and the :data:`STRICT_CHOICES` it declares.

    ``ferry_capabilities`` (operations and features) replaces detection for third-party
    queues that lack parts of SPEC; ``ferry_declares`` adds stricter choices. Example::

        class MyStore:
            ferry_declares = frozenset({"holder-binding"})
    """
    declared = getattr(store, "ferry_capabilities", None)
    if declared is not None:
        caps = set(declared)
    else:
        caps = {op for op in PROTOCOL if callable(getattr(store, op, None))} | set(FEATURES)
        if "dispatch" in caps:
            try:
                params = inspect.signature(store.dispatch).parameters
            except (TypeError, ValueError):
                params = {}
            # a wrapper's (*args, **kwargs) hides the real signature: SPEC's default is a DAG
            if "depends_on" in params or not params or any(
                    p.kind is p.VAR_KEYWORD for p in params.values()):
                caps.add("dag")
    strict = set(getattr(store, "ferry_declares", None) or ())
    unknown = strict - set(STRICT_CHOICES) - set(CONVENTIONS)
    if unknown:
        raise ValueError(f"ferry_declares names unknown choices {sorted(unknown)}; "
                         f"known: {sorted(STRICT_CHOICES) + sorted(CONVENTIONS)}")
    return frozenset(caps | strict)
