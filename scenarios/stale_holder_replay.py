"""stale-holder-replay — an old token comes back after the task was given up and re-claimed.

Rule: PROTOCOL.md#token-unique (release and expiry retire a token for good).

A worker claims a task, gives it back (``release``, or its lease runs out), and the same
agent claims it again in another process, getting a fresh token. The first process still
has the old token and replays it through every holder operation. A store that accepts any
token it ever issued for the task (no retirement) lets the stale holder finish, fail,
release or extend a task that is no longer its own. On a poll-only queue both claims are
polls (the task is the only one ready).
"""

from __future__ import annotations

from ferry_harness.check.history import HOLDER_OPS

from .base import TAKE, Scenario, Session, holder_args

EXEC_TTL_MS = 5_000


def stale_holder_replay(s: Session) -> str:
    agent = "worker"  # the same agent both times: only the token tells the claims apart
    old_slot, new_slot = 0, 1
    for how in s.each(("release", "expiry") if s.have(("lease",)) else ("release",)):
        task = s.dispatch(exec_ttl=EXEC_TTL_MS, attempts=2, title=f"replay after {how}")
        old = s.take(old_slot, agent, task)
        if how == "release":
            s.need(s.call(old_slot, "release", agent,
                          **holder_args("release", task, old["token"], "first claim")), "release")
        else:
            s.set_clock(old["lease_expires_at"], "the first lease ends")
        new = s.take(new_slot, agent, task)
        s.say(f"old token {old['token'][:8]} retired by {how}; current {new['token'][:8]}")
        for op in s.have(HOLDER_OPS):
            s.call(old_slot, op, agent, **holder_args(op, task, old["token"], "stale holder"))
        s.call(new_slot, "fulfill", agent, **holder_args("fulfill", task, new["token"], "current holder"))
    return (f"after {' and after '.join(('a release', 'an expiry')[:s.rounds_run])}, the retired token was refused by all "
            f"{len(s.have(HOLDER_OPS))} holder operations; the new holder finished")


SCENARIO = Scenario(
    name="stale-holder-replay",
    invariant="token-unique",
    description="After release (or expiry) and a re-claim by the same agent, the old token "
                "replays every holder operation: all refused.",
    source="PROTOCOL.md#token-unique",
    script=stale_holder_replay,
    needs=("dispatch", TAKE, "fulfill", "release"),
)
