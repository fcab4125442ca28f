"""The messages the controller and its worker processes exchange over pipes.

One frozen dataclass per message kind; a process dispatches on the message's type. They
travel pickled through ``multiprocess`` pipes, so every field is plain data (no store, no
connection). Three conversations use them:

- a **store worker** (:mod:`ferry_harness.runtime.client`): :class:`OpenStore` →
  :class:`StoreOpened` / :class:`StoreOpenFailed`; :class:`CallOp` → (:class:`AtBarrier`)
  → :class:`OpDone`; :class:`CloseStore` → :class:`StoreClosed`; :class:`Stop`;
- the **long reader**: :class:`HoldSnapshot` → :class:`SnapshotHeld`,
  :class:`DropSnapshot` → :class:`SnapshotDropped`, :class:`CheckIntegrity` →
  :class:`IntegrityResult`; :class:`Stop`;
- **schedule mode** (:mod:`ferry_harness.runtime.schedule`), during a scheduled op: the worker
  sends :class:`AtSchedulePoint` before each SQL statement and waits for :class:`Proceed`
  or :class:`AbortSchedule`.

Messages go through :func:`send` and :func:`receive`: the standard pickle of a message is
a few times cheaper than ``multiprocess``'s own (dill) pickling of the same object, so a
typed message costs less per op than the tuples it replaced.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

from ferry_harness.check.ops import CallArgs


def send(conn: Any, message: Any) -> None:
    """Send one message (an instance of a class below) over a pipe end."""
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def receive(conn: Any) -> Any:
    """The next message from a pipe end (blocks; EOFError/OSError if the other end died)."""
    return pickle.loads(conn.recv_bytes())


# ---------------------------------------------------------------- controller -> worker
@dataclass(frozen=True, kw_only=True)
class OpenStore:
    """(Re)open the worker's store: ``factory(path, clock=shared_clock)``."""

    path: str  # the SQLite database file every worker opens (one WAL file shared by all)


@dataclass(frozen=True, kw_only=True)
class CallOp:
    """Run one protocol operation on the worker's store."""

    op_index: int  # the op's index in the controller's history (names the op in replies)
    op: str  # protocol operation name (ferry_harness.check.ops), e.g. "claim"
    args: CallArgs  # its keyword arguments, e.g. {"task_id": "t1"}
    agent: str  # the agent name the operation runs as
    barrier: bool  # report AtBarrier, then wait at the shared gate before running
    barrier_timeout_s: float  # seconds to wait at the gate before giving up (op is info)
    scheduled: bool  # schedule mode: stop at every SQL statement for the controller's go
    race: bool = False  # a race call: note when its first SQL statement starts (sql_start_ns)
    # > 0: and hold it there until every racer of gate round ``gate_round`` (the pool slots
    # ``gate_slots``; this one is ``gate_slot``) stands there too (ferry_harness.runtime.gate)
    gate_round: int = 0
    gate_slot: int = -1
    gate_slots: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CloseStore:
    """Close the worker's store (the database file is about to be removed)."""


@dataclass(frozen=True, kw_only=True)
class Stop:
    """Leave the message loop and exit (store workers and the long reader)."""


# ---------------------------------------------------------------- worker -> controller
@dataclass(frozen=True, kw_only=True)
class StoreOpened:
    """The store opened; what the target can do."""

    capabilities: tuple[str, ...]  # sorted operations and features (ferry_harness.check.ops)
    skips: dict[str, str]  # invariant id -> why the target says it cannot be checked
    # a Postgres target: the server pids of the psycopg 3 connections the worker's process
    # has open now (ferry_harness.runtime.pgconns); None: not tracked
    pg_pids: tuple[int, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class StoreOpenFailed:
    """The target factory raised while opening the store."""

    error: str  # "ExceptionType: message"


@dataclass(frozen=True, kw_only=True)
class AtBarrier:
    """The worker stands at the race barrier, ready to run its op."""

    op_index: int  # the op it will run (CallOp.op_index)


@dataclass(frozen=True, kw_only=True)
class OpDone:
    """An operation's outcome, as :func:`ferry_harness.check.ops.execute` classified it."""

    op_index: int  # CallOp.op_index
    type: str  # "ok", "fail" (typed refusal) or "info" (indeterminate)
    value: Any  # the return value (ok), else None
    error: str | None  # the refusal's or exception's class name
    message: str | None  # its message
    invoke_ns: int  # time.monotonic_ns() in the worker just before the call (0: never ran)
    complete_ns: int  # time.monotonic_ns() in the worker just after it (0: never ran)
    now_ms: int  # the shared clock (ms) when the call started
    # time.monotonic_ns() when a race call's first SQL statement started (after the race
    # gate let it go, if it held it); 0: not a race call, or it ran no SQL statement
    sql_start_ns: int = 0
    gated: bool = False  # the race gate held it and it left with every racer arrived
    # a Postgres target (ferry_harness.runtime.pgconns): one of the worker's psycopg 3
    # connections was inside a transaction (or running a statement) when the call returned
    pg_in_tx: bool = False
    # the server pids of its open psycopg 3 connections, when they changed since its last
    # answer (None: unchanged, or not tracked)
    pg_pids: tuple[int, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class StoreClosed:
    """The store is closed."""


# ---------------------------------------------------------------- the long reader
@dataclass(frozen=True, kw_only=True)
class HoldSnapshot:
    """Open a read transaction on the database and keep it open."""

    path: str  # the database file


@dataclass(frozen=True, kw_only=True)
class SnapshotHeld:
    """The read transaction is open."""


@dataclass(frozen=True, kw_only=True)
class DropSnapshot:
    """End the read transaction (if any) and close the connection."""


@dataclass(frozen=True, kw_only=True)
class SnapshotDropped:
    """The read snapshot is released."""


@dataclass(frozen=True, kw_only=True)
class CheckIntegrity:
    """Run ``PRAGMA integrity_check`` on a read-only connection of its own."""

    path: str  # the database file


@dataclass(frozen=True, kw_only=True)
class IntegrityResult:
    """What ``PRAGMA integrity_check`` said."""

    result: str  # "ok", or SQLite's problems joined with "; ", or why it could not run


# ---------------------------------------------------------------- schedule mode
@dataclass(frozen=True, kw_only=True)
class AtSchedulePoint:
    """A scheduled op is about to run an SQL statement; the worker waits for a decision."""

    op_index: int  # the op running (CallOp.op_index)
    sql: str  # the statement, stripped, at most 500 characters
    retry: bool  # the previous statement failed with SQLITE_BUSY/locked: this retries
    # one of the worker's connections is inside a transaction (it may hold the write lock)
    in_tx: bool = False


@dataclass(frozen=True, kw_only=True)
class Proceed:
    """Run the statement the worker is parked at."""


@dataclass(frozen=True, kw_only=True)
class AbortSchedule:
    """Give up the scheduled op (it ends as ``info``)."""
