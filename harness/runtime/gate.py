"""Race rounds that really race: did the racers overlap, and a gate that makes them.

**Overlap.** A racer's *span* is the worker-side interval of its store call on
``CLOCK_MONOTONIC`` (``time.monotonic_ns()``, one system-wide clock on Linux, so spans of
different worker processes compare directly). It ends when the call returns. It starts
when the call's first SQL statement starts — after the gate below let it go, if the gate
held it — or, for a call that ran no statement ferry could see, when the call started. So
a wait before the first statement (ferry's own gate, or a lock the store takes outside
SQLite) is not counted as racing; a wait inside SQLite (a busy handler) is. A race round
*overlapped* when every racer has a span and all spans contain one common instant: the
latest start is not after the earliest end (:func:`overlapped`). A racer that never ran
(its worker died or hung, or the barrier never opened) has no span: the round did not
overlap.

**The first-statement gate** (stress mode). The barrier lines the racers up before their
calls, but a call's Python prelude and, on a loaded machine, the scheduler's wake-up
latency leave a start spread longer than a store call, so most racers' SQL ran one after
the other. With the gate, each racer's call is armed with a one-shot hook (the statement
hook of :mod:`ferry_harness.runtime.schedule`): at its first SQL statement, before the
statement is prepared (no new SQLite lock taken), the racer marks itself arrived on a
shared board (one slot per pool slot, in shared memory) and spins until every racer of
the round is marked: the last to arrive releases everyone with no process to wake, which
is what makes them start within microseconds. From there on a gated racer yields the CPU
(``sched_yield``) before each of its statements: on a machine with fewer free cores than
racers (2 cores, 4 racers, other load) the racers' statements then interleave, instead of
one racer's whole call running before the next is even scheduled (measured: overlap of
2-racer rounds on ferry_core from 13-19 % to over 90 %, README "Races that really race").
The controller marks a racer *gone* when its
call ended without arriving (refused in Python before any SQL); a racer that spun
:data:`SPIN_S` goes on by itself (one blocked outside SQLite, e.g. on a lock of the
store's own, does not stall the round). A round is *gated* when every racer left the gate
with all the others arrived. A target whose SQL does not go through Python's
``sqlite3.connect`` (apsw, a bundled SQLite) never reaches the hook: its rounds run as
before, are never gated, and their spans start at the call. Schedule mode's rounds are
never gated (the scheduler orders their statements).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import multiprocess as mp

from ferry_harness.runtime import schedule

ENABLED = True  # pools gate their stress races unless made with gate=False
YIELD = True  # a gated racer yields the CPU before each statement (see the module doc)
SPIN_S = 0.005  # a racer at the gate goes on by itself after spinning this long
_armed: dict[str, list[int]] = {}  # this worker's armed call: [first statement ns, gated]


@dataclass(frozen=True, kw_only=True)
class RacerSpan:
    """One racer's store call on CLOCK_MONOTONIC (ns), as its worker measured it."""

    start_ns: int  # its first SQL statement's start (after the gate), else the call's start
    end_ns: int  # when the call returned


def overlapped(spans: Sequence[RacerSpan | None]) -> bool:
    """Did every racer run its store call at one common instant? (module docstring)

    >>> overlapped([RacerSpan(start_ns=0, end_ns=10), RacerSpan(start_ns=10, end_ns=20)])
    True
    >>> overlapped([RacerSpan(start_ns=0, end_ns=9), RacerSpan(start_ns=10, end_ns=20)])
    False
    """
    if len(spans) < 2 or any(s is None for s in spans):
        return False
    return max(s.start_ns for s in spans) <= min(s.end_ns for s in spans)


class Board:
    """The gate's shared memory: per pool slot, the last round it arrived at (``r``) or
    was marked gone from by the controller (``-r``). Made before the workers fork."""

    def __init__(self, slots: int) -> None:
        self.cells = mp.get_context("fork").RawArray("q", slots)
        self.round = 0

    def next_round(self) -> int:
        """A new round number (the controller's; cells of earlier rounds mean nothing)."""
        self.round += 1
        return self.round

    def gone(self, slot: int, rnd: int) -> None:
        """The racer in ``slot`` ended its call without arriving: nobody waits for it."""
        if self.cells[slot] != rnd:
            self.cells[slot] = -rnd

    def wait(self, rnd: int, slot: int, slots: tuple[int, ...]) -> bool:
        """In a racer: mark ``slot`` arrived at round ``rnd``, then spin (yielding the CPU
        to racers still on their way) until every slot of ``slots`` arrived or is gone, at
        most :data:`SPIN_S`. True when all of them arrived."""
        cells = self.cells
        cells[slot] = rnd
        deadline = time.perf_counter() + SPIN_S
        while True:
            marks = [cells[j] for j in slots]
            if all(m == rnd for m in marks):
                return True
            if all(m == rnd or m == -rnd for m in marks):
                return False
            if time.perf_counter() > deadline:
                cells[slot] = -rnd  # gone on alone: a later arrival did not meet it here
                return False
            os.sched_yield()


# ---------------------------------------------------------------------------- worker side
def arm(board: Board | None, rnd: int, slot: int, slots: tuple[int, ...]) -> None:
    """Note when this worker's next store call starts its first SQL statement; with a
    ``board`` and round ``rnd`` > 0, hold it there until every racer in ``slots`` arrived
    (or was marked gone), at most :data:`SPIN_S`, then yield before each statement."""
    armed = [0, 0]
    held = board is not None and rnd > 0

    def hook() -> None:
        if not armed[0]:
            if held:
                armed[1] = board.wait(rnd, slot, slots)
            armed[0] = time.monotonic_ns()
        if held and YIELD:
            os.sched_yield()  # let the other racers run their statement too

    _armed["call"] = armed
    schedule.on_statement(hook)


def disarm() -> tuple[int, bool]:
    """End the armed call: (when its first statement started in ns, 0 if it ran none;
    whether it left the gate with every racer arrived)."""
    schedule.on_statement(None)
    armed = _armed.pop("call", None) or [0, 0]
    return armed[0], bool(armed[1])
