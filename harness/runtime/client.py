"""Clients: a pool of persistent worker processes, each driving its own store instance.

Each worker calls the target factory itself (``factory(path, clock=shared_clock)``), so
every store has its own connection to the one WAL file, as in production. The pool is
started once per campaign (fork costs milliseconds, spawn hundreds): per example the
workers only re-open the store on a fresh database file.

Commands go over pipes as the typed messages of :mod:`ferry_harness.runtime.wire`; each
process dispatches on the message's type. A *race round* sends one
call to each of k workers, waits until all k stand at a shared barrier, then releases
them together; in stress mode the race gate (:mod:`ferry_harness.runtime.gate`) then holds
each at its first SQL statement until all are there, and each round's ``last_spans`` say
whether the calls overlapped. A worker that dies or overruns its timeout is killed and replaced by a
fresh one with a new id; its operation is recorded as ``info`` (indeterminate).
"""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import multiprocess as mp

from ferry_harness.check.annotations import CutShort, Died, Hung, Statements, mark
from ferry_harness.check.history import INFO, History, Op
from ferry_harness.check.ops import CallArgs
from ferry_harness.errors import HarnessError
from ferry_harness.runtime import backend, pgconns, schedule
from ferry_harness.runtime import gate as gate_mod
from ferry_harness.runtime.calls import capabilities, execute
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.process import die_with_parent
from ferry_harness.runtime.target import load_factory
from ferry_harness.runtime.wire import (
    AtBarrier,
    CallOp,
    CheckIntegrity,
    CloseStore,
    DropSnapshot,
    HoldSnapshot,
    IntegrityResult,
    OpDone,
    OpenStore,
    SnapshotDropped,
    SnapshotHeld,
    Stop,
    StoreClosed,
    StoreOpened,
    StoreOpenFailed,
    receive,
    send,
)

_CTX = mp.get_context("fork")
# Liveness: an op still running after 20 × the slowest recent op, at least LIVENESS_FLOOR_S
# and at most LIVENESS_CAP_S (unless --op-timeout fixes it), is a hang.
LIVENESS_FLOOR_S = 3.0
LIVENESS_CAP_S = 10.0


def _worker_main(conn: Any, target: str, clock: SharedClock, gate_fd: int, parent: int,
                 scheduled: bool = False, board: gate_mod.Board | None = None) -> None:
    """A store worker's loop: one message in, its answer out (see ferry_harness.runtime.wire)."""
    die_with_parent()
    if os.getppid() != parent:  # the controller died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    # before the target opens any connection: schedule points, and the race gate's hook;
    # libpq connections named after this process (the nemesis' Postgres aims find them)
    schedule.install(conn, psycopg=scheduled)
    backend.name_worker_connections()
    factory = load_factory(target)
    # a Postgres target: its psycopg connections report their own transaction state
    track_pg = backend.backend_of(factory) == backend.POSTGRES and pgconns.install()
    store = None
    while True:
        try:
            msg = receive(conn)
        except (EOFError, OSError):
            break
        match msg:
            case CallOp():
                done = _call(store, msg, conn, clock, gate_fd, board)
                if track_pg:
                    in_tx, pids = pgconns.report()
                    done = replace(done, pg_in_tx=in_tx, pg_pids=pids)
                send(conn, done)
            case OpenStore():
                if store is not None:
                    _close(store)
                    store = None
                try:
                    store = factory(msg.path, clock=clock)
                    caps = set(capabilities(store))
                    if scheduled and schedule.connections():
                        caps.add("schedule-points")
                    send(conn, StoreOpened(
                        capabilities=tuple(sorted(caps)),
                        skips=dict(getattr(store, "ferry_skips", None) or {}),
                        pg_pids=pgconns.report(force=True)[1] if track_pg else None))
                except Exception as exc:
                    send(conn, StoreOpenFailed(error=f"{type(exc).__name__}: {exc}"))
            case CloseStore():
                if store is not None:
                    _close(store)
                    store = None
                send(conn, StoreClosed())
            case Stop():
                break
    if store is not None:
        _close(store)


def _call(store: Any, msg: CallOp, conn: Any, clock: SharedClock, gate_fd: int,
          board: gate_mod.Board | None = None) -> OpDone:
    """Run one operation (after the barrier, if the call has one; held at its first SQL
    statement by the race gate, if armed) and classify it."""
    if msg.barrier:
        send(conn, AtBarrier(op_index=msg.op_index))
        if not _pass_gate(gate_fd, msg.barrier_timeout_s):
            return OpDone(op_index=msg.op_index, type=INFO, value=None, error="BarrierTimeout",
                          message="barrier never opened", invoke_ns=0, complete_ns=0,
                          now_ms=clock())
    now = clock()
    t0 = time.monotonic_ns()
    schedule.begin(msg.op_index if msg.scheduled else None)
    if msg.race:
        gate_mod.arm(board, msg.gate_round, msg.gate_slot, msg.gate_slots)
    try:
        typ, value, error, message = execute(store, msg.op, msg.args, msg.agent)
    except schedule.ScheduleAbort as exc:
        typ, value, error, message = INFO, None, None, str(exc)
    except Exception as exc:  # not a typed refusal: indeterminate, and a finding
        typ, value, error, message = INFO, None, type(exc).__name__, str(exc)
    finally:
        schedule.begin(None)
        sql_start, gated = gate_mod.disarm()
    t1 = time.monotonic_ns()
    return OpDone(op_index=msg.op_index, type=typ, value=value, error=error, message=message,
                  invoke_ns=t0, complete_ns=t1, now_ms=now, sql_start_ns=sql_start,
                  gated=gated)


def _pass_gate(gate_fd: int, timeout: float) -> bool:
    """Wait for one byte on the shared gate pipe (the barrier).

    All racers block in ``select`` on the same pipe and the controller writes one byte per
    racer at once, so they wake together. Unlike a shared Event or Barrier, a pipe holds no
    lock a SIGKILLed waiter could leave taken.
    """
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([gate_fd], [], [], left)
        if ready:
            try:
                if os.read(gate_fd, 1):
                    return True
            except BlockingIOError:
                continue  # another racer took that byte


def _reader_main(conn: Any, parent: int) -> None:
    """A process that only holds an SQLite read transaction open (a 'long reader').

    It never loads the target, so two SQLite libraries never share a process.
    """
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    db = None
    while True:
        try:
            msg = receive(conn)
        except (EOFError, OSError):
            break
        match msg:
            case HoldSnapshot():
                db = sqlite3.connect(msg.path, isolation_level=None)
                db.execute("BEGIN")
                db.execute("SELECT count(*) FROM sqlite_master").fetchall()
                send(conn, SnapshotHeld())
            case DropSnapshot():
                if db is not None:
                    db.execute("COMMIT")
                    db.close()
                    db = None
                send(conn, SnapshotDropped())
            case CheckIntegrity():
                send(conn, IntegrityResult(result=_integrity_check(msg.path)))
            case Stop():
                break


def _integrity_check(path: str) -> str:
    """``PRAGMA integrity_check`` on a read-only connection of its own: "ok" or the problems."""
    try:
        db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True,
                             isolation_level=None)
    except sqlite3.Error as exc:
        return f"cannot open: {exc}"
    try:
        return "; ".join(str(r[0]) for r in db.execute("PRAGMA integrity_check").fetchall())
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        db.close()


def _close(store: Any) -> None:
    try:
        store.close()
    except Exception:
        pass


def _record(op: Op, reply: OpDone) -> None:
    """Fill ``op`` with a worker's answer; the worker's own clock readings win over the
    controller's, except where the op never ran (a barrier that never opened)."""
    op.type, op.value, op.error, op.message = reply.type, reply.value, reply.error, reply.message
    op.invoke_ns = reply.invoke_ns or op.invoke_ns
    op.complete_ns = reply.complete_ns or time.monotonic_ns()
    op.now = reply.now_ms


def _meanwhile_then_record(meanwhile: Callable[[], object] | None, ops: list[Op],
                           history: History) -> BaseException | None:
    """Run ``meanwhile`` while the workers run ``ops``' calls, then append ``ops`` to the
    history; what ``meanwhile`` raised is returned, to raise once every answer is in (no
    reply left unread for the next round to take as its own)."""
    failed: BaseException | None = None
    if meanwhile is not None:
        try:
            meanwhile()
        except BaseException as exc:
            failed = exc
    for op in ops:
        history.append(op)
    return failed


@dataclass
class Worker:
    id: int
    proc: Any
    conn: Any
    paused: bool = False
    doomed: bool = False  # a fault is killing it: its death is injected, not a finding
    # a Postgres target (ferry_harness.runtime.pgconns): its psycopg connections' server
    # pids, and whether one was inside a transaction after its last call
    pg_pids: tuple[int, ...] = ()
    pg_in_tx: bool = False


@dataclass(frozen=True, kw_only=True)
class PlannedCall:
    """One operation of a round: which pool slot runs it, as which agent."""

    slot: int  #: index of the worker (pool slot) that runs it
    op: str  #: protocol operation name (ferry_harness.check.ops.PROTOCOL)
    args: CallArgs  #: the operation's arguments, plain JSON-ready data
    agent: str  #: the agent id the call is made as


class WorkerPool:
    """Persistent workers for one campaign. Use as a context manager: nothing outlives it."""

    def __init__(self, target: str, clock: SharedClock, size: int = 4, *,
                 op_timeout_s: float | None = None, scheduled: bool = False,
                 gate: bool | None = None) -> None:
        if size < 2:
            raise HarnessError("a race needs at least 2 workers (--workers >= 2)")
        load_factory(target)  # fail fast, in the controller, with a clear message
        self.target = target
        self.clock = clock
        self.size = size
        # None: adaptive (LIVENESS_FLOOR_S .. LIVENESS_CAP_S from observed latency)
        self.fixed_timeout_s = op_timeout_s
        self.latencies: list[float] = []  # seconds of recent completed ops (a ring)
        self.deadline: float | None = None  # time.monotonic(): no wait goes past it
        self.scheduled = scheduled
        self._reader_lock = threading.Lock()
        self._reader_held = False
        # the race barrier: a pipe whose read end every worker inherits (see _pass_gate)
        self._gate_r, self._gate_w = os.pipe()
        os.set_blocking(self._gate_r, False)
        # the race gate at the first SQL statement (ferry_harness.runtime.gate): its board
        self.gate = gate_mod.ENABLED if gate is None else gate
        self._board = gate_mod.Board(size)
        #: the last round's racers' spans (None: it never ran) and whether the gate held
        #: every one of them and released them together
        self.last_spans: list[gate_mod.RacerSpan | None] = []
        self.last_gated = False
        # the target's racers reach the gate (its last race round was gated): the gate alone
        # lines them up, so its rounds skip the barrier's extra round trip (see run)
        self._gate_proven = False
        self._spans: dict[int, gate_mod.RacerSpan] = {}
        self.slots: list[Worker] = []
        self.next_id = 0
        self.replaced = 0
        # a Postgres target's workers' psycopg connections changed (opened, replaced)
        # since the controller last asked the server (ferry_harness.runtime.pgconns)
        self.pg_changed = False
        self.path: str | None = None
        self.capabilities: frozenset[str] = frozenset()
        self.skips: dict[str, str] = {}  # invariants the target declares it cannot be checked on
        self._reader: Worker | None = None

    # ---------------------------------------------------------------- time limits
    @property
    def op_timeout_s(self) -> float:
        """How long an op may run before it is a liveness finding: ``--op-timeout`` if set,
        else 20 × the slowest of the recent ops, between LIVENESS_FLOOR_S and LIVENESS_CAP_S."""
        if self.fixed_timeout_s is not None:
            return self.fixed_timeout_s
        slowest = max(self.latencies, default=0.0)
        return min(LIVENESS_CAP_S, max(LIVENESS_FLOOR_S, 20 * slowest))

    def _wait_limit(self) -> tuple[float, bool]:
        """(seconds to wait for an op, whether the budget's deadline is what limits it)."""
        limit = self.op_timeout_s
        if self.deadline is not None:
            left = max(0.2, self.deadline - time.monotonic())
            if left < limit:
                return left, True
        return limit, False

    def _observe(self, op: Op) -> None:
        if op.complete_ns and op.type != INFO:
            self.latencies.append((op.complete_ns - op.invoke_ns) / 1e9)
            if len(self.latencies) > 200:
                del self.latencies[:100]

    def paused_workers(self) -> list[int]:
        return [w.id for w in self.slots if w.paused]

    def pg_reported(self) -> tuple[set[int], bool]:
        """A Postgres target (ferry_harness.runtime.pgconns): the server pids of the workers'
        open psycopg connections, and whether one was inside a transaction after its
        worker's last call."""
        return ({p for w in self.slots for p in w.pg_pids},
                any(w.pg_in_tx for w in self.slots))

    def _mark_hung(self, op: Op, waited: float, by_deadline: bool) -> None:
        """An op that did not return: a liveness finding, unless the budget cut it short or
        a SIGSTOPped worker may hold the lock it waits for (then it is only ``info``)."""
        paused = self.paused_workers()
        if by_deadline:
            op.note = f"stopped at the campaign's budget after {waited:.1f}s; worker killed"
            mark(op, CutShort(why="budget"))
        elif paused:
            mark(op, CutShort(why="frozen worker"))
            op.note = (f"no answer within {waited:.1f}s while worker(s) {paused} were frozen "
                       "(SIGSTOP) and may hold the lock; worker killed")
        else:
            op.note = f"no answer within {waited:.1f}s; worker killed"
            mark(op, Hung(seconds=round(waited, 3)))

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> WorkerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        for _ in range(self.size):
            self.slots.append(self._spawn())

    def _spawn(self) -> Worker:
        parent_end, child_end = _CTX.Pipe()
        proc = _CTX.Process(target=_worker_main, daemon=True, name=f"ferry-worker-{self.next_id}",
                            args=(child_end, self.target, self.clock, self._gate_r, os.getpid(),
                                  self.scheduled, self._board))
        proc.start()
        child_end.close()
        worker = Worker(self.next_id, proc, parent_end)
        self.next_id += 1
        return worker

    def close(self) -> None:
        """Stop every worker; SIGKILL what does not stop within a second. Idempotent."""
        procs = [w for w in self.slots] + ([self._reader] if self._reader else [])
        for w in procs:
            if w.paused:
                self._signal(w, signal.SIGCONT)
            try:
                send(w.conn, Stop())
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 1.0
        for w in procs:
            w.proc.join(max(0.0, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5)
            w.conn.close()
        self.slots = []
        self._reader = None
        for fd in (self._gate_r, self._gate_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._gate_r = self._gate_w = -1

    def _drain_gate(self) -> None:
        """Drop bytes left by racers that died before passing the last gate."""
        while True:
            try:
                if not os.read(self._gate_r, 4096):
                    return
            except BlockingIOError:
                return

    def slot_of(self, worker_id: int) -> int:
        """The slot a worker id runs in (0 if it was retired since)."""
        return next((i for i, w in enumerate(self.slots) if w.id == worker_id), 0)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.slots]

    # ---------------------------------------------------------------- store lifecycle
    def open(self, path: str, *, together: bool = False,
             first_opened: Callable[[str], object] | None = None) -> None:
        """Every worker (re)opens its store on ``path``: slot 0 first (its factory makes
        the schema), then the others all at once — or, ``together`` (a Postgres backend,
        whose targets create their tables under a lock of their own), every slot at once;
        one whose factory raised then (a store that writes as it opens, busy without a
        timeout) opens again alone. A factory that raises alone is fatal.
        ``first_opened(path)`` runs once slot 0 opened alone, before the others open."""
        self.path = path
        if not together:
            self._open_slot(0)
            if first_opened is not None:
                first_opened(path)
        rest = self.slots if together else self.slots[1:]
        for w in rest:
            send(w.conn, OpenStore(path=path))
        first = 0 if together else 1
        again = [slot for slot, w in enumerate(rest, first)
                 if not self._opened(w, tolerate=True)]
        for slot in again:
            self._open_slot(slot)

    def close_stores(self) -> bool:
        """Every worker closes its store (the next example reuses the database: the
        target's ``ferry_reset`` empties it first). False if one did not say it closed
        in time (its store may still be open: then nothing is reused)."""
        live = []
        for w in self.slots:
            try:
                send(w.conn, CloseStore())
                live.append(w)
            except (OSError, ValueError):
                return False
        return all(isinstance(self._recv(w, self.op_timeout_s), StoreClosed) for w in live)

    def _open_slot(self, slot: int) -> None:
        w = self.slots[slot]
        send(w.conn, OpenStore(path=self.path))
        self._opened(w)

    def _opened(self, w: Worker, *, tolerate: bool = False) -> bool:
        """Take ``w``'s answer to OpenStore; False if its factory raised and ``tolerate``."""
        reply = self._recv(w, self.op_timeout_s)
        if isinstance(reply, StoreOpenFailed) and tolerate:
            return False
        if isinstance(reply, StoreOpenFailed):
            raise HarnessError(
                f"the target factory {self.target} raised in a worker: {reply.error}")
        if not isinstance(reply, StoreOpened):
            raise HarnessError(f"worker {w.id} did not open the store within {self.op_timeout_s}s")
        self.capabilities = frozenset(reply.capabilities)
        self.skips = dict(reply.skips)
        w.pg_pids, w.pg_in_tx = reply.pg_pids or (), False
        self.pg_changed = True
        return True

    def replace(self, slot: int) -> Worker:
        """Kill the worker in ``slot`` (if alive) and start a fresh one with a new id."""
        old = self.slots[slot]
        if old.proc.is_alive():
            old.proc.kill()
        old.proc.join(5)
        old.conn.close()
        self.slots[slot] = self._spawn()
        self.replaced += 1
        self.pg_changed = True
        if self.path is not None:
            self._open_slot(slot)
        return self.slots[slot]

    def _signal(self, w: Worker, sig: int) -> None:
        try:
            os.kill(w.proc.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self, slot: int) -> None:
        """SIGSTOP a worker (a zombie holder: alive, frozen, still holding its token)."""
        self._signal(self.slots[slot], signal.SIGSTOP)
        self.slots[slot].paused = True

    def resume(self, slot: int) -> None:
        self._signal(self.slots[slot], signal.SIGCONT)
        self.slots[slot].paused = False

    # ---------------------------------------------------------------- long reader
    def _ensure_reader(self) -> Worker:
        if self._reader is None:
            parent_end, child_end = _CTX.Pipe()
            proc = _CTX.Process(target=_reader_main, args=(child_end, os.getpid()), daemon=True,
                                name="ferry-reader")
            proc.start()
            child_end.close()
            self._reader = Worker(-1, proc, parent_end)
        return self._reader

    def hold_reader(self) -> None:
        """Open a read transaction on the database from a separate process."""
        self._ensure_reader()
        send(self._reader.conn, HoldSnapshot(path=self.path))
        if self._recv(self._reader, self.op_timeout_s) is None:
            raise HarnessError("the long-reader process did not answer")
        with self._reader_lock:
            self._reader_held = True

    def drop_reader(self) -> None:
        with self._reader_lock:
            if self._reader is None or not self._reader_held:
                return
            self._reader_held = False
            send(self._reader.conn, DropSnapshot())
            self._recv(self._reader, self.op_timeout_s)

    def run_with_reader(self, call: PlannedCall, history: History, hold_s: float,
                        **kw: Any) -> Op:
        """Run ``call`` while another process holds a read snapshot, for at most ``hold_s``:
        then the reader lets go, so a checkpoint that waits for readers (RESTART, TRUNCATE
        with the busy handler) stalls the other workers for a bounded, measured time."""
        self.hold_reader()
        timer = threading.Timer(hold_s, self.drop_reader)
        timer.start()
        try:
            return self.run([call], history, barrier=False, **kw)[0]
        finally:
            timer.cancel()
            timer.join()
            self.drop_reader()

    def integrity(self) -> str:
        """``PRAGMA integrity_check`` of the database, run in the reader process (which never
        loads the target): "ok", or SQLite's list of problems."""
        reader = self._ensure_reader()
        send(reader.conn, CheckIntegrity(path=self.path))
        reply = self._recv(reader, self.op_timeout_s)
        if not isinstance(reply, IntegrityResult):
            raise HarnessError("the reader process did not answer the integrity check")
        return reply.result

    # ---------------------------------------------------------------- running operations
    def _recv(self, w: Worker, timeout: float) -> Any:
        """The worker's next message (a ferry_harness.runtime.wire type), or None if it sent none
        within ``timeout`` seconds or died."""
        if w.conn.poll(timeout):
            try:
                return receive(w.conn)
            except (EOFError, OSError):
                return None
        return None

    def run(self, calls: list[PlannedCall], history: History, *, barrier: bool | None = None,
            round_id: int | None = None, example: int | None = None,
            chooser: schedule.Chooser | None = None,
            meanwhile: Callable[[], object] | None = None) -> list[Op]:
        """Run calls (one per distinct slot) and append their ops to ``history``.

        With a barrier (the default for more than one call) all workers start together;
        then (unless the pool was made with ``gate=False``) the race gate holds each racer at
        its first SQL statement and releases them together (ferry_harness.runtime.gate).
        With a ``chooser`` (schedule mode) they instead run one statement at a time in the
        order it decides; each op's ``Statements`` fact lists its statements as
        ``[seq, sql, switch]`` in the order they ran. ``last_spans`` and ``last_gated``
        say afterwards how the round's calls lay in time.

        ``meanwhile`` runs in the controller while the workers run the calls (the executor
        checks the previous step there), before the round's ops enter ``history``: it sees
        a history with no op in flight.
        """
        controlled = chooser is not None and len(calls) > 1
        if len({c.slot for c in calls}) != len(calls):
            raise ValueError("one call per worker slot in a round")
        barrier = len(calls) > 1 if barrier is None else barrier
        race = barrier and len(calls) > 1
        rnd = self._board.next_round() if self.gate and race and not controlled else 0
        racing = tuple(c.slot for c in calls) if rnd else ()
        # a target proven to reach the gate needs no barrier before it: the racers' first
        # statements meet at the gate however late each worker woke (up to SPIN_S)
        barrier = barrier and not (rnd and self._gate_proven)
        self._drain_gate()
        self.last_spans, self.last_gated = [], False
        pending: dict[int, tuple[PlannedCall, Op]] = {}
        created: list[Op] = []
        first = history.next_index()
        for call in calls:
            w = self.slots[call.slot]
            op = Op(index=first + len(created), process=w.id, agent=call.agent, op=call.op,
                    args=dict(call.args), invoke_ns=time.monotonic_ns(), now=self.clock(),
                    round=round_id, example=example)
            created.append(op)
            try:
                send(w.conn, CallOp(op_index=op.index, op=call.op, args=call.args,
                                    agent=call.agent, barrier=barrier,
                                    barrier_timeout_s=self.op_timeout_s, scheduled=controlled,
                                    race=race, gate_round=rnd, gate_slot=call.slot,
                                    gate_slots=racing))
            except (OSError, ValueError):
                op.note = "worker was dead before the call"
                self._board.gone(call.slot, rnd)
                continue
            pending[call.slot] = (call, op)
        if barrier:
            for slot, (_call, op) in list(pending.items()):
                reply = self._recv(self.slots[slot], self.op_timeout_s)
                if not isinstance(reply, AtBarrier):
                    op.note = "worker died before the barrier"
                    self._board.gone(slot, rnd)
                    op.complete_ns = time.monotonic_ns()
                    del pending[slot]
                    self.replace(slot)
            os.write(self._gate_w, b"g" * len(pending))  # open the gate for all at once
        failed = _meanwhile_then_record(meanwhile, created, history)
        if controlled and pending:
            self._scheduled_round(pending, chooser)
        else:
            self._collect(pending, rnd)
        if failed is not None:
            raise failed
        self.last_spans = [self._spans.pop(op.index, None) for op in created]
        self._spans.clear()
        if rnd:
            self._gate_proven = self.last_gated
        return created

    def run_sequence(self, calls: list[PlannedCall], history: History, *,
                     first_round: int | None = None, example: int | None = None,
                     meanwhile: Callable[[], object] | None = None) -> list[Op]:
        """Run calls on one worker, one after another, as ``run`` would one at a time, but
        sent together: the worker reads the next call as soon as it answered the last, so
        the sequence costs one wake-up of each process instead of one per call. Each op
        keeps the worker's own clock readings (so they do not overlap) and gets its own
        round (``first_round``, +1, ...). If the worker dies, the calls it never started
        are recorded as such and not run."""
        if len({c.slot for c in calls}) > 1:
            raise ValueError("a sequence runs on one worker slot")
        if not calls:
            return []
        slot = calls[0].slot
        w = self.slots[slot]
        self._drain_gate()
        first = history.next_index()
        ops, sent = [], []
        for i, call in enumerate(calls):
            op = Op(index=first + i, process=w.id, agent=call.agent, op=call.op,
                    args=dict(call.args), invoke_ns=time.monotonic_ns(), now=self.clock(),
                    round=None if first_round is None else first_round + i, example=example)
            ops.append(op)
            try:
                send(w.conn, CallOp(op_index=op.index, op=call.op, args=call.args,
                                    agent=call.agent, barrier=False,
                                    barrier_timeout_s=self.op_timeout_s, scheduled=False))
                sent.append(op)
            except (OSError, ValueError):
                op.note = "worker was dead before the call"
                op.complete_ns = time.monotonic_ns()
                break
        failed = _meanwhile_then_record(meanwhile, ops, history)
        for call, op in zip(calls, sent, strict=False):  # sent: a prefix of calls
            if self.slots[slot] is not w:  # it died or hung on an earlier call: never ran
                op.note = "worker was replaced before the call (an earlier call killed it)"
                op.complete_ns = time.monotonic_ns()
                continue
            self._collect({slot: (call, op)}, 0)
        self.last_spans, self.last_gated = [], False
        self._spans.clear()
        if failed is not None:
            raise failed
        return ops

    def _collect(self, pending: dict[int, tuple[PlannedCall, Op]], rnd: int) -> None:
        """Wait for the running calls' answers (``rnd``: their race gate round, or 0)."""
        limit, by_deadline = self._wait_limit()
        deadline = time.monotonic() + limit
        by_conn = {self.slots[s].conn: s for s in pending}
        gated = bool(rnd and pending)
        while by_conn:
            ready = wait(list(by_conn), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            for conn in ready:
                slot = by_conn.pop(conn)
                _call, op = pending.pop(slot)
                if rnd:
                    self._board.gone(slot, rnd)  # if it never arrived, nobody waits for it
                try:
                    reply = receive(conn)
                except (EOFError, OSError):
                    reply = None
                gated = gated and isinstance(reply, OpDone) and reply.gated
                if not isinstance(reply, OpDone):
                    w = self.slots[slot]
                    w.proc.join(0.5)
                    if w.doomed:
                        op.note = "worker died: killed by an injected fault during the operation"
                        mark(op, CutShort(why="fault"))
                    else:
                        op.note = f"worker died during the operation (exit code {w.proc.exitcode})"
                        mark(op, Died(exitcode=w.proc.exitcode))
                    op.complete_ns = time.monotonic_ns()
                    self.replace(slot)
                    continue
                self._take(op, reply)
        for slot, (_call, op) in pending.items():  # overran the timeout: kill, replace
            self._mark_hung(op, limit, by_deadline)
            op.complete_ns = time.monotonic_ns()
            self.replace(slot)
        self.last_gated = gated and not pending

    def _take(self, op: Op, reply: OpDone) -> None:
        """Fill ``op`` with a worker's answer, and keep its call's span for ``last_spans``."""
        _record(op, reply)
        self._observe(op)
        w = next((w for w in self.slots if w.id == op.process), None)
        if w is not None:
            w.pg_in_tx = reply.pg_in_tx
            if reply.pg_pids is not None:
                w.pg_pids, self.pg_changed = reply.pg_pids, True
        if reply.invoke_ns and reply.complete_ns:
            self._spans[op.index] = gate_mod.RacerSpan(
                start_ns=reply.sql_start_ns or reply.invoke_ns, end_ns=reply.complete_ns)

    def run_and_kill(self, call: PlannedCall, history: History, delay_s: float, *,
                     round_id: int | None = None, example: int | None = None) -> Op:
        """Start ``call`` and SIGKILL its worker after ``delay_s`` (maybe mid-transaction).

        The op is ``ok``/``fail`` if it finished first, else ``info``; the worker is replaced.
        """
        w = self.slots[call.slot]
        op = Op(index=history.next_index(), process=w.id, agent=call.agent, op=call.op,
                args=dict(call.args), invoke_ns=time.monotonic_ns(), now=self.clock(),
                round=round_id, example=example)
        history.append(op)
        send(w.conn, CallOp(op_index=op.index, op=call.op, args=call.args, agent=call.agent,
                            barrier=False, barrier_timeout_s=self.op_timeout_s, scheduled=False))
        time.sleep(delay_s)
        w.proc.kill()
        w.proc.join(5)
        reply = self._recv(w, 0.05)
        if isinstance(reply, OpDone):
            _record(op, reply)
        else:
            op.note = f"worker killed (SIGKILL) {delay_s * 1000:.2f} ms into the operation"
            mark(op, CutShort(why="fault"))
            op.complete_ns = time.monotonic_ns()
        self.replace(call.slot)
        return op

    def _scheduled_round(self, pending: dict[int, tuple[PlannedCall, Op]],
                         chooser: schedule.Chooser) -> None:
        slots = sorted(pending)
        ops = [pending[s][1] for s in slots]
        limit, by_deadline = self._wait_limit()
        res = schedule.run_round([self.slots[s].conn for s in slots], [o.index for o in ops],
                                 chooser, stall_s=limit, until=self.deadline)
        ran: dict[int, list[list[Any]]] = {}
        for seq, (pos, _idx, sql, switch) in enumerate(res.trace):
            ran.setdefault(pos, []).append([seq, sql, switch])
        for pos, statements in ran.items():
            mark(ops[pos], Statements(ran=statements))
        for pos, op in enumerate(ops):
            reply = res.replies.get(pos)
            if reply is not None:
                self._take(op, reply)
                continue
            op.complete_ns = time.monotonic_ns()
            op.note = res.note or "worker died during a scheduled round"
            if pos in res.died:
                if not self.slots[slots[pos]].doomed:
                    mark(op, Died(exitcode=self.slots[slots[pos]].proc.exitcode))
                self.replace(slots[pos])
            elif pos in res.hung:  # running inside the store, not parked at a point
                self._mark_hung(op, limit, by_deadline or res.at_deadline)
        if res.stalled:
            schedule.abort([self.slots[slots[p]].conn for p in res.stalled])
            for p in res.stalled:  # whatever they were doing, start them afresh
                self.replace(slots[p])

    def wal_mark(self) -> str:
        """The WAL's change mark of the pool's database (:func:`ferry_harness.runtime.backend.wal_mark`)."""
        return backend.wal_mark(self.path)

    def wal_size(self) -> int:
        """Size of the ``-wal`` file in bytes (0 if absent): measured, never opened."""
        return backend.wal_size(self.path)
