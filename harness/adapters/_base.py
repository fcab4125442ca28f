"""What every adapter shares: claims and views in the protocol's shape, dispatch checks."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from ferry_core.errors import InvalidArgument, TokenRequired
from ferry_core.types import Claim

# module name -> PyPI distribution it adapts
ADAPTERS: dict[str, str] = {
    "persist_queue": "persist-queue",
    "litequeue": "litequeue",
    "localqueue": "localqueue",
    "huey": "huey",
    "simplebroker": "simplebroker",
    "procrastinate": "procrastinate",  # PostgreSQL (ferry_backend = "postgres")
    "pgqueuer": "pgqueuer",  # PostgreSQL (ferry_backend = "postgres")
}


def make_claim(task_id: Any, agent: str, token: Any, clock: Callable[[], int]) -> Claim:
    """A claim without a lease on the harness clock: ``lease_expires_at`` is None."""
    return Claim(task_id=str(task_id), agent_id=agent, token=str(token), claimed_at=clock(),
                 lease_expires_at=None, attempt=None)  # type: ignore[arg-type]


def check_dispatch(library: str, target_agent: str | None, depends_on: Any,
                   payload: Any = None) -> None:
    """Refuse what the library cannot express (no per-agent tasks, no dependencies) and
    what the protocol never accepts (a payload that is not JSON), as typed refusals."""
    if target_agent is not None:
        raise InvalidArgument(f"{library} has no per-agent tasks: target_agent must be None")
    if depends_on is not None and (isinstance(depends_on, (str, bytes))
                                   or not isinstance(depends_on, Iterable)):
        raise InvalidArgument(f"depends_on must be a list of task ids, got {depends_on!r}")
    if list(depends_on or ()):
        raise InvalidArgument(f"{library} has no task dependencies: depends_on must be empty")
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"payload must be JSON: {exc}") from None


def require_token(library: str, token: str | None, handle: str) -> str:
    """The library's ack call cannot be made without its handle."""
    if token is None:
        raise TokenRequired(f"{library} needs the {handle} from the claim to ack, nack or fail")
    if not isinstance(token, str):
        raise InvalidArgument(f"the {handle} must be a string, got {token!r}")
    return token


def view(task_id: str, status: str, **extra: Any) -> dict[str, Any]:
    """A TaskView-like read: no token, never logically expired (no lease on our clock)."""
    return {"task_id": task_id, "status": status, "claimed_by": None,
            "is_logically_expired": False, **extra}


CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")


def checkpoint(conn: Any, mode: str) -> tuple[int, int, int]:
    """``PRAGMA wal_checkpoint(mode)`` on the library's own Python ``sqlite3`` connection.

    The library has no checkpoint call, so this is the adapter's WAL probe. It does not
    wait for readers (busy_timeout 0 for the call, then restored): a reader makes it
    return busy at once instead of after the library's whole busy timeout, with the same
    outcome for the harness.
    """
    if not isinstance(mode, str) or mode.upper() not in CHECKPOINT_MODES:
        raise InvalidArgument(f"checkpoint mode must be one of {CHECKPOINT_MODES}")
    saved = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        row = conn.execute(f"PRAGMA wal_checkpoint({mode.upper()})").fetchone()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(saved)}")
    return int(row[0]), int(row[1]), int(row[2])
