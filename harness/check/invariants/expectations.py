"""A scenario's own expectations (``ferry_scenarios.base.Session.expect``), judged by the Checker.

A race script may state an outcome no general rule covers (exactly one of these daemons
gets the lock…). When it does not hold, the session records an ``expect`` op (process -1,
like the nemesis's entries) whose args name the invariant id, the message, the ops that
show it and the scenario; this check reports it, so every verdict of a scenario comes out
of one Checker, ordered with the rest.
"""

from __future__ import annotations

from ferry_harness.check.history import Op
from ferry_harness.check.invariant import INVARIANTS, Violation
from ferry_harness.check.runstate import RunState

EXPECT = "expect"  # the op name of a scenario expectation that did not hold


class ScenarioExpectations:
    """Every fresh ``expect`` op that did not hold (value ``False``) is a violation of the
    invariant it names."""

    name = "scenario-expectations"
    ids = tuple(INVARIANTS)  # a scenario names whichever id its race is about
    needs = ()
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [Violation(o.args["invariant"], o.args["message"], ops=list(o.args["ops"]),
                          detail={"scenario": o.args["scenario"]})
                for o in fresh if o.op == EXPECT and o.value is False]
