"""The nemesis: faults injected on purpose, each recorded in the history.

- ``kill``: SIGKILL a lease holder while its ``fulfill`` is in flight. There are no
  schedule points to aim at, so half the kills (``aim: random``) fire on a timer after a
  delay drawn over the *measured* course of a fulfill (pipe latency to the worker, then
  the store call itself: guard and write transaction), and half (``aim: write-tx``) hunt
  for the write transaction: a helper thread asks the kernel who holds SQLite's WAL write
  lock (``F_GETLK`` on the ``-shm``), freezes the victim when it does and kills it there.
  Either way the victim is frozen (SIGSTOP) at the kill instant and the lock looked up, so
  ``kill:in-write-tx`` counts exactly the kills *inside a write transaction*. The killed
  op is ``info``; the pool retires the worker id and starts a fresh worker in its slot.
  The delay (or aim) is recorded in the step, so a replay fires the same way.
  Then the **orphan probe**: a ``get`` says whether the dead holder's lease survived it
  (still ``CLAIMED``); if so the clock goes to ``expires - 1`` (k rescuers race to claim:
  nobody may win) and to ``expires`` (exactly one must win, attempts permitting), and the
  winner completes the task. Against a poll-only queue (no ``claim``) the rescuers poll
  as the holder's agent; a poll handed another ready task says nothing about the orphan
  (``probe_other``), and at ``expires`` they poll again until one gets the orphan or a poll
  comes back empty — an empty poll while the orphan should be free is a late reclaim.
  Without a lease on the harness clock there is no expiry to probe: the rescuers race
  once, and the model refuses any of them the dead holder's task.
- ``pause``: SIGSTOP the holder while its ``fulfill`` is in flight (timed), hold it
  past its lease (rescuers race at ``expires - 1`` and ``expires``, claiming or polling as
  above), SIGCONT: the zombie's in-flight fulfill, and one more it sends afterwards with
  its old token, must be refused. Without a lease the frozen holder keeps its task: the
  rescuers must get nothing, and its fulfill must be accepted.
  A pause that lands while the holder holds the WAL write lock is lifted at once (a frozen
  writer blocks every other writer: nothing could race it) and counted apart.
- ``clock``: jump time forward past leases and queue windows.

After a kill or a pause: ``inspect()`` (each task listed once, accepted results intact),
``PRAGMA integrity_check`` in the pool's reader process (never a worker that loaded the
target), and a ``TRUNCATE`` checkpoint that must leave the ``-wal`` empty. The checker
turns the annotations these steps leave on ops (``probe``, ``zombie``, ``integrity``)
into violations (:meth:`harness.check.checker.Checker._faults`).

``stats.faults`` counts faults by kind, and by where they landed (``kill:mid-op``,
``kill:in-write-tx``, ``kill:after-op``, ``pause:mid-op``, ``pause:after-op``,
``pause:in-write-tx``); ``kill-missed`` counts timers cancelled because the op finished.

Helpers here (:class:`TimedKill`, :func:`wal_writer`, :func:`stop`) are shared with
``ferry-harness crash`` (:mod:`harness.tools.crash`).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import random
import signal
import struct
import threading
import time
from typing import TYPE_CHECKING, Any

from harness.check.history import FAIL, INFO, OK, Op
from harness.runtime.client import PlannedCall, Worker, WorkerPool

if TYPE_CHECKING:
    from harness.run.executor import Executor, KnownClaim, Stats

FAULTS = ("kill", "pause", "clock")
WAL_WRITE_LOCK_BYTE = 120  # SQLite unix VFS: the WAL writer locks byte 120 of the -shm file
DEFAULT_WINDOW_NS = (200_000, 400_000)  # where a fulfill runs, before we measured one
RESCUERS = 3
DRAIN_ROUNDS = 8  # polling rescuers handed other ready tasks poll again, at most this often
# Half the kills hunt for the write transaction (polling F_GETLK), half fire at a
# random point of the operation: a timer alone rarely lands in a ~50 µs transaction.
AIMS = ("write-tx", "random")


# ------------------------------------------------------------------ process-level tools
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
                 aim: str = "random", hunt_s: float = 0.05) -> None:
        self.pool = pool
        self.slot = slot
        self.delay_s = delay_s
        self.aim = aim
        self.hunt_s = hunt_s
        self.worker: Worker = pool.slots[slot]
        self.path = pool.path
        self.killed = False
        self.in_write_tx = False
        self.at_ns = 0
        self._cancel = threading.Event()
        self._armed = threading.Event()
        self._deadline_ns = 0
        self._lock = threading.Lock()
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
        else:
            self._armed.wait()
            if not wait_until(self._deadline_ns, self._cancel):
                return
        with self._lock:
            if self._cancel.is_set() or self.pool.slots[self.slot] is not self.worker:
                return
            if not self.in_write_tx:  # (a successful hunt has it frozen already)
                self.at_ns = time.monotonic_ns()
                stopped = stop(pid)  # freeze, look at its locks, then kill: an exact snapshot
                self.in_write_tx = stopped and holds_wal_write_lock(pid, self.path)
            try:
                self.worker.doomed = True
                os.kill(pid, signal.SIGKILL)
                self.killed = True
            except ProcessLookupError:
                pass

    def _hunt(self, pid: int) -> None:
        """Aimed kill: poll ``F_GETLK`` until the victim holds the WAL write lock, freeze it,
        and if it still holds it, leave it frozen for the kill (``in_write_tx``); if it
        had just committed, SIGCONT and poll on. A timer alone rarely lands inside a ~50 µs
        transaction. Gives up when the op finished (cancelled) or after ``hunt_s``: then
        the kill is a random one."""
        give_up = None
        while not self._cancel.is_set():
            if give_up is None and self._armed.is_set():
                give_up = time.monotonic() + self.hunt_s
            elif give_up is not None and time.monotonic() > give_up:
                return
            if not holds_wal_write_lock(pid, self.path):
                time.sleep(0)  # let the main thread run (it may not have sent the call yet)
                continue
            with self._lock:
                if self._cancel.is_set():
                    return
                self.at_ns = time.monotonic_ns()
                if stop(pid) and holds_wal_write_lock(pid, self.path):
                    self.in_write_tx = True
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
    def __init__(self, kinds: tuple[str, ...], stats: Stats, seed: int = 0) -> None:
        self.kinds = kinds
        self.stats = stats
        self.rng = random.Random(seed)
        self.latency: list[int] = []  # controller send -> store call starts in the worker, ns

    # -------------------------------------------------------------- bookkeeping
    def _count(self, key: str) -> None:
        self.stats.faults[key] = self.stats.faults.get(key, 0) + 1

    def _note(self, ex: Executor, fault: str, *, count: bool = True, at_ns: int | None = None,
              **args: Any) -> Op:
        t = at_ns or time.monotonic_ns()
        op = ex.history.append(Op(index=ex.history.next_index(), process=-1, agent="nemesis",
                                  op="nemesis", args={"fault": fault, **args}, invoke_ns=t,
                                  now=ex.clock(), complete_ns=t, type=OK, example=ex.example))
        if count:
            self._count(fault)
        return op

    def _one(self, ex: Executor, slot: int, op: str, agent: str, **args: Any) -> Op:
        """``ex._one``, measuring how long a call takes to reach the store (send -> t0)."""
        sent = time.monotonic_ns()
        o = ex._one(slot, op, agent, **args)
        if o.type != INFO and o.invoke_ns >= sent:
            self.latency = (self.latency + [o.invoke_ns - sent])[-64:]
        return o

    def _delay_s(self, ex: Executor, step: dict[str, Any]) -> float:
        """The recorded delay (a replay fires at the same point), or a fresh draw over the
        measured windows: the pipe latency, then an accepted fulfill's store-call time."""
        if "delay_us" not in step:
            calls = [o.complete_ns - o.invoke_ns for o in ex.history.ops[-400:]
                     if o.op == "fulfill" and o.type == OK and o.complete_ns]
            samples = []
            if len(self.latency) >= 3 and len(calls) >= 3:
                samples = [(lat, lat + self.rng.choice(calls))
                           for lat in self.rng.choices(self.latency, k=16)]
            step["delay_us"] = draw_delay_ns(self.rng, samples) // 1000
        return step["delay_us"] / 1e6

    # -------------------------------------------------------------- entry point
    def inject(self, ex: Executor, step: dict[str, Any]) -> None:
        fault = step["fault"]
        if fault == "clock":
            ex.clock.advance(step.get("ms", 1000))
            self._note(ex, "clock", ms=step.get("ms", 1000))
            return
        caps = ex.capabilities
        if "fulfill" not in caps or not ({"claim", "poll_next"} & caps):
            return
        # without a lease on our clock the fault still runs: no expiry to probe, but the
        # dead or frozen holder keeps its task (rescuers must get nothing) and the
        # integrity, inspect and WAL checks follow as after any fault
        victim = self._victim(ex, step)
        if victim is None:
            return
        if fault == "kill":
            self._kill(ex, step, victim)
        elif fault == "pause":
            self._pause(ex, step, victim)
        self._after_fault(ex)

    # -------------------------------------------------------------- victims
    def _live(self, ex: Executor, c: KnownClaim) -> bool:
        """Is ``c`` (probably) still the lease on its task, with room for ``expires - 1``?"""
        if c.expires is not None and ex.clock() >= c.expires - 1:
            return False
        if any(k.task_id == c.task_id and k is not c for k in ex.claims[ex.claims.index(c) + 1:]):
            return False
        return not any(o.op in ("fulfill", "fail", "release") and o.type != FAIL
                       and o.args.get("token") == c.token for o in ex.history)

    def _victim(self, ex: Executor, step: dict[str, Any]) -> KnownClaim | None:
        """The drawn claim if it still holds its lease, else a fresh lease of our own."""
        from harness.run.executor import KnownClaim

        if ex.claims:
            c = ex._claim(step.get("claim", 0))
            if self._live(ex, c):
                return c
        if "dispatch" not in ex.capabilities:
            return None
        slot = step.setdefault("slot", self.rng.randrange(ex.pool.size)) % ex.pool.size
        d = self._one(ex, 0, "dispatch", "client", target_agent=None, queue_ttl_ms=10_000,
                    exec_ttl_ms=step.setdefault("ettl", 300), max_attempts=2,
                    payload={"victim": len(ex.steps)})
        if d.type != OK:
            return None
        if "claim" in ex.capabilities:
            got = self._one(ex, slot, "claim", "alice", task_id=d.value)
        else:
            got = self._one(ex, slot, "poll_next", "alice")
        if got.type != OK or not got.value:
            return None
        v = got.value
        return KnownClaim(v["task_id"], "alice", v["token"], slot, v["lease_expires_at"])

    # -------------------------------------------------------------- kill
    def _kill(self, ex: Executor, step: dict[str, Any], c: KnownClaim) -> None:
        aim = step.setdefault("aim", self.rng.choice(AIMS))
        delay = 0.0 if aim == "write-tx" else self._delay_s(ex, step)
        step.setdefault("delay_us", 0)
        call = PlannedCall(c.slot, "fulfill", ex._holder_args(c, "fulfill", c.slot), c.agent)
        old_id = ex.pool.slots[c.slot].id
        killer = TimedKill(ex.pool, c.slot, delay, aim=aim)
        sent = time.monotonic_ns()
        killer.arm(sent)
        try:
            [op] = ex._run([call])
        finally:
            killed = killer.finish()
        if not killed:  # it finished (and the timer was cancelled) before the kill
            self._note(ex, "kill-missed", slot=c.slot, worker=old_id, delay_us=step["delay_us"],
                       task=c.task_id, landed="never: the op finished first", op_index=op.index)
            return
        landed = "mid-op" if op.type == INFO else "after-op"
        self._count("kill")
        self._count(f"kill:{landed}")
        if killer.in_write_tx:
            self._count("kill:in-write-tx")
        self._note(ex, "kill", count=False, at_ns=killer.at_ns, slot=c.slot, worker=old_id,
                   new_worker=ex.pool.slots[c.slot].id, aim=aim, delay_us=step["delay_us"],
                   task=c.task_id, landed=landed, in_write_tx=killer.in_write_tx,
                   op_index=op.index)
        op.extra["killed"] = {"delay_us": step["delay_us"], "in_write_tx": killer.in_write_tx}
        if op.type == INFO:
            winner, _ran = self._probe(ex, c, op, "killed")
            if winner is not None:
                self._complete(ex, winner)

    # -------------------------------------------------------------- orphan / zombie probe
    def _orphaned(self, ex: Executor, c: KnownClaim, observer: int) -> dict[str, Any] | None:
        """``get`` the task: the store's view if ``c``'s lease is still on it, else None."""
        if "get" not in ex.capabilities or not ({"claim", "poll_next"} & ex.capabilities):
            return None
        g = self._one(ex, observer, "get", "auditor", task_id=c.task_id)
        v = g.value if g.type == OK else None
        if not isinstance(v, dict) or v.get("status") != "CLAIMED":
            return None
        if v.get("claimed_by") not in (None, c.agent):
            return None
        return v

    @staticmethod
    def _rescue_calls(ex: Executor, c: KnownClaim, slots: list[int]) -> list[PlannedCall]:
        """Rescuers claim the orphan by id, or — a poll-only queue — poll as its holder's
        agent: the orphan is then whatever the queue must hand out once the lease is over."""
        if "claim" in ex.capabilities:
            return [PlannedCall(s, "claim", {"task_id": c.task_id}, c.agent) for s in slots]
        return [PlannedCall(s, "poll_next", {}, c.agent) for s in slots]

    @staticmethod
    def _took_other(o: Op, c: KnownClaim) -> bool:
        """A poll that legitimately took another ready task: no evidence about the orphan."""
        return (o.op == "poll_next" and o.type == OK and isinstance(o.value, dict)
                and o.value.get("task_id") != c.task_id)

    def _rescue_round(self, ex: Executor, rescue: list[PlannedCall], c: KnownClaim,
                      info: dict[str, Any], at: str) -> tuple[list[Op], bool]:
        """One race of the rescuers. Ops that say something about the orphan (a claim of
        it, a poll that got it or got nothing) carry ``extra["probe"]``, which the checker
        judges per instant; a poll that took another task is marked ``probe_other``.
        Returns (the orphan's winners, whether a poll took another task)."""
        ops = ex._run(rescue)
        other = False
        for o in ops:
            if self._took_other(o, c):
                o.extra["probe_other"] = {**info, "at": at}
                other = True
            else:
                o.extra["probe"] = {**info, "at": at}
        won = [o for o in ops if o.type == OK and o.value and not self._took_other(o, c)]
        return won, other

    def _probe(self, ex: Executor, c: KnownClaim, holder_op: Op, cause: str,
               slots: list[int] | None = None, *,
               in_flight: bool = False) -> tuple[Op | None, bool]:
        """The dead (or frozen) holder's lease ends at ``expires``, not later: rescuers race
        at ``expires - 1`` (nobody may win) and at ``expires`` (one must, attempts left).
        Polling rescuers may first be handed other ready tasks: at ``expires`` they poll
        again until one gets the orphan or a poll comes back empty (``DRAIN_ROUNDS`` at
        most), so an empty poll while the orphan should be free is a late reclaim.
        Without a lease on our clock the rescuers race once, now: the holder still holds.

        ``in_flight``: the holder's call is frozen in flight (a pause). With no attempt left
        the task would end ``TIMED_OUT`` at ``expires``, and the zombie's call, which may
        read the clock only when woken, would be judged at the instant it was sent; so the
        clock stays at ``expires - 1`` (where nobody may win and the zombie still holds).
        Returns (the winning claim, which then completes the task; whether it ran)."""
        size = ex.pool.size
        slots = slots if slots is not None else list(range(size))
        slots = slots[:RESCUERS]
        if not slots:
            return None, False
        view = self._orphaned(ex, c, slots[0])
        if view is None:
            return None, False
        rescue = self._rescue_calls(ex, c, slots)
        if c.expires is None:  # no expiry to probe: the model refuses any winner
            ops = ex._run(rescue)
            for o in ops:
                o.extra["rescue"] = {"task": c.task_id, "cause": cause, "lease": None,
                                     "holder_op": holder_op.index}
            return None, True
        left = view.get("attempt", 1) < view.get("max_attempts", 1)
        info = {"task": c.task_id, "expires": c.expires, "attempts_left": left, "cause": cause,
                "holder_op": holder_op.index, "by": rescue[0].op}
        winner = None
        for at, t in (("expires-1", c.expires - 1), ("expires", c.expires)):
            if at == "expires" and in_flight and not left:
                break
            if not ex._set_clock(t):
                if at == "expires-1":
                    continue
                at = "after-expires"
            won, other = self._rescue_round(ex, rescue, c, info, at)
            for _ in range(DRAIN_ROUNDS if at != "expires-1" else 0):
                if won or not other:
                    break
                won, other = self._rescue_round(ex, rescue, c, info, at)
            if won and at != "expires-1":
                winner = won[0]
        return winner, True

    # -------------------------------------------------------------- pause
    def _pause(self, ex: Executor, step: dict[str, Any], c: KnownClaim) -> None:
        delay = self._delay_s(ex, step)
        pool = ex.pool
        zslot, zombie = c.slot, pool.slots[c.slot]
        call = PlannedCall(zslot, "fulfill", ex._holder_args(c, "fulfill", zslot), c.agent)
        start = len(ex.history)
        box: dict[str, Any] = {}

        def in_flight() -> None:
            try:
                ex._run([call])
            except BaseException as exc:  # re-raised on the main thread
                box["error"] = exc

        th = threading.Thread(target=in_flight, name="ferry-zombie", daemon=True)
        sent = time.monotonic_ns()
        th.start()
        deadline = time.monotonic() + 5
        while len(ex.history) == start and th.is_alive() and time.monotonic() < deadline:
            time.sleep(0.00002)
        if len(ex.history) == start:  # the call never went out
            th.join(pool.op_timeout_s + 5)
            if "error" in box:
                raise box["error"]
            return
        zop = ex.history.ops[start]  # the helper thread's op: nothing else was appended since
        wait_until(sent + int(delay * 1e9))
        at_ns = time.monotonic_ns()
        pool.pause(zslot)
        stopped = stop(zombie.proc.pid)
        in_tx = stopped and holds_wal_write_lock(zombie.proc.pid, pool.path)
        winner = None
        try:
            if in_tx:
                self._count("pause:in-write-tx")
            else:
                others = [(zslot + i) % pool.size for i in range(1, pool.size)]
                # the clock moves only with rescuers racing (their ops tell the checker
                # it moved while the zombie was frozen): a silent jump would make the
                # zombie's refusal look like one before expires
                winner, _probed = self._probe(ex, c, zop, "paused", slots=others,
                                              in_flight=True)
        finally:
            pool.resume(zslot)
            th.join(pool.op_timeout_s + 5)
        if pool.slots[zslot] is not zombie:  # replaced on the helper thread: redo it here
            pool.replace(zslot)
        if "error" in box:
            raise box["error"]
        landed = "in-write-tx" if in_tx else ("mid-op" if zop.complete_ns and zop.complete_ns > at_ns
                                               else "after-op")
        if landed != "in-write-tx":
            self._count(f"pause:{landed}")
        self._note(ex, "pause", at_ns=at_ns, slot=zslot, worker=zombie.id, task=c.task_id,
                   delay_us=step["delay_us"], landed=landed, expires=c.expires,
                   op_index=zop.index)
        self._note(ex, "resume", count=False, slot=zslot, worker=zombie.id)
        rescued = winner.index if winner is not None else None
        zop.extra["zombie"] = {"task": c.task_id, "expires": c.expires, "rescued_by": rescued,
                               "landed": landed}
        if landed == "in-write-tx":
            return
        # the zombie, unaware, tries once more with its old token: refused, too
        late = ex._run([PlannedCall(zslot, "fulfill", ex._holder_args(c, "fulfill", zslot), c.agent)])[0]
        late.extra["zombie"] = {"task": c.task_id, "expires": c.expires, "rescued_by": rescued,
                                "landed": "after resume"}
        if winner is not None:
            self._complete(ex, winner)

    def _complete(self, ex: Executor, winner: Op) -> None:
        """The rescuer finishes the task it reclaimed (the lifecycle ends COMPLETED)."""
        slot = ex.pool.slot_of(winner.process)
        token = winner.value["token"]
        ex._run([PlannedCall(slot, "fulfill", {"task_id": winner.value["task_id"], "token": token,
                                               "result": {"rescued_by": winner.agent,
                                                          "step": len(ex.steps)}}, winner.agent)])

    # -------------------------------------------------------------- after every fault
    def _after_fault(self, ex: Executor) -> None:
        """Each task listed once with its accepted result; integrity ok; the WAL empties."""
        caps = ex.capabilities
        if "inspect" in caps:
            ex._one(1, "inspect", "auditor")
        if "wal-file" in caps:
            integrity_probe(ex)
            if "checkpoint" in caps:
                ex._step_checkpoint({"reader": False})


def integrity_probe(ex: Executor) -> Op:
    """``PRAGMA integrity_check`` in the pool's reader process, recorded as an op whose
    ``extra["integrity"]`` the checker reads ("ok" or SQLite's list of problems)."""
    t0 = time.monotonic_ns()
    text = ex.pool.integrity()
    return ex.history.append(Op(
        index=ex.history.next_index(), process=-1, agent="nemesis", op="integrity_check",
        args={"pragma": "integrity_check"}, invoke_ns=t0, now=ex.clock(),
        complete_ns=time.monotonic_ns(), type=OK, value=text, example=ex.example,
        extra={"integrity": text}))
