"""The WAL rules, from the ``-wal`` measurements the executor attaches to ops (``WalSample``):
idle calls write nothing (``idle-no-write``); checkpoints can reset it (``wal-bounded``).
On a Postgres target the same two ids have the meanings of PROTOCOL.md#postgres-targets:
an idle call assigns no transaction id; no connection is left idle in transaction."""

from __future__ import annotations

from ferry_harness.check.annotations import Hung, WalSample, fact
from ferry_harness.check.history import FAIL, OK, Op
from ferry_harness.check.invariant import Violation, injected
from ferry_harness.check.runstate import RunState
from ferry_harness.check.sizes import WAL_BOUND_BYTES


class WalRules:
    """``idle-no-write`` on measured idle calls; ``wal-bounded`` on checkpoints and on every
    measurement against ``bound_bytes`` (``--wal-bound``)."""

    name = "wal-rules"
    ids = ("idle-no-write", "wal-bounded")
    needs = ("wal-file|pg-probes",)
    sees_invalid_args = False

    def __init__(self, bound_bytes: int = WAL_BOUND_BYTES) -> None:
        self.bound_bytes = bound_bytes  # the largest -wal file allowed, in bytes

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in fresh:
            x = fact(o, WalSample)
            if x is None:
                continue
            if x.wal_before is not None and x.wal_after is not None and x.idle:
                what = "an idle poll" if o.op == "poll_next" else f"a read ({o.op})"
                if x.wal_after != x.wal_before:
                    out.append(Violation(
                        "idle-no-write",
                        f"{what} grew the -wal file from {x.wal_before} to {x.wal_after} "
                        "bytes: it wrote although there was nothing to do",
                        ops=[o.index]))
                elif x.wal_mark_before != x.wal_mark_after:
                    out.append(Violation(
                        "idle-no-write",
                        f"{what} appended to the WAL (its header or frame count changed: "
                        f"{x.wal_mark_before} -> {x.wal_mark_after}), though the "
                        "file size stayed the same: it wrote although there was nothing to do",
                        ops=[o.index]))
            if x.xid_before is not None and x.xid_after is not None and x.idle:
                what = "an idle poll" if o.op == "poll_next" else f"a read ({o.op})"
                if x.xid_after != x.xid_before:
                    out.append(Violation(
                        "idle-no-write",
                        f"{what} assigned a transaction id on the Postgres server (the next "
                        f"id moved from {x.xid_before} to {x.xid_after}): it wrote although "
                        "there was nothing to do", ops=[o.index]))
            if x.open_tx_after_step:
                out.append(Violation(
                    "wal-bounded",
                    f"a connection of the target was left idle in transaction by the step "
                    f"that ended with {o.op} (op #{o.index}) or an earlier call "
                    f"({x.open_tx_after_step}): on Postgres no transaction may outlive the "
                    "call that opened it", ops=[o.index]))
            hung = fact(o, Hung)
            if o.op == "checkpoint" and x.reader and hung and not injected(o):
                out.append(Violation(
                    "wal-bounded",
                    f"checkpoint(TRUNCATE) was still waiting {hung.seconds:.1f}s after the "
                    f"outside reader let go (it held its snapshot {x.reader_hold_s or 0}s): "
                    "something of the store itself keeps a read transaction open, so the WAL "
                    "can never be reset", ops=[o.index]))
            if (o.op == "checkpoint" and x.wal_after is not None and not x.reader
                    and o.type != OK and not injected(o)):
                out.append(Violation(
                    "wal-bounded",
                    f"checkpoint(TRUNCATE) with no outside reader open was "
                    f"{'refused with ' + str(o.error) if o.type == FAIL else 'not answered'}"
                    f"{': ' + str(o.message)[:120] if o.message else ''}: with no reader it "
                    "must empty the -wal, or the WAL grows without bound", ops=[o.index]))
            if o.op == "checkpoint" and x.wal_after is not None and not x.reader:
                if o.type == OK and str(o.args.get("mode", "TRUNCATE")).upper() == "TRUNCATE" and x.wal_after > 0:
                    out.append(Violation(
                        "wal-bounded",
                        f"checkpoint(TRUNCATE) with no outside reader left the -wal at "
                        f"{x.wal_after} bytes (returned {o.value}): a transaction or cursor "
                        "of the store itself is still open",
                        ops=[o.index]))
            peak = max(x.wal_after or 0, x.wal_after_step or 0)
            if peak > self.bound_bytes:
                out.append(Violation(
                    "wal-bounded",
                    f"the -wal file reached {peak} bytes, over the bound of {self.bound_bytes} "
                    "(--wal-bound): under the store's normal traffic its WAL must stay "
                    "bounded (checkpoints must be able to reset it)", ops=[o.index]))
        return out
