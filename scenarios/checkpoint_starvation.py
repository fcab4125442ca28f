"""checkpoint-starvation — a long reader blocks checkpoints; after it, the WAL must empty.

Rule: PROTOCOL.md#sqlite-rules (no transaction or cursor outlives its call): while any
read snapshot stays open, no checkpoint can copy the log back and reset it, so the -wal
keeps growing for as long as the snapshot lives.

With ordinary traffic, a ``TRUNCATE`` checkpoint empties the ``-wal``. Then an outside
process opens a read transaction and keeps it: the traffic goes on, the ``-wal`` grows (we
measure it), and a checkpoint cannot empty it. Once that reader ends, the store's own
reads run and a checkpoint must empty the ``-wal`` again; if it cannot, the store itself
keeps a transaction or cursor open (say, a read that never commits) and the WAL grows
without bound.
"""

from __future__ import annotations

from ferry_harness.check.annotations import WalSample, fact, mark
from ferry_harness.run.steps import Checkpoint

from .base import TAKE, Scenario, Session, holder_args

TASKS_PER_BATCH = 8
BATCHES = 3


def _traffic(s: Session, n: int, tag: str) -> None:
    """n tasks through their whole life: dispatch, claim (or poll), fulfill."""
    for i in range(n):
        task = s.dispatch(title=f"{tag} {i}")
        lease = s.take(1, "worker", task)
        s.call(1, "fulfill", "worker", **holder_args("fulfill", task, lease["token"], "worker"))


def checkpoint_starvation(s: Session) -> str:
    _traffic(s, TASKS_PER_BATCH, "warm-up")
    s.step(Checkpoint())  # no reader: the checker wants the -wal empty
    s.hold_reader()
    try:
        sizes = [s.pool.wal_size()]
        for b in range(BATCHES):
            _traffic(s, TASKS_PER_BATCH, f"batch {b} under a long reader")
            sizes.append(s.pool.wal_size())
        s.say(f"-wal under the long reader: {' -> '.join(map(str, sizes))} bytes")
        pinned = s.call(0, "checkpoint", "janitor", mode="TRUNCATE")
        mark(pinned, WalSample(reader=True, wal_after=s.pool.wal_size()))
    finally:
        s.drop_reader()
    if s.have(("get",)):  # the store's own reads, then checkpoint
        s.call(1, "get", "reader", task_id=s.tasks[-1])
    if s.have(("inspect",)):
        s.call(1, "inspect", "reader")
    s.step(Checkpoint())
    after = s.pool.wal_size()
    left = pinned_wal.wal_after if (pinned_wal := fact(pinned, WalSample)) else None
    busy = pinned.value[0] if pinned.type == "ok" and pinned.value else "?"
    return (f"-wal grew {sizes[0]} -> {sizes[-1]} bytes over {BATCHES * TASKS_PER_BATCH} tasks "
            f"while a reader was open (TRUNCATE busy={busy}, left {left}); "
            f"{after} bytes after it ended")


SCENARIO = Scenario(
    name="checkpoint-starvation",
    invariant="wal-bounded",
    description="A long outside reader stops TRUNCATE checkpoints while the WAL grows; once "
                "it ends the store's checkpoint must empty the -wal.",
    source="PROTOCOL.md#wal-bounded",
    script=checkpoint_starvation,
    needs=("dispatch", TAKE, "fulfill", "checkpoint", "wal-file"),
)
