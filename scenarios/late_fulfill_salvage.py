"""late-fulfill-salvage — a result delivered after the lease ended is refused, not lost.

Rule: PROTOCOL.md#late-results (the refusal keeps the result as salvage) and
PROTOCOL.md#salvage-entries.

A holder saves partial work while its lease runs, then delivers its result just after the
lease ended (at ``expires``, ``expires + 1``, much later). The delivery must be refused
(someone else may own the task now), but the work must not vanish: ``salvaged()`` keeps
both the partial artifact and the late result, even after another worker reclaims and
completes the task.
"""

from __future__ import annotations

from .base import TAKE, Scenario, Session, holder_args

EXEC_TTL_MS = 3_000


def late_fulfill_salvage(s: Session) -> str:
    agent, other = "slowpoke", "rescuer"
    for late_by in s.each((0, 1, 60_000)):
        attempts = 1 if late_by == 1 else 2  # once straight to TIMED_OUT, twice back to the queue
        task = s.dispatch(exec_ttl=EXEC_TTL_MS, attempts=attempts, title=f"late by {late_by}")
        lease = s.take(0, agent, task)
        s.set_clock(lease["lease_expires_at"] - 1, "the last millisecond of the lease")
        if s.have(("salvage",)):  # partial work, kept forever
            s.call(0, "salvage", agent, **holder_args("salvage", task, lease["token"], agent))
        s.set_clock(lease["lease_expires_at"] + late_by, f"expires{late_by:+d}")
        late = s.call(0, "fulfill", agent, **holder_args("fulfill", task, lease["token"], agent))
        s.say(f"late fulfill -> {late.type} {late.error or ''}")
        s.call(1, "salvaged", "auditor", task_id=task)  # the model expects the late result
        if attempts > 1:
            again = s.take(1, other, task)
            s.call(1, "fulfill", other, **holder_args("fulfill", task, again["token"], other))
            s.call(1, "salvaged", "auditor", task_id=task)  # still there after completion
    return ("late fulfills (at expires, +1, +60000) were refused and kept as salvage with the "
            "partial work, also after a reclaim completed the task")


SCENARIO = Scenario(
    name="late-fulfill-salvage",
    invariant="no-lost-task",
    description="A fulfill that arrives after the lease ended is refused, but its result is "
                "kept as salvage.",
    source="PROTOCOL.md#late-results",
    script=late_fulfill_salvage,
    needs=("dispatch", TAKE, "fulfill", "salvaged", "lease"),
)
