"""``dag-order``: dependencies first, and a failed dependency's failure cascades."""

from __future__ import annotations

from ferry_harness.check.history import OK, Op
from ferry_harness.check.invariant import Violation, hashable, won_claims
from ferry_harness.check.runstate import RunState


class DependenciesFirst:
    """No task is claimed before every dependency was fulfilled (before the claim ended)."""

    name = "dependencies-first"
    ids = ("dag-order",)
    needs = ("dispatch", "claim|poll_next", "fulfill", "dag")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for claim in won_claims(fresh):
            tid = claim.value["task_id"]
            for d in run.deps.get(hashable(tid), []):
                done = run.fulfilled_any.get(hashable(d))
                if done is None or done.invoke_ns >= (claim.complete_ns or 0):
                    out.append(Violation(
                        "dag-order",
                        f"task {tid} was claimed by {claim.agent!r} at t={claim.now} before its "
                        f"dependency {d} was COMPLETED",
                        ops=[claim.index] + ([done.index] if done else [])))
        return out


class FailureCascades:
    """No dependent may still read SUBMITTED after a sweep that started once both its
    dependency had ended FAILED or TIMED_OUT and the dependent's own dispatch had returned
    (PROTOCOL.md#dependencies-and-the-failure-cascade): a task dispatched onto a dead
    dependency may wait for the next sweep."""

    name = "failure-cascades"
    ids = ("dag-order",)
    needs = ("dispatch", "get", "sweep", "dag")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        reads = [o for o in fresh if o.op == "get" and o.type == OK and isinstance(o.value, dict)
                 and o.value.get("status") == "SUBMITTED" and o.value.get("depends_on")]
        out = []
        for r in reads:
            # the latest start of a sweep that ended before this read began
            swept = run.sweeps.max_before(r.invoke_ns)
            disp = run.dispatched.get(hashable(r.value.get("task_id")))
            if disp is None or not (disp.complete_ns or 0) < swept:
                continue  # no sweep started after its dispatch returned: it may still wait
            for dep in r.value["depends_on"]:
                t = run.ended.get(hashable(dep))
                if t is not None and t < swept:
                    out.append(Violation(
                        "dag-order",
                        f"task {r.value['task_id']} is still SUBMITTED at t={r.now} although its "
                        f"dependency {dep} ended FAILED/TIMED_OUT and a sweep started after that "
                        f"and after this task's dispatch (op #{disp.index}) returned: the "
                        "failure must cascade by then", ops=[r.index, disp.index]))
                    break
        return out
