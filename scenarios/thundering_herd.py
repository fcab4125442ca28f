"""thundering-herd — many same-name pollers, one ready task, one instant.

Rule: PROTOCOL.md#single-winner (the claim is one atomic write).

Several worker processes under the *same* agent name poll the queue in the same instant,
and there is one task. A claim written as "SELECT a ready task, then UPDATE it" lets two
of them see it ready and both "win"; the single-statement CAS (or one BEGIN IMMEDIATE
transaction) lets exactly one win. The race is repeated, since a lost race is luck.
"""

from __future__ import annotations

from .base import Scenario, Session, holder_args


def thundering_herd(s: Session) -> str:
    agent = "worker"  # every process runs as the same agent: names cannot tell them apart
    for r in s.rounds():
        task = s.dispatch(title=f"bug #{r}")
        polls = s.race([(slot, "poll_next", agent, {}) for slot in range(s.size)])
        winners = s.winners(polls)
        s.expect(len(winners) == 1, "single-winner",
                 f"{len(winners)} of {len(polls)} same-name pollers got task {task[:8]} at one "
                 "barrier; exactly one must win", polls)
        won = winners[0].value
        s.call(s.slot_of(winners[0]), "fulfill", agent,
               **holder_args("fulfill", task, won["token"], f"w{winners[0].process}"))
    return (f"{s.rounds_run} rounds of {s.size} same-name pollers on one task at one barrier: "
            "exactly one winner each time")


SCENARIO = Scenario(
    name="thundering-herd",
    invariant="single-winner",
    description="Many same-name workers poll one ready task at one barrier: exactly one may win.",
    source="PROTOCOL.md#single-winner",
    script=thundering_herd,
    needs=("dispatch", "poll_next", "fulfill"),
)
