"""``ferry-harness crash``: claim/fulfill lifecycles while workers are SIGKILLed; then prove
that nothing was lost.

Each *round* runs on W persistent worker processes, on one WAL database, with the shared
clock frozen at the round's instant ``t``:

1. every worker dispatches one task (W lifecycles per round);
2. every worker ``poll_next``\\ s at one barrier (they race for the oldest tasks);
3. every worker that got a claim fulfills it.

In a fraction of the rounds (``--kill-rate``) one random worker is killed with SIGKILL:
during its claim, during its fulfill, or between its claim and its fulfill (it dies
holding the lease). A kill in a call takes one of three aims: it hunts for the moment the
victim holds SQLite's WAL write lock (on Postgres: a transaction id of its own, seen in
``pg_stat_activity``; *inside* its write transaction either way), fires after a
random delay spread over the measured duration of the call, or lands right after the
call's first commit (``after-commit``: the victim's call then runs by itself, before the
others of its step, so the commit counted is its own). The last lands between a write's
two transactions unless the watcher wakes only after the second (a loaded machine,
a gap of a millisecond or two); a timer lands there only when the gap is wide and the
machine quiet. The pool records the killed op as ``info``, retires the worker id and
starts a fresh worker; the dead worker's agent name is never reused.

After a kill the controller reads every unfinished task back (``get``). A task still
``CLAIMED`` by a dead agent is an *orphan*: its lease was granted at ``t`` and so must end
at exactly ``t + exec_ttl_ms``. The clock goes to ``expires - 1`` (two live rescuers race
to claim: nobody may win) and then to ``expires`` (exactly one must win); a rescuer that
only wins later is counted *late*, one that never wins means a lost task. The winner
fulfills. Tasks a dead worker never claimed are picked up by later rounds.

At the end every left-over task is drained, then one ``inspect()`` must list every
dispatched task exactly once, ``COMPLETED``, with the result of its one accepted
``fulfill`` (or, when the killed worker's fulfill had committed before it died, that
result); ``PRAGMA integrity_check`` (in the pool's reader process) must say ``ok``; a
``TRUNCATE`` checkpoint must leave the ``-wal`` empty; no claim token may repeat.

A Postgres target (``ferry_backend = "postgres"``, PROTOCOL.md#postgres-targets) runs the
same rounds in a database of the run's own (``--pg-uri``, else ``$FERRY_PG_URI``, else a
throwaway cluster, as fuzz): the integrity check is skipped (the server checks its own
pages), and the closing checkpoint gives way to the Postgres meaning of ``wal-bounded``:
no connection of the target is left ``idle in transaction``. The kill aims watch the
server (:mod:`ferry_harness.run.nemesis`).

The campaign only drives and records: it marks what it knows on the ops (the round, the
killed holder of an orphan, each rescue race) and every verdict, in-round and closing, is
the check layer's (:func:`ferry_harness.check.invariants.crash_audit.crash_invariants`).

Exit code 0 when all of that holds, 1 otherwise, 2 for usage or harness errors.

``ferry-harness replay DIR`` on a crash report directory runs the same campaign again
(target, seed, rounds, workers, kill rate from ``crash.json``): the kills are drawn from the
seed, but where they land depends on the OS scheduler, so a replay is a rerun that stops at
the first run showing one of the same invariants.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ferry_harness.check.annotations import (
    CampaignRound,
    FinalRead,
    KilledHolder,
    Rescue,
    WalSample,
    fact,
    mark,
)
from ferry_harness.check.checker import Checker, Violation, fuzz_invariants, invariant_status
from ferry_harness.check.history import INFO, OK, History, Op
from ferry_harness.check.invariants.crash_audit import crash_invariants
from ferry_harness.errors import ExitCode, HarnessError, TargetError
from ferry_harness.report.paths import json_text
from ferry_harness.report.schema import (
    BackendInfo,
    Provenance,
    Report,
    report_from_json,
    report_to_json,
    violation_entry,
)
from ferry_harness.run.faults import integrity_op, race_at_expiry
from ferry_harness.run.nemesis import AIMS, TimedKill, draw_delay_ns, in_write_tx, stop
from ferry_harness.runtime.backend import (
    PG_MEANINGS,
    PG_SKIPPED,
    POSTGRES,
    PgWatch,
    PostgresBackend,
    backend_of,
    backend_skips,
    measured,
    open_tx_text,
    opened_backend,
)
from ferry_harness.runtime.client import PlannedCall, WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.provenance import provenance
from ferry_harness.runtime.target import DEFAULT_TARGET, load_factory

START_MS = 1_000_000_000
QUEUE_TTL_MS = 1_000_000_000  # tasks never time out in the queue during a campaign
MAX_ATTEMPTS = 1_000  # every kill of a holder spends an attempt; never run out
NEEDS = ("dispatch", "fulfill", "get")
PHASES = ("claim", "fulfill", "between")
DEAD = object()  # a read-back view that leaves claimed_by out
PHASE_WEIGHTS = (0.25, 0.6, 0.15)


@dataclass
class CrashConfig:
    target: str = DEFAULT_TARGET
    workers: int = 4
    rounds: int = 1000
    seed: int = 0
    report_dir: str | None = None
    kill_rate: float = 0.35
    exec_ttl_ms: int = 1_000
    integrity_every: int = 250  # rounds between integrity checks (and one at the end)
    # a Postgres target's server (a libpq URI; None: $FERRY_PG_URI, else a throwaway
    # cluster); never written to the report (it may carry a password)
    pg_uri: str | None = None


@dataclass
class Tally:
    """What the summary prints."""

    rounds: int = 0
    lifecycles: int = 0
    completed: int = 0
    kills: int = 0
    kills_by_phase: dict[str, int] = field(default_factory=dict)
    kills_by_aim: dict[str, int] = field(default_factory=dict)  # write-tx, random, ...
    kills_mid_op: int = 0
    kills_after_op: int = 0
    kills_in_write_tx: int = 0
    kills_missed: int = 0
    fulfill_kills_committed: int = 0
    fulfill_kills_rolled_back: int = 0
    orphans: int = 0
    reclaimed: int = 0
    reclaimed_at_expires: int = 0
    reclaimed_late: int = 0
    never_reclaimed: int = 0
    claimed_before_expiry: int = 0
    tasks_lost: int = 0
    duplicate_completions: int = 0
    changed_results: int = 0
    duplicate_tokens: int = 0
    integrity: str = "not run"
    wal_after_checkpoint: int | None = None
    idle_in_transaction: int | None = None  # Postgres: connections left so at the end
    workers_replaced: int = 0
    seconds: float = 0.0


class Crash:
    """One crash campaign: a pool, a database, the rounds, the final audit."""

    def __init__(self, cfg: CrashConfig,
                 progress: Callable[[Tally], None] | None = None) -> None:
        self.cfg = cfg
        self.progress = progress or (lambda _t: None)
        self.rng = random.Random(cfg.seed)
        self.t = Tally()
        self.history = History()
        self.violations: list[Violation] = []
        # every verdict (each round's, the integrity checks', the closing audit's) is the
        # check layer's: the campaign only records what happened
        # (the fuzz checks too, the model's linearizability search included)
        self.checker = Checker(invariants=crash_invariants(fuzz_invariants()))
        self.judged = 0  # history ops handed to the checker so far
        self.clock = SharedClock(START_MS)
        self.windows: dict[str, list[tuple[int, int]]] = {"claim": [], "fulfill": []}
        self.tasks: list[str] = []  # every task dispatched, in order
        self.unfinished: set[str] = set()  # not yet known COMPLETED
        self.dead: set[str] = set()  # agent names of killed workers
        self.lost: set[str] = set()  # orphans no rescuer could ever claim
        self.round = 0
        self.invariants: dict[str, str] = {}  # invariant id -> checked / skipped (why)
        self.aims: tuple[str, ...] = ("random",)  # how a kill in a call lands (set at open)
        self.pg: PostgresBackend | None = None  # a Postgres target's backend
        self.watch: PgWatch | None = None  # ... and the nemesis' connection to it

    # ------------------------------------------------------------------ plumbing
    def agent(self, slot: int) -> str:
        return f"w{self.pool.slots[slot].id}"

    def judge(self) -> None:
        """Let the crash's Checker judge the ops recorded since the last call (marked as
        :mod:`ferry_harness.check.invariants.crash_rounds` and ``crash_audit`` read them); its
        findings join the report, and those the summary counts (``detail["tally"]``) are
        tallied."""
        fresh = self.history.ops[self.judged:]
        self.judged = len(self.history)
        for v in self.checker.check(self.history, fresh):
            self.violations.append(v)
            tally = v.detail.get("tally")
            if tally:
                setattr(self.t, tally, getattr(self.t, tally) + v.detail.get("count", 1))

    def run_round(self, calls: list[PlannedCall], phase: str = "", *,
                  killer: TimedKill | None = None, barrier: bool | None = None) -> list[Op]:
        self.round += 1
        origin = time.monotonic_ns()
        alone = killer is not None and killer.aim == "after-commit"
        if alone:  # (the commits it counts must be the victim's: its call runs by itself)
            rest = [c for c in calls if c.slot != killer.slot]
            calls = [c for c in calls if c.slot == killer.slot]
        if killer is not None:
            killer.arm(origin)
        try:
            ops = self.pool.run(calls, self.history, barrier=barrier and not alone,
                                round_id=self.round)
        finally:
            killed = killer.finish() if killer is not None else False
        if alone and rest:
            ops += self.pool.run(rest, self.history, barrier=barrier, round_id=self.round)
        if phase in self.windows and killer is None:  # where the calls ran, for kill timing
            for o in ops:
                if o.type != INFO and o.complete_ns and o.invoke_ns >= origin:
                    self.windows[phase].append((o.invoke_ns - origin, o.complete_ns - origin))
            del self.windows[phase][:-64]
        if killer is not None:
            victim = next(o for o in ops if o.process == killer.worker.id)
            if killed:
                self.record_kill(phase, killer.worker.id, victim, killer.in_write_tx,
                                 killer.at_ns, killer.aim)
            else:
                self.t.kills_missed += 1
        return ops

    def record_kill(self, phase: str, worker_id: int, op: Op | None, in_tx: bool, at_ns: int,
                    aim: str) -> None:
        self.dead.add(f"w{worker_id}")
        t = self.t
        t.kills += 1
        t.kills_by_phase[phase] = t.kills_by_phase.get(phase, 0) + 1
        t.kills_by_aim[aim] = t.kills_by_aim.get(aim, 0) + 1
        landed = "between ops" if op is None else ("mid-op" if op.type == INFO else "after-op")
        if op is not None:
            if op.type == INFO:
                t.kills_mid_op += 1
            else:
                t.kills_after_op += 1
        t.kills_in_write_tx += in_tx
        self.history.append(Op(
            index=self.history.next_index(), process=-1, agent="nemesis", op="nemesis",
            args={"fault": "kill", "worker": worker_id, "phase": phase, "aim": aim,
                  "landed": landed, "in_write_tx": in_tx,
                  "op_index": op.index if op is not None else None},
            invoke_ns=at_ns, now=self.clock(), complete_ns=at_ns, type=OK, round=self.round))

    def killer_for(self, calls: list[PlannedCall], phase: str, plan: dict[str, Any] | None) -> TimedKill | None:
        if plan is None or plan["phase"] != phase or not calls:
            return None
        slot = calls[plan["victim"] % len(calls)].slot
        if plan["aim"] in ("write-tx", "after-commit"):
            return TimedKill(self.pool, slot, 0.0, aim=plan["aim"], pg=self.watch)
        delay_ns = draw_delay_ns(self.rng, self.windows.get(phase, []))
        return TimedKill(self.pool, slot, delay_ns / 1e9, pg=self.watch)

    # ------------------------------------------------------------------ the campaign
    def run(self) -> Report:
        cfg = self.cfg
        postgres = backend_of(load_factory(cfg.target)) == POSTGRES
        self.pool = WorkerPool(cfg.target, self.clock, cfg.workers)
        tmp = tempfile.mkdtemp(prefix="ferry-crash-")
        t0 = time.perf_counter()
        try:
            # a Postgres target: the run's own database, made before the workers start
            # and dropped after they stop (as fuzz)
            with opened_backend(POSTGRES if postgres else "sqlite", directory=tmp,
                                pg_uri=cfg.pg_uri) as backend, self.pool:
                self.pg = backend if isinstance(backend, PostgresBackend) else None
                self.open_stores(os.path.join(tmp, "crash.db"))
                caps = self.pool.capabilities
                missing = [n for n in NEEDS if n not in caps]
                if missing or not ({"poll_next", "claim"} & caps):
                    raise HarnessError(f"crash needs dispatch, poll_next or claim, fulfill and get; "
                                       f"{cfg.target} lacks {', '.join(missing) or 'poll_next/claim'}")
                if "lease" not in caps:  # (PROTOCOL.md#ferry_capabilities)
                    raise HarnessError(f"crash needs the lease feature: {cfg.target} declares "
                                       "no lease, so a killed holder's task is never freed and "
                                       "there is nothing to rescue at expiry")
                last = time.monotonic()
                for r in range(cfg.rounds):
                    self.one_round(r)
                    if (r + 1) % cfg.integrity_every == 0 and r + 1 < cfg.rounds:
                        self.integrity()
                    if time.monotonic() - last > 2:
                        last = time.monotonic()
                        self.t.seconds = time.perf_counter() - t0
                        self.progress(self.t)
                self.drain()
                self.audit()
                self.t.workers_replaced = self.pool.replaced
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.t.seconds = round(time.perf_counter() - t0, 2)
        return self.report()

    def open_stores(self, path: str) -> None:
        """Every worker opens its store (on a Postgres target: in the schema the backend
        made); the checks the target's features and its backend allow; the aims."""
        pool = self.pool
        if self.pg is None:
            self.path = path
            pool.open(path)
        else:
            self.path = self.pg.fresh(1)
            pool.open(self.path, together=True)
            self.pg.opened(self.path)
        # hold the target only to the features it has, as fuzz does (the target's own
        # ferry_skips are known once its stores opened)
        extra = measured(self.pg, self.path)
        skips = backend_skips(self.pg is not None, pool.skips)
        if self.pg is None:  # the two aims that read SQLite's -shm need a WAL file to read
            aimed = "wal-file" in extra
        else:  # they find a worker's backends by its application_name: a target that
            # names its connections itself gets timed kills only
            self.watch = self.pg.watch()
            aimed = all(self.watch.backends(w.proc.pid) for w in pool.slots)
        self.aims = (*AIMS, "after-commit") if aimed else ("random",)
        caps = set(pool.capabilities) | extra
        self.checker.cfg = self.checker.cfg.for_capabilities(caps)
        self.checker.skips = frozenset(skips)
        self.invariants = invariant_status(caps, skips)

    def one_round(self, r: int) -> None:
        cfg, pool, t = self.cfg, self.pool, self.t
        t.rounds += 1
        self.clock.advance(1)
        at = self.clock()
        plan = None
        if self.rng.random() < cfg.kill_rate:
            plan = {"phase": self.rng.choices(PHASES, PHASE_WEIGHTS)[0],
                    "victim": self.rng.randrange(pool.size),
                    "aim": self.rng.choice(self.aims)}
        # 1. every worker dispatches one task
        ops = self.run_round([PlannedCall(slot=s, op="dispatch", args={
            "target_agent": None, "queue_ttl_ms": QUEUE_TTL_MS, "exec_ttl_ms": cfg.exec_ttl_ms,
            "max_attempts": MAX_ATTEMPTS, "payload": {"round": r, "slot": s}}, agent="client")
            for s in range(pool.size)], barrier=False)
        for o in ops:
            mark(o, CampaignRound(number=r))
            if o.type == OK:
                self.tasks.append(o.value)
                self.unfinished.add(o.value)
                t.lifecycles += 1
        # 2. every worker polls, at one barrier (maybe one is killed mid-claim)
        if "poll_next" in pool.capabilities:
            calls = [PlannedCall(slot=s, op="poll_next", args={}, agent=self.agent(s)) for s in range(pool.size)]
        else:
            todo = sorted(self.unfinished, key=self.tasks.index)[:pool.size]
            calls = [PlannedCall(slot=s, op="claim", args={"task_id": tid}, agent=self.agent(s))
                     for s, tid in enumerate(todo)]
        # (no barrier when a claim may be killed: a worker SIGKILLed while it waits at the
        # pool's barrier can leave the shared Event's lock held, and the pool deadlocks)
        ops = self.run_round(calls, "claim", killer=self.killer_for(calls, "claim", plan),
                             barrier=not (plan and plan["phase"] == "claim"))
        for o in ops:
            mark(o, CampaignRound(number=r))
        claims = [(pool.slot_of(o.process), o.value) for o in ops
                  if o.type == OK and o.value and f"w{o.process}" not in self.dead]
        # 2b. or one dies holding its fresh lease, between its claim and its fulfill
        if plan and plan["phase"] == "between" and claims:
            slot, _claim = claims.pop(plan["victim"] % len(claims))
            w = pool.slots[slot]
            at_ns = time.monotonic_ns()
            stop(w.proc.pid)
            in_tx = in_write_tx(w.proc.pid, self.path, self.watch)
            w.doomed = True
            os.kill(w.proc.pid, signal.SIGKILL)
            w.proc.join(5)
            pool.replace(slot)
            self.record_kill("between", w.id, None, in_tx, at_ns, "idle holder")
        # 3. every holder fulfills (maybe one is killed mid-fulfill)
        calls = [PlannedCall(slot=slot, op="fulfill", args={"task_id": c["task_id"], "token": c["token"],
                                               "result": {"by": self.agent(slot), "round": r}},
                             agent=self.agent(slot)) for slot, c in claims]
        ops = self.run_round(calls, "fulfill", killer=self.killer_for(calls, "fulfill", plan),
                             barrier=False)
        victim_fulfill = None
        for o in ops:
            mark(o, CampaignRound(number=r))
            if o.type == OK:
                self.unfinished.discard(o.args["task_id"])
            elif o.type == INFO:
                victim_fulfill = o
        if plan is not None:
            self.recover(r, at, victim_fulfill)
        self.judge()

    def read(self, task_ids: list[str], facts: tuple[Any, ...]) -> dict[str, Op]:
        """``get`` each task, W at a time on the live workers, each op marked with
        ``facts``; the gets that answered with a view, by task."""
        reads: dict[str, Op] = {}
        size = self.pool.size
        for i in range(0, len(task_ids), size):
            chunk = task_ids[i:i + size]
            ops = self.run_round([PlannedCall(slot=s, op="get", args={"task_id": tid}, agent="auditor")
                                  for s, tid in enumerate(chunk)], barrier=False)
            for o in ops:
                for f in facts:
                    mark(o, f)
                if o.type == OK and isinstance(o.value, dict):
                    reads[o.args["task_id"]] = o
        return reads

    # ------------------------------------------------------------------ after a kill
    def recover(self, r: int, at: int, victim_fulfill: Op | None) -> None:
        """Read back every unfinished task (round ``r``, store instant ``at``); rescue this
        round's orphans at their expiry."""
        reads = self.read(sorted(self.unfinished - self.lost, key=self.tasks.index),
                          (CampaignRound(number=r),))
        if victim_fulfill is not None:
            read = reads.get(victim_fulfill.args["task_id"])
            status = read.value.get("status") if read is not None else None
            if status == "COMPLETED":
                self.t.fulfill_kills_committed += 1
            elif status == "CLAIMED":
                self.t.fulfill_kills_rolled_back += 1
        orphans = []
        for tid, o in reads.items():
            status = o.value.get("status")
            if status == "COMPLETED":
                self.unfinished.discard(tid)
            elif status == "CLAIMED" and (o.value.get("claimed_by", DEAD) is DEAD
                                          or o.value["claimed_by"] in self.dead):
                # (a view may leave claimed_by out: every live holder fulfilled before
                # this read, so a task still CLAIMED is the dead worker's)
                mark(o, KilledHolder(granted_at=at, exec_ttl_ms=self.cfg.exec_ttl_ms))
                orphans.append(tid)
        if orphans:
            self.rescue(orphans, at + self.cfg.exec_ttl_ms)

    def rescue(self, orphans: list[str], expires: int) -> None:
        """The dead holders' leases (all granted at this round's instant) end at
        ``expires``: nobody may claim an orphan a millisecond earlier, somebody must at
        that very millisecond (:func:`ferry_harness.run.faults.race_at_expiry`: two live
        rescuers race for each orphan at ``expires - 1``, then at ``expires``); an orphan
        nobody got is tried again later (counted late), and if even ``expires + 100 *
        exec_ttl_ms`` does not free it, it is lost (each race is marked with a ``Rescue`` fact;
        the Checker judges them)."""
        t, pool = self.t, self.pool
        ttl = self.cfg.exec_ttl_ms
        t.orphans += len(orphans)
        use_claim = "claim" in pool.capabilities
        races: dict[str, int] = {}
        later = (expires + 1, expires + ttl, expires + 100 * ttl)

        def race(tid: str, at: str) -> list[Op]:
            rescuers = self.rng.sample(range(pool.size), 2)
            rescue = Rescue(task=tid, expires=expires, race=races.get(tid, 0), at=self.clock(),
                            last=self.clock() >= later[-1])
            races[tid] = rescue.race + 1
            ops = self.run_round([PlannedCall(slot=s, op="claim" if use_claim else "poll_next",
                                              args={"task_id": tid} if use_claim else {},
                                              agent=self.agent(s)) for s in rescuers])
            for o in ops:
                mark(o, rescue)
            got = [o for o in ops if o.type == OK and o.value]
            for o in got:  # a poll may hand a rescuer another task, one still waiting:
                if o.value["task_id"] != tid:  # it holds it now, so it finishes it
                    self.finish(o.value["task_id"], o)
            won = [o for o in got if o.value["task_id"] == tid]
            if at == "expires-1":
                if won:
                    t.claimed_before_expiry += 1
                    for o in won:  # it is held now: finish it
                        self.finish(tid, o)
                return won
            if won:  # reclaimed: finish it now, at the instant it was won
                t.reclaimed += 1
                if self.clock() == expires:
                    t.reclaimed_at_expires += 1
                else:
                    t.reclaimed_late += 1
                self.finish(tid, won[0])
            return won

        def move_clock(when: int) -> bool:
            if self.clock() > when:
                return False
            self.clock.set(when)
            return True

        got = race_at_expiry(orphans, race, move_clock, expires, later=later)
        t.never_reclaimed += len(got.waiting)
        self.lost.update(got.waiting)

    def finish(self, tid: str, claim: Op) -> None:
        """The rescuer fulfills the task it reclaimed (marked as its claim was)."""
        slot = self.pool.slot_of(claim.process)
        [done] = self.run_round([PlannedCall(slot=slot, op="fulfill", args={
            "task_id": tid, "token": claim.value["token"],
            "result": {"by": claim.agent, "rescued": True}}, agent=claim.agent)])
        rescue = fact(claim, Rescue)
        if rescue is not None:
            mark(done, rescue)
        if done.type == OK:
            self.unfinished.discard(tid)

    # ------------------------------------------------------------------ the end
    def drain(self) -> None:
        """Claim and fulfill whatever dead workers left unclaimed (a task still CLAIMED by a
        dead worker here was already given its rescue, and failed it: it stays lost)."""
        for _ in range(10 + len(self.unfinished)):
            if not self.unfinished - self.lost:
                return
            reads = self.read(sorted(self.unfinished - self.lost, key=self.tasks.index), ())
            todo = []
            for tid, o in reads.items():
                if o.value.get("status") == "COMPLETED":
                    self.unfinished.discard(tid)
                elif o.value.get("status") == "SUBMITTED":
                    todo.append(tid)
            for i in range(0, len(todo), self.pool.size):
                chunk = todo[i:i + self.pool.size]
                calls = [PlannedCall(slot=s, op="claim", args={"task_id": tid}, agent=self.agent(s))
                         for s, tid in enumerate(chunk)] if "claim" in self.pool.capabilities else [
                    PlannedCall(slot=s, op="poll_next", args={}, agent=self.agent(s)) for s in range(len(chunk))]
                got = [(self.pool.slot_of(o.process), o.value) for o in self.run_round(calls)
                       if o.type == OK and o.value]
                ops = self.run_round([PlannedCall(slot=s, op="fulfill", args={
                    "task_id": c["task_id"], "token": c["token"],
                    "result": {"by": self.agent(s), "drained": True}}, agent=self.agent(s))
                    for s, c in got], barrier=False)
                for o in ops:
                    if o.type == OK:
                        self.unfinished.discard(o.args["task_id"])

    def integrity(self) -> str:
        if self.pg is not None:  # (PG_SKIPPED: the server checks its own pages)
            self.t.integrity = "skipped (Postgres target)"
            return self.t.integrity
        text = integrity_op(self.pool, self.history, self.clock).value
        self.t.integrity = text
        self.judge()
        return text

    def audit(self) -> None:
        """Every task once, COMPLETED, with its one accepted result; tokens; integrity; WAL
        (judged by the crash's Checker: :mod:`ferry_harness.check.invariants.crash_audit`).
        On Postgres the WAL's part is: no connection left idle in transaction."""
        t, pool = self.t, self.pool
        listed = None
        if "inspect" in pool.capabilities:
            [listed] = self.run_round([PlannedCall(slot=0, op="inspect", args={}, agent="auditor")])
        if listed is not None and not (listed.type == OK and isinstance(listed.value, list)
                                       and any("task_id" not in v for v in listed.value)):
            mark(listed, FinalRead())
            finals = [listed]
        else:  # no inspect, or views that leave task_id out: a get of every task
            finals = list(self.read(self.tasks, (FinalRead(),)).values())
        if self.pg is not None and finals:
            left = open_tx_text(self.pg)
            t.idle_in_transaction = len(left.split("; ")) if left else 0
            mark(finals[-1], WalSample(open_tx_after_step=left))
        self.judge()  # the drain's ops, then the final read-back
        t.completed = len(self.tasks) - t.tasks_lost
        self.integrity()
        if "checkpoint" in pool.capabilities and self.pg is None:
            [op] = self.run_round([PlannedCall(slot=0, op="checkpoint", args={"mode": "TRUNCATE"}, agent="janitor")])
            t.wal_after_checkpoint = pool.wal_size()
            mark(op, WalSample(wal_after=t.wal_after_checkpoint))
            self.judge()

    # ------------------------------------------------------------------ report
    def report(self) -> Report:
        """The campaign as a ``kind="crash"`` report (the one schema every run writes)."""
        config = {k: v for k, v in asdict(self.cfg).items() if k != "pg_uri"}
        b = self.pg
        info = None if b is None else BackendInfo(
            name=POSTGRES, server=b.where_server, isolation=f"one schema in database {b.dbname}",
            skipped=dict(PG_SKIPPED), meanings=dict(PG_MEANINGS))
        return Report(kind="crash", verdict="fail" if self.violations else "pass",
                      ferry=Provenance(**provenance()), target=self.cfg.target, backend=info,
                      config=config, summary=asdict(self.t),
                      invariants=self.invariants,
                      violations=tuple(violation_entry(v, None) for v in self.violations))


def summary_lines(rep: Report, report_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """The printed summary; names crash.json only when ``report_dir`` holds one."""
    s, cfg = rep.summary or {}, rep.config or {}
    kp = s["kills_by_phase"]
    closing = (f"connections idle in transaction at the end: {s['idle_in_transaction']}"
               if s.get("idle_in_transaction") is not None else  # a Postgres target
               f"-wal after checkpoint(TRUNCATE): {s['wal_after_checkpoint']} bytes")
    lines = [
        f"ferry crash: {rep.verdict.upper()} — {s['rounds']} rounds, {s['lifecycles']} "
        f"lifecycles on {cfg['workers']} workers against {rep.target} in {s['seconds']:.1f}s",
        f"  kills: {s['kills']} (claim {kp.get('claim', 0)}, fulfill {kp.get('fulfill', 0)}, "
        f"holding a lease between ops {kp.get('between', 0)}); mid-operation {s['kills_mid_op']}, "
        f"inside a write transaction {s['kills_in_write_tx']}, just after the reply "
        f"{s['kills_after_op']}; timers that missed {s['kills_missed']}"
        + (f"; by aim: {', '.join(f'{a} {n}' for a, n in sorted(s['kills_by_aim'].items()))}"
           if s.get("kills_by_aim") else ""),
        f"  killed fulfills: committed before death {s['fulfill_kills_committed']}, rolled back "
        f"{s['fulfill_kills_rolled_back']}",
        f"  tasks lost: {s['tasks_lost']}   duplicate completions: {s['duplicate_completions']}   "
        f"changed results: {s['changed_results']}   completed: {s['completed']}/{s['lifecycles']}",
        f"  orphaned leases: {s['orphans']}, reclaimed at expiry {s['reclaimed']} (at exactly "
        f"expires: {s['reclaimed_at_expires']}; late {s['reclaimed_late']}; never "
        f"{s['never_reclaimed']}; claimed at expires-1: {s['claimed_before_expiry']})",
        f"  integrity_check: {s['integrity']}   {closing}   duplicate tokens: "
        f"{s['duplicate_tokens']}   workers replaced: {s['workers_replaced']}",
    ]
    for v in rep.violations[:10]:
        lines.append(f"  [{v.invariant}] {v.message}")
    if len(rep.violations) > 10:
        more = len(rep.violations) - 10
        lines.append(f"  … and {more} more (see {Path(report_dir) / 'crash.json'})" if report_dir
                     else f"  … and {more} more (rerun with --report-dir DIR to keep them all "
                     "in DIR/crash.json)")
    return lines


def crash_command(cfg: dict[str, Any]) -> str:
    """The ``ferry-harness crash`` command line that runs this campaign again."""
    return (f"ferry-harness crash --target {cfg['target']} --rounds {cfg['rounds']} "
            f"--workers {cfg['workers']} --seed {cfg['seed']} --kill-rate {cfg['kill_rate']}")


def write_report(rep: Report, history: History, report_dir: str) -> Path:
    """crash.json (the report schema, ``kind="crash"``), crash.md and history.jsonl."""
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    command = crash_command(dict(rep.config or {}))
    rep = replace(rep, replay=f"ferry-harness replay {d}", command=command)
    (d / "crash.json").write_text(json_text(report_to_json(rep)))
    (d / "history.jsonl").write_text(history.to_jsonl(), encoding="utf-8")
    (d / "crash.md").write_text("# ferry crash campaign\n\n```\n"
                                + "\n".join(summary_lines(rep, d))
                                + f"\n```\n\nReplay: `{rep.replay}` (reruns `{command}`)\n")
    return d


def replay_crash(report_dir: str | os.PathLike[str], target: str | None, tries: int) -> int:
    """``ferry-harness replay`` on a crash report: rerun the campaign of ``crash.json`` up to
    ``tries`` times, stopping at the first run that shows one of its invariants. Exit 1 if
    one did, 0 if none did (or the report records no violation)."""
    path = Path(report_dir) / "crash.json"
    try:
        rep = report_from_json(json.loads(path.read_text()))
        cfg = CrashConfig(**{k: v for k, v in (rep.config or {}).items()
                             if k in CrashConfig.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TargetError(f"cannot read {path}: {exc}") from None
    wanted = {v.invariant for v in rep.violations}
    if not wanted:
        print(f"ferry: {path} records no violation; nothing to replay")
        return ExitCode.OK
    cfg.target = target or cfg.target
    cfg.report_dir = None
    load_factory(cfg.target)
    print(f"ferry: replaying the crash campaign ({crash_command(asdict(cfg))}); a crash "
          "replay is a rerun: the kills land where the scheduler puts them", flush=True)
    for n in range(1, tries + 1):
        again = Crash(cfg).run()
        seen = {v.invariant for v in again.violations} & wanted
        if seen:
            print(f"ferry: replayed crash campaign against {cfg.target}: "
                  f"[{', '.join(sorted(seen))}] reproduced on run {n} of at most {tries}")
            return ExitCode.VIOLATION
    print(f"ferry: replayed crash campaign against {cfg.target}: "
          f"[{', '.join(sorted(wanted))}] reproduced 0/{tries}")
    return ExitCode.OK
