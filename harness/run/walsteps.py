"""The WAL steps (``IdlePoll``, ``Reads``, ``Checkpoint``, and the audit's checkpoint), run
through the executor with the ``-wal`` measured around each call.

The step dataclasses are in :mod:`ferry_harness.run.steps`; what these functions measure is
put on the ops as a :class:`~ferry_harness.check.annotations.WalSample`, and
:mod:`ferry_harness.check.invariants.wal` (``idle-no-write``, ``wal-bounded``) judges it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferry_harness.check.annotations import WalSample, mark
from ferry_harness.check.history import OK, Op
from ferry_harness.check.ops import CallArgs
from ferry_harness.run.steps import Checkpoint, IdlePoll, Reads, Step
from ferry_harness.runtime.client import PlannedCall

if TYPE_CHECKING:  # the executor dispatches to these: types only
    from ferry_harness.run.executor import Executor

SETTLE_POLLS = 50  # polls before an idle probe, each may take a ready task
READER_HOLD_S = 0.2  # how long the "checkpoint with a reader open" probe keeps its snapshot


def _one(ex: Executor, slot: int, op: str, agent: str, **args: Any) -> Op:
    return ex.run_calls([PlannedCall(slot=slot % ex.pool.size, op=op, args=args, agent=agent)])[0]


def idle_poll(ex: Executor, s: IdlePoll) -> Step:
    """Settle, then poll: if nothing came back the poll was idle and must not write.

    Settling makes the measured poll idle by construction (PROTOCOL.md#freedoms-a-correct-store-may-take: a poll that applies
    a due expiry or claims a task has work to do and may write): sweep where the store
    has it, then poll until a poll comes back empty, all at one frozen instant."""
    pg = ex.pg
    if ("wal-file" not in ex.capabilities and pg is None) or "poll_next" not in ex.capabilities:
        return s  # idle-no-write is skipped (target lacks poll_next or the -wal file)
    if "sweep" in ex.capabilities:
        _one(ex, 0, "sweep", "janitor")
    for _ in range(SETTLE_POLLS):
        settle = _one(ex, 0, "poll_next", "idle-probe")
        if settle.type != OK or settle.value is None:
            break
    else:
        return s  # still claiming work: no idle instant to measure
    if pg is not None:  # Postgres: no transaction id assigned (PROTOCOL.md#postgres-targets)
        xid = pg.next_xid()
        op = _one(ex, 0, "poll_next", "idle-probe")
        mark(op, WalSample(xid_before=xid, xid_after=pg.next_xid(),
                           idle=op.type == OK and op.value is None))
        return s
    before, header = ex.pool.wal_size(), ex.pool.wal_mark()
    op = _one(ex, 0, "poll_next", "idle-probe")
    mark(op, WalSample(wal_before=before, wal_after=ex.pool.wal_size(),
                       wal_mark_before=header, wal_mark_after=ex.pool.wal_mark(),
                       idle=op.type == OK and op.value is None))
    return s


def reads(ex: Executor, s: Reads) -> Step:
    """Reads must not write: measure the -wal around each one."""
    has_wal = "wal-file" in ex.capabilities
    calls: list[tuple[str, CallArgs]] = []
    for tid in ex.tasks[-6:]:
        if "get" in ex.capabilities:
            calls.append(("get", {"task_id": tid}))
        if "salvaged" in ex.capabilities:
            calls.append(("salvaged", {"task_id": tid}))
    if "inspect" in ex.capabilities:
        calls.append(("inspect", {}))
    pg = ex.pg
    for name, args in calls:
        if pg is not None:  # Postgres: a read assigns no transaction id
            xid = pg.next_xid()
            op = _one(ex, 1, name, "reader", **args)
            mark(op, WalSample(xid_before=xid, xid_after=pg.next_xid(), idle=True))
            continue
        before, header = ex.pool.wal_size(), ex.pool.wal_mark()
        op = _one(ex, 1, name, "reader", **args)
        if has_wal:
            mark(op, WalSample(wal_before=before, wal_after=ex.pool.wal_size(),
                               wal_mark_before=header, wal_mark_after=ex.pool.wal_mark(),
                               idle=True))
    return s


def checkpoint_step(ex: Executor, s: Checkpoint) -> Step:
    checkpoint(ex, reader=s.reader)
    return s


def checkpoint(ex: Executor, *, reader: bool) -> None:
    """A TRUNCATE checkpoint, with or without an outside reader open."""
    if "checkpoint" not in ex.capabilities or "wal-file" not in ex.capabilities:
        return
    if reader:  # the outside reader lets go after READER_HOLD_S, whatever the store does
        ex.round += 1
        op = ex.pool.run_with_reader(
            PlannedCall(slot=0, op="checkpoint", args={"mode": "TRUNCATE"}, agent="janitor"),
            ex.history, READER_HOLD_S, round_id=ex.round, example=ex.example)
        ex.stats.ops += 1
        ex.note_stall(op)
        mark(op, WalSample(reader=True, reader_hold_s=READER_HOLD_S,
                           wal_after=ex.pool.wal_size()))
    else:
        op = _one(ex, 0, "checkpoint", "janitor", mode="TRUNCATE")
        mark(op, WalSample(reader=False, wal_after=ex.pool.wal_size()))
