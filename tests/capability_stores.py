"""Correct stores that lack operations: ``ferry_core.LeaseStore`` with some methods hidden.

PROTOCOL.md#missing-methods lets a target leave out any operation; ferry must then never
generate a call to it (a call would raise ``AttributeError`` and be filed as
``typed-errors``). Each factory here hides a set of methods (``getattr`` raises
``AttributeError``) and declares ``ferry_capabilities`` without them: a target that only
has daemon locks, one that can poll but not claim by id, one that can claim by id but not
poll, one without ``sweep`` and reads. Load them as ``--target tests.capability_stores:NAME``.
"""

from __future__ import annotations

from typing import Any

from ferry_core import LeaseStore
from ferry_harness.check.ops import FEATURES, PROTOCOL

LOCKS = frozenset({"acquire_lock", "release_lock", "lock_holder"})

# factory name -> the operations the target lacks
MISSING: dict[str, frozenset[str]] = {
    "locks_only": frozenset(PROTOCOL) - LOCKS,
    "no_claim": frozenset({"claim"}),
    "no_poll_next": frozenset({"poll_next"}),
    "no_sweep_no_reads": frozenset({"sweep", "get", "inspect", "salvaged"}),
}


def _hidden(name: str) -> property:
    def missing(self: Any) -> Any:
        raise AttributeError(f"{type(self).__name__} has no {name}()")
    return property(missing)


def _store_class(key: str) -> type[LeaseStore]:
    lacks = MISSING[key]
    has = frozenset(PROTOCOL) - lacks
    caps = has | set(FEATURES) | ({"dag"} if "dispatch" in has else set())
    body: dict[str, Any] = {op: _hidden(op) for op in lacks}
    body["ferry_capabilities"] = frozenset(caps)
    body["__doc__"] = f"Correct, without {', '.join(sorted(lacks))}."
    return type(f"Store_{key}", (LeaseStore,), body)


CLASSES = {key: _store_class(key) for key in MISSING}


def locks_only(path: str, *, clock: Any) -> LeaseStore:
    return CLASSES["locks_only"](path, clock=clock)


def no_claim(path: str, *, clock: Any) -> LeaseStore:
    return CLASSES["no_claim"](path, clock=clock)


def no_poll_next(path: str, *, clock: Any) -> LeaseStore:
    return CLASSES["no_poll_next"](path, clock=clock)


def no_sweep_no_reads(path: str, *, clock: Any) -> LeaseStore:
    return CLASSES["no_sweep_no_reads"](path, clock=clock)
