"""``no-lost-task`` during a run: ``inspect()`` shows every task once with its accepted
result, and no poll or claim comes back empty while a task was certainly ready for it."""

from __future__ import annotations

from ferry_harness.check.history import OK, Op
from ferry_harness.check.invariant import Violation, hashable
from ferry_harness.check.model import COMPLETED, STATES, canonical
from ferry_harness.check.runstate import RunState


class InspectShowsAll:
    """``inspect()`` lists every dispatched task exactly once, in a state of PROTOCOL.md#task-states, every
    accepted fulfill as ``COMPLETED`` and, for a target with the ``results`` feature, its
    result unchanged (PROTOCOL.md#taskview-fields: a target without it need not show one)."""

    name = "inspect-shows-all"
    ids = ("no-lost-task",)
    needs = ("dispatch", "inspect")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out: list[Violation] = []
        for o in fresh:
            if (o.op != "inspect" or o.type != OK or o.args.get("agent_id")
                    or not isinstance(o.value, list)
                    or not all(isinstance(v, dict) and "task_id" in v for v in o.value)):
                continue
            views = {}
            for v in o.value:
                tid = v.get("task_id")
                if tid in views:
                    out.append(Violation("no-lost-task", f"inspect() lists task {tid} twice",
                                         ops=[o.index]))
                views[tid] = v
                if v.get("status") not in STATES:
                    out.append(Violation("no-lost-task", f"inspect() shows task {tid} in "
                                         f"state {v.get('status')!r}, not a state of PROTOCOL.md#task-states",
                                         ops=[o.index]))
            for p in run.ok_writes:
                if not (p.complete_ns and p.complete_ns < o.invoke_ns):
                    continue
                if p.op == "dispatch" and p.value not in views:
                    out.append(Violation("no-lost-task", f"task {p.value} (dispatched by op "
                                         f"#{p.index}) is missing from inspect()",
                                         ops=[p.index, o.index]))
                elif p.op == "fulfill" and p.args.get("task_id") in views:
                    v = views[p.args["task_id"]]
                    if v.get("status") != COMPLETED or (
                            run.cfg.results
                            and canonical(v.get("result")) != canonical(p.args.get("result"))):
                        out.append(Violation(
                            "no-lost-task",
                            f"task {p.args['task_id']}: fulfill (op #{p.index}) was accepted with "
                            f"{canonical(p.args.get('result'))}, but inspect() shows "
                            f"{v.get('status')} with {canonical(v.get('result'))}",
                            ops=[p.index, o.index]))
        return out


class ReadyNotRefused:
    """A poll or claim that came back empty although a task was *certainly* ready for that
    agent. Certain means: dispatched before the call, for this agent or any, every
    dependency fulfilled before the call, queue window open, and nothing that could have
    claimed or changed it started before the call ended."""

    name = "ready-not-refused"
    ids = ("no-lost-task",)
    needs = ("dispatch", "claim|poll_next")
    sees_invalid_args = False

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for e in fresh:
            if not (e.op in ("poll_next", "claim") and e.type == OK and e.value is None):
                continue
            end = e.complete_ns or 0
            if run.info_claim_min < end:
                continue  # an indeterminate claim may have taken anything
            if e.op == "claim":
                tid = e.args["task_id"]
                found = tid if run.ready_for(e, tid) else None
            else:
                found = run.first_ready(e)
            if found is None:
                continue
            d = run.dispatched[hashable(found)]
            deps = d.args.get("depends_on") or []
            out.append(Violation(
                "no-lost-task",
                f"{e.op}({e.agent!r}) returned nothing at t={e.now}, but task {found} was "
                f"ready for it (dispatched by op #{d.index}, never claimed"
                f"{', dependencies completed' if deps else ''})", ops=[e.index, d.index]))
        return out
