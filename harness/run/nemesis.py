"""The nemesis: faults injected on purpose, each recorded in the history.

This module only *injects*: it kills, freezes and thaws workers, jumps the clock, and
draws when to fire (which call a kill lands in, its aim, its delay). What a fault step
does end to end — the victim, the probes, the zombie's calls, the checks after a fault —
is the fault runner's (:mod:`ferry_harness.run.faults`), and the checker judges.

How a kill lands: there are no schedule points to aim at, so half the kills (``aim:
random``) fire on a timer after a delay drawn over the *measured* course of the call
(pipe latency to the worker, then the store call itself: its guard, its statements, its
write transaction), and half (``aim: write-tx``) hunt for the write transaction: a helper
thread asks the kernel who holds SQLite's WAL write lock (``F_GETLK`` on the ``-shm``),
freezes the victim when it does and kills it there. Either way the victim is frozen
(SIGSTOP) at the kill instant and the lock looked up, so ``kill:in-write-tx`` counts
exactly the kills *inside a write transaction*. The killed op is ``info``; the pool
retires the worker id and starts a fresh worker in its slot. The delay (or aim) is
recorded in the step, so a replay fires the same way.

On a Postgres target (a kill given the backend's :class:`~ferry_harness.runtime.backend.PgWatch`)
the same aims read the server instead of the ``-shm``: every worker's connections carry
its pid in ``application_name``, so ``pg_stat_activity`` shows the victim's backends and
whether one holds a transaction id (``backend_xid``: it has written in its open
transaction); ``txid_status`` says when a transaction id committed. ``in_write_tx`` then
means: frozen while one of its backends held a transaction id with no statement of the
victim still running (or one waiting for a lock), so the kill rolls that transaction back.
A ``write-tx`` hunt that sees the victim's write under way kills it there even when the
freeze finds that write done: the server runs a statement to its end whatever the client
does, so a store whose every write is one autocommit statement (ferry_core's
PgLeaseStore) is never killed inside a transaction, only just after a write and before
its reply (a call cut short that took effect).
Each look is one query, ~0.1–0.3 ms, against the ~50 µs the -shm takes: a write
transaction shorter than that is often missed (``write-tx`` then falls back to a late
kill, or counts ``kill-missed`` when the call ends first, as on SQLite), while
``after-commit`` misses no commit (it lists every id assigned since it was armed) but
lands up to a look late: a store whose two transactions follow each other within ~0.3 ms
may be killed after both.

Helpers here (:class:`TimedKill`, :func:`wal_writer`, :func:`stop`) are shared with
``ferry-harness crash`` (:mod:`ferry_harness.tools.crash`).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import random
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterable

from ferry_harness.check.history import INFO, OK, Op
from ferry_harness.runtime.backend import PgWatch, worker_appname
from ferry_harness.runtime.client import Worker, WorkerPool
from ferry_harness.runtime.clock import SharedClock

FAULTS = ("kill", "pause", "clock")
WAL_WRITE_LOCK_BYTE = 120  # SQLite unix VFS: the WAL writer locks byte 120 of the -shm file
DEFAULT_WINDOW_NS = (200_000, 400_000)  # where a fulfill runs, before we measured one
# Half the kills hunt for the write transaction (polling F_GETLK), half fire at a
# random point of the operation: a timer alone rarely lands in a ~50 µs transaction.
AIMS = ("write-tx", "random")  # drawn; "after-commit" is the shrinker's (see TimedKill)
AFTER_COMMIT_WAIT_S = 1.0  # aim after-commit: the longest wait for the commits, s


# ------------------------------------------------------------------ process-level tools
WAL_INDEX_ICHANGE = 8  # byte offset in the ``-shm`` file of the wal-index header's iChange
_ICHANGE_MASK = 2 ** 32 - 1


def wal_changes(db_path: str | None) -> int | None:
    """The wal-index header's change counter (``iChange``: SQLite adds one at each commit
    and WAL restart), read from the ``-shm`` file without a lock; None where there is none.

    A commit is visible to the controller only here: the WAL file grows inside the
    transaction too, but the header is written once its commit frame is.
    """
    if not db_path:
        return None
    try:
        fd = os.open(db_path + "-shm", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.pread(fd, 4, WAL_INDEX_ICHANGE)
    finally:
        os.close(fd)
    return int.from_bytes(raw, sys.byteorder) if len(raw) == 4 else None


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def stop(pid: int, timeout_s: float = 0.2) -> bool:
    """SIGSTOP ``pid`` and wait until it really is stopped (signals are asynchronous)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while True:
        state = _proc_state(pid)
        if state in ("T", "t"):
            return True
        if state in (None, "Z", "X") or time.monotonic() > deadline:
            return False
        time.sleep(0.00002)


_FLOCK = "hhqqi4x"  # struct flock on Linux x86_64 / aarch64: type, whence, start, len, pid


def wal_writer(db_path: str | None) -> int | None:
    """The pid holding SQLite's WAL write lock on ``db_path``, or None.

    The unix VFS takes it with ``fcntl`` on byte 120 of the ``-shm`` file from ``BEGIN
    IMMEDIATE`` (or a write statement's start) to ``COMMIT``: holding it means being inside
    a write transaction. We ask the kernel with ``F_GETLK`` (a few µs; ``/proc/locks`` takes
    100 µs or more), from a descriptor of our own: it sets no lock, and as the controller
    never opens the database, closing it cannot drop a lock SQLite holds in this process.
    """
    if not db_path:
        return None
    try:
        fd = os.open(db_path + "-shm", os.O_RDWR)
    except OSError:
        return None
    try:
        req = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, WAL_WRITE_LOCK_BYTE, 1, 0)
        got = fcntl.fcntl(fd, fcntl.F_GETLK, req)
    except OSError:
        return None
    finally:
        os.close(fd)
    kind, _whence, _start, _len, pid = struct.unpack(_FLOCK, got)
    return None if kind == fcntl.F_UNLCK else pid


def holds_wal_write_lock(pid: int, db_path: str | None) -> bool:
    """Is ``pid`` inside a write transaction on ``db_path`` (see :func:`wal_writer`)?"""
    return wal_writer(db_path) == pid


PG_SETTLE_S = 0.02  # a frozen victim's last statement, still running on the server: the wait
# between two looks at the server: back to back, the watch and its server backend would
# keep two cores busy, and on a small machine the victim (and its backend) wait for them
PG_POLL_PAUSE_S = 0.0002


def pg_in_write_tx(watch: PgWatch, pid: int) -> bool:
    """Is the frozen worker ``pid`` inside a write transaction on the Postgres server? Its
    backend may still be running the statement sent just before the freeze (a COMMIT,
    maybe): wait up to ``PG_SETTLE_S`` for it to end (a statement blocked on a lock never
    does, and is no COMMIT), then: does one of its backends hold a transaction id?"""
    deadline = time.monotonic() + PG_SETTLE_S
    while True:
        seen = watch.backends(pid)
        busy = [b for b in seen if b.state == "active" and not b.waiting_on_lock]
        if not busy or time.monotonic() > deadline:
            return any(b.xid is not None for b in seen)
        time.sleep(0.0005)


def in_write_tx(pid: int, db_path: str | None, watch: PgWatch | None = None) -> bool:
    """Is the frozen worker ``pid`` inside a write transaction: SQLite's WAL write lock on
    ``db_path``, or with ``watch`` (a Postgres target) :func:`pg_in_write_tx`."""
    if watch is not None:
        return pg_in_write_tx(watch, pid)
    return holds_wal_write_lock(pid, db_path)


_PR_SET_TIMERSLACK = 29
_LOCAL = threading.local()


def _precise_timers() -> None:
    """Linux lets a sleep overshoot by the thread's timer slack (50 µs by default): set it
    to 1 ns for this thread, so a 300 µs delay fires within ~30 µs of its target."""
    if getattr(_LOCAL, "precise", False):
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except OSError:
        pass
    _LOCAL.precise = True


def wait_until(deadline_ns: int, cancel: threading.Event | None = None) -> bool:
    """Sleep until ``deadline_ns`` (monotonic) without holding the GIL (never spin: the
    main thread must be free to send the very call we are timing). False if cancelled."""
    _precise_timers()
    while True:
        if cancel is not None and cancel.is_set():
            return False
        left = deadline_ns - time.monotonic_ns() - 25_000  # ~ the wake-up latency
        if left <= 0:
            return True
        if cancel is not None:
            if cancel.wait(left / 1e9):
                return False
        else:
            time.sleep(left / 1e9)


class TimedKill:
    """SIGKILL the worker in ``slot`` ``delay_s`` after :meth:`start`, unless finished first.

    Runs on a helper thread while the main thread runs the round (``WorkerPool.run``), so
    the pool itself notices the death, records the op as ``info`` and replaces the worker on
    the main thread (workers die with the thread that forked them: never fork elsewhere).
    """

    def __init__(self, pool: WorkerPool, slot: int, delay_s: float, *,
                 aim: str = "random", hunt_s: float = 0.05, after_commits: int = 1,
                 pg: PgWatch | None = None) -> None:
        self.pool = pool
        self.pg = pg  # a Postgres target: the aims read the server (module docstring)
        self.slot = slot
        self.delay_s = delay_s
        self.aim = aim
        self.after_commits = after_commits
        self.hunt_s = hunt_s
        self.worker: Worker = pool.slots[slot]
        self.path = pool.path
        self.killed = False
        self.in_write_tx = False
        self._frozen = False
        self.at_ns = 0
        self._cancel = threading.Event()
        self._armed = threading.Event()
        self._deadline_ns = 0
        self._lock = threading.Lock()
        # after-commit on Postgres: the first transaction id that may be the victim's, read
        # here, before the call is sent (the helper thread may first run after its commit)
        self._xid_base = pg.next_xid() if pg is not None and aim == "after-commit" else 0
        # started now, armed later: a thread takes ~100 µs to start, which must not delay
        # the call we are timing
        self._thread = threading.Thread(target=self._fire, name="ferry-nemesis", daemon=True)
        self._thread.start()

    def arm(self, origin_ns: int | None = None) -> TimedKill:
        """Fire ``delay_s`` after ``origin_ns`` (default: now); call just before the round."""
        self._deadline_ns = (origin_ns or time.monotonic_ns()) + int(self.delay_s * 1e9)
        self._armed.set()
        return self

    def _fire(self) -> None:
        pid = self.worker.proc.pid
        if self.aim == "write-tx":
            # hunt from the start: woken only by arm(), the thread would start ~0.5 ms late
            # (the main thread holds the GIL while it sends the round), after short calls
            self._hunt(pid)
        elif self.aim == "after-commit":
            if not self._after_commits():
                return
        else:
            self._armed.wait()
            if not wait_until(self._deadline_ns, self._cancel):
                return
        with self._lock:
            if self._cancel.is_set() or self.pool.slots[self.slot] is not self.worker:
                if self._frozen:  # the round ended between the hunt's freeze and here
                    os.kill(pid, signal.SIGCONT)  # (its call had answered): no kill
                return
            if not self._frozen:  # (a successful hunt has it frozen already)
                self.at_ns = time.monotonic_ns()
                stopped = stop(pid)  # freeze, look at its locks, then kill: an exact snapshot
                self.in_write_tx = stopped and in_write_tx(pid, self.path, self.pg)
            try:
                self.worker.doomed = True
                os.kill(pid, signal.SIGKILL)
                self.killed = True
            except ProcessLookupError:
                pass

    def _after_commits(self) -> bool:
        """Aim ``after-commit``: wait until the victim's call has committed
        ``after_commits`` write transactions (the wal-index change counter moved and the
        WAL write lock is free again), then kill it there, between two transactions or
        after its last one. The landing does not depend on timing, so a replay lands in
        the same gap. False: the call finished first, or no commit came in time."""
        if self.pg is not None:
            return self._pg_after_commits()
        base = wal_changes(self.path)
        if base is None:
            return False
        seen, done, give_up = base, 0, None
        while not self._cancel.is_set():
            if give_up is None and self._armed.is_set():
                give_up = time.monotonic() + max(self.hunt_s, AFTER_COMMIT_WAIT_S)
            elif give_up is not None and time.monotonic() > give_up:
                return False
            now = wal_changes(self.path)
            if now is not None and now != seen and wal_writer(self.path) is None:
                done, seen = done + 1, now  # (a restart and its commit count once)
                if done >= self.after_commits:
                    return True
            time.sleep(0)
        return False

    def _pg_after_commits(self) -> bool:
        """Aim ``after-commit`` on Postgres: every transaction id the server assigns from
        the arming on is listed (``txid_status``), so none is missed however short; one
        seen held by another worker's backend is not the victim's. The victim's call runs
        alone (crash and the fault runner see to it), so the others are its own; a
        writer outside the run's workers (another database on a shared server) that
        commits unseen would be counted too. Fires once ``after_commits`` of them are
        committed."""
        assert self.pg is not None
        mine = worker_appname(self.worker.proc.pid)
        base = self._xid_base
        owner: dict[int, str] = {}
        give_up = None
        while not self._cancel.is_set():
            if give_up is None and self._armed.is_set():
                give_up = time.monotonic() + max(self.hunt_s, AFTER_COMMIT_WAIT_S)
            elif give_up is not None and time.monotonic() > give_up:
                return False
            done = 0
            for xid, status, holder in self.pg.xids_since(base):
                if holder is not None:
                    owner.setdefault(xid, holder)
                if status == "committed" and owner.get(xid, mine) == mine:
                    done += 1
            if done >= self.after_commits:
                return True
            time.sleep(PG_POLL_PAUSE_S)
        return False

    def _in_write(self, pid: int) -> bool:
        """One look, the victim running: does it hold the WAL write lock (SQLite) or does
        one of its backends hold a transaction id (Postgres)?"""
        if self.pg is not None:
            return any(b.xid is not None for b in self.pg.backends(pid))
        return holds_wal_write_lock(pid, self.path)

    def _hunt(self, pid: int) -> None:
        """Aimed kill: poll ``F_GETLK`` (Postgres: ``pg_stat_activity``, see the module
        docstring) until the victim holds the WAL write lock (a transaction id), freeze it,
        and if it still holds it, leave it frozen for the kill (``in_write_tx``); if it
        had just committed, SIGCONT and poll on (on Postgres: kill it there all the same,
        mid-call, just after its write). A timer alone rarely lands inside a ~50 µs
        transaction. Gives up when the op finished (cancelled) or after ``hunt_s``: then
        the kill is a random one."""
        give_up = None
        while not self._cancel.is_set():
            if give_up is None and self._armed.is_set():
                give_up = time.monotonic() + self.hunt_s
            elif give_up is not None and time.monotonic() > give_up:
                return
            if not self._in_write(pid):
                # let the main thread run (it may not have sent the call yet)
                time.sleep(0 if self.pg is None else PG_POLL_PAUSE_S)
                continue
            with self._lock:
                if self._cancel.is_set():
                    return
                self.at_ns = time.monotonic_ns()
                stopped = stop(pid)
                if stopped and in_write_tx(pid, self.path, self.pg):
                    self.in_write_tx = self._frozen = True
                    return
                if stopped and self.pg is not None:
                    # its write was under way: a one-statement (autocommit) write runs on
                    # the server to its end whatever the client does, so it is killed
                    # here, mid-call, its write done or not (in_write_tx False)
                    self._frozen = True
                    return
                os.kill(pid, signal.SIGCONT)

    def finish(self) -> bool:
        """Call after the round returned: no kill after this; replace a victim the pool
        did not notice (it died after answering). True if a SIGKILL was delivered."""
        self._cancel.set()
        self._armed.set()
        with self._lock:
            pass
        self._thread.join()
        if self.killed and self.pool.slots[self.slot] is self.worker:
            self.worker.proc.join(5)
            self.pool.replace(self.slot)
        return self.killed


def draw_delay_ns(rng: random.Random, samples: list[tuple[int, int]],
                  fallback: tuple[int, int] = DEFAULT_WINDOW_NS) -> int:
    """A kill (or pause) delay, from the controller's send, spread across the operation.

    ``samples`` are measured ``(start, end)`` offsets of the store call inside the worker
    (its guard and its write transaction) from the controller's send. The call itself is
    short (~50 µs of a ~500 µs round trip: the rest is pipes and wake-ups), so three draws
    in four land uniformly inside a measured call window and one in four anywhere from
    the send to 10% past the reply.
    """
    start, end = rng.choice(samples) if len(samples) >= 5 else fallback
    if rng.random() < 0.75:
        return start + int(rng.random() * max(1, end - start))
    return int(rng.random() * end * 1.1)


# ------------------------------------------------------------------ the nemesis
class Nemesis:
    """Fault primitives and the draws of when to fire them; it never runs an operation.

    The fault runner, carrying out a fault step, asks it to jump the clock, to arm a kill
    (:meth:`kill_timer`), to freeze or thaw a worker, and for the values a step leaves
    open (slot, aim, delay), drawn from its own seeded random source and from the latency
    of the calls the fault runner reports (:meth:`latency_seen`)."""

    def __init__(self, kinds: tuple[str, ...], seed: int = 0) -> None:
        self.kinds = kinds  # the faults this campaign injects (a subset of FAULTS)
        self.rng = random.Random(seed)
        self.latency: list[int] = []  # controller send -> store call starts in the worker, ns

    # -------------------------------------------------------------- draws
    def latency_seen(self, ns: int) -> None:
        """One measured send -> store-call-start latency (the last 64 are kept)."""
        self.latency = (self.latency + [ns])[-64:]

    def draw_delay_us(self, history: Iterable[Op], op: str = "fulfill") -> int:
        """A fresh kill or pause delay from the send of an ``op`` call, µs, drawn over the
        measured windows: the pipe latency, then an answered call's store-call time (the
        recent ``op`` calls in ``history``; ``fulfill``'s while there are too few), so a
        kill lands anywhere among the call's statements."""
        recent = list(history)[-400:]
        calls = [o.complete_ns - o.invoke_ns for o in recent
                 if o.op == op and o.type != INFO and o.complete_ns]
        if len(calls) < 3:
            calls = [o.complete_ns - o.invoke_ns for o in recent
                     if o.op == "fulfill" and o.type == OK and o.complete_ns]
        samples = []
        if len(self.latency) >= 3 and len(calls) >= 3:
            samples = [(lat, lat + self.rng.choice(calls))
                       for lat in self.rng.choices(self.latency, k=16)]
        return draw_delay_ns(self.rng, samples) // 1000

    def draw_aim(self) -> str:
        """Where a kill aims (one of AIMS)."""
        return self.rng.choice(AIMS)

    def draw_during(self, weights: dict[str, int]) -> str:
        """The call a kill lands in, drawn by weight."""
        return self.rng.choices(list(weights), list(weights.values()))[0]

    def draw_slot(self, size: int) -> int:
        """The worker slot of a fresh victim lease."""
        return self.rng.randrange(size)

    # -------------------------------------------------------------- faults
    @staticmethod
    def jump(clock: SharedClock, ms: int) -> None:
        """The clock fault: time jumps ``ms`` forward, past leases and queue windows."""
        clock.advance(ms)

    @staticmethod
    def kill_timer(pool: WorkerPool, slot: int, delay_s: float, *, aim: str,
                   after_commits: int = 1, pg: PgWatch | None = None) -> TimedKill:
        """A kill of the worker in ``slot``: ``arm()`` it just before the round, ``finish()``
        it after (see :class:`TimedKill`; ``pg``: a Postgres target's watch)."""
        return TimedKill(pool, slot, delay_s, aim=aim, after_commits=after_commits, pg=pg)

    @staticmethod
    def freeze(pool: WorkerPool, slot: int) -> tuple[int, bool]:
        """SIGSTOP the worker in ``slot``: (the instant, ns monotonic; whether it was frozen
        inside a write transaction). :meth:`thaw` it afterwards."""
        worker = pool.slots[slot]
        at_ns = time.monotonic_ns()
        pool.pause(slot)
        stopped = stop(worker.proc.pid)
        return at_ns, stopped and holds_wal_write_lock(worker.proc.pid, pool.path)

    @staticmethod
    def thaw(pool: WorkerPool, slot: int) -> None:
        """SIGCONT the worker :meth:`freeze` froze."""
        pool.resume(slot)
