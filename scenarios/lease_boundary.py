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
On a poll-only queue the reclaimer polls, and each instant gets a task of its own (a poll
takes whichever task is ready), claimed alone just before.
"""

from __future__ import annotations

from .base import TAKE, Scenario, Session, holder_args


def _race_at(s: Session, task: str, lease: dict, delta: int) -> None:
    holder, reclaimer = "holder", "reclaimer"
    s.set_clock(lease["lease_expires_at"] + delta, f"expires{delta:+d}")
    fin, grab = s.race([
        (0, "fulfill", holder, holder_args("fulfill", task, lease["token"], holder)),
        s.grab(1, reclaimer, task)])
    s.say(f"at expires{delta:+d}: holder fulfill -> {fin.type} {fin.error or ''}, "
          f"reclaimer -> {'won' if grab.value else 'nothing'}")
    if s.poll_only and grab.type == "ok" and grab.value:  # keep one ready task at a time
        s.call(1, "fulfill", reclaimer,
               **holder_args("fulfill", grab.value["task_id"], grab.value["token"], reclaimer))


def lease_boundary(s: Session) -> str:
    for ttl in s.each((1_000, 2, 1)):
        if s.poll_only:
            # a poll takes whichever task is ready: one task per instant, each claimed alone
            for delta in (-1, 0, 1):
                task = s.dispatch(exec_ttl=ttl, attempts=2, title=f"ttl {ttl} at expires{delta:+d}")
                _race_at(s, task, s.take(0, "holder", task), delta)
            continue
        tasks = [s.dispatch(exec_ttl=ttl, attempts=2, title=f"ttl {ttl} at expires{d:+d}")
                 for d in (-1, 0, 1)]
        leases = [s.claim(0, "holder", t) for t in tasks]
        for task, lease, delta in zip(tasks, leases, (-1, 0, 1), strict=True):
            _race_at(s, task, lease, delta)
    how = "polled" if s.poll_only else "reclaimed"
    return (f"at expires-1 the holder won and nobody {how} the task; at expires and expires+1 "
            f"the holder was refused and the reclaimer won (exec_ttl_ms 1000, 2, 1)")


SCENARIO = Scenario(
    name="lease-boundary",
    invariant="lease-half-open",
    description="At expires-1, expires and expires+1 the holder's fulfill races a reclaimer: "
                "the holder wins only before expires.",
    source="PROTOCOL.md#at-the-boundaries",
    script=lease_boundary,
    needs=("dispatch", TAKE, "fulfill", "lease"),
)
