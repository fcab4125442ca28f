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

On PostgreSQL the same points sit in front of psycopg 3's statements (sync API: the
methods of ``psycopg.Cursor``, which ``Connection.execute`` goes through, are wrapped in
schedule-mode workers); ``in_tx`` is the connection's transaction status. A statement
waiting on another transaction's row lock (``FOR UPDATE``, an ``UPDATE`` of a row another
transaction changed) leaves its worker silent, as SQLite's busy wait does, so the
controller's rules carry over unchanged; a lock timeout, deadlock or serialization
failure marks the next point a retry, as ``SQLITE_BUSY`` does.

Targets that reach no schedule point — apsw or a bundled SQLite, an async Postgres driver
(psycopg's ``AsyncConnection``, asyncpg) — fall back to stress mode, and the report says
so (:func:`no_points_finding`).
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
#: SQLSTATEs after which a Postgres store retries (as after SQLITE_BUSY): lock_not_available
#: (lock_timeout), serialization_failure, deadlock_detected
_PG_RETRY_STATES = frozenset({"55P03", "40001", "40P01"})


class _State(TypedDict):
    pipe: Any  # the controller's end of this worker's pipe, None: not scheduled
    op: int | None  # the op index now running
    connections: int
    busy: bool
    hook: Callable[[], None] | None  # called at every statement (the race gate), or None
    depth: int  # statements being run now (a driver method calling another: one point)


_state: _State = {"pipe": None, "op": None, "connections": 0, "busy": False, "hook": None,
                  "depth": 0}
_open: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()  # this worker's connections
_pg_open: weakref.WeakSet[Any] = weakref.WeakSet()  # its psycopg connections (ran a statement)
_pg_idle: list[Any] = []  # psycopg.pq.TransactionStatus.IDLE, once psycopg is hooked


def _point(sql: Any) -> None:
    """The schedule point every driver's statement passes first (both drivers share it)."""
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
    for pg in list(_pg_open):
        if not pg.closed and pg.info.transaction_status != _pg_idle[0]:
            return True
    return False


def _is_busy(exc: BaseException) -> bool:
    """Will the store retry after this error because another transaction held a lock?"""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        return "locked" in text or "busy" in text
    return getattr(exc, "sqlstate", None) in _PG_RETRY_STATES  # psycopg.Error


def _statement(text: Any, call: Callable[[], Any]) -> Any:
    """A schedule point, then the statement; a busy error marks the next point a retry."""
    if _state["depth"]:  # inside a statement already past its point (a driver's own call)
        return call()
    _point(text)
    _state["depth"] += 1
    try:
        return call()
    except Exception as exc:
        if _is_busy(exc):
            _state["busy"] = True
        raise
    finally:
        _state["depth"] -= 1


def _run(method: Any, sql: Any, *args: Any) -> Any:
    return _statement(sql, lambda: method(sql, *args))


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


# ---------------------------------------------------------------------------- psycopg 3
def _pg_text(cur: Any, query: Any) -> str:
    """A statement as text for the trace (``psycopg.sql`` objects rendered, bytes decoded)."""
    if isinstance(query, bytes | bytearray | memoryview):
        return bytes(query).decode("utf-8", "replace")
    if hasattr(query, "as_string"):
        try:
            return str(query.as_string(cur.connection))
        except Exception:
            pass
    return str(query)


def _pg_seen(cur: Any) -> None:
    conn = cur.connection
    if conn not in _pg_open:
        _pg_open.add(conn)
        _state["connections"] += 1


def _pg_wrap(cls: Any, name: str) -> None:
    """Put a schedule point in front of ``cls.<name>`` (once; a subclass that overrides
    it and calls ``super()`` passes this one)."""
    original = cls.__dict__.get(name)
    if original is None or getattr(original, "_ferry_point", False):
        return

    def method(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        _pg_seen(self)
        return _statement(_pg_text(self, query), lambda: original(self, query, *args, **kwargs))

    def stream(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        # a generator: the point comes when the first row is asked for, as the query runs
        _pg_seen(self)
        yield from _statement(_pg_text(self, query),
                              lambda: original(self, query, *args, **kwargs))

    wrapper = stream if name == "stream" else method
    wrapper._ferry_point = True  # type: ignore[attr-defined]
    wrapper.__name__, wrapper.__doc__ = name, original.__doc__
    setattr(cls, name, wrapper)


def _install_psycopg() -> bool:
    """Route every statement of psycopg 3's sync API through :func:`_point`: the cursor
    classes' own methods are wrapped (``Connection.execute`` goes through a cursor), so
    every connection counts however it was made — ``psycopg.connect``, a pool, a
    ``Connection`` subclass, a ``cursor_factory`` of the store's own. The async API
    (``AsyncConnection``, and asyncpg) is not hooked: such a target reaches no point.
    False when psycopg is not installed (it is never imported where it is missing)."""
    try:
        import psycopg
    except ImportError:
        return False
    _pg_idle[:] = [psycopg.pq.TransactionStatus.IDLE]
    for name in ("execute", "executemany", "stream", "copy"):
        _pg_wrap(psycopg.Cursor, name)
    _pg_wrap(psycopg.ServerCursor, "execute")  # its own DECLARE, not Cursor.execute
    return True


def install(pipe: Any, *, psycopg: bool = False) -> None:
    """In a worker, before the factory runs: route every new ``sqlite3`` connection through
    points, and with ``psycopg`` (schedule-mode workers) every psycopg 3 statement too, if
    psycopg is installed. Stress-mode workers leave psycopg alone: the race gate holds
    SQLite racers only (PROTOCOL.md#postgres-targets)."""
    _state["pipe"] = pipe
    sqlite3.connect = _connect
    if psycopg:
        _install_psycopg()


def connections() -> int:
    """How many connections of the target reach schedule points in this worker: opened
    through Python's sqlite3, or psycopg connections that ran a statement."""
    return int(_state["connections"])


def no_points_finding(backend: str) -> str:
    """The report's one line for a schedule-mode run whose target reached no point."""
    if backend == "postgres":
        return ("schedule mode needs the target to run its SQL through psycopg 3's sync API "
                "(no schedule points were reached: an async driver such as psycopg's "
                "AsyncConnection or asyncpg?); fell back to stress mode")
    return ("schedule mode needs the target to use Python's sqlite3 (no schedule points were "
            "reached: apsw or a bundled SQLite?); fell back to stress mode")


def begin(op_index: int | None) -> None:
    """Points block only while a scheduled op runs (``None``: free-running)."""
    _state["op"] = op_index


def on_statement(hook: Callable[[], None] | None) -> None:
    """Call ``hook`` before every SQL statement this worker runs from now on (None: stop)."""
    _state["hook"] = hook


# ---------------------------------------------------------------------------- choosers
#: statements one worker may run in a row while another waits inside a transaction
SPIN = 16


@dataclass
class Chooser:
    """Decides which waiting worker goes next; records every decision it takes.

    ``explicit`` decisions come first (round-local worker positions); then PCT with
    ``seed``/``depth`` if given, else the lowest waiting position runs on. A worker
    retrying after SQLITE_BUSY goes only when nobody else can, and then retriers take
    turns, so the lock holder always gets to commit (no livelock). While another worker is
    blocked inside SQLite, the waiting workers in a transaction (``prefer``) go first: a
    store's busy timeout must not run out because ferry kept the lock holder paused. And
    a worker that has run ``SPIN`` statements in a row while another waits inside a
    transaction (``holding``) yields to it: a claimer spinning past a row the other holds
    (``SKIP LOCKED``, never blocked, so never seen as blocked) would otherwise starve the
    holder until the store gave up (measured on Postgres: rounds of 5–26 s ending in a
    lock-timeout ``StoreError``).
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
             prefer: set[int] | frozenset[int] = frozenset(),
             holding: set[int] | frozenset[int] = frozenset()) -> int:
        step = len(self.taken)
        fresh = [w for w in waiting if w not in retrying]
        fresh = [w for w in fresh if w in prefer] or fresh
        spinner = self.taken[-1] if step >= SPIN and len(set(self.taken[-SPIN:])) == 1 else None
        starved = sorted(w for w in waiting if w in holding and w != spinner)
        if step < len(self.explicit) and self.explicit[step] in waiting:
            choice = self.explicit[step]
        elif spinner is not None and spinner not in holding and starved:
            choice = starved[0]
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
    at_deadline: bool = False  # ended by ``until`` (the run's time limit), not by a stall


def run_round(conns: list[Any], op_indices: list[int], chooser: Chooser, *,
              quiescence_s: float = 0.05, stall_s: float = 10.0,
              until: float | None = None) -> RoundResult:
    """Drive one scheduled race. ``conns[i]`` already received its call and will report
    points or completion; every wait is bounded, a stall ends the round (never a hang):
    ``stall_s`` without a message from any worker, or ``until`` (``time.monotonic()``,
    the run's deadline) however much the workers still report."""
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

    def next_deadline() -> float:
        d = time.monotonic() + stall_s
        return d if until is None else min(d, until)

    deadline = next_deadline()
    while len(replies) + len(died) < k:
        if time.monotonic() > deadline:
            stalled = [i for i in range(k) if i not in replies and i not in died]
            cut = until is not None and time.monotonic() >= until
            return RoundResult(replies=replies, trace=trace, stalled=stalled,
                               note=("the run's time limit came mid-round; round ended as info"
                                     if cut else
                                     f"schedule stalled for {stall_s:.1f}s; round ended as info"),
                               hung=[i for i in stalled if i not in waiting], died=died,
                               at_deadline=cut)
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
            deadline = next_deadline()
        if ready:
            continue
        # quiescent: whoever is still "running" is blocked inside SQLite
        blocked |= running
        if waiting:
            # someone is stuck inside SQLite (on a lock, most likely): a transaction holder
            # runs on until it commits, so a short busy timeout is not spent on our pause
            choice = chooser.pick(sorted(waiting), retrying, in_tx if blocked else frozenset(),
                                  holding=in_tx)
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
