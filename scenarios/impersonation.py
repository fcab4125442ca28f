"""impersonation — a second process with the holder's agent name but no token.

Rule: PROTOCOL.md#the-holder-guard (the token, not the agent name, proves the claim).

Instance A of agent ``reviewer`` claims a task addressed to ``reviewer``. Instance B, the
same name in another process, never claimed it and has no token; it tries every holder
operation without a token and with a forged one, and then races A's own fulfill. A guard
that checks only the agent name lets B finish A's task with its half-done result.
"""

from __future__ import annotations

from ferry_harness.check.history import HOLDER_OPS

from .base import Scenario, Session, holder_args


def impersonation(s: Session) -> str:
    agent = "reviewer"
    a, b = 0, 1  # two instances of the same agent, in two worker processes
    for r in s.rounds(3):
        task = s.dispatch(target=agent if s.have(("targets",)) else None, title=f"review #{r}")
        claim = s.need(s.call(a, "poll_next", agent), "instance A's poll").value
        s.say(f"instance A (w{a}) holds {task[:8]}; instance B (w{b}) has the same name, no token")
        for op in s.have(HOLDER_OPS):
            for token in (None, s.forged_token()):
                s.call(b, op, agent, **holder_args(op, task, token, "instance B"))
        if s.have(("get",)):
            s.call(b, "get", "auditor", task_id=task)  # still CLAIMED by A, nothing changed
        ops = s.race([(a, "fulfill", agent, holder_args("fulfill", task, claim["token"], "instance A")),
                      (b, "fulfill", agent, holder_args("fulfill", task, None, "instance B"))])
        s.expect(ops[0].type == "ok", "holder-guard",
                 f"the real holder's fulfill was refused ({ops[0].error}) while an impersonator "
                 "raced it", ops)
    return (f"{s.rounds_run} rounds: a same-name instance without the token was refused "
            f"{2 * len(s.have(HOLDER_OPS)) + 1} times each, the real holder's result kept")


SCENARIO = Scenario(
    name="impersonation",
    invariant="holder-guard",
    description="A same-name instance without the claim token tries every holder operation "
                "and races the real holder's fulfill: all refused.",
    source="PROTOCOL.md#the-holder-guard",
    script=impersonation,
    needs=("dispatch", "poll_next", "fulfill"),
)
