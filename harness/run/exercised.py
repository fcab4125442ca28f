"""What the checks of one example really judged: the report's ``checked (N evaluations)``
and ``not exercised (why)``.

An invariant counts as exercised by every op one of its check paths looks at and could
have filed a finding about (PROTOCOL.md#invariants): a ``dag-order`` evaluation is a
claim or poll while a dependent task waits (the claim-time dependency check), a claim of a
dependent, a dispatch with dependencies (unknown ones must be refused) or a read of a
dependent (the failure cascade); a ``lease-half-open`` one is a boundary instant, a
granted lease or extend (its ``lease_expires_at``) or a read (``is_logically_expired``).
Counting only one of several paths made runs whose other paths ran say "not exercised".
"""

from __future__ import annotations

from dataclasses import dataclass

from ferry_harness.check.annotations import Probe, WalSample, fact, has
from ferry_harness.check.history import FAIL, OK, Op
from ferry_harness.run.executor import Executor
from ferry_harness.run.steps import Clock, LockRace

HOLDER = frozenset({"fulfill", "fail", "release", "extend", "salvage"})
READ = frozenset({"get", "inspect", "salvaged"})
LOCK = frozenset({"acquire_lock", "release_lock", "lock_holder"})
CLAIMS = frozenset({"claim", "poll_next"})

# what "not exercised" means for each invariant: the kind of event that never happened
NEVER = {
    "single-winner": "no claim succeeded", "token-unique": "no claim succeeded",
    "holder-guard": "no holder operation ran",
    "lease-half-open": "no lease, lock boundary or read of a task",
    "lock-exclusive": "no daemon-lock call ran",
    "dag-order": "no task with dependencies was dispatched, claimed, polled for or read",
    "no-lost-task": "no read and no claim or poll", "wal-bounded": "no checkpoint without a reader",
    "idle-no-write": "no idle poll or read was measured", "linearizable": "no object to order",
    "typed-errors": "no operation ran", "integrity": "no integrity check ran",
    "liveness": "no operation ran", "refusal-class": "no holder operation was refused",
    "refusal-order": "no holder operation was refused",
}


def _tid(o: Op) -> str | None:
    tid = o.args.get("task_id")
    return tid if isinstance(tid, str) else None  # hostile ids are judged elsewhere


@dataclass
class _Dependent:
    deps: set[str]  # its dependencies
    target: str | None  # its target_agent
    window_end: int  # queued_at + queue_ttl_ms of its first queue window


def dependency_judgements(ops: list[Op]) -> tuple[int, int]:
    """Ops the ``dag-order`` checks judge, and how many of them were claims or polls that
    could have been handed a dependent too early (the claim-time check). Judged: a dispatch
    with ``depends_on`` (accepted or refused); a claim of a dependent, or a poll by an agent
    it is meant for, while it waits in its queue window for a dependency not yet fulfilled
    (nor failed); a read of a dependent (the failure cascade, the view's ``depends_on``)."""
    waiting: dict[str, _Dependent] = {}
    ended: set[str] = set()  # fulfilled or failed by their holder
    n = early = 0
    for o in ops:  # history order: what was known when the op ran
        if o.op == "dispatch" and o.args.get("depends_on"):
            n += 1
            if o.type == OK and isinstance(o.value, str):
                waiting[o.value] = _Dependent(
                    {str(d) for d in o.args["depends_on"]}, o.args.get("target_agent"),
                    o.now + int(o.args.get("queue_ttl_ms") or 0))
        elif o.op in CLAIMS and o.type != FAIL:
            could = [tid for tid, d in waiting.items()
                     if not d.deps & ended and o.now < d.window_end
                     and d.target in (None, o.agent)
                     and (o.op == "poll_next" or _tid(o) == tid)]
            early += bool(could)
            n += bool(could or _tid(o) in waiting)
        elif o.op == "get" and _tid(o) in waiting:
            n += 1
        elif o.op == "inspect" and o.type == OK and waiting:
            n += 1
        if o.op in ("fulfill", "fail") and o.type == OK:
            ended.add(str(o.args.get("task_id")))
    return n, early


def evaluations(ex: Executor) -> dict[str, int]:
    """How many times each invariant's checks judged something in one example: a report may
    say ``checked`` only where a check could have failed (``checked (N evaluations)``)."""
    ops = list(ex.history)
    won = [o for o in ops if o.op in CLAIMS and o.type == OK and o.value]
    holder = [o for o in ops if o.op in HOLDER]
    reads = [o for o in ops if o.op in READ and o.type == OK]
    wal = [(o, w) for o in ops if (w := fact(o, WalSample)) is not None]
    leases = len(won) + sum(1 for o in holder if o.op == "extend" and o.type == OK)
    boundaries = sum(1 for st in ex.steps if isinstance(st, (Clock, LockRace))
                     and st.offset is not None)
    boundaries += sum(1 for o in ops if has(o, Probe))
    n = {
        "single-winner": len(won),
        "token-unique": len(won) + len(holder) + len(reads),
        "holder-guard": len(holder),
        "lease-half-open": boundaries + (leases + sum(1 for o in reads if o.op != "salvaged")
                                         if "lease" in ex.capabilities else 0),
        "lock-exclusive": sum(1 for o in ops if o.op in LOCK),
        "dag-order": dependency_judgements(ops)[0],
        "no-lost-task": len(reads) + sum(1 for o in ops if o.op in CLAIMS and o.type == OK),
        "wal-bounded": sum(1 for o, w in wal if o.op == "checkpoint" and not w.reader
                           and w.wal_after is not None)
                       + sum(1 for _o, w in wal if w.open_tx_after_step is not None),
        "idle-no-write": sum(1 for _o, w in wal if w.idle),
        "linearizable": len({o.task_id for o in ops if o.task_id} |
                            {o.args.get("name") for o in ops if o.op in LOCK}),
        "typed-errors": len(ops),
        "integrity": sum(1 for o in ops if o.op == "integrity_check"),
        "liveness": len(ops),
        "refusal-class": sum(1 for o in holder if o.type == FAIL),
        "refusal-order": sum(1 for o in holder if o.type == FAIL),
    }
    return {k: v for k, v in n.items() if v}


def with_evaluations(status: dict[str, str], evaluated: dict[str, int]) -> dict[str, str]:
    """``checked`` becomes ``checked (N evaluations)`` or ``not exercised (why)``."""
    out = {}
    for inv, said in status.items():
        if said == "checked":
            n = evaluated.get(inv, 0)
            said = (f"checked ({n} evaluations)" if n
                    else f"not exercised ({NEVER.get(inv, 'nothing to judge')} in this run)")
        out[inv] = said
    return out
