"""dag-unlock — a task with two dependencies under racing claimers, then a failure cascade.

Rule: PROTOCOL.md#dependencies-and-the-failure-cascade: readiness and the dependencies' states
must be read in the same snapshot as the claiming write, or a claimer acts on stale news.

C depends on A and B. While A and B are open, every worker tries to claim C at once (and to
poll): nobody may get it. A completes: C stays locked. B completes: C unlocks and exactly
one worker gets it. Then the failure path: X fails, so Y (which needs X) and Z (which
needs Y) must become FAILED with a reason naming the dependency, and stay unclaimable.
On a poll-only queue every "claim of C" is a poll by every worker: the first one also
hands out A and B (nothing else is ready), the later ones must find C only once both
are done.
"""

from __future__ import annotations

from ferry_core.types import FAILED

from .base import TAKE, Scenario, Session, holder_args


def _everyone_claims(s: Session, task: str) -> list:
    """Every worker tries to take ``task`` at once: by id, or by polling on a poll-only
    target (then the script has left nothing else ready, or only the tasks named)."""
    return s.race([s.grab(slot, f"worker-{slot}", task) for slot in range(s.size)])


def _finish(s: Session, slot: int, agent: str, task: str) -> None:
    lease = s.take(slot, agent, task)
    s.call(slot, "fulfill", agent, **holder_args("fulfill", task, lease["token"], agent))


def _complete(s: Session, o) -> None:
    s.call(s.slot_of(o), "fulfill", o.agent,
           **holder_args("fulfill", o.value["task_id"], o.value["token"], o.agent))


def dag_unlock(s: Session) -> str:
    a = s.dispatch(title="A")
    b = s.dispatch(title="B")
    c = s.dispatch(deps=[a, b], title="C needs A and B")
    first = _everyone_claims(s, c)  # the checker flags any claim of C before A and B are done
    if s.poll_only:  # those pollers were handed A and B (nothing else was ready)
        got = {o.value["task_id"]: o for o in s.winners(first)}
    else:
        polls = s.race([(slot, "poll_next", f"worker-{slot}", {}) for slot in range(s.size)])
        got = {o.value["task_id"]: o for o in s.winners(polls)}
    for task in (a, b):  # the pollers should have taken A and B (not C)
        if task in got:
            _complete(s, got.pop(task))
        else:
            _finish(s, 0, "worker-0", task)
        if task == a:
            _everyone_claims(s, c)  # A done, B not yet: C is still locked
    won = s.winners(_everyone_claims(s, c))
    s.expect(len(won) == 1, "dag-order",
             f"{len(won)} workers got C after A and B completed; it must unlock for exactly one")
    _complete(s, won[0])

    x = s.dispatch(title="X")
    y = s.dispatch(deps=[x], title="Y needs X")
    z = s.dispatch(deps=[y], title="Z needs Y")
    lease = s.take(0, "worker-0", x)
    s.call(0, "fail", "worker-0", **holder_args("fail", x, lease["token"], "worker-0"))
    _everyone_claims(s, y)
    for task, dep in ((y, x), (z, y)):
        view = s.call(1, "get", "auditor", task_id=task)
        v = view.value or {}
        named = "error_reason" not in v or dep in str(v["error_reason"])  # (may be left out)
        s.expect(v.get("status") == FAILED and named, "dag-order",
                 f"after {dep[:8]} failed, its dependent {task[:8]} is {v.get('status')} "
                 f"({v.get('error_reason')!r}); it must be FAILED with a reason naming the "
                 "dependency (PROTOCOL.md#dependencies-and-the-failure-cascade)",
                 [view])
    return ("C stayed locked while A or B was open (all workers raced it twice), unlocked for "
            "one worker after both; X failing cascaded FAILED to Y and Z")


SCENARIO = Scenario(
    name="dag-unlock",
    invariant="dag-order",
    description="C waits for A and B under racing claimers and unlocks for one worker once "
                "both complete; a failed dependency cascades FAILED.",
    source="PROTOCOL.md#dependencies-and-the-failure-cascade",
    script=dag_unlock,
    needs=("dispatch", TAKE, "poll_next", "fulfill", "fail", "get", "dag"),
)
