"""Run one named operation on a live store and turn the outcome into plain data.

The single place where the store protocol (PROTOCOL.md#operations) meets a store object:
workers, the sequential state-machine test and the scenarios all call :func:`execute`.
"""

from __future__ import annotations

import inspect
from typing import Any

from ferry_core.errors import FerryError
from ferry_harness.check.history import FAIL, OK
from ferry_harness.check.ops import (
    CONVENTIONS,
    DISPATCH_KWARGS,
    FEATURES,
    PROTOCOL,
    STRICT_CHOICES,
    CallArgs,
    plain,
)

__all__ = ["call", "capabilities", "execute"]


def call(store: Any, op: str, args: CallArgs, agent: str) -> Any:
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


def execute(store: Any, op: str, args: CallArgs, agent: str) -> tuple[str, Any, str | None, str | None]:
    """Run and classify: (``ok``, value, None, None) or (``fail``, None, error class, message).

    Any exception that is not a typed refusal propagates: the caller records it as
    ``info`` (indeterminate) and the report lists it as a finding about the store.
    """
    try:
        value = call(store, op, args, agent)
    except FerryError as exc:
        return FAIL, None, type(exc).__name__, str(exc)
    return OK, plain(value), None, None


def capabilities(store: Any) -> frozenset[str]:
    """What the model may hold ``store`` to: its operations, the protocol :data:`FEATURES`
    (PROTOCOL.md#ferry_capabilities) it implements, and the :data:`STRICT_CHOICES` it
    declares.

    ``ferry_capabilities`` (operations and features) replaces detection for third-party
    queues that lack parts of the protocol (PROTOCOL.md#capability-declarations);
    ``ferry_declares`` adds stricter choices. Example::

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
            # a wrapper's (*args, **kwargs) hides the real signature: the protocol's default
            # is a DAG (PROTOCOL.md#dependencies-and-the-failure-cascade)
            if "depends_on" in params or not params or any(
                    p.kind is p.VAR_KEYWORD for p in params.values()):
                caps.add("dag")
    strict = set(getattr(store, "ferry_declares", None) or ())
    unknown = strict - set(STRICT_CHOICES) - set(CONVENTIONS)
    if unknown:
        raise ValueError(f"ferry_declares names unknown choices {sorted(unknown)}; "
                         f"known: {sorted(STRICT_CHOICES) + sorted(CONVENTIONS)}")
    return frozenset(caps | strict)
