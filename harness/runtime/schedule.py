"""Schedule mode: control the interleaving of real processes at SQL statement boundaries.

Worker side: before the target is created, :func:`install` replaces ``sqlite3.connect``
so every connection the target opens is a :class:`ScheduledConnection` (in every worker:
the stress-mode race gate, :mod:`ferry_harness.runtime.gate`, uses the same hook, see
:func:`on_statement`). Each statement it executes first passes a *schedule point*:
during a scheduled race the worker reports ``(op, sql)`` to the controller and waits for
"go" before the statement is even prepared, so it takes no new SQLite lock while it waits
(one inside a transaction keeps those it holds; it says so with ``in_tx``).

Controller side: :func:`run_round` lets exactly one worker run at a time. A released
worker runs until its next point, until it finishes, or until it has been silent for a
short quiescence window — then it is taken to be blocked inside SQLite on a lock, and
another worker goes. While a worker is blocked so, the waiting workers inside a transaction
(possible lock holders) go first, and one runs on statement by statement without another
quiescence window: a store's busy timeout (1 s is common) measures the store's lock hold,
not ferry's pause. Which worker goes is a :class:`Chooser`'s decision: an explicit list
first (a replay, or a shrunk schedule), then PCT (random priorities with ``depth`` change
points) or, for a shrunk schedule, "lowest index runs on". The decisions actually taken are
recorded, so a failing round replays exactly.

Targets that do not use Python's ``sqlite3`` (apsw, a bundled SQLite) reach no schedule
point; the executor then falls back to stress mode and says so.
"""

from __future__ import annotations

import random
import sqlite3
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, TypedDict

from ferry_harness.errors import ScheduleAbort
from ferry_harness.runtime.wire import (
    AbortSchedule,
    AtSchedulePoint,
    OpDone,
    Proceed,
    receive,
    send,
)

_original_connect = sqlite3.connect
class _State(TypedDict):
    pipe: Any  # the controller's end of this worker's pipe, None: not scheduled
    op: int | None  # the op index now running
    connections: int
    busy: bool
    hook: Callable[[], None] | None  # called at every statement (the race gate), or None


_state: _State = {"pipe": None, "op": None, "connections": 0, "busy": False, "hook": None}
_open: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()  # this worker's connections


def _point(sql: Any) -> None:
    hook = _state["hook"]
    if hook is not None:  # the race gate (ferry_harness.runtime.gate)
        hook()
    pipe, op = _state["pipe"], _state["op"]
    if pipe is None or op is None:
        return
    retry, _state["busy"] = _state["busy"], False
    send(pipe, AtSchedulePoint(op_index=op, sql=str(sql).strip()[:500], retry=retry,
                               in_tx=_in_transaction()))
    if not isinstance(receive(pipe), Proceed):
        raise ScheduleAbort("schedule aborted by the controller")


def _in_transaction() -> bool:
    """Is one of this worker's connections inside a transaction (it may hold a lock)?"""
    for con in list(_open):
        try:
            if con.in_transaction:
                return True
        except sqlite3.ProgrammingError:  # closed
            continue
    return False


def _run(method: Any, sql: Any, *args: Any) -> Any:
    """A schedule point, then the statement; a busy error marks the next point a retry."""
    _point(sql)
    try:
        return method(sql, *args)
    except sqlite3.OperationalError as exc:
        text = str(exc)
        if "locked" in text or "busy" in text:
            _state["busy"] = True
        raise


class ScheduledCursor(sqlite3.Cursor):
    def execute(self, sql: str, *args: Any) -> Any:  # noqa: D102
        return _run(super().execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:  # noqa: D102
        return _run(super().executemany, sql, *args)

    def executescript(self, script: str) -> Any:  # noqa: D102
        return _run(super().executescript, script)


class ScheduledConnection(sqlite3.Connection):
    def cursor(self, factory: Any = ScheduledCursor) -> Any:  # noqa: D102
        return super().cursor(factory)

    def execute(self, sql: str, *args: Any) -> Any:  # noqa: D102
        return _run(super().execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:  # noqa: D102
        return _run(super().executemany, sql, *args)

    def executescript(self, script: str) -> Any:  # noqa: D102
        return _run(super().executescript, script)


def _connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    base = kwargs.get("factory", sqlite3.Connection)
    if base is sqlite3.Connection:
        kwargs["factory"] = ScheduledConnection
    elif not issubclass(base, ScheduledConnection):
        kwargs["factory"] = type(f"Scheduled{base.__name__}", (ScheduledConnection, base), {})
    _state["connections"] += 1
    con = _original_connect(*args, **kwargs)
    _open.add(con)
    return con


def install(pipe: Any) -> None:
    """In a worker, before the factory runs: route every new connection through points."""
    _state["pipe"] = pipe
    sqlite3.connect = _connect


def connections() -> int:
    """How many connections the target opened through Python's sqlite3 in this worker."""
    return int(_state["connections"])


def begin(op_index: int | None) -> None:
    """Points block only while a scheduled op runs (``None``: free-running)."""
    _state["op"] = op_index


def on_statement(hook: Callable[[], None] | None) -> None:
    """Call ``hook`` before every SQL statement this worker runs from now on (None: stop)."""
    _state["hook"] = hook


# ---------------------------------------------------------------------------- choosers
@dataclass
class Chooser:
    """Decides which waiting worker goes next; records every decision it takes.

    ``explicit`` decisions come first (round-local worker positions); then PCT with
    ``seed``/``depth`` if given, else the lowest waiting position runs on. A worker
    retrying after SQLITE_BUSY goes only when nobody else can, and then retriers take
    turns, so the lock holder always gets to commit (no livelock). While another worker is
    blocked inside SQLite, the waiting workers in a transaction (``prefer``) go first: a
    store's busy timeout must not run out because ferry kept the lock holder paused.
    """

    explicit: list[int] = field(default_factory=list)
    seed: int | None = None
    depth: int = 2
    taken: list[int] = field(default_factory=list)
    _prio: dict[int, float] = field(default_factory=dict)
    _changes: set[int] = field(default_factory=set)

    def start(self, k: int) -> None:
        if self.seed is not None:
            rng = random.Random(self.seed)
            order = list(range(k))
            rng.shuffle(order)
            self._prio = {w: float(k - i) for i, w in enumerate(order)}
            self._changes = {rng.randrange(1, 12) for _ in range(self.depth)}

    def pick(self, waiting: list[int], retrying: set[int],
             prefer: set[int] | frozenset[int] = frozenset()) -> int:
        step = len(self.taken)
        fresh = [w for w in waiting if w not in retrying]
        fresh = [w for w in fresh if w in prefer] or fresh
        if step < len(self.explicit) and self.explicit[step] in waiting:
            choice = self.explicit[step]
        elif not fresh:  # only busy retriers: the least recently run goes
            last = {w: i for i, w in enumerate(self.taken)}
            choice = min(waiting, key=lambda w: last.get(w, -1))
        elif self.seed is not None and step >= len(self.explicit):
            choice = max(fresh, key=lambda w: self._prio.get(w, 0.0))
            if step in self._changes:  # a PCT change point: demote the chosen worker
                self._prio[choice] = min(self._prio.values(), default=0.0) - 1.0
        else:
            choice = min(fresh)
        self.taken.append(choice)
        return choice


def compact(decisions: list[int]) -> str:
    """``[0, 0, 1, 1]`` -> ``"0.0.1.1"``: the schedule string stored in reports."""
    return ".".join(str(d) for d in decisions)


# ---------------------------------------------------------------------------- controller
@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """How a scheduled round went; workers are named by their position in the round."""

    replies: dict[int, OpDone]  # position -> the worker's answer, for those that finished
    trace: list[tuple[int, int, str, bool]]  # (position, op index, sql, switch)
    stalled: list[int]  # positions that never finished (nor died)
    note: str | None = None  # why the round ended early, if it did
    hung: list[int] = field(default_factory=list)  # of those, running in the store (no point)
    died: list[int] = field(default_factory=list)  # positions whose worker died mid-round


def run_round(conns: list[Any], op_indices: list[int], chooser: Chooser, *,
              quiescence_s: float = 0.05, stall_s: float = 10.0) -> RoundResult:
    """Drive one scheduled race. ``conns[i]`` already received its call and will report
    points or completion; every wait is bounded, a stall ends the round (never a hang)."""
    k = len(conns)
    chooser.start(k)
    pos_of = {c: i for i, c in enumerate(conns)}
    waiting: dict[int, str] = {}
    running: set[int] = set(range(k))
    blocked: set[int] = set()
    retrying: set[int] = set()
    in_tx: set[int] = set()  # waiting workers inside a transaction (possible lock holders)
    stuck: set[int] = set()  # blocked when the worker released last went on in its transaction
    replies: dict[int, OpDone] = {}
    died: list[int] = []
    trace: list[tuple[int, int, str, bool]] = []
    last_pos: int | None = None
    deadline = time.monotonic() + stall_s
    while len(replies) + len(died) < k:
        if time.monotonic() > deadline:
            stalled = [i for i in range(k) if i not in replies and i not in died]
            return RoundResult(replies=replies, trace=trace, stalled=stalled,
                               note=f"schedule stalled for {stall_s:.1f}s; round ended as info",
                               hung=[i for i in stalled if i not in waiting], died=died)
        # blocked workers too: one inside SQLite's own busy handler reports its next point
        # once the lock frees, and may be the only one left to hear from
        live = [conns[i] for i in running]
        # the worker released last is at its next point still inside its transaction: who
        # was blocked on its lock still is, so no new quiescence window (each would spend
        # the blocked worker's busy timeout, one statement of the holder at a time)
        holding = bool(stuck) and running <= stuck and last_pos in waiting and last_pos in in_tx
        ready = wait(live, timeout=0 if holding else quiescence_s) if live else []
        for c in ready:
            i = pos_of[c]
            try:
                msg = receive(c)
            except (EOFError, OSError):
                died.append(i)
                running.discard(i)
                continue
            match msg:
                case AtSchedulePoint():
                    if msg.retry:
                        retrying.add(i)
                    else:
                        retrying.discard(i)
                    if msg.in_tx:
                        in_tx.add(i)
                    else:
                        in_tx.discard(i)
                    waiting[i] = msg.sql
                    running.discard(i)
                case OpDone():
                    replies[i] = msg
                    running.discard(i)
            deadline = time.monotonic() + stall_s
        if ready:
            continue
        # quiescent: whoever is still "running" is blocked inside SQLite
        blocked |= running
        if waiting:
            # someone is stuck inside SQLite (on a lock, most likely): a transaction holder
            # runs on until it commits, so a short busy timeout is not spent on our pause
            choice = chooser.pick(sorted(waiting), retrying, in_tx if blocked else frozenset())
            sql = waiting.pop(choice)
            trace.append((choice, op_indices[choice], sql, last_pos is not None and last_pos != choice))
            last_pos = choice
            send(conns[choice], Proceed())
            stuck = blocked - {choice} if choice in in_tx else set()
            running.add(choice)
            blocked.discard(choice)
            # a blocked worker may be free now that someone else moved; look again
            blocked.clear()
        elif not running:
            break
    return RoundResult(replies=replies, trace=trace,
                       stalled=[i for i in range(k) if i not in replies and i not in died],
                       died=died)


def abort(conns: list[Any]) -> None:
    """Tell workers parked at a point to give up (their op ends as ``info``)."""
    for c in conns:
        try:
            send(c, AbortSchedule())
        except (OSError, ValueError):
            pass
