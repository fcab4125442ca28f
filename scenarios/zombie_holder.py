"""zombie-holder — a frozen holder wakes up after its lease ended and tries to deliver.

Rule: PROTOCOL.md#leases-are-half-open (a lease ends on time even if its holder is stuck)
and PROTOCOL.md#late-results.

The holder process is frozen with SIGSTOP (a laptop lid closed, a debugger, a GC pause)
while its lease runs out. The other workers, under the same agent name, race to reclaim
the task at ``expires - 1`` (nobody may: the lease still holds) and at exactly
``lease_expires_at`` (one must win) — the expiry rescue race of fuzz faults and crash
campaigns (:func:`ferry_harness.run.faults.race_at_expiry`) — or, in the second round,
only 1000 ms after the lease ended. Then the zombie is woken with SIGCONT
and, unaware, delivers its result with its old token: the store must refuse it and keep
the rescuer's work. The zombie's partial work and late result stay as salvage. On a
poll-only queue the rescuers poll (the task is the only one that could be handed out),
and a poll that comes back empty at the expiry is a late reclaim.
"""

from __future__ import annotations

import functools

from ferry_harness.check.history import Op
from ferry_harness.run.faults import race_at_expiry

from .base import TAKE, Scenario, Session, holder_args

EXEC_TTL_MS = 2_000


def _rescue(s: Session, agent: str, rescuers: list[int], expires: int, task: str,
            at: str) -> list[Op]:
    """The rescuers race for the frozen holder's ``task`` once, at ``at``; its winners."""
    s.say(f"rescuers race for the frozen holder's task at {at}")
    grabs = s.race([s.grab(slot, agent, task) for slot in rescuers])
    won = s.winners(grabs)
    s.expect(len(won) <= 1, "single-winner",
             f"{len(won)} of {len(grabs)} rescuers reclaimed task {task[:8]} at t={s.now()}; "
             "at most one may", grabs)
    if at != "expires-1":
        s.expect(len(won) == 1, "lease-half-open",
                 f"none of {len(grabs)} rescuers could take task {task[:8]} at t={s.now()}, "
                 f"though the frozen holder's lease ended at {expires}: a lease must end at "
                 "lease_expires_at, not later", grabs)
    return won


def zombie_holder(s: Session) -> str:
    agent = "worker"
    zombie, rescuers = 0, list(range(1, s.size))
    for late_by in s.each((0, 1_000)):
        task = s.dispatch(exec_ttl=EXEC_TTL_MS, attempts=2, title=f"long job, late by {late_by}")
        lease = s.take(zombie, agent, task)
        if s.have(("salvage",)):  # the zombie did some work before it froze
            s.call(zombie, "salvage", agent, **holder_args("salvage", task, lease["token"], "zombie"))
        s.pause(zombie)
        try:
            expires = lease["lease_expires_at"]
            race = functools.partial(_rescue, s, agent, rescuers, expires)
            if late_by == 0:
                got = race_at_expiry([task], race, s.move_clock, expires)
                won = [got.won[task][1]]
            else:
                s.set_clock(expires + late_by, "the frozen holder's lease is long over")
                won = race(task, f"expires+{late_by}")
        finally:
            s.resume(zombie)
        rescue = won[0]
        zf = s.call(zombie, "fulfill", agent, **holder_args("fulfill", task, lease["token"], "zombie"))
        s.say(f"the zombie's fulfill -> {zf.type} {zf.error or ''}".strip())
        s.call(s.slot_of(rescue), "fulfill", agent,
               **holder_args("fulfill", task, rescue.value["token"], "rescuer"))
        if s.have(("get",)):
            s.call(1, "get", "auditor", task_id=task)  # the rescuer's result, not the zombie's
    return ("a SIGSTOPped holder's lease held at expires-1 (no rescuer got the task) and "
            "ended at expires (one rescuer reclaimed; and one 1000 ms late), the woken "
            "zombie's fulfill was refused, nothing overwritten")


SCENARIO = Scenario(
    name="zombie-holder",
    invariant="lease-half-open",
    description="The holder is frozen (SIGSTOP) past its lease, another worker reclaims at "
                "the boundary, and the woken zombie's fulfill is refused.",
    source="PROTOCOL.md#leases-are-half-open",
    script=zombie_holder,
    needs=("dispatch", TAKE, "fulfill", "lease"),
)
