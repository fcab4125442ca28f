"""idle-poll-quiet — polls, sweeps and reads with nothing to do must not touch the WAL.

Rule: PROTOCOL.md#two-phase-idle-polls (read first, open a write only when something is
due or ready).

The queue is not empty, but nothing in it is for the pollers: one task is addressed to
another agent, one waits for an unfinished dependency, one is done. After a ``TRUNCATE``
checkpoint the ``-wal`` is empty; then idle pollers poll, sweep and read, alone and all at
once, and the ``-wal`` must stay exactly as it was. A blind UPDATE (or any write) in the
poll path appends a frame on every idle poll.
"""

from __future__ import annotations

from ferry_harness.run.steps import Checkpoint, IdlePoll, Reads

from .base import TAKE, Scenario, Session, holder_args


def idle_poll_quiet(s: Session) -> str:
    blocker = s.dispatch(target="somebody-else", title="not for us") if s.have(("targets",)) \
        else None
    if blocker and s.have(("dag",)):
        s.dispatch(deps=[blocker], title="waits for a dependency")
    done = s.dispatch(title="already done")
    lease = s.take(1, "worker", done)
    s.call(1, "fulfill", "worker", **holder_args("fulfill", done, lease["token"], "worker"))
    s.step(Checkpoint())  # -wal emptied (and the checker makes sure it is)
    polls = 0
    for _ in s.rounds(5):
        s.step(IdlePoll())  # the Executor's: sweep, then one measured idle poll
        s.measured([(slot, "poll_next", f"idle-{slot}", {}) for slot in range(s.size)])
        if s.have(("sweep",)):
            s.measured([(0, "sweep", "janitor", {})])
        s.step(Reads())  # get/salvaged/inspect, each measured
        polls += s.size + 1
    return (f"{polls} idle polls (alone and {s.size} at one barrier), sweeps and reads: "
            f"the -wal stayed at {s.pool.wal_size()} bytes")


SCENARIO = Scenario(
    name="idle-poll-quiet",
    invariant="idle-no-write",
    description="Polls, sweeps and reads that find nothing to do leave the -wal unchanged, "
                "alone or all at once.",
    source="PROTOCOL.md#two-phase-idle-polls",
    script=idle_poll_quiet,
    needs=("dispatch", TAKE, "fulfill", "poll_next", "wal-file"),
)
