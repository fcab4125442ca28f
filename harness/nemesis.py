"""The nemesis: faults injected on purpose, each recorded in the history.

- ``kill``: SIGKILL the worker holding a lease while it runs an operation (so possibly
  inside its write transaction); its op is ``info`` and a fresh worker takes its slot.
- ``pause``: SIGSTOP the holder, move time past its lease, let others race to claim,
  SIGCONT, and let the zombie try to finish with its old token (it must be refused).
- ``clock``: jump time forward past leases and queue windows.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any

from .client import PlannedCall
from .history import OK, Op

if TYPE_CHECKING:
    from .executor import Executor, Stats

FAULTS = ("kill", "pause", "clock")


class Nemesis:
    def __init__(self, kinds: tuple[str, ...], stats: Stats) -> None:
        self.kinds = kinds
        self.stats = stats
        self.rng = random.Random(0)

    def _note(self, ex: Executor, fault: str, **args: Any) -> None:
        ex.history.append(Op(index=ex.history.next_index(), process=-1, agent="nemesis",
                             op="nemesis", args={"fault": fault, **args},
                             invoke_ns=time.monotonic_ns(), now=ex.clock(),
                             complete_ns=time.monotonic_ns(), type=OK, example=ex.example))
        self.stats.faults[fault] = self.stats.faults.get(fault, 0) + 1

    def inject(self, ex: Executor, step: dict[str, Any]) -> None:
        fault = step["fault"]
        if fault == "clock":
            ex.clock.advance(step.get("ms", 1000))
            self._note(ex, "clock", ms=step.get("ms", 1000))
            return
        if not ex.claims:
            return
        c = ex._claim(step.get("claim", 0))
        if fault == "kill":
            delay = step.get("delay_us", self.rng.randrange(0, 1500)) / 1e6
            step["delay_us"] = int(delay * 1e6)  # recorded so a replay kills at the same point
            self._note(ex, "kill", slot=c.slot, delay_us=step["delay_us"])
            args = ex._holder_args(c, "fulfill", c.slot)
            ex.pool.run_and_kill(PlannedCall(c.slot, "fulfill", args, c.agent), ex.history, delay,
                                 example=ex.example)
        elif fault == "pause":
            self._note(ex, "pause", slot=c.slot)
            ex.pool.pause(c.slot)
            try:
                if c.expires is not None:  # a lease on the harness clock: end it
                    ex._set_clock(c.expires + 1)
                others = [i for i in range(ex.pool.size) if i != c.slot][:2]
                ex._run([PlannedCall(i, "poll_next", {}, f"rescuer-{i}") for i in others])
            finally:
                ex.pool.resume(c.slot)
                self._note(ex, "resume", slot=c.slot)
            args = ex._holder_args(c, "fulfill", c.slot)
            ex._run([PlannedCall(c.slot, "fulfill", args, c.agent)])
