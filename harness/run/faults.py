"""The fault runner: what a fault step does, end to end, in one place.

The nemesis (:mod:`ferry_harness.run.nemesis`) only injects (SIGKILL, SIGSTOP/SIGCONT, clock
jumps) and draws when; the executor (:mod:`ferry_harness.run.executor`) runs ordinary steps. A
fault step is carried out here, as ordinary operations around the injection, and the
checker judges the annotations they leave (:class:`ferry_harness.check.invariants.faults.FaultProbes`
reads ``probe``, ``zombie``, ``integrity``; the model judges every op, the killed one as
``info``):

- ``kill``: SIGKILL a worker while one of its writes is in flight. ``during`` names the
  write: ``claim`` (or ``poll_next`` on a poll-only queue) of a fresh victim task,
  ``fulfill``, ``release``, ``extend`` or ``salvage`` of a live lease, ``acquire_lock`` /
  ``release_lock`` of the daemon lock, or a ``checkpoint``. Half the kills hunt for the
  moment the victim holds SQLite's WAL write lock (on Postgres: a transaction id of its
  own, :mod:`ferry_harness.run.nemesis`) (``aim: write-tx``), half fire at a
  random point of the call's measured duration, so every statement of a multi-statement
  write can be the last one that ran. A found kill is shrunk to ``aim: after-commit``
  where it still fails: killed right after the call's first (or second) commit, the
  victim dies in the same gap on every replay. A claim killed before its commit did not happen; one
  killed after it is an ``info`` op the model lets take effect or not. Then
  :func:`race_at_expiry` on whatever the dead worker may still hold (its lease, at
  ``expires - 1`` and ``expires``; the lock, likewise).
- ``pause``: SIGSTOP a holder while its ``fulfill`` is in flight, hold it past its lease
  while rescuers race (:func:`race_at_expiry`), SIGCONT: the zombie's call, and one more
  with its old token, must be refused. A pause inside the write transaction is lifted at
  once (a frozen writer blocks every other writer) and counted apart.
- ``clock``: jump time forward past leases and queue windows.

After a kill or a pause: ``inspect()``, ``PRAGMA integrity_check`` in the pool's reader
process and a ``TRUNCATE`` checkpoint that must empty the ``-wal``.

:func:`race_at_expiry` is the one implementation of "rescuers race at ``expires - 1``,
then at ``expires``": fuzz faults use it here, ``ferry-harness crash`` in
:mod:`ferry_harness.tools.crash`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Protocol, TypeVar

from ferry_harness.check.annotations import (
    Integrity,
    Killed,
    Probe,
    ProbeOther,
    Rescue,
    Zombie,
    mark,
)
from ferry_harness.check.history import FAIL, INFO, OK, History, Op
from ferry_harness.check.ops import CallArgs
from ferry_harness.run.nemesis import Nemesis, wait_until
from ferry_harness.run.steps import Fault
from ferry_harness.runtime.backend import PostgresBackend
from ferry_harness.runtime.client import PlannedCall, WorkerPool
from ferry_harness.runtime.clock import SharedClock

RESCUERS = 3  # workers racing to reclaim a faulted holder's task
DRAIN_ROUNDS = 8  # polling rescuers handed other ready tasks poll again, at most this often
VICTIM_EXEC_TTL_MS = 300  # lease length of a fresh victim task when no live claim is drawn
CLOCK_FAULT_MS = 1000  # a clock fault's jump when its step names none
FAULT_LOCK = "ferry-fault-lock"  # the lock a lock-call kill takes (its expiry is known)
FAULT_LOCK_TTL_MS = 500
# what a kill may land in, and how often (the writes that hold the write lock longest and
# the claim, whose two halves a store may commit apart, weigh most)
DURING: dict[str, int] = {"claim": 4, "fulfill": 3, "release": 1, "extend": 1, "salvage": 1,
                          "acquire_lock": 1, "release_lock": 1, "checkpoint": 1}
LOCK_KILLS = ("acquire_lock", "release_lock")
ANY_CALL = "any"  # a kill step's ``during`` the nemesis draws (from DURING) when it runs
HOLDER_KILLS = ("fulfill", "release", "extend", "salvage")

T = TypeVar("T")


@dataclass
class KnownClaim:
    """A lease the run has seen granted (its expiry moves with accepted extends)."""

    task_id: str  # the task it is on
    agent: str  # the agent that holds it
    token: str | None  # its fencing token (None: a claim killed before it answered)
    slot: int  # the worker slot that claimed it
    expires: int | None  # lease expiry on the harness clock, ms; None: not on our clock


@dataclass
class ExpiryRace(Generic[T]):
    """What :func:`race_at_expiry` saw: winners at ``expires - 1`` (none may win there), the
    winner of each target at ``expires`` or later with the label it won at, and the
    targets nobody won."""

    early: dict[T, list[Op]] = field(default_factory=dict)
    won: dict[T, tuple[str, Op]] = field(default_factory=dict)
    waiting: list[T] = field(default_factory=list)


def race_at_expiry(targets: Sequence[T], race: Callable[[T, str], list[Op]],
                   move_clock: Callable[[int], bool], expires: int, *,
                   later: Sequence[int] = (), at_expires: bool = True) -> ExpiryRace[T]:
    """Rescuers race for each target at ``expires - 1`` (nobody may win: the lease still
    holds), then at ``expires`` (one must, attempts permitting: the lease is half-open),
    then at each instant of ``later`` for the targets nobody won yet.

    ``race(target, at)`` runs one race and returns its winners; ``at`` is ``expires-1``,
    ``expires``, ``later``, or ``after-expires`` when the clock had already passed the
    instant (``move_clock(t)`` returns False: time never goes back). ``at_expires=False``
    stops after ``expires - 1`` (a frozen holder whose task would time out there)."""
    out: ExpiryRace[T] = ExpiryRace()
    if move_clock(expires - 1):
        for t in targets:
            out.early[t] = race(t, "expires-1")
    out.waiting = list(targets)
    if not at_expires:
        return out
    for i, instant in enumerate((expires, *later)):
        if not out.waiting:
            break
        at = "expires" if i == 0 else "later"
        if not move_clock(instant):
            at = "after-expires"
        for t in list(out.waiting):
            won = race(t, at)
            if won:
                out.won[t] = (at, won[0])
                out.waiting.remove(t)
    return out


def integrity_op(pool: WorkerPool, history: History, clock: SharedClock, *,
                 example: int | None = None, round_id: int | None = None) -> Op:
    """``PRAGMA integrity_check`` in the pool's reader process (never a worker that loaded
    the target), appended to ``history`` as an ``integrity_check`` op of the nemesis whose
    :class:`~ferry_harness.check.annotations.Integrity` fact the checker reads ("ok" or SQLite's list of problems)."""
    t0 = time.monotonic_ns()
    text = pool.integrity()
    return history.append(mark(Op(
        index=history.next_index(), process=-1, agent="nemesis", op="integrity_check",
        args={"pragma": "integrity_check"}, invoke_ns=t0, now=clock(),
        complete_ns=time.monotonic_ns(), type=OK, value=text, example=example,
        round=round_id), Integrity(text=text)))


class Steps(Protocol):
    """What the fault runner needs of the executor that runs the other steps (it is the
    :class:`ferry_harness.run.executor.Executor`)."""


    pool: WorkerPool
    clock: SharedClock
    history: History
    claims: list[KnownClaim]
    capabilities: set[str]
    steps: list[Any]
    example: int
    pg: PostgresBackend | None  # a Postgres target's backend (the kill aims watch it)

    def run_calls(self, calls: list[PlannedCall]) -> list[Op]: ...
    def claim_ref(self, ref: int) -> KnownClaim: ...
    def holder_args(self, c: KnownClaim, op: str, tag: int) -> CallArgs: ...
    def move_clock(self, target: int) -> bool: ...
    def integrity_check(self) -> Op: ...
    def checkpoint(self, *, reader: bool) -> None: ...


class FaultRunner:
    """Carries out fault steps for one example (see the module docstring)."""

    def __init__(self, ex: Steps, nemesis: Nemesis, counts: dict[str, int]) -> None:
        self.ex = ex
        self.nemesis = nemesis
        self.counts = counts  # the campaign's faults by kind and landing (Stats.faults)

    # -------------------------------------------------------------- plumbing
    def _one(self, slot: int, op: str, agent: str, **args: Any) -> Op:
        return self.ex.run_calls([PlannedCall(slot=slot % self.ex.pool.size, op=op, args=args,
                                              agent=agent)])[0]

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def note(self, fault: str, *, count: bool = True, at_ns: int | None = None,
             **args: Any) -> Op:
        """Record a fault in the history, as an op of the nemesis (process -1).

        ``counts`` counts faults by kind and by where they landed (``kill:mid-op``,
        ``kill:in-write-tx``, ``kill:after-op``, ``kill-in:<op>``, ``pause:mid-op``,
        ``pause:after-op``, ``pause:in-write-tx``; ``kill-missed``: the op finished first)."""
        ex = self.ex
        t = at_ns or time.monotonic_ns()
        op = ex.history.append(Op(index=ex.history.next_index(), process=-1,
                                  agent="nemesis", op="nemesis", args={"fault": fault, **args},
                                  invoke_ns=t, now=ex.clock(), complete_ns=t, type=OK,
                                  example=ex.example))
        if count:
            self._count(fault)
        return op

    def _timed_one(self, slot: int, op: str, agent: str, **args: Any) -> Op:
        """``_one``, telling the nemesis how long the call took to reach the store."""
        sent = time.monotonic_ns()
        o = self._one(slot, op, agent, **args)
        if o.type != INFO and o.invoke_ns >= sent:
            self.nemesis.latency_seen(o.invoke_ns - sent)
        return o

    # -------------------------------------------------------------- the step
    def run(self, s: Fault) -> Fault:
        """Carry out one fault step; returns it as run (values drawn filled in)."""
        ex, nemesis = self.ex, self.nemesis
        if s.fault == "clock":
            ms = s.tick if s.tick is not None else CLOCK_FAULT_MS
            nemesis.jump(ex.clock, ms)
            self.note("clock", ms=ms)
            return s
        caps = ex.capabilities
        if s.fault == "kill":
            s = self._placed(s)
            if s.during in (*LOCK_KILLS, "checkpoint"):
                s = self._kill_other(s)
                self._after_fault()
                return s
        if "fulfill" not in caps or not ({"claim", "poll_next"} & caps):
            return s
        if s.fault == "kill" and s.during == "claim":
            s = self._kill_claim(s)
            self._after_fault()
            return s
        # without a lease on our clock the fault still runs: no expiry to probe, but the
        # dead or frozen holder keeps its task (rescuers must get nothing) and the
        # integrity, inspect and WAL checks follow as after any fault
        victim, s = self._victim(s)
        if victim is None:
            return s
        if s.fault == "kill":
            s = self._kill(s, victim)
        elif s.fault == "pause":
            s = self._pause(s, victim)
        self._after_fault()
        return s

    def _placed(self, s: Fault) -> Fault:
        """The write a kill lands in, as the store can take it (None: ``fulfill``)."""
        caps = self.ex.capabilities
        during = s.during or "fulfill"
        if during == ANY_CALL:
            during = self.nemesis.draw_during(DURING)
        if during in LOCK_KILLS and not set(LOCK_KILLS) <= caps:
            during = "fulfill"
        if during == "checkpoint" and not {"checkpoint", "wal-file"} <= caps:
            during = "fulfill"
        if during in HOLDER_KILLS[1:] and during not in caps:
            during = "fulfill"
        return s if s.during == during else replace(s, during=during)

    def _draw_aim_delay(self, s: Fault, op: str) -> tuple[Fault, float]:
        if s.aim is None:
            s = replace(s, aim=self.nemesis.draw_aim())
        if s.aim in ("write-tx", "after-commit"):
            if s.delay_us is None:
                s = replace(s, delay_us=0)
            return s, 0.0
        if s.delay_us is None:
            s = replace(s, delay_us=self.nemesis.draw_delay_us(self.ex.history, op))
        return s, s.delay_us / 1e6

    def _killed_call(self, s: Fault, call: PlannedCall, delay: float) -> tuple[Op, bool, Any]:
        """Run ``call`` with a kill armed; (its op, whether the kill fired, the killer)."""
        pool = self.ex.pool
        old_id = pool.slots[call.slot].id
        pg = self.ex.pg.watch() if self.ex.pg is not None else None
        killer = self.nemesis.kill_timer(pool, call.slot, delay, aim=s.aim or "random",
                                         after_commits=s.after_commits or 1, pg=pg)
        killer.arm(time.monotonic_ns())
        try:
            [op] = self.ex.run_calls([call])
        finally:
            killed = killer.finish()
        where = s.during or "fulfill"
        if not killed:  # it finished (and the timer was cancelled) before the kill
            self.note("kill-missed", slot=call.slot, worker=old_id, delay_us=s.delay_us,
                      during=where, task=call.args.get("task_id"),
                      landed="never: the op finished first", op_index=op.index)
            return op, False, killer
        landed = "mid-op" if op.type == INFO else "after-op"
        self._count("kill")
        self._count(f"kill:{landed}")
        self._count(f"kill-in:{where}")
        if killer.in_write_tx:
            self._count("kill:in-write-tx")
        self.note("kill", count=False, at_ns=killer.at_ns, slot=call.slot, worker=old_id,
                  new_worker=pool.slots[call.slot].id, aim=s.aim, delay_us=s.delay_us,
                  during=where, task=call.args.get("task_id"), landed=landed,
                  in_write_tx=killer.in_write_tx, op_index=op.index)
        mark(op, Killed(delay_us=s.delay_us, in_write_tx=killer.in_write_tx))
        return op, True, killer

    # -------------------------------------------------------------- victims
    def _live(self, c: KnownClaim) -> bool:
        """Is ``c`` (probably) still the lease on its task, with room for ``expires - 1``?"""
        ex = self.ex
        if c.expires is not None and ex.clock() >= c.expires - 1:
            return False
        if any(k.task_id == c.task_id and k is not c
               for k in ex.claims[ex.claims.index(c) + 1:]):
            return False
        return not any(o.op in ("fulfill", "fail", "release") and o.type != FAIL
                       and o.args.get("token") == c.token for o in ex.history)

    def _fresh_task(self, s: Fault) -> tuple[Op | None, Fault]:
        """Dispatch a victim task (slot and lease length drawn into the step)."""
        if "dispatch" not in self.ex.capabilities:
            return None, s
        if s.slot is None:
            s = replace(s, slot=self.nemesis.draw_slot(self.ex.pool.size))
        if s.exec_ttl_ms is None:
            s = replace(s, exec_ttl_ms=VICTIM_EXEC_TTL_MS)
        d = self._timed_one(0, "dispatch", "client", target_agent=None,
                            queue_ttl_ms=10_000, exec_ttl_ms=s.exec_ttl_ms, max_attempts=2,
                            payload={"victim": len(self.ex.steps)})
        return (d if d.type == OK else None), s

    def _claim_call(self, slot: int, task_id: str) -> PlannedCall:
        if "claim" in self.ex.capabilities:
            return PlannedCall(slot=slot, op="claim", args={"task_id": task_id}, agent="alice")
        return PlannedCall(slot=slot, op="poll_next", args={}, agent="alice")

    def _victim(self, s: Fault) -> tuple[KnownClaim | None, Fault]:
        """The drawn claim if it still holds its lease, else a fresh lease of our own."""
        ex = self.ex
        if ex.claims:
            c = ex.claim_ref(s.claim or 0)
            if self._live(c):
                return c, s
        d, s = self._fresh_task(s)
        if d is None:
            return None, s
        slot = (s.slot or 0) % ex.pool.size
        call = self._claim_call(slot, d.value)
        got = self._timed_one(slot, call.op, "alice", **call.args)
        if got.type != OK or not got.value:
            return None, s
        v = got.value
        return KnownClaim(v["task_id"], "alice", v["token"], slot, v["lease_expires_at"]), s

    # -------------------------------------------------------------- kills
    def _kill(self, s: Fault, c: KnownClaim) -> Fault:
        """SIGKILL the holder while its ``fulfill`` (``release``, ``extend``, ``salvage``) is
        in flight, then the orphan probe."""
        op_name = s.during or "fulfill"
        s, delay = self._draw_aim_delay(s, op_name)
        call = PlannedCall(slot=c.slot, op=op_name, args=self.ex.holder_args(c, op_name, c.slot),
                           agent=c.agent)
        op, killed, _ = self._killed_call(s, call, delay)
        if not killed:
            return s
        if op.type == INFO or op_name in ("extend", "salvage"):
            # an extend that may have committed moves the lease: the rescuers still race,
            # but only the model (which knows both outcomes) judges them
            winner = self._probe(c, op, "killed", certain=op_name != "extend")
            if winner is not None:
                self._complete(winner)
        return s

    def _kill_claim(self, s: Fault) -> Fault:
        """SIGKILL a worker while its ``claim`` (or ``poll_next``) of a fresh victim task is in
        flight. Killed before the commit, the claim did not happen; after it, the dead
        worker holds a lease granted at the claim's instant: rescuers race at its
        ``expires - 1`` and ``expires``."""
        ex = self.ex
        d, s = self._fresh_task(s)
        if d is None:
            return s
        slot = (s.slot or 0) % ex.pool.size
        call = self._claim_call(slot, d.value)
        s, delay = self._draw_aim_delay(s, call.op)
        op, killed, _ = self._killed_call(s, call, delay)
        if not killed:
            return s
        if op.type == OK and not op.value:
            return s
        if op.type == OK:  # it answered, then died holding the lease
            v = op.value
            c = KnownClaim(v["task_id"], "alice", v["token"], slot, v["lease_expires_at"])
        else:
            c = KnownClaim(d.value, "alice", None, slot, op.now + (s.exec_ttl_ms or 0))
        winner = self._probe(c, op, "killed")
        if winner is not None:
            self._complete(winner)
        return s

    def _kill_other(self, s: Fault) -> Fault:
        """SIGKILL a worker mid lock call (then others race for the lock at its expiry) or
        mid ``checkpoint`` (then the checks after a fault)."""
        ex = self.ex
        if s.slot is None:
            s = replace(s, slot=self.nemesis.draw_slot(ex.pool.size))
        slot = s.slot % ex.pool.size
        if s.during == "checkpoint":
            call = PlannedCall(slot=slot, op="checkpoint", args={"mode": "TRUNCATE"},
                               agent="janitor")
            s, delay = self._draw_aim_delay(s, "checkpoint")
            self._killed_call(s, call, delay)
            return s
        args = {"name": FAULT_LOCK, "owner": "doomed", "ttl_ms": FAULT_LOCK_TTL_MS}
        op_name = "acquire_lock"
        if s.during == "release_lock":  # take it first (else the kill hits the acquire)
            got = self._one(slot, "acquire_lock", "doomed", **args)
            if got.type == OK and got.value:
                op_name = "release_lock"
        call = PlannedCall(slot=slot, op=op_name, args=(
            args if op_name == "acquire_lock" else {"name": FAULT_LOCK, "owner": "doomed"}),
            agent="doomed")
        s, delay = self._draw_aim_delay(s, op_name)
        op, killed, _ = self._killed_call(s, call, delay)
        if not killed:
            return s
        others = [(slot + i) % ex.pool.size for i in range(1, ex.pool.size)][:RESCUERS] or [slot]

        def race(_lock: str, _at: str) -> list[Op]:
            ops = ex.run_calls([PlannedCall(slot=sl, op="acquire_lock", args={
                "name": FAULT_LOCK, "owner": f"rescuer-{i}", "ttl_ms": FAULT_LOCK_TTL_MS},
                agent=f"rescuer-{i}") for i, sl in enumerate(others)])
            return [o for o in ops if o.type == OK and o.value]

        race_at_expiry([FAULT_LOCK], race, ex.move_clock, op.now + FAULT_LOCK_TTL_MS)
        return s

    # -------------------------------------------------------------- pauses
    def _pause(self, s: Fault, c: KnownClaim) -> Fault:
        """SIGSTOP the holder while its ``fulfill`` is in flight, hold it past its lease
        (rescuers race), SIGCONT: the zombie's call, and one more with its old token, must
        be refused. A pause inside the write transaction is lifted at once."""
        ex, nemesis = self.ex, self.nemesis
        if s.delay_us is None:
            s = replace(s, delay_us=nemesis.draw_delay_us(ex.history))
        delay = s.delay_us / 1e6
        pool = ex.pool
        zslot, zombie = c.slot, pool.slots[c.slot]
        call = PlannedCall(slot=zslot, op="fulfill", args=ex.holder_args(c, "fulfill", zslot),
                           agent=c.agent)
        start = len(ex.history)
        box: dict[str, Any] = {}

        def in_flight() -> None:
            try:
                ex.run_calls([call])
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
            return s
        zop = ex.history.ops[start]  # the helper thread's op: nothing else was appended since
        wait_until(sent + int(delay * 1e9))
        at_ns, in_tx = nemesis.freeze(pool, zslot)
        winner = None
        try:
            if in_tx:
                self._count("pause:in-write-tx")
            else:
                others = [(zslot + i) % pool.size for i in range(1, pool.size)]
                # the clock moves only with rescuers racing (their ops tell the checker
                # it moved while the zombie was frozen): a silent jump would make the
                # zombie's refusal look like one before expires
                winner = self._probe(c, zop, "paused", slots=others, in_flight=True)
        finally:
            nemesis.thaw(pool, zslot)
            th.join(pool.op_timeout_s + 5)
        if pool.slots[zslot] is not zombie:  # replaced on the helper thread: redo it here
            pool.replace(zslot)
        if "error" in box:
            raise box["error"]
        landed = "in-write-tx" if in_tx else ("mid-op" if zop.complete_ns and zop.complete_ns > at_ns
                                               else "after-op")
        if landed != "in-write-tx":
            self._count(f"pause:{landed}")
        self.note("pause", at_ns=at_ns, slot=zslot, worker=zombie.id, task=c.task_id,
                  delay_us=s.delay_us, landed=landed, expires=c.expires, op_index=zop.index)
        self.note("resume", count=False, slot=zslot, worker=zombie.id)
        rescued = winner.index if winner is not None else None
        mark(zop, Zombie(task=c.task_id, expires=c.expires, rescued_by=rescued, landed=landed))
        if landed == "in-write-tx":
            return s
        # the zombie, unaware, tries once more with its old token: refused, too
        late = ex.run_calls([PlannedCall(slot=zslot, op="fulfill",
                                         args=ex.holder_args(c, "fulfill", zslot),
                                         agent=c.agent)])[0]
        mark(late, Zombie(task=c.task_id, expires=c.expires, rescued_by=rescued,
                          landed="after resume"))
        if winner is not None:
            self._complete(winner)
        return s

    # -------------------------------------------------------------- orphan / zombie probe
    def _orphaned(self, c: KnownClaim, observer: int) -> dict[str, Any] | None:
        """``get`` the task: the store's view if ``c``'s lease is still on it, else None."""
        caps = self.ex.capabilities
        if "get" not in caps or not ({"claim", "poll_next"} & caps):
            return None
        g = self._timed_one(observer, "get", "auditor", task_id=c.task_id)
        v = g.value if g.type == OK else None
        if not isinstance(v, dict) or v.get("status") != "CLAIMED":
            return None
        if v.get("claimed_by") not in (None, c.agent):
            return None
        return v

    def _rescue_calls(self, c: KnownClaim, slots: list[int]) -> list[PlannedCall]:
        """Rescuers claim the orphan by id, or — a poll-only queue — poll as its holder's
        agent: the orphan is then whatever the queue must hand out once the lease is over."""
        if "claim" in self.ex.capabilities:
            return [PlannedCall(slot=s, op="claim", args={"task_id": c.task_id}, agent=c.agent)
                    for s in slots]
        return [PlannedCall(slot=s, op="poll_next", args={}, agent=c.agent) for s in slots]

    @staticmethod
    def _took_other(o: Op, c: KnownClaim) -> bool:
        """A poll that legitimately took another ready task: no evidence about the orphan."""
        return (o.op == "poll_next" and o.type == OK and isinstance(o.value, dict)
                and o.value.get("task_id") != c.task_id)

    def _rescue_round(self, rescue: list[PlannedCall], c: KnownClaim,
                      info: dict[str, Any] | None, at: str) -> tuple[list[Op], bool]:
        """One race of the rescuers. Ops that say something about the orphan (a claim of
        it, a poll that got it or got nothing) carry a ``Probe``, which the checker judges
        per instant; a poll that took another task a ``ProbeOther``.
        Returns (the orphan's winners, whether a poll took another task)."""
        ops = self.ex.run_calls(rescue)
        other = False
        for o in ops:
            if self._took_other(o, c):
                if info is not None:
                    mark(o, ProbeOther(**info, at=at))
                other = True
            elif info is not None:
                mark(o, Probe(**info, at=at))
        won = [o for o in ops if o.type == OK and o.value and not self._took_other(o, c)]
        return won, other

    def _probe(self, c: KnownClaim, holder_op: Op, cause: str,
               slots: list[int] | None = None, *, in_flight: bool = False,
               certain: bool = True) -> Op | None:
        """The dead (or frozen) holder's lease ends at ``expires``, not later: rescuers race
        (:func:`race_at_expiry`) at ``expires - 1`` (nobody may win) and at ``expires``
        (one must, attempts left). Polling rescuers may first be handed other ready tasks:
        at ``expires`` they poll again until one gets the orphan or a poll comes back
        empty (``DRAIN_ROUNDS`` at most), so an empty poll while the orphan should be free
        is a late reclaim. Without a lease on our clock the rescuers race once, now: the
        holder still holds. ``certain=False``: the killed call may have moved the lease
        (an ``extend``): the races carry no ``probe`` mark, the model alone judges them.

        ``in_flight``: the holder's call is frozen in flight (a pause). With no attempt left
        the task would end ``TIMED_OUT`` at ``expires``, and the zombie's call, which may
        read the clock only when woken, would be judged at the instant it was sent; so the
        clock stays at ``expires - 1`` (where nobody may win and the zombie still holds).
        Returns the winning claim, which then completes the task."""
        size = self.ex.pool.size
        slots = slots if slots is not None else list(range(size))
        slots = slots[:RESCUERS]
        if not slots:
            return None
        view = self._orphaned(c, slots[0])
        if view is None:
            return None
        rescue = self._rescue_calls(c, slots)
        if c.expires is None:  # no expiry to probe: the model refuses any winner
            ops = self.ex.run_calls(rescue)
            for o in ops:
                mark(o, Rescue(task=c.task_id, cause=cause, holder_op=holder_op.index))
            return None
        left = view.get("attempt", 1) < view.get("max_attempts", 1)
        info: dict[str, Any] | None = {
            "task": c.task_id, "expires": c.expires, "attempts_left": left, "cause": cause,
            "holder_op": holder_op.index, "by": rescue[0].op,
            "server_side": in_flight and "pg-probes" in self.ex.capabilities} if certain else None

        def race(_task: str, at: str) -> list[Op]:
            won, other = self._rescue_round(rescue, c, info, at)
            for _ in range(DRAIN_ROUNDS if at != "expires-1" else 0):
                if won or not other:
                    break
                won, other = self._rescue_round(rescue, c, info, at)
            return won

        got = race_at_expiry([c.task_id], race, self.ex.move_clock, c.expires,
                             at_expires=not (in_flight and not left))
        won = got.won.get(c.task_id)
        return won[1] if won is not None else None

    def _complete(self, winner: Op) -> None:
        """The rescuer finishes the task it reclaimed (the lifecycle ends COMPLETED)."""
        ex = self.ex
        slot = ex.pool.slot_of(winner.process)
        token = winner.value["token"]
        ex.run_calls([PlannedCall(slot=slot, op="fulfill", args={
            "task_id": winner.value["task_id"], "token": token,
            "result": {"rescued_by": winner.agent, "step": len(ex.steps)}}, agent=winner.agent)])

    def _after_fault(self) -> None:
        """Each task listed once with its accepted result; integrity ok; the WAL empties."""
        ex = self.ex
        caps = ex.capabilities
        if "inspect" in caps:
            self._one(1, "inspect", "auditor")
        if "wal-file" in caps:
            ex.integrity_check()
            if "checkpoint" in caps:
                ex.checkpoint(reader=False)
