"""The model's verdict per object: each task and lock searched for a legal sequential
order (:mod:`ferry_harness.check.linearizability`), the failing step named by the rule it breaks."""

from __future__ import annotations

from ferry_harness.check.annotations import WritersNowMax, has, mark
from ferry_harness.check.history import FAIL, Op
from ferry_harness.check.invariant import INVARIANTS, Violation
from ferry_harness.check.linearizability import partition_key
from ferry_harness.check.runstate import RunState


class PerObjectSearch:
    """Linearizability per task and per lock. An object whose search runs out of budget is
    undecided: said once per object in ``run.undecided`` (the Checker's ``unknown``)."""

    name = "per-object-search"
    ids = tuple(INVARIANTS)  # the model classifies a failing step under any rule
    needs = ("dispatch|acquire_lock",)  # any task or lock to search
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        mark_concurrent_writers(run, fresh)
        touched = {k for k in map(partition_key, fresh) if k is not None}
        for o in fresh:  # an indeterminate poll joined every open task's search
            touched.update(run.spread.get(o.index, ()))
        out = []
        for key in sorted(touched):
            search = run.parts.get(key)
            if search is None:
                continue
            res = search.run()
            if res.ok is None:
                if key not in run.unknown_said:
                    run.unknown_said.add(key)
                    run.undecided.append(f"{key}: {res.why}")
            elif not res.ok:
                out.append(Violation(
                    res.invariant or "linearizable", res.why or "not linearizable",
                    ops=[res.culprit] if res.culprit is not None else [],
                    detail={"object": key, "linearized_prefix": res.linearized,
                            "partition_ops": res.ops},
                ))
        return out


def mark_concurrent_writers(run: RunState, fresh: list[Op]) -> None:
    """For each fresh late-fulfill refusal, the latest clock any other possible writer ran
    at before it ended (the model decides from it whether the late result must have been
    kept: see annotations.WritersNowMax)."""
    for o in fresh:
        if (o.op == "fulfill" and o.type == FAIL and o.error == "LeaseExpired"
                and not has(o, WritersNowMax)):
            mark(o, WritersNowMax(now=run.writers.max_before(o.complete_ns or 0, o.index, -1)))
