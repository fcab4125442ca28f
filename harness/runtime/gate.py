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
calls, but a call's Python prelude (argument checks, building SQL) takes longer than the
start spread the barrier leaves, so most racers' SQL ran one after the other. With the
gate, each racer's call is armed with a one-shot hook (the statement hook of
:mod:`ferry_harness.runtime.schedule`): at its first SQL statement, before the statement
is prepared (no new SQLite lock taken), the worker reports
:class:`~ferry_harness.runtime.wire.AtGate` and waits on a shared release pipe. The
controller releases everyone who arrived at once when every racer has arrived or finished,
or after :data:`GATE_WAIT_S` (a racer refused in Python before any SQL, or blocked on a
lock of its own outside SQLite, does not stall the round); a late arrival is released as
soon as it reports, and a parked racer goes on by itself after :data:`RELEASE_WAIT_S`.
A round is *gated* when every racer stood at the gate when it opened. A target whose SQL
does not go through Python's ``sqlite3.connect`` (apsw, a bundled SQLite) never reaches
the hook: its rounds run as before, are never gated, and their spans start at the call.
Schedule mode's rounds are never gated (the scheduler orders their statements).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ferry_harness.runtime import schedule
from ferry_harness.runtime.wire import AtGate, send

ENABLED = True  # pools gate their stress races unless made with gate=False
GATE_WAIT_S = 0.05  # the controller waits at most this long for racers to reach SQL
RELEASE_WAIT_S = 2.0  # a parked racer goes on by itself after this (never a hang)
_armed: dict[str, list[int]] = {}  # this worker's armed call: when its first statement began


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


# ---------------------------------------------------------------------------- worker side
def arm(conn: Any, release_fd: int, op_index: int) -> None:
    """Note when this worker's next store call starts its first SQL statement (one shot);
    with a ``release_fd`` (not -1), hold it there until the controller releases it."""
    started = [0]

    def hook() -> None:
        if release_fd >= 0:
            send(conn, AtGate(op_index=op_index))
            _wait_release(release_fd, RELEASE_WAIT_S)
        started[0] = time.monotonic_ns()

    _armed["started"] = started
    schedule.on_first_statement(hook)


def disarm() -> int:
    """End the armed call: when its first statement started (ns), 0 if it ran none."""
    schedule.on_first_statement(None)
    started = _armed.pop("started", None)
    return started[0] if started else 0



def _wait_release(fd: int, timeout: float) -> bool:
    """Take one byte from the shared release pipe (False: none came within ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                if os.read(fd, 1):
                    return True
            except BlockingIOError:
                continue  # another racer took that byte


# ---------------------------------------------------------------------------- controller side
class Release:
    """The controller's side of one gated round: who arrived, and when to let them go."""

    def __init__(self, release_w: int, release_r: int, racers: int) -> None:
        self._w = release_w
        self.racers = racers
        self.arrived = 0  # racers that reported AtGate
        self.finished = 0  # racers that finished (or died) without reaching the gate
        self.opened = False  # the first release happened
        self.together = False  # every racer had arrived at the gate when it opened
        self.deadline = time.monotonic() + GATE_WAIT_S
        _drain(release_r)  # bytes of racers that went on by themselves last time

    def timeout(self) -> float | None:
        """How long the controller may wait before it must open the gate (None: it is open)."""
        return None if self.opened else max(0.0, self.deadline - time.monotonic())

    def arrive(self) -> None:
        self.arrived += 1
        if self.opened:  # a late racer: let it go at once
            os.write(self._w, b"g")
        else:
            self.poll()

    def finish(self) -> None:
        """A racer's call ended without it ever standing at the gate."""
        self.finished += 1
        self.poll()

    def poll(self) -> None:
        """Open the gate once everyone arrived or finished, or the wait ran out."""
        if self.opened:
            return
        if self.arrived + self.finished >= self.racers or time.monotonic() >= self.deadline:
            self.opened = True
            self.together = self.arrived == self.racers
            if self.arrived:
                os.write(self._w, b"g" * self.arrived)


def _drain(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                return
        except BlockingIOError:
            return
