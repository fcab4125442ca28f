"""``liveness``: every call returns or raises in bounded time; no unexplained worker death."""

from __future__ import annotations

from ferry_harness.check.annotations import Died, Hung, fact
from ferry_harness.check.history import Op
from ferry_harness.check.invariant import Violation
from ferry_harness.check.runstate import RunState


class Liveness:
    """A call that never returned (no frozen worker to blame), or a worker that died with
    no fault injected: every call must end with a result or a typed error."""

    name = "liveness"
    ids = ("liveness",)
    needs = ()
    sees_invalid_args = True

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in fresh:
            if o.op == "checkpoint":
                continue  # a TRUNCATE that cannot finish: wal-bounded's case (see wal.py)
            hung, died = fact(o, Hung), fact(o, Died)
            if hung:
                out.append(Violation(
                    "liveness",
                    f"{o.op} by {o.agent!r} on worker w{o.process} did not return within "
                    f"{hung.seconds:.1f}s (20× the slowest op seen, at least "
                    f"{3:.0f}s; --op-timeout sets it) and was killed: a call must end with a "
                    "result or a typed error, busy waits included", ops=[o.index]))
            elif died:
                out.append(Violation(
                    "liveness",
                    f"worker w{o.process} died during {o.op} by {o.agent!r} (exit code "
                    f"{died.exitcode}) with no fault injected: the store crashed the process",
                    ops=[o.index]))
        return out
