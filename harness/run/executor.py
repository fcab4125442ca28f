"""Runs *steps* (:mod:`ferry_harness.run.steps`) against the worker pool.

The generator (Hypothesis) only draws steps; this module carries them out, records every
operation in the history, and checks the invariants after each step. Because steps are
plain data, a failing example is a JSON list that ``ferry-harness replay`` can run again,
and that our own shrinker can cut down, without Hypothesis.

A fault step is handed to the fault runner (:mod:`ferry_harness.run.faults`), which owns the
kill, pause and clock choreography; the checker judges what it leaves in the history.
The WAL steps (idle poll, reads, checkpoint), which measure the ``-wal`` around each call,
are :mod:`ferry_harness.run.walsteps`'s.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ferry_harness.check.annotations import WalSample, fact, mark
from ferry_harness.check.checker import Checker, Violation
from ferry_harness.check.history import OK, History, Op
from ferry_harness.check.ops import CallArgs
from ferry_harness.errors import HarnessError
from ferry_harness.run import walsteps
from ferry_harness.run.faults import FaultRunner, KnownClaim, integrity_op
from ferry_harness.run.hostile import hostile_call
from ferry_harness.run.nemesis import Nemesis
from ferry_harness.run.records import Stats, StepTrace
from ferry_harness.run.steps import (
    Audit,
    Checkpoint,
    Clock,
    Dispatch,
    Fault,
    Holder,
    Hostile,
    IdlePoll,
    LockOp,
    LockRace,
    RaceClaim,
    RacePoll,
    Reads,
    Scheduled,
    Step,
)
from ferry_harness.runtime import schedule
from ferry_harness.runtime.backend import (
    Backend,
    PostgresBackend,
    measured,
    open_tx_text,
    remove_sqlite_files,
)
from ferry_harness.runtime.client import PlannedCall, WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.gate import overlapped

LOCK_NAME = "ferry-daemon"
STALL_S = 1.0  # an op that ran this long kept the other workers waiting: a report finding
START_MS = 1_000_000_000
CLOCK_LIMIT_MS = 1 << 42  # the harness clock stays below this (PROTOCOL.md#limits, huge TTLs)


class Executor:
    """One example: a fresh database, a fresh history, steps run one after another."""

    def __init__(self, pool: WorkerPool, clock: SharedClock, path: str, *,
                 checker: Checker | None = None, stats: Stats | None = None,
                 example: int = 0, nemesis: Nemesis | None = None, mode: str = "stress",
                 backend: Backend | None = None, defer_checks: bool = False,
                 ignore: frozenset[str] = frozenset()) -> None:
        self.pool = pool
        self.clock = clock
        self.path = path
        self.checker = checker or Checker()
        self.stats = stats or Stats()
        self.example = example
        self.nemesis = nemesis
        self.fault_runner = (FaultRunner(self, nemesis, self.stats.faults)
                             if nemesis is not None else None)
        self.mode = mode
        self.history = History()
        self.steps: list[Step] = []  # the steps as run (values drawn while running filled in)
        self.traces: list[StepTrace] = []  # one per step: what it referred to and created
        self.tasks: list[str] = []
        self.claims: list[KnownClaim] = []
        self.lock_expires: int | None = None
        # task -> (queued_at, queue_ttl_ms) of its queue window, as far as the run knows
        # (dispatch, release; a lease expiry's new window is the store's choice)
        self.windows: dict[str, tuple[int, int]] = {}
        self.violations: list[Violation] = []
        # violations of these are recorded but neither returned nor stop the example: the
        # robustness findings a campaign already made, masked so it keeps looking for the
        # others (PROTOCOL.md#several-findings)
        self.ignore = ignore
        # check a step while the workers run the next one's first round (see run_step)
        self.defer_checks = defer_checks
        self._unchecked: list[Op] = []  # the last step's ops, when its check was deferred
        self._found_late: list[Violation] = []  # what a deferred check found
        self.round = 0
        self._step: Step = Audit()  # the step running now, as given
        self._round_in_step = 0
        self._schedules: list[tuple[int, ...]] | None = None  # recorded by this step's rounds
        self._learned: set[int] = set()  # op indices already taken into tasks / claims
        self._refs: dict[str, list[int]] = {}  # what the current step referred to
        # where: a SQLite path (made fresh here, as the backend does), or what a Postgres
        # backend made fresh for this example (PROTOCOL.md#postgres-targets)
        self.pg = backend if isinstance(backend, PostgresBackend) else None
        self._pg_covered = False  # the last server look saw only workers' psycopg connections
        if backend is None:  # a backend made ``path`` fresh itself (maybe from a template)
            remove_sqlite_files(path)
        clock.set(START_MS)
        t0 = time.perf_counter()
        pool.open(path, together=getattr(backend, "opens_together", False),
                  first_opened=getattr(backend, "captured", None))  # a SQLite template
        if backend is not None:
            backend.opened(path)
        self.stats.setup_s += time.perf_counter() - t0
        self.capabilities = set(pool.capabilities) | measured(backend, path)
        # hold the target only to the protocol features it has (ferry_harness.check.ops.FEATURES)
        self.checker.cfg = self.checker.cfg.for_capabilities(self.capabilities)
        self.checker.skips = frozenset(pool.skips)  # ferry_skips: not checked at all

    # ------------------------------------------------------------------ plumbing
    def _chooser(self) -> schedule.Chooser | None:
        """In schedule mode: the step's recorded decisions for this round, then PCT."""
        if self.mode != "schedule" or "schedule-points" not in self.capabilities:
            return None
        s = self._step
        recorded = s.schedules if isinstance(s, Scheduled) else ()
        explicit = recorded[self._round_in_step] if self._round_in_step < len(recorded) else ()
        seed = s.pct if isinstance(s, Scheduled) else None
        return schedule.Chooser(explicit=list(explicit), seed=seed)

    def run_calls(self, calls: list[PlannedCall]) -> list[Op]:
        """Run one round of calls, recorded in the history (what every step does)."""
        missing = sorted({c.op for c in calls} - self.capabilities)
        if missing:  # PROTOCOL.md#missing-methods: never a call to an operation it lacks
            raise HarnessError(f"the executor planned {', '.join(missing)}, which the target "
                               "does not have (a step must check the capabilities first)")
        if len(calls) > 1 and isinstance(self._step, Scheduled) and self._step.sequential:
            order = calls[::-1] if self._step.sequential == "reversed" else calls
            return [op for c in order for op in self.run_calls([c])]
        self.round += 1
        chooser = self._chooser() if len(calls) > 1 else None
        t0, checked = time.perf_counter(), self.stats.checking_s
        ops = self.pool.run(calls, self.history, round_id=self.round, example=self.example,
                            chooser=chooser,
                            meanwhile=self.check_deferred if self._unchecked else None)
        # a deferred check ran meanwhile: its time is checking's, not the round's
        self.stats.rounds_s += time.perf_counter() - t0 - (self.stats.checking_s - checked)
        if len(calls) > 1:  # did the racers really race? (ferry_harness.runtime.gate)
            self.stats.raced(len(calls), overlapped(self.pool.last_spans), self.pool.last_gated)
        if chooser is not None:
            if self._schedules is None:
                s = self._step
                self._schedules = list(s.schedules) if isinstance(s, Scheduled) else []
            rounds = self._schedules
            while len(rounds) <= self._round_in_step:
                rounds.append(())
            rounds[self._round_in_step] = tuple(chooser.taken)  # replays follow these exactly
            self._round_in_step += 1
        for op in ops:
            self.note_stall(op)
        self.stats.ops += len(ops)
        return ops

    _run = run_calls

    def _sequence(self, calls: list[PlannedCall]) -> list[Op]:
        """Calls on one worker, one after another (``WorkerPool.run_sequence``), each its
        own round, recorded in the history as ``run_calls`` would record them."""
        t0, checked = time.perf_counter(), self.stats.checking_s
        ops = self.pool.run_sequence(calls, self.history, first_round=self.round + 1,
                                     example=self.example,
                                     meanwhile=self.check_deferred if self._unchecked else None)
        self.round += len(calls)
        self.stats.rounds_s += time.perf_counter() - t0 - (self.stats.checking_s - checked)
        for op in ops:
            self.note_stall(op)
        self.stats.ops += len(ops)
        return ops

    def note_stall(self, op: Op) -> None:
        if op.complete_ns and op.type != "info":
            took = (op.complete_ns - op.invoke_ns) / 1e9
            if took >= STALL_S:
                self.stats.stalled(op.op, took)

    def _one(self, slot: int, op: str, agent: str, **args: Any) -> Op:
        return self._run([PlannedCall(slot=slot % self.pool.size, op=op, args=args, agent=agent)])[0]

    def _task(self, ref: int) -> str:
        i = len(self.tasks) - 1 - ref % len(self.tasks)
        self._refs.setdefault("tasks", []).append(i)
        return self.tasks[i]

    def claim_ref(self, ref: int) -> KnownClaim:
        """The claim a step's reference names (recorded for the shrinker)."""
        i = len(self.claims) - 1 - ref % len(self.claims)
        self._refs.setdefault("claims", []).append(i)
        return self.claims[i]

    def _slot(self, i: int) -> int:
        return i % self.pool.size

    def _learn(self, ops: list[Op]) -> None:
        """Remember what the run produced: task ids, claims, lease and lock expiries."""
        for op in ops:
            if op.type != OK or op.index in self._learned:
                continue
            self._learned.add(op.index)
            if op.op == "dispatch":
                self.tasks.append(op.value)
                if isinstance(op.args.get("queue_ttl_ms"), int):
                    self.windows[op.value] = (op.now, op.args["queue_ttl_ms"])
            elif op.op == "release" and op.args.get("task_id") in self.windows:
                tid = op.args["task_id"]
                self.windows[tid] = (op.now, self.windows[tid][1])
            elif op.op in ("claim", "poll_next") and op.value:
                v = op.value
                slot = self.pool.slot_of(op.process)
                self.claims.append(KnownClaim(v["task_id"], op.agent, v["token"], slot,
                                              v["lease_expires_at"]))
            elif op.op == "extend" and isinstance(op.value, int):
                for c in self.claims:
                    if c.token == op.args.get("token"):
                        c.expires = op.value
            elif op.op == "acquire_lock" and op.value:
                self.lock_expires = op.now + op.args["ttl_ms"]

    def move_clock(self, target: int) -> bool:
        """Move time forward to ``target`` (never backwards: leases would un-expire), but not
        to 2**42 ms or later: PROTOCOL.md#limits keeps the clock below that, and the lease
        end of an accepted huge TTL would wrap the shared int64 clock negative."""
        if target < self.clock() or target >= CLOCK_LIMIT_MS:
            return False
        self.clock.set(target)
        return True

    # ------------------------------------------------------------------ steps
    def run_step(self, step: Step) -> list[Violation]:
        """Carry out one step, then check the invariants on what it produced.

        ``steps`` gets the step as run (what the store could not take dropped, values drawn
        while running filled in, schedules recorded) and ``traces`` what it referred to and
        created, so the shrinker can renumber references when it deletes steps."""
        handler = self._HANDLERS.get(type(step))
        if handler is None:
            raise TypeError(f"not a step: {step!r}")
        if self._unchecked and type(step) not in self._ROUNDS_ONLY:
            self.check_deferred()  # this step may add ops outside a round first
            if self._found_late:
                found, self._found_late = self._found_late, []
                return found
        self.steps.append(step)
        self._step, self._round_in_step, self._schedules = step, 0, None
        self.stats.steps += 1
        start = len(self.history)
        self._refs = {}
        first = (len(self.tasks), len(self.claims))
        ran = handler(self, step)
        if self._schedules is not None and isinstance(ran, Scheduled):
            ran = replace(ran, schedules=tuple(self._schedules))
        self.steps[-1] = ran
        new = self.history.ops[start:]
        if new and "wal-file" in self.capabilities:  # the growth bound, sampled every step
            had = fact(new[-1], WalSample) or WalSample()
            mark(new[-1], replace(had, wal_after_step=self.pool.wal_size()))
        elif new and self.pg is not None and not self.pool.paused_workers():
            # Postgres: no transaction outlives its call (PROTOCOL.md#postgres-targets)
            had = fact(new[-1], WalSample) or WalSample()
            mark(new[-1], replace(had, open_tx_after_step=self._open_tx_after(step)))
        self._learn(new)
        self.traces.append(StepTrace(
            task_refs=tuple(self._refs.get("tasks", ())),
            claim_refs=tuple(self._refs.get("claims", ())),
            first_task=first[0], first_claim=first[1],
            made_tasks=len(self.tasks) - first[0], made_claims=len(self.claims) - first[1],
            ops=len(new)))
        if self.defer_checks:
            if self._unchecked:  # the step ran no round: nothing to overlap its check with
                self.check_deferred()
            self._unchecked = new
            found, self._found_late = self._found_late, []
            return found
        return self._check(new)

    def _check(self, new: list[Op]) -> list[Violation]:
        t0 = time.perf_counter()
        found = self.checker.check(self.history, new) if new else []
        self.stats.checking_s += time.perf_counter() - t0
        self.violations.extend(found)
        return [v for v in found if v.invariant not in self.ignore]

    def check_deferred(self) -> list[Violation]:
        """Check the last step now, if its check was deferred (``defer_checks``).

        With ``defer_checks`` a step's check runs in the controller while the workers run
        the next step's first round (``WorkerPool.run``'s ``meanwhile``, before that
        round's ops enter the history), so checking costs no wall time of its own. What
        it finds is returned by the step during which it ran, or by this call; a failing
        example then holds one step more than it needed, which the shrinker removes."""
        new, self._unchecked = self._unchecked, []
        found = self._check(new)
        self._found_late.extend(found)
        return found

    def _open_tx_after(self, step: Step) -> str:
        """The target's connections left idle in transaction after ``step`` ("" if none).
        The workers' psycopg connections report their own state with each answer
        (ferry_harness.runtime.pgconns); the server is asked when one reported a
        transaction, when their connections changed (an open, a replaced worker), after a
        fault or audit, and after every step while it lists a connection of the run's
        database that no worker reported (another driver)."""
        assert self.pg is not None
        known, in_tx = self.pool.pg_reported()
        if (self._pg_covered and not in_tx and not self.pool.pg_changed
                and not isinstance(step, (Fault, Audit))):
            self.stats.open_tx_local += 1
            return ""
        self.pool.pg_changed = False
        self.stats.open_tx_server += 1
        found, unknown = self.pg.look(known)
        self._pg_covered = not unknown
        return open_tx_text(self.pg, found)

    def _step_dispatch(self, s: Dispatch) -> Step:
        if "dispatch" not in self.capabilities:
            return s  # nothing to dispatch with: the invariants that need tasks are skipped
        # the step records what is really sent: a target or dependencies the store cannot
        # take are dropped from the step itself, so reports and replays show the truth
        if "targets" not in self.capabilities and s.target_agent is not None:
            s = replace(s, target_agent=None)
        if ("dag" not in self.capabilities or not self.tasks) and s.depends_on:
            s = replace(s, depends_on=())
        deps = sorted({self._task(i) for i in s.depends_on}) if self.tasks else []
        args: CallArgs = {"target_agent": s.target_agent, "queue_ttl_ms": s.queue_ttl_ms,
                                "exec_ttl_ms": s.exec_ttl_ms, "max_attempts": s.max_attempts,
                                "payload": {"n": len(self.tasks)}}
        if deps and "dag" in self.capabilities:
            args["depends_on"] = deps
        self._one(0, "dispatch", "client", **args)
        return s

    def _step_race_claim(self, s: RaceClaim) -> Step:
        if not self.tasks:
            return s
        task = self._task(s.task)
        agents = s.agents[: self.pool.size]
        if s.window is not None and task in self.windows:  # the queue window's edge
            queued_at, ttl = self.windows[task]
            self.move_clock(queued_at + ttl + s.window)
        if "claim" in self.capabilities:
            self._run([PlannedCall(slot=i, op="claim", args={"task_id": task}, agent=a) for i, a in enumerate(agents)])
        else:
            self._poll_race(agents)
        return s

    def _step_race_poll(self, s: RacePoll) -> Step:
        self._poll_race(s.agents[: self.pool.size])
        return s

    def _poll_race(self, agents: tuple[str, ...]) -> None:
        if "poll_next" not in self.capabilities:
            return  # a claim-only target (or one that cannot take tasks at all)
        self._run([PlannedCall(slot=i, op="poll_next", args={}, agent=a) for i, a in enumerate(agents)])

    def holder_args(self, c: KnownClaim, op: str, tag: int) -> CallArgs:
        """The arguments of holder op ``op`` on ``c`` (``tag`` marks its result)."""
        args: CallArgs = {"task_id": c.task_id, "token": c.token}
        if op == "fulfill":
            args["result"] = {"by": tag, "step": len(self.steps)}
        elif op == "fail":
            args["reason"] = f"failed by {tag}"
        elif op == "release":
            args["reason"] = "released"
        elif op == "salvage":
            args["partial"] = {"part": tag, "step": len(self.steps)}
        return args

    def _step_holder(self, s: Holder) -> Step:
        if not self.claims or s.op not in self.capabilities:
            return s
        c = self.claim_ref(s.claim)
        op, who = s.op, s.who
        other = self._slot(c.slot + 1)
        if s.repeat:  # the same holder again and again: limits must bite
            self._repeat(c, op, s.repeat)
            return s
        if who == "holder":
            racers = max(1, min(s.race, self.pool.size))
            slots = [self._slot(c.slot + i) for i in range(racers)]
            self._run([PlannedCall(slot=sl, op=op, args=self.holder_args(c, op, sl), agent=c.agent) for sl in slots])
            return s
        args = self.holder_args(c, op, other)
        agent = c.agent
        if who == "impersonator":  # same agent name, another process, no token
            args["token"] = None
        elif who == "forged":
            args["token"] = str(uuid.UUID(int=len(self.steps) + 1, version=4))
        elif who == "other-agent":  # the right token in the wrong agent's hands
            agent = "mallory"
        self._run([PlannedCall(slot=other, op=op, args=args, agent=agent)])
        return s

    def _repeat(self, c: KnownClaim, op: str, times: int) -> None:
        """``extend`` ``times`` times, or ``release`` and claim again ``times`` times."""
        for i in range(times):
            done = self._one(c.slot, op, c.agent, **self.holder_args(c, op, i))
            if done.type != OK or op != "release":
                continue
            verb = "claim" if "claim" in self.capabilities else "poll_next"
            if verb not in self.capabilities:
                return  # released for good: nothing can take it back
            args = {"task_id": c.task_id} if verb == "claim" else {}
            again = self._one(c.slot, verb, c.agent, **args)
            self._learn([again])
            if again.type != OK or not again.value or again.value.get("task_id") != c.task_id:
                return
            c = self.claims[-1]

    def _step_hostile(self, s: Hostile) -> Step:
        """One call with a hostile argument (:func:`ferry_harness.run.hostile.hostile_call`)."""
        hostile_call(self, s.case)
        return s

    def _step_clock(self, s: Clock) -> Step:
        if s.tick is not None:
            self.clock.advance(s.tick)
            return s
        if not self.claims:
            return s
        c = self.claim_ref(s.claim or 0)
        if c.expires is not None:  # None: the target's lease is not on the harness clock
            self.move_clock(c.expires + (s.offset or 0))
        return s

    def _to_lock_expiry(self, offset: int | None) -> None:
        """Move the clock to the lock's last known expiry plus ``offset`` ms (None: stay)."""
        if offset is not None and self.lock_expires is not None:
            self.move_clock(self.lock_expires + offset)

    def _step_lock_race(self, s: LockRace) -> Step:
        if "acquire_lock" not in self.capabilities:
            return s
        self._to_lock_expiry(s.offset)
        owners = s.owners[: self.pool.size]
        self._run([PlannedCall(slot=i, op="acquire_lock", args={"name": LOCK_NAME, "owner": o, "ttl_ms": s.ttl_ms}, agent=o)
                   for i, o in enumerate(owners)])
        return s

    def _step_lock_op(self, s: LockOp) -> Step:
        if s.op not in self.capabilities:
            return s
        self._to_lock_expiry(s.offset)
        args = {"name": LOCK_NAME}
        if s.op == "release_lock":
            args["owner"] = s.owner
        self._one(1, s.op, s.owner, **args)
        return s

    def checkpoint(self, *, reader: bool) -> None:
        """A TRUNCATE checkpoint, with or without an outside reader open (see walsteps)."""
        walsteps.checkpoint(self, reader=reader)

    def _step_audit(self, s: Audit) -> Step:
        """End of an example: materialise expiries, then read everything back (the reads
        one after another on one worker, sent together: ``WorkerPool.run_sequence``)."""
        if "sweep" in self.capabilities:
            self._one(0, "sweep", "janitor")
        reads = [PlannedCall(slot=self._slot(1), op=op, args={"task_id": tid}, agent="auditor")
                 for tid in self.tasks for op in ("get", "salvaged") if op in self.capabilities]
        self._sequence(reads)
        self.checkpoint(reader=False)
        if "wal-file" in self.capabilities:  # PRAGMA integrity_check, in a separate process
            self.integrity_check()
        return s

    def integrity_check(self) -> Op:
        """``PRAGMA integrity_check``, recorded (see :func:`ferry_harness.run.faults.integrity_op`)."""
        return integrity_op(self.pool, self.history, self.clock, example=self.example)

    def finish(self) -> list[Violation]:
        """The closing audit step (and every check still deferred)."""
        found = self.run_step(Audit())
        if found:
            return found
        self.check_deferred()
        found, self._found_late = self._found_late, []
        return found

    # ------------------------------------------------------------------ faults
    def _step_fault(self, s: Fault) -> Step:
        """A fault step is the fault runner's (:mod:`ferry_harness.run.faults`)."""
        if self.fault_runner is None:
            return s
        return self.fault_runner.run(s)

    # steps that add ops to the history only through rounds (run_calls): a deferred check
    # can wait for their first round
    _ROUNDS_ONLY: frozenset[type] = frozenset({Dispatch, RaceClaim, RacePoll, Holder, Hostile,
                                               LockRace, LockOp})

    # one handler per step type (run_step dispatches on the step's type)
    _HANDLERS: dict[type, Callable[[Executor, Any], Step]] = {
        Dispatch: _step_dispatch, RaceClaim: _step_race_claim, RacePoll: _step_race_poll,
        Holder: _step_holder, Hostile: _step_hostile, Clock: _step_clock,
        LockRace: _step_lock_race, LockOp: _step_lock_op, IdlePoll: walsteps.idle_poll,
        Reads: walsteps.reads, Checkpoint: walsteps.checkpoint_step, Audit: _step_audit,
        Fault: _step_fault,
    }
