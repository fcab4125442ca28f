"""lease-boundary — holder and reclaimer race at expires-1, expires and expires+1.

Rule: PROTOCOL.md#leases-are-half-open: the lease is ``[claimed_at, lease_expires_at)``, so
the holder owns the last millisecond before ``lease_expires_at`` and a reclaimer owns
``lease_expires_at`` itself; one comparison written the wrong way round is a whole
millisecond with two holders or with none.

Three tasks are claimed in the same millisecond, so their leases end together. The clock
then stops at ``expires - 1``, ``expires`` and ``expires + 1``, and at each instant the
holder's fulfill races a reclaimer's claim of one task: at ``expires - 1`` the holder must
win and nobody may reclaim; from ``expires`` on the holder must be refused and the
reclaimer must win. A closed interval ``[claimed_at, expires]`` is off by one millisecond:
at ``expires`` it lets the holder finish and refuses the reclaimer. Repeated with
``exec_ttl_ms`` of 1000, 2 and 1 (so ``expires - 1`` can be the claim instant itself).
"""

from __future__ import annotations

from .base import Scenario, Session, holder_args


def lease_boundary(s: Session) -> str:
    holder, reclaimer = "holder", "reclaimer"
    for ttl in s.each((1_000, 2, 1)):
        tasks = [s.dispatch(exec_ttl=ttl, attempts=2, title=f"ttl {ttl} at expires{d:+d}")
                 for d in (-1, 0, 1)]
        leases = [s.claim(0, holder, t) for t in tasks]
        expires = leases[0]["lease_expires_at"]
        for task, lease, delta in zip(tasks, leases, (-1, 0, 1), strict=True):
            s.set_clock(expires + delta, f"expires{delta:+d}")
            fin, grab = s.race([
                (0, "fulfill", holder, holder_args("fulfill", task, lease["token"], holder)),
                (1, "claim", reclaimer, {"task_id": task})])
            s.say(f"at expires{delta:+d}: holder fulfill -> {fin.type} {fin.error or ''}, "
                  f"reclaimer -> {'won' if grab.value else 'nothing'}")
    return ("at expires-1 the holder won and nobody could reclaim; at expires and expires+1 "
            "the holder was refused and the reclaimer won (exec_ttl_ms 1000, 2, 1)")


SCENARIO = Scenario(
    name="lease-boundary",
    invariant="lease-half-open",
    description="At expires-1, expires and expires+1 the holder's fulfill races a reclaimer: "
                "the holder wins only before expires.",
    source="PROTOCOL.md#at-the-boundaries",
    script=lease_boundary,
    needs=("dispatch", "claim", "fulfill", "lease"),
)
