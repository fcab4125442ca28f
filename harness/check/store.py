"""The store contract as types: :class:`LeasingStore`, the operations of PROTOCOL.md#operations
as a ``typing.Protocol``, and :class:`Capability`, every name a store's capability set may
hold.

Pure and for reading (and type checkers): ferry drives a store through
:mod:`ferry_harness.runtime.calls` by the names in :data:`ferry_harness.check.ops.PROTOCOL`,
positionally, so a store's own parameter names are free; only the order is the contract.
A store may lack operations and features (PROTOCOL.md#capability-declarations): this is the
full protocol store, and ``tests/harness/check/test_store_contract.py`` holds it and
``ops.py`` to the same operations and arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, Protocol

from ferry_harness.check.ops import CONVENTIONS, FEATURES, PROTOCOL, STRICT_CHOICES


class LeasingStore(Protocol):
    """A leasing job queue as PROTOCOL.md#operations names it. ``agent_id`` is the caller's
    agent name (``ops.PROTOCOL`` writes it ``agent``: where the harness puts the agent).
    Claims, views and salvage entries (PROTOCOL.md#claim-fields, #taskview-fields,
    #salvage-entries) may be objects or mappings with those fields, hence ``Any``."""

    def dispatch(self, target_agent: str | None, /, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Sequence[str] = (),
                 queue_ttl_ms: int = ..., exec_ttl_ms: int = ...,
                 max_attempts: int = 1) -> str:
        """Submit a task; its id (PROTOCOL.md#dispatch)."""
        ...

    def poll_next(self, agent_id: str, /) -> Any:
        """Claim the next ready task, or None (PROTOCOL.md#poll_next)."""
        ...

    def claim(self, task_id: str, agent_id: str, /) -> Any:
        """Claim this task if it is ready: a Claim, or None (PROTOCOL.md#claim)."""
        ...

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any, /) -> Any:
        """The holder's result: the task is COMPLETED (PROTOCOL.md#fulfill)."""
        ...

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str, /) -> Any:
        """The holder gives up on the task (PROTOCOL.md#fail)."""
        ...

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "",
                /) -> Any:
        """The holder hands the task back to the queue (PROTOCOL.md#release)."""
        ...

    def extend(self, task_id: str, agent_id: str, token: str | None, /) -> int:
        """A longer lease: its new ``lease_expires_at`` (PROTOCOL.md#extend)."""
        ...

    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any,
                /) -> Any:
        """Keep a partial result; the task stays claimed (PROTOCOL.md#salvage)."""
        ...

    def sweep(self) -> int:
        """Apply every due expiry; how many tasks changed (PROTOCOL.md#sweep)."""
        ...

    def get(self, task_id: str, /) -> Any:
        """The task's TaskView (PROTOCOL.md#get)."""
        ...

    def inspect(self, agent_id: str | None = None, /) -> list[Any]:
        """Every task's TaskView (PROTOCOL.md#inspect)."""
        ...

    def salvaged(self, task_id: str, /) -> list[Any]:
        """The task's salvage entries (PROTOCOL.md#salvaged)."""
        ...

    def acquire_lock(self, name: str, owner: str, ttl_ms: int, /) -> bool:
        """Take or renew a named lock (PROTOCOL.md#acquire_lock)."""
        ...

    def release_lock(self, name: str, owner: str, /) -> bool:
        """Give a named lock up (PROTOCOL.md#release_lock)."""
        ...

    def lock_holder(self, name: str, /) -> str | None:
        """The lock's live owner, or None (PROTOCOL.md#lock_holder)."""
        ...

    def checkpoint(self, mode: str = "TRUNCATE", /) -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint``: (busy, log frames, checkpointed frames)
        (PROTOCOL.md#checkpoint)."""
        ...

    def close(self) -> None:
        """Release the store's connections (PROTOCOL.md#close)."""
        ...


# PROTOCOL.md#close: a lifecycle call, not an operation a history records
LIFECYCLE = frozenset({"close"})


class Capability(str, Enum):
    """Every name a store's capability set may hold (``runtime.calls.capabilities``): its
    operations, the protocol features it implements (``ops.FEATURES``, and ``dag``), the
    stricter choices and lease conventions it declares (``ops.STRICT_CHOICES``,
    ``ops.CONVENTIONS``), and what the harness finds about it (``wal-file``: its database
    has a ``-wal`` file ferry can measure; ``schedule-points``: its statements run through
    Python's sqlite3, so schedule mode can interleave them). A member compares and hashes
    as its string, so ``Capability.LEASE in caps`` works on a set of names."""

    DISPATCH = "dispatch"
    POLL_NEXT = "poll_next"
    CLAIM = "claim"
    FULFILL = "fulfill"
    FAIL = "fail"
    RELEASE = "release"
    EXTEND = "extend"
    SALVAGE = "salvage"
    SWEEP = "sweep"
    GET = "get"
    INSPECT = "inspect"
    SALVAGED = "salvaged"
    ACQUIRE_LOCK = "acquire_lock"
    RELEASE_LOCK = "release_lock"
    LOCK_HOLDER = "lock_holder"
    CHECKPOINT = "checkpoint"
    # features (ops.FEATURES), and the dependency graph
    LEASE = "lease"
    QUEUE_TTL = "queue-ttl"
    TARGETS = "targets"
    RESULTS = "results"
    LIMITS = "limits"
    TYPED_REFUSALS = "typed-refusals"
    DAG = "dag"
    # declared stricter choices (ops.STRICT_CHOICES) and lease conventions (ops.CONVENTIONS)
    HOLDER_BINDING = "holder-binding"
    REFUSAL_ORDER = "refusal-order"
    LEASE_CLOSED = "lease-closed"
    LEASE_AT_CLAIM = "lease-at-claim"
    # found by the harness
    WAL_FILE = "wal-file"
    SCHEDULE_POINTS = "schedule-points"

    def __str__(self) -> str:
        return self.value


# the names ops.py defines, for the cross-check (every one is a member, and no other is)
DEFINED = (frozenset(PROTOCOL) | frozenset(FEATURES) | {"dag"} | frozenset(STRICT_CHOICES)
           | frozenset(CONVENTIONS) | {"wal-file", "schedule-points"})
