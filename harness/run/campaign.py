"""A fuzz campaign: generate with Hypothesis, shrink and replay ourselves, write the report.

Real races do not repeat on demand, so Hypothesis only *generates* here (phase
``generate``): it never shrinks, so it can never raise ``Flaky``. Failing executions are
kept as plain step lists; our shrinker removes steps while the failure still shows up in
*any* of a few tries, and the final minimal example is replayed N times to say how often it
reproduces ("reproduced 7/10"). The discovering execution's history is always kept.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import get_state_machine_test

from harness.check.checker import Checker, Violation, invariant_status
from harness.check.history import FAIL, OK, History
from harness.check.model import ModelConfig
from harness.errors import UsageError
from harness.report.paths import write_report_dir
from harness.report.schema import (
    Budget,
    Coverage,
    Discovery,
    ExampleDatabaseUse,
    FuzzStats,
    Provenance,
    Report,
    ScheduleSearch,
    Stall,
    TraceStatement,
    ViolationReport,
    involved_ops,
    violation_entry,
)
from harness.run.executor import Executor, Stats, StepTrace
from harness.run.generator import ViolationFound, machine_for
from harness.run.nemesis import Nemesis
from harness.run.steps import (
    RACES,
    Audit,
    Clock,
    Dispatch,
    Fault,
    Holder,
    Hostile,
    LockRace,
    RaceClaim,
    RacePoll,
    Scheduled,
    Step,
    kind,
    step_from_json,
    step_to_json,
)
from harness.runtime.client import WorkerPool
from harness.runtime.clock import SharedClock
from harness.runtime.provenance import provenance
from harness.runtime.schedule import compact
from harness.runtime.target import import_root

REPLAY_TRIES = 10
SHRINK_TRIES = 3
RELIABLE_HITS = 8  # of REPLAY_TRIES: below this a stress example is re-run in schedule mode
SCHEDULE_SEEDS = 20  # PCT interleavings tried for a deterministic replay
SHRINK_SHARE = 0.6  # of the time left after the search; the replays get the rest
REPORT_RESERVE_S = 2.0  # kept back from the time limit for the report and the pool's exit


@dataclass
class CampaignConfig:
    target: str = "ferry_core:LeaseStore"
    workers: int = 4
    budget_s: float | None = 30.0
    max_examples: int | None = None
    seed: int = 0
    report_dir: str = "reports/latest"
    steps_per_example: int = 30
    faults: tuple[str, ...] = ()
    wal_bound_bytes: int = 64 << 20
    shrink_budget_s: float = 30.0
    batch: int = 5
    mode: str = "stress"
    # A Hypothesis ExampleDatabase (any: directory, Redis, GitHub artifacts...). Failing
    # step lists are saved there, and the next campaign replays them before generating.
    database: Any = None
    # seconds an op may run before it is a liveness finding; None: adaptive (client.py)
    op_timeout_s: float | None = None

    def __post_init__(self) -> None:
        # a NaN budget never ends (every comparison with it is False) and no report can
        # hold it as JSON: finite and positive, or None where None is allowed
        for name in ("budget_s", "op_timeout_s", "shrink_budget_s"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                                  or not math.isfinite(v) or v <= 0):
                raise UsageError(f"{name} must be a finite number of seconds > 0, got {v!r}")

    def time_limit_s(self) -> float | None:
        """The promise: the whole campaign (search, shrink, replays, report) ends by then."""
        return None if self.budget_s is None else self.budget_s * 1.1 + 10.0


@dataclass
class Failure:
    """One failing execution, as plain data."""

    steps: list[Step]  # the steps that ran (as run, or as shrunk)
    history: History
    violations: list[Violation]
    # per step, what it referred to and created when it ran (for renumbering); may be
    # shorter than ``steps`` (a replayed report has none)
    traces: list[StepTrace] = field(default_factory=list)

    @property
    def invariant(self) -> str:
        return self.violations[0].invariant


@dataclass
class Outcome:
    verdict: str
    report: Report
    report_dir: Path
    failure: Failure | None = None
    reproduced: tuple[int, int] | None = None
    stats: Stats = field(default_factory=Stats)
    history: History = field(default_factory=History)


class Runner:
    """Owns the pool and the database directory; runs examples and step lists."""

    def __init__(self, cfg: CampaignConfig) -> None:
        self.cfg = cfg
        self.clock = SharedClock()
        self.pool = WorkerPool(cfg.target, self.clock, cfg.workers,
                               op_timeout_s=cfg.op_timeout_s, scheduled=cfg.mode == "schedule")
        self.tmp = tempfile.mkdtemp(prefix="ferry-")
        self.stats = Stats()
        self.checker = Checker(ModelConfig(), wal_bound_bytes=cfg.wal_bound_bytes)
        self.nemesis = Nemesis(cfg.faults) if cfg.faults else None
        self.pool_start_s = 0.0
        self.stopping = False
        self.phase = "search"  # "shrink" / "replay": what the next runs are counted as
        self.runs = 0

    def __enter__(self) -> Runner:
        t = time.perf_counter()
        self.pool.start()
        self.pool_start_s = time.perf_counter() - t
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def executor(self) -> Executor:
        """A fresh example, counted under the phase that runs it."""
        self.runs += 1
        if self.phase == "shrink":
            self.stats.shrink_runs += 1
        elif self.phase == "replay":
            self.stats.replay_runs += 1
        else:
            self.stats.examples += 1
        return Executor(self.pool, self.clock, os.path.join(self.tmp, "ferry.db"),
                        checker=self.checker, stats=self.stats, example=self.runs,
                        nemesis=self.nemesis, mode=self.cfg.mode)

    def run_steps(self, steps: list[Step]) -> tuple[list[Violation], Executor]:
        """Run a step list on a fresh database; stop at the first violating step."""
        ex = self.executor()
        for step in steps:
            if self.out_of_time():
                return [], ex  # the budget ran out mid-run: nothing shown
            if isinstance(step, Audit):
                continue
            found = ex.run_step(step)
            if found:
                return found, ex
        return ex.finish(), ex

    def out_of_time(self) -> bool:
        """Past the campaign's hard deadline (or stopping): no more runs start."""
        d = self.pool.deadline
        return self.stopping or (d is not None and time.monotonic() >= d)


class Campaign:
    """``ferry-harness fuzz``: the main job."""

    def __init__(self, cfg: CampaignConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.cfg = cfg
        self.progress = progress or (lambda _s: None)
        self.failures: list[Failure] = []
        self.passes: list[History] = []
        self.capabilities: set[str] = set()
        self.workers = cfg.workers
        self.faults = cfg.faults
        self.mode = cfg.mode
        self.first_example_s: float | None = None
        self.replayed_saved = 0
        self.from_database = False
        self.stopping = False
        # campaign-wide: ops by name, refusals by class, steps by kind (boundaries, races…)
        self.coverage: dict[str, dict[str, int]] = {"ops": {}, "refusals": {}, "steps": {}}
        self.evaluated: dict[str, int] = {}  # invariant -> times a check of it judged an op
        self.search_end: float | None = None  # time.monotonic() when generating stops
        self.hard_end: float | None = None  # ... and when every run must have ended
        self.passes_seen: list[int] = []
        self._example_started = 0.0
        self.example_times: list[float] = []

    # ---------------------------------------------------------------- Context protocol
    def new_executor(self) -> Executor:
        self._example_started = time.perf_counter()
        ex = self.runner.executor()
        self.capabilities |= ex.capabilities
        return ex

    def _tally(self, ex: Executor) -> None:
        """Add one searched example to the campaign-wide coverage (what the report shows
        for a passing run: every example, not only the last one)."""
        for inv, n in evaluations(ex).items():
            self.evaluated[inv] = self.evaluated.get(inv, 0) + n
        for o in ex.history:
            self.coverage["ops"][o.op] = self.coverage["ops"].get(o.op, 0) + 1
            if o.type == FAIL:
                key = o.error or "?"
                self.coverage["refusals"][key] = self.coverage["refusals"].get(key, 0) + 1
        for st in ex.steps:
            label = step_label(st)
            self.coverage["steps"][label] = self.coverage["steps"].get(label, 0) + 1

    def _example_done(self) -> None:
        dt = time.perf_counter() - self._example_started
        if self.first_example_s is None:
            self.first_example_s = dt
        else:
            self.example_times.append(dt)
        self.progress(self.snapshot())

    def record_failure(self, ex: Executor, violations: list[Violation]) -> None:
        if not self.failures:
            self.detect_s = time.perf_counter() - self.t0
        self.failures.append(Failure(list(ex.steps), ex.history, violations, list(ex.traces)))
        self._tally(ex)
        self._example_done()

    def record_pass(self, ex: Executor) -> None:
        self.passes = (self.passes + [ex.history])[-20:]
        if not self.failures:
            self.passes_seen.append(ex.example)
        self._tally(ex)
        self._example_done()

    def snapshot(self) -> dict[str, Any]:
        s = self.runner.stats
        return {"examples": s.examples, "race_rounds": s.race_rounds, "ops": s.ops,
                "violations": len(self.failures), "elapsed": time.perf_counter() - self.t0,
                "budget": self.cfg.budget_s, "phase": self.phase}

    # ---------------------------------------------------------------- main
    def run(self) -> Outcome:
        self.t0 = time.perf_counter()
        mono0 = time.monotonic()
        limit = self.cfg.time_limit_s()
        # the hard end leaves REPORT_RESERVE_S for the report and stopping the workers
        self.hard_end = None if limit is None else mono0 + limit - REPORT_RESERVE_S
        self.search_end = None if self.cfg.budget_s is None else mono0 + self.cfg.budget_s
        self.phase = "fuzzing"
        with Runner(self.cfg) as runner:
            self.runner = runner
            runner.pool.deadline = self.hard_end
            self._replay_saved()
            if not self.failures:
                self._generate()
            failure, reproduced = None, None
            if self.failures:
                self.phase = "shrinking"
                runner.phase = "shrink"
                self.progress(self.snapshot())
                failure = self._shrink(self._smallest())
                self.phase = "replaying"
                runner.phase = "replay"
                self.progress(self.snapshot())
                reproduced, replayed = replay_count(runner, failure, REPLAY_TRIES)
                if replayed is not None:  # the minimal steps, with a history that shows them
                    failure = Failure(failure.steps, replayed.history, replayed.violations,
                                      failure.traces)
                self._save(failure)
        self.deterministic = None
        if (failure is not None and self.cfg.mode == "stress" and reproduced is not None
                and reproduced[0] < RELIABLE_HITS and not self.stopping):
            self.phase = "finding a schedule"
            self.progress(self.snapshot())
            self.deterministic = self._find_schedule(failure)
        seconds = time.perf_counter() - self.t0
        return self._outcome(failure, reproduced, seconds)

    def _find_schedule(self, failure: Failure) -> ScheduleSearch:
        """A stress-mode example that replays unreliably is run again in schedule mode,
        one SQL statement at a time in PCT orders, until an interleaving shows the same
        invariant; that interleaving replays exactly. Bounded by the campaign's end."""
        cfg = replace(self.cfg, mode="schedule")
        with Runner(cfg) as runner:
            runner.pool.deadline = self.hard_end
            runner.phase = "replay"
            for seed in range(SCHEDULE_SEEDS):
                if runner.out_of_time():
                    return ScheduleSearch(found=False, tried=seed, why="stopped at budget")
                steps = [replace(st, pct=seed * 7919 + i) if isinstance(st, RACES) else st
                         for i, st in enumerate(failure.steps)]
                found, ex = runner.run_steps(steps)
                if any(v.invariant == failure.invariant for v in found):
                    got = Failure(list(ex.steps), ex.history, found, list(ex.traces))
                    (hits, tries), _ = replay_count(runner, got, REPLAY_TRIES)
                    sched = [compact(r) for r in recorded_schedules(got.steps) if r]
                    return ScheduleSearch(found=True, steps=tuple(public_steps(got.steps)),
                                          schedule=" | ".join(sched), reproduced=f"{hits}/{tries}",
                                          tried=seed + 1,
                                          replay="ferry-harness replay DIR --mode schedule")
            return ScheduleSearch(found=False, tried=SCHEDULE_SEEDS,
                                  why="no PCT interleaving of these steps showed it")

    def halted(self) -> bool:
        """Stop generating: Ctrl-C / SIGTERM, or the search budget is spent."""
        return self.stopping or (self.search_end is not None
                                 and time.monotonic() >= self.search_end)

    # ---------------------------------------------------------------- example database
    @property
    def _db_key(self) -> bytes:
        return f"ferry:{self.cfg.target}:{self.cfg.mode}".encode()

    def _replay_saved(self) -> None:
        """Replay failures saved by earlier runs first (as Hypothesis does); drop the ones
        that no longer fail."""
        db = self.cfg.database
        if db is None:
            return
        self.replayed_saved = 0
        for blob in sorted(db.fetch(self._db_key), key=len):
            try:
                steps = [step_from_json(st) for st in json.loads(blob.decode())["steps"]]
            except (ValueError, KeyError, TypeError, UnicodeDecodeError, UsageError):
                db.delete(self._db_key, blob)  # unreadable, or saved by another ferry version
                continue
            self.replayed_saved += 1
            for _ in range(SHRINK_TRIES):
                found, ex = self.runner.run_steps(steps)
                if found:
                    self.failures.append(Failure(list(ex.steps), ex.history, found,
                                                 list(ex.traces)))
                    self.from_database = True
                    return
            db.delete(self._db_key, blob)

    def _save(self, failure: Failure) -> None:
        if self.cfg.database is not None:
            blob = json.dumps({"steps": public_steps(failure.steps),
                               "invariant": failure.invariant}, sort_keys=True).encode()
            self.cfg.database.save(self._db_key, blob)

    def request_stop(self) -> None:
        """Ctrl-C: finish the current example, skip shrinking, write what we have."""
        self.stopping = True
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.stopping = True

    def _budget_left(self) -> bool:
        if self.stopping:
            return False
        if self.cfg.budget_s is not None and time.perf_counter() - self.t0 >= self.cfg.budget_s:
            return False
        if self.cfg.max_examples is not None and self.runner.stats.examples >= self.cfg.max_examples:
            return False
        return True

    def _generate(self) -> None:
        machine = machine_for(self)
        batch = 0
        while self._budget_left() and not self.failures:
            n = self.cfg.batch
            if self.cfg.max_examples is not None:
                n = min(n, self.cfg.max_examples - self.runner.stats.examples)
            test = get_state_machine_test(machine, settings=settings(
                max_examples=max(1, n), stateful_step_count=self.cfg.steps_per_example,
                deadline=None, database=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False))
            test = seed(self.cfg.seed * 1_000_003 + batch)(test)
            batch += 1
            try:
                test()
            except ViolationFound:
                pass  # recorded by record_failure
            except Flaky:
                # Hypothesis replays a failing example once; a race need not repeat. We kept
                # the discovering execution, so this is expected, never shown to users.
                if not self.failures:
                    raise

    def _smallest(self) -> Failure:
        return min(self.failures, key=lambda f: len(f.steps))

    def _shrink(self, failure: Failure) -> Failure:
        """Shrinking gets ``shrink_budget_s``, and at most SHRINK_SHARE of the time left
        before the hard end (the rest is for the replays)."""
        deadline = time.perf_counter() + self.cfg.shrink_budget_s
        if self.hard_end is not None:
            left = self.hard_end - time.monotonic()
            deadline = min(deadline, time.perf_counter() + SHRINK_SHARE * max(0.0, left))
        return shrink(self.runner, failure, deadline=deadline)

    # ---------------------------------------------------------------- report
    def _outcome(self, failure: Failure | None, reproduced: tuple[int, int] | None,
                 seconds: float) -> Outcome:
        stats = self.runner.stats
        invariants = with_evaluations(invariant_status(self.capabilities, self.runner.pool.skips),
                                      self.evaluated)
        # a pass needs at least one example that ran to its closing audit
        verdict = "fail" if failure else ("pass" if self.passes else "unknown")
        if verdict == "pass" and self.runner.checker.unknown:
            verdict = "unknown"
        history = failure.history if failure else (self.passes[-1] if self.passes else History())
        steady = sorted(self.example_times)[len(self.example_times) // 2] if self.example_times else None
        mode, findings = self.cfg.mode, []
        if self.cfg.mode == "schedule" and "schedule-points" not in self.capabilities:
            mode = "stress"
            findings.append(
                "schedule mode needs the target to use Python's sqlite3 (no schedule points were "
                "reached: apsw or a bundled SQLite?); fell back to stress mode")
        for op, sec in stats.stalls[:3]:
            findings.append(
                f"{op} ran {sec:.1f}s and kept the other workers waiting (a checkpoint that "
                "waits for readers, or a long write transaction, stalls every writer: "
                "checkpoint starvation)")
        violations: list[ViolationReport] = []
        discovery = None
        if failure:
            violations = [violation_report(v, failure, reproduced) for v in failure.violations]
            if self.deterministic is not None:
                violations[0] = replace(violations[0], schedule_mode=self.deterministic)
            discovery = Discovery(steps=len(self._smallest().steps),
                                  seconds_to_detect=round(getattr(self, "detect_s", 0.0), 3),
                                  examples_until_found=len(self.passes_seen) + 1)
        report = Report(
            kind="fuzz",
            verdict=verdict,
            ferry=Provenance(**provenance()),
            target=self.cfg.target,
            target_path=import_root(self.cfg.target),
            mode=mode,
            seed=self.cfg.seed,
            workers=self.cfg.workers,
            faults=tuple(self.cfg.faults),
            capabilities=tuple(sorted(self.capabilities)),
            invariants=invariants,
            violations=tuple(violations),
            stats=FuzzStats(
                examples=stats.examples, shrink_runs=stats.shrink_runs,
                replay_runs=stats.replay_runs, steps=stats.steps, ops=stats.ops,
                race_rounds=stats.race_rounds, seconds=round(seconds, 3),
                race_rounds_per_s=round(stats.race_rounds / seconds, 1) if seconds else 0,
                pool_start_s=round(self.runner.pool_start_s, 4),
                first_example_s=round(self.first_example_s or 0, 4),
                steady_example_s=round(steady, 4) if steady is not None else None,
                workers_replaced=self.runner.pool.replaced,
                refusals=dict(sorted(self.coverage["refusals"].items())),
                coverage=Coverage(ops=dict(sorted(self.coverage["ops"].items())),
                                  steps=dict(sorted(self.coverage["steps"].items()))),
                faults=dict(stats.faults),
                stalls=tuple(Stall(op=op, seconds=sec) for op, sec in stats.stalls)),
            budget=Budget(budget_s=self.cfg.budget_s, time_limit_s=self.cfg.time_limit_s(),
                          stopped_at_limit=bool(self.hard_end is not None
                                                and time.monotonic() >= self.hard_end)),
            unknown=tuple(self.runner.checker.unknown),
            findings=tuple(findings),
            example_database=ExampleDatabaseUse(replayed=self.replayed_saved,
                                                failure_from_database=self.from_database),
            discovery=discovery,
        )
        return Outcome(verdict, report, Path(self.cfg.report_dir), failure, reproduced, stats, history)


HOLDER = frozenset({"fulfill", "fail", "release", "extend", "salvage"})
READ = frozenset({"get", "inspect", "salvaged"})
LOCK = frozenset({"acquire_lock", "release_lock", "lock_holder"})

# what "not exercised" means for each invariant: the kind of event that never happened
NEVER = {
    "single-winner": "no claim succeeded", "token-unique": "no claim succeeded",
    "holder-guard": "no holder operation ran", "lease-half-open": "no lease or lock boundary",
    "lock-exclusive": "no daemon-lock call ran", "dag-order": "no task with dependencies was claimed",
    "no-lost-task": "no read and no empty poll", "wal-bounded": "no checkpoint without a reader",
    "idle-no-write": "no idle poll or read was measured", "linearizable": "no object to order",
    "typed-errors": "no operation ran", "integrity": "no integrity check ran",
    "liveness": "no operation ran", "refusal-class": "no holder operation was refused",
    "refusal-order": "no holder operation was refused",
}


def evaluations(ex: Executor) -> dict[str, int]:
    """How many times each invariant's checks judged something in one example: a report may
    say ``checked`` only where a check could have failed (``checked (N evaluations)``)."""
    ops = list(ex.history)
    deps = {o.value for o in ops if o.op == "dispatch" and o.type == OK
            and o.args.get("depends_on")}
    claims = sum(1 for o in ops if o.op in ("claim", "poll_next") and o.type == OK and o.value)
    holder = [o for o in ops if o.op in HOLDER]
    boundaries = sum(1 for st in ex.steps if isinstance(st, (Clock, LockRace))
                     and st.offset is not None)
    boundaries += sum(1 for o in ops if "probe" in o.extra)
    n = {
        "single-winner": claims,
        "token-unique": claims + len(holder) + sum(1 for o in ops if o.op in READ),
        "holder-guard": len(holder),
        "lease-half-open": boundaries,
        "lock-exclusive": sum(1 for o in ops if o.op in LOCK),
        "dag-order": sum(1 for o in ops if o.op in ("claim", "poll_next") and o.type == OK
                         and o.value and o.value.get("task_id") in deps),
        "no-lost-task": sum(1 for o in ops if (o.op in READ and o.type == OK) or (
            o.op in ("claim", "poll_next") and o.type == OK and o.value is None)),
        "wal-bounded": sum(1 for o in ops if o.op == "checkpoint" and not o.extra.get("reader")
                           and "wal_after" in o.extra),
        "idle-no-write": sum(1 for o in ops if o.extra.get("idle")),
        "linearizable": len({o.task_id for o in ops if o.task_id} |
                            {o.args.get("name") for o in ops if o.op in LOCK}),
        "typed-errors": len(ops),
        "integrity": sum(1 for o in ops if o.op == "integrity_check"),
        "liveness": len(ops),
        "refusal-class": sum(1 for o in holder if o.type == FAIL),
        "refusal-order": sum(1 for o in holder if o.type == FAIL),
    }
    return {k: v for k, v in n.items() if v}


def with_evaluations(status: dict[str, str], evaluated: dict[str, int]) -> dict[str, str]:
    """``checked`` becomes ``checked (N evaluations)`` or ``not exercised (why)``."""
    out = {}
    for inv, said in status.items():
        if said == "checked":
            n = evaluated.get(inv, 0)
            said = (f"checked ({n} evaluations)" if n
                    else f"not exercised ({NEVER.get(inv, 'nothing to judge')} in this run)")
        out[inv] = said
    return out


def violation_report(v: Violation, failure: Failure,
                     reproduced: tuple[int, int] | None) -> ViolationReport:
    """A violation as the report stores it: the minimal steps and the ops involved."""
    recorded = recorded_schedules(failure.steps)
    schedules = [compact(r) for r in recorded if r]
    return violation_entry(
        v, failure.history, steps=tuple(public_steps(failure.steps)),
        schedule=" | ".join(schedules) if schedules else None,
        schedule_steps=sum(len(r) for r in recorded) if schedules else None,
        schedule_trace=(schedule_trace(failure.history, involved_ops(v)) if schedules
                        else None),
        reproduced=f"{reproduced[0]}/{reproduced[1]}" if reproduced is not None else None,
        replays_stopped_at_budget=(reproduced[1] < REPLAY_TRIES
                                   if reproduced is not None else None))


def schedule_trace(history: History, involved: set[int]) -> tuple[TraceStatement, ...]:
    """The SQL statements of the involved scheduled rounds, in the order they ran."""
    rounds = {o.round for o in history if o.index in involved and o.extra.get("sql")}
    rows = sorted((o.round, seq, o.process, sql, switch, o.index) for o in history
                  if o.round in rounds for seq, sql, switch in o.extra.get("sql", []))
    return tuple(TraceStatement(worker=w, sql=sql, op=i, switch=sw)
                 for _r, _s, w, sql, sw, i in rows)


def _fails_like(runner: Runner, steps: list[Step], invariant: str,
                tries: int) -> Failure | None:
    if invariant == "liveness":
        tries = 1  # a hang costs the whole op timeout per try, and repeats anyway
    for _ in range(tries):
        found, ex = runner.run_steps(steps)
        if any(v.invariant == invariant for v in found):
            return Failure(list(ex.steps), ex.history, found, list(ex.traces))
    return None


def _ran(failure: Failure) -> list[tuple[Step, StepTrace]]:
    """The failure's steps but the closing audit, each with its trace (a step without one
    counts as busy and as referring to nothing)."""
    traces = failure.traces + [StepTrace(ops=1)] * (len(failure.steps) - len(failure.traces))
    return [(s, t) for s, t in zip(failure.steps, traces, strict=False) if not isinstance(s, Audit)]


def shrink(runner: Runner, failure: Failure, *, deadline: float, tries: int = SHRINK_TRIES) -> Failure:
    """Delta-debug the step list: drop chunks, then single steps, then simplify steps.

    A candidate counts as failing if *any* of ``tries`` runs shows the same invariant,
    so a flaky race does not stop the shrink (nor does it ever surface as an error).
    """
    inv = failure.invariant
    best = failure
    steps = _ran(failure)  # (step, what it referred to and created when it last ran)

    def more() -> bool:
        return time.perf_counter() < deadline and not runner.out_of_time()

    def attempt(cand: list[tuple[Step, StepTrace]]) -> tuple[list[tuple[Step, StepTrace]], Failure] | None:
        """The candidate with references renumbered, else as it is: the steps that failed
        (cut after the failing one, with the traces of that run) and the failure."""
        if not cand:
            return None
        renumbered, as_is = renumber(cand), [s for s, _t in cand]
        for tried in (renumbered, as_is):
            if tried is as_is and (tried == renumbered or not more()):
                break
            got = _fails_like(runner, tried, inv, tries)
            if got:
                traces = [t for _s, t in _ran(got)]
                return list(zip(tried, traces, strict=False)), got
        return None

    # steps that did nothing in the failing run (no operation at all) go first, together
    busy = [(s, t) for s, t in steps if t.ops > 0]
    if len(busy) < len(steps) and more():
        res = attempt(busy)
        if res:
            steps, best = res
    chunk = max(1, len(steps) // 2)
    while chunk >= 1 and more():
        i, progressed = 0, False
        while i < len(steps) and more():
            res = attempt(steps[:i] + steps[i + chunk:])
            if res:
                (steps, best), progressed = res, True
            else:
                i += chunk
        if not progressed:
            chunk //= 2
    for i in range(len(steps)):
        progressed = True
        while progressed:
            progressed = False
            for simpler in _simplifications(steps[i][0]):
                if not more():
                    return _shrunk(steps, best)
                cand = [s for s, _t in steps[:i]] + [simpler] + [s for s, _t in steps[i + 1:]]
                got = _fails_like(runner, cand, inv, tries)
                if got:
                    steps[i], best, progressed = (simpler, steps[i][1]), got, True
                    break
    # keep the shrunk steps (an explicit schedule prefix, then the default order), not the
    # full decision lists the executor recorded while running them
    return _shrunk(steps, best)


def _shrunk(steps: list[tuple[Step, StepTrace]], best: Failure) -> Failure:
    return Failure([s for s, _t in steps], best.history, best.violations, [t for _s, t in steps])


def renumber(steps: list[tuple[Step, StepTrace]]) -> list[Step]:
    """Keep references pointing at the same objects after steps were deleted.

    Steps name tasks and claims by position from the newest, so deleting a dispatch shifts
    every later reference. Each step comes with the trace of its last run: the absolute
    positions it referred to and created; this rewrites the references of a shortened
    list to the positions those objects now have (assuming the surviving steps create the
    same objects, which the shrinker then checks by running)."""
    tasks = claims = 0
    new_task: dict[int, int] = {}
    new_claim: dict[int, int] = {}
    out: list[Step] = []
    for st, tr in steps:
        old_tasks = [new_task.get(i) for i in tr.task_refs]
        old_claims = [new_claim.get(i) for i in tr.claim_refs]
        if isinstance(st, Dispatch) and old_tasks and st.depends_on:
            st = replace(st, depends_on=tuple(tasks - 1 - n if n is not None else d for d, n
                                              in zip(st.depends_on, old_tasks, strict=False)))
        elif isinstance(st, RaceClaim) and old_tasks and old_tasks[0] is not None:
            st = replace(st, task=tasks - 1 - old_tasks[0])
        if (isinstance(st, (Holder, Clock, Fault)) and st.claim is not None and old_claims
                and old_claims[0] is not None):
            st = replace(st, claim=claims - 1 - old_claims[0])
        for k in range(tr.made_tasks):
            new_task[tr.first_task + k] = tasks + k
        for k in range(tr.made_claims):
            new_claim[tr.first_claim + k] = claims + k
        tasks, claims = tasks + tr.made_tasks, claims + tr.made_claims
        out.append(st)
    return out


def public_steps(steps: list[Step]) -> list[dict[str, Any]]:
    """Steps as reports and the example database store them (``steps.step_to_json``)."""
    return [step_to_json(st) for st in steps]


def recorded_schedules(steps: list[Step]) -> list[tuple[int, ...]]:
    """The schedule decisions the steps recorded, round by round, in order."""
    return [r for st in steps if isinstance(st, Scheduled) for r in st.schedules]


def step_label(st: Step) -> str:
    """What the coverage counts a step as: its kind, or what makes it special (a lease or
    lock boundary, a holder race, a hostile case)."""
    if isinstance(st, Clock) and st.offset is not None:
        return f"lease boundary {st.offset:+d}"
    if isinstance(st, LockRace) and st.offset is not None:
        return f"lock boundary {st.offset:+d}"
    if isinstance(st, Holder) and st.race > 1:
        return "holder race"
    if isinstance(st, Hostile):
        return f"hostile {st.case}"
    return kind(st)


def _simplifications(step: Step) -> list[Step]:
    """Smaller variants of one step, most useful first: fewer racers, no dependencies,
    then shorter schedules (a decision dropped, or the tail cut and left to the default
    order "lowest worker runs on")."""
    out: list[Step] = []

    def two_racers(smaller: Step) -> list[Step]:
        """With two racers left, a recorded schedule's later workers become worker 1."""
        variants = [smaller]
        if isinstance(smaller, Scheduled) and smaller.schedules:
            variants.append(replace(smaller, schedules=tuple(tuple(min(p, 1) for p in r)
                                                             for r in smaller.schedules)))
        return variants

    if isinstance(step, (RaceClaim, RacePoll)) and len(step.agents) > 2:
        out += two_racers(replace(step, agents=step.agents[:2]))
    if isinstance(step, LockRace) and len(step.owners) > 2:
        out += two_racers(replace(step, owners=step.owners[:2]))
    if isinstance(step, Holder) and step.race > 2:
        out += two_racers(replace(step, race=2))
    if isinstance(step, Dispatch) and step.depends_on:
        out.append(replace(step, depends_on=()))
    if isinstance(step, Scheduled) and step.schedules:
        rounds = step.schedules
        base = replace(step, pct=None)
        for r, decisions in enumerate(rounds):
            variants = [decisions[:cut] for cut in (0, len(decisions) // 2, len(decisions) - 1)]
            variants += [decisions[:i] + decisions[i + 1:] for i in range(len(decisions))]
            seen: set[tuple[int, ...]] = set()
            for v in variants:
                if len(v) < len(decisions) and tuple(v) not in seen:
                    seen.add(tuple(v))
                    out.append(replace(base, schedules=rounds[:r] + (tuple(v),) + rounds[r + 1:]))
        if step.pct is not None:
            out.append(base)
    if isinstance(step, Holder) and step.race == 2:
        out.append(replace(step, race=1))
    return out


def replay_count(runner: Runner, failure: Failure, tries: int) -> tuple[tuple[int, int], Failure | None]:
    """Run the minimal steps ``tries`` times; how many showed the same invariant."""
    hits, last = 0, None
    for done in range(tries):
        if runner.out_of_time():
            return (hits, done), last
        found, ex = runner.run_steps(failure.steps)
        if any(v.invariant == failure.invariant for v in found):
            hits += 1
            last = Failure(list(ex.steps), ex.history, found)
    return (hits, tries), last


def write_report(outcome: Outcome, *, argv_replay: str | None = None) -> Path:
    """report.json, history.jsonl, report.md and timeline.html in the report directory."""
    d = outcome.report_dir
    report = replace(outcome.report, replay=argv_replay or f"ferry-harness replay {d}")
    return write_report_dir(d, report, outcome.history)
