"""double-finish — two processes with one token fulfill at once; the final UPDATE decides.

Rule: PROTOCOL.md#the-holder-guard (the write repeats the guard and checks the row count).

The holder's token is in two processes at once (a retry that raced its first attempt, a
forked helper), and both call ``fulfill`` in the same instant with different results.
Checking the guard in application code and then writing by primary key lets both succeed,
the second overwriting the first; the UPDATE must repeat the status and token conditions
and check that exactly one row changed, so exactly one fulfill wins.
"""

from __future__ import annotations

from .base import TAKE, Scenario, Session, holder_args


def double_finish(s: Session) -> str:
    agent = "worker"
    for r in s.rounds():
        task = s.dispatch(title=f"report #{r}")
        token = s.take(0, agent, task)["token"]
        finishes = s.race([(slot, "fulfill", agent, holder_args("fulfill", task, token, f"copy-{slot}"))
                           for slot in range(s.size)])
        winners = [o for o in finishes if o.type == "ok"]
        s.expect(len(winners) == 1, "token-unique",
                 f"{len(winners)} of {len(finishes)} concurrent fulfills with one token "
                 f"succeeded on task {task[:8]}; exactly one must", finishes)
        if s.have(("get",)):
            s.call(1, "get", "auditor", task_id=task)  # the model checks the winner's result stayed
    return (f"{s.rounds_run} rounds of {s.size} concurrent fulfills with one token: "
            "exactly one won, its result kept")


SCENARIO = Scenario(
    name="double-finish",
    invariant="token-unique",
    description="Two or more processes fulfill with the same token at once: exactly one wins, "
                "the token is then spent.",
    source="PROTOCOL.md#the-holder-guard",
    script=double_finish,
    needs=("dispatch", TAKE, "fulfill"),
)
