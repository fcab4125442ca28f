"""``typed-errors``: every refusal is a PROTOCOL.md#error-classes error class."""

from __future__ import annotations

from ferry_harness.check.history import INFO, Op
from ferry_harness.check.invariant import Violation
from ferry_harness.check.runstate import RunState


class TypedErrors:
    """A call that raised something other than a protocol error class (and was not cut
    short by ferry, nor a barrier that timed out)."""

    name = "typed-errors"
    ids = ("typed-errors",)
    needs = ()
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        return [
            Violation("typed-errors",
                      f"{o.op} raised {o.error}: {o.message} — not a PROTOCOL.md#error-classes error class",
                      ops=[o.index])
            for o in fresh
            if o.type == INFO and o.error and o.note is None and o.error != "BarrierTimeout"
        ]
