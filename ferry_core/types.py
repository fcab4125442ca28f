"""Plain, frozen values the store hands out; safe to send between processes and into JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SUBMITTED = "SUBMITTED"
CLAIMED = "CLAIMED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
TERMINAL = frozenset({COMPLETED, FAILED, TIMED_OUT})
STATES = (SUBMITTED, CLAIMED, COMPLETED, FAILED, TIMED_OUT)


@dataclass(frozen=True)
class Claim:
    """Proof of a lease: the token is the only authority for holder operations."""

    task_id: str
    agent_id: str
    token: str
    claimed_at: int
    lease_expires_at: int
    attempt: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskView:
    """A read-only snapshot of a task. Never carries the claim token."""

    task_id: str
    status: str
    target_agent: str | None
    title: str
    payload: Any
    requester: str
    depends_on: tuple[str, ...]
    queue_ttl_ms: int
    exec_ttl_ms: int
    max_attempts: int
    created_at: int
    queued_at: int
    claimed_by: str | None
    claimed_at: int | None
    lease_expires_at: int | None
    completed_at: int | None
    attempt: int
    extend_count: int
    release_count: int
    result: Any
    error_reason: str | None
    is_logically_expired: bool

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["depends_on"] = list(self.depends_on)
        return d


@dataclass(frozen=True)
class Salvage:
    """A partial artifact or a late result; kept forever, whatever happens to the task."""

    task_id: str
    agent_id: str
    kind: str  # "partial" or "late_result"
    data: Any
    created_at: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class ClaimStats:
    """How one store instance's claiming statements went since it was opened (counted by
    the store itself, per process: add the instances up for a fleet).

    A statement that raised (busy, an error) is not counted; its retry is.
    """

    #: claiming statements that ran: compare-and-swap UPDATEs of one named task plus
    #: one-statement claims of the oldest ready task (``claim`` and ``poll_next``).
    attempts: int
    #: CAS UPDATEs that changed no row: the task was no longer claimable (another process
    #: took it first, or it was never ready). Always <= ``attempts``.
    misses: int
    #: one-statement claims that found no ready task under the write lock. They pick while
    #: holding the lock, so they cannot lose a race: this is not a miss.
    empty: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
