"""A fuzz campaign: generate with Hypothesis, shrink and replay ourselves, write the report.

Real races do not repeat on demand, so Hypothesis only *generates* here (phase
``generate``): it never shrinks, so it can never raise ``Flaky``. Failing executions are
kept as plain step lists; our shrinker removes steps while the failure still shows up in
*any* of a few tries, and the final minimal example is replayed N times to say how often it
reproduces ("reproduced 7/10"). The discovering execution's history is always kept.

A robustness finding (typed-errors, refusal-class, refusal-order) does not end the search:
it is kept and masked, and the search goes on for the others; a safety or liveness finding
ends it. Every distinct invariant found then gets its own shrunk, replayed minimal example,
safety first, the time left shared equally between them (PROTOCOL.md#several-findings).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import get_state_machine_test

from ferry_harness.check.annotations import Statements, fact
from ferry_harness.check.checker import (
    GENERIC,
    ROBUSTNESS,
    Checker,
    Violation,
    invariant_kind,
    invariant_status,
    rank,
)
from ferry_harness.check.history import FAIL, History
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.ops import JSONObject
from ferry_harness.check.sizes import WAL_BOUND_BYTES
from ferry_harness.errors import HarnessError, UsageError
from ferry_harness.report.paths import write_report_dir
from ferry_harness.report.schema import (
    BackendInfo,
    Budget,
    Coverage,
    Discovery,
    ExampleDatabaseUse,
    FoundInvariant,
    FuzzStats,
    Provenance,
    RaceOverlap,
    Report,
    ScheduleSearch,
    Stall,
    TraceStatement,
    ViolationReport,
    best_reproduction,
    involved_ops,
    violation_entry,
)
from ferry_harness.run.executor import Executor, Stats, StepTrace
from ferry_harness.run.exercised import evaluations, with_evaluations
from ferry_harness.run.generator import ViolationFound, machine_for
from ferry_harness.run.jobs import POSTGRES_ONE_JOB, JobDone, JobLink, Jobs
from ferry_harness.run.nemesis import Nemesis
from ferry_harness.run.steps import (
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
from ferry_harness.runtime.backend import (
    PG_MEANINGS,
    PG_SKIPPED,
    POSTGRES,
    Backend,
    PostgresBackend,
    SqliteBackend,
    backend_of,
    backend_skips,
)
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.dbdir import database_dir
from ferry_harness.runtime.provenance import provenance
from ferry_harness.runtime.schedule import compact, no_points_finding
from ferry_harness.runtime.target import import_root, load_factory

REPLAY_TRIES = 10
SHRINK_TRIES = 3
RELIABLE_HITS = 8  # of REPLAY_TRIES: below this a stress example is re-run in schedule mode
SCHEDULE_SEEDS = 20  # PCT interleavings tried for a deterministic replay
SHRINK_SHARE = 0.6  # of the time left after the search; the replays get the rest
REPORT_RESERVE_S = 2.0  # kept back from the time limit for the report and the pool's exit


class Snapshot(TypedDict):
    """Where a running campaign is, for its progress line."""

    examples: int
    race_rounds: int
    ops: int
    violations: int
    elapsed: float  # seconds since the campaign started
    budget: float | None  # the search budget (s), None: no budget
    phase: str  # "fuzzing", then the shrinking and reporting phases


Progress = Callable[[Snapshot], None]


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
    wal_bound_bytes: int = WAL_BOUND_BYTES
    shrink_budget_s: float = 30.0
    batch: int = 5
    mode: str = "stress"
    # A Hypothesis ExampleDatabase (any: directory, Redis, GitHub artifacts...). Failing
    # step lists are saved there, and the next campaign replays them before generating.
    database: Any = None
    # seconds an op may run before it is a liveness finding; None: adaptive (client.py)
    op_timeout_s: float | None = None
    # where each example's database is made: "auto" (a tmpfs if there is one), "disk" or a
    # directory (ferry_harness.runtime.dbdir)
    db_dir: str | None = None
    # a Postgres target's server (PROTOCOL.md#postgres-targets): a libpq URI; None:
    # $FERRY_PG_URI, else a throwaway cluster started for the campaign
    pg_uri: str | None = None
    # controller processes the search is split over (ferry_harness.run.jobs): each with
    # its own worker pool and every jobs-th Hypothesis batch; 1: the search as it always was
    jobs: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise UsageError(f"jobs must be a whole number ≥ 1, got {self.jobs!r}")
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
    detected_s: float | None = None  # seconds from the campaign's start to its discovery
    examples_until: int = 0  # examples searched until it, counting it
    # replayed from the example database: (the try that failed again, tries given)
    from_database: tuple[int, int] | None = None
    saved_invariant: str | None = None  # the invariant the database had it under

    @property
    def invariant(self) -> str:
        return self.violations[0].invariant


@dataclass
class JobResult:
    """What one search job (ferry_harness.run.jobs) found and counted, for job 0 to merge."""

    failures: list[Failure]
    last_pass: History | None  # its last passing example's history
    capabilities: set[str]
    coverage: dict[str, dict[str, int]]
    evaluated: dict[str, int]
    stats: Stats
    example_times: list[float]  # wall time of each example after its first (s)
    unknown: list[str]  # "object: why" for every search that gave up
    workers_replaced: int
    template_copies: int  # examples whose database was a copy of the template
    seconds: float  # the job's wall time, from its fork to its result (s)


@dataclass
class Finding:
    """One distinct invariant the campaign found, with its own minimal example."""

    invariant: str
    failure: Failure  # shrunk for this invariant (with the history of a replay showing it)
    found: Failure  # the execution as the search found it
    reproduced: tuple[int, int] | None = None  # replays that showed it, of those run
    schedule: ScheduleSearch | None = None  # the schedule-mode re-run, if one was tried


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
        factory = load_factory(cfg.target)
        self.backend_name = backend_of(factory)
        # a Postgres target may empty its own schema between examples (ferry_reset)
        self.reset = getattr(factory, "ferry_reset", None) if self.backend_name == POSTGRES \
            else None
        self.backend: Backend | None = None
        self.clock = SharedClock()
        self.pool = WorkerPool(cfg.target, self.clock, cfg.workers,
                               op_timeout_s=cfg.op_timeout_s, scheduled=cfg.mode == "schedule")
        self.db_dir = database_dir(cfg.db_dir)
        self.tmp = tempfile.mkdtemp(prefix="ferry-", dir=self.db_dir.path)
        self.stats = Stats()
        self.checker = Checker(ModelConfig(), wal_bound_bytes=cfg.wal_bound_bytes)
        self.nemesis = Nemesis(cfg.faults) if cfg.faults else None
        self.pool_start_s = 0.0
        self.stopping = False
        self.phase = "search"  # "shrink" / "replay": what the next runs are counted as
        self.runs = 0

    def __enter__(self) -> Runner:
        try:
            # a Postgres target: the run's own database (a throwaway cluster if no server
            # is given), made before the workers start and dropped after they stop
            self.backend = (PostgresBackend(self.cfg.pg_uri, cluster_parent=self.db_dir.path)
                            if self.backend_name == POSTGRES else SqliteBackend(self.tmp))
            t = time.perf_counter()
            self.pool.start()
            self.pool_start_s = time.perf_counter() - t
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.pool.close()
        finally:
            if self.backend is not None:
                self.backend.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def skips(self) -> dict[str, str]:
        """What the target declares unchecked, and what its backend cannot check."""
        return backend_skips(self.backend_name == POSTGRES, self.pool.skips)

    def backend_info(self) -> BackendInfo | None:
        """For the report: which backend ran (None: SQLite, the report as it always was)."""
        b = self.backend
        if not isinstance(b, PostgresBackend):
            return None
        return BackendInfo(name=POSTGRES, server=b.where_server,
                           isolation=(f"a fresh schema per example in database {b.dbname}"
                                      if not b.resets else
                                      f"one schema emptied by the target's ferry_reset between "
                                      f"examples ({b.resets} resets; {b.schemas_made} schemas "
                                      f"made) in database {b.dbname}"),
                           skipped=dict(PG_SKIPPED), meanings=dict(PG_MEANINGS))

    def executor(self, ignore: frozenset[str] = frozenset(), *,
                 defer_checks: bool = False) -> Executor:
        """A fresh example, counted under the phase that runs it; violations of the
        ``ignore`` invariants (already found) neither stop it nor are returned.
        ``defer_checks``: see ``Executor.check_deferred`` (the search's examples)."""
        self.runs += 1
        if self.phase == "shrink":
            self.stats.shrink_runs += 1
        elif self.phase == "replay":
            self.stats.replay_runs += 1
        else:
            self.stats.examples += 1
        assert self.backend is not None, "a Runner runs examples inside its with-block"
        return Executor(self.pool, self.clock, self._where(),
                         checker=self.checker, stats=self.stats, example=self.runs,
                         nemesis=self.nemesis, mode=self.cfg.mode, ignore=ignore,
                         backend=self.backend, defer_checks=defer_checks)

    def _where(self) -> str:
        """The next example's database: a fresh one, or on Postgres the previous schema
        emptied by the target's own ``ferry_reset`` (PROTOCOL.md#postgres-targets) once
        every worker closed its store (never while a worker is frozen)."""
        b = self.backend
        assert b is not None
        reset = self.reset if isinstance(b, PostgresBackend) else None
        if reset is not None and b.schemas_made and not self.pool.paused_workers() \
                and self.pool.close_stores():
            return b.fresh(self.runs, reset)
        return b.fresh(self.runs)

    def run_steps(self, steps: list[Step],
                  ignore: frozenset[str] = frozenset()) -> tuple[list[Violation], Executor]:
        """Run a step list on a fresh database; stop at the first violating step (one
        that shows an invariant not in ``ignore``)."""
        ex = self.executor(ignore)
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


def _others(invariant: str) -> frozenset[str]:
    """What a run looking for ``invariant`` goes on past: the other robustness findings
    (a hostile step that raises an untyped error must not hide a race after it)."""
    return ROBUSTNESS - {invariant}


class Campaign:
    """``ferry-harness fuzz``: the main job."""

    def __init__(self, cfg: CampaignConfig, progress: Progress | None = None) -> None:
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
        self.stopping = False
        # robustness invariants found so far: masked for the rest of the search
        self.masked: set[str] = set()
        self.findings: list[Finding] = []
        # campaign-wide: ops by name, refusals by class, steps by kind (boundaries, races…)
        self.coverage: dict[str, dict[str, int]] = {"ops": {}, "refusals": {}, "steps": {}}
        self.evaluated: dict[str, int] = {}  # invariant -> times a check of it judged an op
        self.search_end: float | None = None  # time.monotonic() when generating stops
        self.hard_end: float | None = None  # ... and when every run must have ended
        self.judged = 0  # examples judged so far (passed or failed)
        self._example_started = 0.0
        self.example_times: list[float] = []
        # a search split over jobs (cfg.jobs > 1, ferry_harness.run.jobs): what they share,
        # and what the other jobs added once they are merged
        self.link: JobLink | None = None
        self.jobs_run = 1  # jobs that searched
        self.job_seconds = 0.0  # the other jobs' wall time (s)
        self.job_replaced = 0  # workers the other jobs replaced
        self.job_copies = 0  # template copies the other jobs made
        self.job_notes: list[str] = []  # jobs that ended without their results

    # ---------------------------------------------------------------- Context protocol
    def new_executor(self) -> Executor:
        self._example_started = time.perf_counter()
        ex = self.runner.executor(frozenset(self.masked), defer_checks=True)
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
        if self.link is not None:
            s = self.runner.stats
            self.link.publish(s.examples, s.race_rounds, s.ops, len(self.failures))
        self.progress(self.snapshot())

    def _judged_one(self) -> int:
        """Count a judged example; how many the search judged so far, every job's."""
        self.judged += 1
        return self.judged if self.link is None else self.link.judged_one()

    def record_failure(self, ex: Executor, violations: list[Violation]) -> None:
        self._keep(ex, violations)
        self._tally(ex)
        self._example_done()

    def _keep(self, ex: Executor, violations: list[Violation], **more: Any) -> None:
        """Keep a failing execution; a robustness invariant it shows is masked from now
        on, so the search goes on looking for the others."""
        until = self._judged_one()
        self.failures.append(Failure(list(ex.steps), ex.history, violations, list(ex.traces),
                                     detected_s=time.perf_counter() - self.t0,
                                     examples_until=until, **more))
        self.masked |= {v.invariant for v in violations if v.invariant in ROBUSTNESS}
        if self.link is not None and self.search_over():
            self.link.stop_all()  # a safety finding ends every job's search

    def search_over(self) -> bool:
        """A safety (or liveness) finding ends the search; a robustness finding never
        does (PROTOCOL.md#several-findings)."""
        return any(invariant_kind(v.invariant) != "robustness"
                   for f in self.failures for v in f.violations)

    def record_pass(self, ex: Executor) -> None:
        self._judged_one()
        self.passes = (self.passes + [ex.history])[-20:]
        self._tally(ex)
        self._example_done()

    def snapshot(self) -> Snapshot:
        s = self.runner.stats
        more = self.link.others() if self.link is not None else None
        return {"examples": s.examples + (more.examples if more else 0),
                "race_rounds": s.race_rounds + (more.race_rounds if more else 0),
                "ops": s.ops + (more.ops if more else 0),
                "violations": len(self.failures) + (more.violations if more else 0),
                "elapsed": time.perf_counter() - self.t0,
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
        jobs = self._start_jobs()
        try:
            with Runner(self.cfg) as runner:
                self.runner = runner
                runner.pool.deadline = self.hard_end
                self._replay_saved()
                if not self.search_over():
                    self._generate()
                if jobs is not None:
                    jobs.link().stop_all()  # the budget, a finding or Ctrl-C: all stop
                    self._merge(jobs.collect(until=self.hard_end))
                if self.failures:
                    self.findings = self._settle(runner)
                    for f in self.findings:
                        self._save(f.failure, f.invariant)
        finally:
            if jobs is not None:
                jobs.close()
        # not (yet) for a Postgres target: --mode schedule runs one, but this re-run's
        # search was never measured there (and an async driver reaches no point)
        unreliable = [f for f in self.findings if self.cfg.mode == "stress"
                      and f.reproduced is not None and f.reproduced[0] < RELIABLE_HITS
                      and self.runner.backend_name != POSTGRES]
        if unreliable and not self.stopping and not self._nearly_out_of_time():
            self.phase = "finding a schedule"
            self.progress(self.snapshot())
            with Runner(replace(self.cfg, mode="schedule")) as sched:
                for i, f in enumerate(unreliable):  # safety first, the time left shared fairly
                    f.schedule = self._find_schedule(f.failure, invariant=f.invariant,
                                                     until=self._share_end(len(unreliable) - i),
                                                     runner=sched)
        elif unreliable and not self.stopping:  # no time to start a schedule-mode pool
            for f in unreliable:
                f.schedule = ScheduleSearch(found=False, tried=0, why="stopped at budget")
        seconds = time.perf_counter() - self.t0
        return self._outcome(self.findings, seconds)

    # ---------------------------------------------------------------- search jobs
    def _start_jobs(self) -> Jobs | None:
        """Fork the search's other jobs (cfg.jobs > 1), before this process starts its own
        worker pool; None: one job."""
        n = self.cfg.jobs
        if self.cfg.max_examples is not None:
            n = min(n, self.cfg.max_examples)  # each job searches at least one example
        if n < 2:
            return None
        if backend_of(load_factory(self.cfg.target)) == POSTGRES:
            raise UsageError(f"jobs={self.cfg.jobs}: {POSTGRES_ONE_JOB}")
        jobs = Jobs(n, self._search_job)
        self.link, self.jobs_run = jobs.link(), n
        return jobs

    def _search_job(self, link: JobLink) -> JobResult:
        """Job ``link.index``'s search (in its own process, a fork of job 0): its own pool
        and database directory, its share of the batches; the result as plain data."""
        self.link = link
        self.progress = lambda _s: None  # job 0 shows the progress of all
        self.cfg = replace(self.cfg, database=None)  # job 0 replays and saves
        with Runner(self.cfg) as runner:
            self.runner = runner
            runner.pool.deadline = self.hard_end
            self._generate()
            return JobResult(
                failures=self.failures, last_pass=self.passes[-1] if self.passes else None,
                capabilities=self.capabilities, coverage=self.coverage,
                evaluated=self.evaluated, stats=runner.stats,
                example_times=self.example_times,
                unknown=list(runner.checker.unknown), workers_replaced=runner.pool.replaced,
                template_copies=getattr(runner.backend, "copies", 0),
                seconds=time.perf_counter() - self.t0)

    def _merge(self, done: list[JobDone]) -> None:
        """Add what the other jobs found and counted to job 0's campaign."""
        for d in done:
            if d.raised:
                raise HarnessError(f"search job {d.index} of {self.jobs_run} failed: {d.error}")
            r = d.result
            if not isinstance(r, JobResult):
                self.job_notes.append(f"search job {d.index} of {self.jobs_run} {d.error}; "
                                      "its examples are not in this report")
                continue
            self.failures += r.failures
            if r.last_pass is not None:
                self.passes = (self.passes + [r.last_pass])[-20:]
            self.capabilities |= r.capabilities
            for part, counts in r.coverage.items():
                mine = self.coverage.setdefault(part, {})
                for k, n in counts.items():
                    mine[k] = mine.get(k, 0) + n
            for inv, n in r.evaluated.items():
                self.evaluated[inv] = self.evaluated.get(inv, 0) + n
            self.runner.stats.add(r.stats)
            self.example_times += r.example_times
            self.runner.checker.unknown.extend(r.unknown)
            self.job_seconds += r.seconds
            self.job_replaced += r.workers_replaced
            self.job_copies += r.template_copies
        self.link = None  # merged: from here on the counts are all job 0's

    def _nearly_out_of_time(self) -> bool:
        """Less left before the hard end than starting another worker pool takes."""
        return (self.hard_end is not None
                and self.hard_end - time.monotonic() < max(1.0, 2 * self.runner.pool_start_s))

    def _share_end(self, parts: int) -> float | None:
        """When the next of ``parts`` equal shares of the time left before the hard end
        ends (time.monotonic()); None without a time limit."""
        if self.hard_end is None:
            return None
        now = time.monotonic()
        return now + max(0.0, self.hard_end - now) / max(1, parts)

    def distinct(self) -> list[tuple[str, Failure]]:
        """Every distinct invariant the search found, safety first, each with the smallest
        execution that showed it. ``linearizable`` beside a specific invariant is that
        invariant seen by the generic search, not a finding of its own."""
        names: list[str] = []
        smallest_first = sorted(self.failures, key=lambda f: len(f.steps))  # stable
        for f in smallest_first:  # within a kind: the checker's order, smallest run first
            shown = {v.invariant for v in f.violations}
            names += [v.invariant for v in f.violations if v.invariant not in names
                      and not (v.invariant in GENERIC and len(shown) > 1)]
        names = list(dict.fromkeys(names))
        names.sort(key=rank)
        return [(n, min((f for f in self.failures if any(v.invariant == n for v in f.violations)),
                        key=lambda f: len(f.steps))) for n in names]

    def _settle(self, runner: Runner) -> list[Finding]:
        """Shrink and replay every distinct invariant found, safety first; each gets an
        equal share of the time left (what one leaves unused goes to the next), and within
        it shrinking gets SHRINK_SHARE, the replays the rest."""
        todo = self.distinct()
        out = []
        for i, (inv, found) in enumerate(todo):
            share_end = self._share_end(len(todo) - i)
            label = f" {inv}" if len(todo) > 1 else ""
            self.phase, runner.phase = f"shrinking{label}", "shrink"
            self.progress(self.snapshot())
            deadline = time.perf_counter() + self.cfg.shrink_budget_s
            if share_end is not None:
                left = share_end - time.monotonic()
                deadline = min(deadline, time.perf_counter() + SHRINK_SHARE * max(0.0, left))
            failure = shrink(runner, found, deadline=deadline, invariant=inv)
            self.phase, runner.phase = f"replaying{label}", "replay"
            self.progress(self.snapshot())
            reproduced, replayed = replay_count(runner, failure, REPLAY_TRIES, invariant=inv,
                                                until=share_end)
            if replayed is not None:  # the minimal steps, with a history that shows them
                failure = Failure(failure.steps, replayed.history, replayed.violations,
                                  failure.traces)
            out.append(Finding(inv, failure, found, reproduced))
        return out

    def _find_schedule(self, failure: Failure, *, invariant: str | None = None,
                       until: float | None = None, runner: Runner | None = None) -> ScheduleSearch:
        """A stress-mode example that replays unreliably is run again in schedule mode,
        one SQL statement at a time in PCT orders, until an interleaving shows the same
        invariant; that interleaving replays exactly. Bounded by ``until``
        (time.monotonic()) and the campaign's end."""
        if runner is None:
            with Runner(replace(self.cfg, mode="schedule")) as own:
                return self._find_schedule(failure, invariant=invariant, until=until,
                                           runner=own)
        inv = invariant or failure.invariant
        runner.pool.deadline = self.hard_end
        runner.phase = "replay"
        for n in range(SCHEDULE_SEEDS):
            if runner.out_of_time() or (until is not None and time.monotonic() >= until):
                return ScheduleSearch(found=False, tried=n, why="stopped at budget")
            steps = [replace(st, pct=n * 7919 + i) if isinstance(st, RACES) else st
                     for i, st in enumerate(failure.steps)]
            found, ex = runner.run_steps(steps, _others(inv))
            if any(v.invariant == inv for v in found):
                got = Failure(list(ex.steps), ex.history, found, list(ex.traces))
                (hits, tries), _ = replay_count(runner, got, REPLAY_TRIES, invariant=inv,
                                                until=until)
                sched = [compact(r) for r in recorded_schedules(got.steps) if r]
                return ScheduleSearch(found=True, steps=tuple(public_steps(got.steps)),
                                      schedule=" | ".join(sched), reproduced=f"{hits}/{tries}",
                                      tried=n + 1,
                                      replay="ferry-harness replay DIR --mode schedule")
        return ScheduleSearch(found=False, tried=SCHEDULE_SEEDS,
                              why="no PCT interleaving of these steps showed it")

    def halted(self) -> bool:
        """Stop generating: Ctrl-C / SIGTERM, or the search budget is spent."""
        return (self.stopping or (self.search_end is not None
                                  and time.monotonic() >= self.search_end)
                or (self.link is not None and self.link.stopped()))

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
                saved = json.loads(blob.decode())
                steps = [step_from_json(st) for st in saved["steps"]]
                inv = saved.get("invariant")
                inv = inv if isinstance(inv, str) else None
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError,
                    UsageError):
                db.delete(self._db_key, blob)  # unreadable, or saved by another ferry version
                continue
            if inv is not None and any(v.invariant == inv for f in self.failures
                                       for v in f.violations):
                continue  # already shown again by a saved example: keep it for next time
            self.replayed_saved += 1
            for k in range(SHRINK_TRIES):
                found, ex = self.runner.run_steps(steps, _others(inv) if inv else frozenset())
                if found:
                    self._keep(ex, found, from_database=(k + 1, SHRINK_TRIES),
                               saved_invariant=inv)
                    break
            else:
                db.delete(self._db_key, blob)
            if self.search_over():
                return

    def _save(self, failure: Failure, invariant: str | None = None) -> None:
        if self.cfg.database is not None:
            blob = json.dumps({"steps": public_steps(failure.steps),
                               "invariant": invariant or failure.invariant},
                              sort_keys=True).encode()
            self.cfg.database.save(self._db_key, blob)

    def request_stop(self) -> None:
        """Ctrl-C: finish the current example, skip shrinking, write what we have."""
        self.stopping = True
        if self.link is not None:
            self.link.stop_all()
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.stopping = True

    def _budget_left(self) -> bool:
        if self.stopping or (self.link is not None and self.link.stopped()):
            return False
        if self.cfg.budget_s is not None and time.perf_counter() - self.t0 >= self.cfg.budget_s:
            return False
        share = self._examples_share()
        if share is not None and self.runner.stats.examples >= share:
            return False
        return True

    def _examples_share(self) -> int | None:
        """This job's part of ``max_examples`` (all of it with one job)."""
        m = self.cfg.max_examples
        if m is None or self.link is None:
            return m
        jobs, index = self.link.jobs, self.link.index
        return m // jobs + (index < m % jobs)

    def _generate(self) -> None:
        machine = machine_for(self)
        base = settings(
            max_examples=self.cfg.batch, stateful_step_count=self.cfg.steps_per_example,
            deadline=None, database=None, phases=[Phase.generate],
            suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False)
        # one test for the whole search: making it hashes the state machine's source
        # (function_digest, ~20 ms), so each batch only gets its own seed and size
        test = get_state_machine_test(machine, settings=base)
        # no database, so no key: without one Hypothesis hashes the source again for every
        # batch; an unknown attribute to a later Hypothesis only brings the hashing back
        test._hypothesis_internal_database_key = None
        # with several jobs, job j searches batches j, j + jobs, j + 2·jobs, …: together the
        # batches one job would have searched in order
        batch, stride = (0, 1) if self.link is None else (self.link.index, self.link.jobs)
        share = self._examples_share()
        while self._budget_left() and not self.search_over():
            n = self.cfg.batch
            if share is not None:
                n = min(n, share - self.runner.stats.examples)
            test = seed(self.cfg.seed * 1_000_003 + batch)(test)
            test._hypothesis_internal_use_settings = settings(base, max_examples=max(1, n))
            batch += stride
            try:
                test()
            except ViolationFound:
                pass  # recorded by record_failure
            except Flaky:
                # Hypothesis replays a failing example once; a race need not repeat. We kept
                # the discovering execution, so this is expected, never shown to users.
                if not self.failures:
                    raise

    # ---------------------------------------------------------------- report
    def _outcome(self, settled: list[Finding], seconds: float) -> Outcome:
        stats = self.runner.stats
        invariants = with_evaluations(invariant_status(self.capabilities, self.runner.skips()),
                                      self.evaluated)
        top = settled[0] if settled else None
        failure = top.failure if top else None
        reproduced = top.reproduced if top else None
        # a pass needs at least one example that ran to its closing audit, and a search
        # that was not interrupted (a violation found before an interrupt still fails)
        verdict = "fail" if failure else ("interrupted" if self.stopping
                                          else "pass" if self.passes else "unknown")
        if verdict == "pass" and self.runner.checker.unknown:
            verdict = "unknown"
        history = failure.history if failure else (self.passes[-1] if self.passes else History())
        steady = sorted(self.example_times)[len(self.example_times) // 2] if self.example_times else None
        mode, findings = self.cfg.mode, []
        if self.cfg.mode == "schedule" and "schedule-points" not in self.capabilities:
            mode = "stress"
            findings.append(no_points_finding(self.runner.backend_name))
        findings += self.job_notes
        for op, sec in stats.stalls[:3]:
            findings.append(
                f"{op} ran {sec:.1f}s and kept the other workers waiting (a checkpoint that "
                "waits for readers, or a long write transaction, stalls every writer: "
                "checkpoint starvation)")
        violations, found = self._entries(settled, mode)
        discovery = None
        if top is not None:  # how the top-ranked finding was found
            discovery = Discovery(steps=len(top.found.steps),
                                  seconds_to_detect=round(top.found.detected_s or 0.0, 3),
                                  examples_until_found=top.found.examples_until)
        db_use = ExampleDatabaseUse(replayed=self.replayed_saved,
                                    failure_from_database=bool(top and top.found.from_database))
        if top is not None and top.found.from_database:
            try_no, tries = top.found.from_database
            db_use = replace(db_use, saved_steps=len(top.found.steps),
                             saved_invariant=top.found.saved_invariant, failed_on_try=try_no,
                             tries=tries, shown=top.found.invariant)
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
                workers_replaced=self.runner.pool.replaced + self.job_replaced,
                refusals=dict(sorted(self.coverage["refusals"].items())),
                coverage=Coverage(ops=dict(sorted(self.coverage["ops"].items())),
                                  steps=dict(sorted(self.coverage["steps"].items()))),
                faults=dict(stats.faults),
                stalls=tuple(Stall(op=op, seconds=sec) for op, sec in stats.stalls),
                examples_per_s=round(stats.examples / seconds, 2) if seconds else 0,
                ops_per_s=round(stats.ops / seconds, 1) if seconds else 0,
                setup_s=round(stats.setup_s, 3), rounds_s=round(stats.rounds_s, 3),
                checking_s=round(stats.checking_s, 3),
                other_s=round(max(0.0, seconds + self.job_seconds - stats.setup_s - stats.rounds_s
                                  - stats.checking_s), 3),
                database_dir=self.runner.db_dir.path,
                database_filesystem=self.runner.db_dir.filesystem,
                database_template_copies=getattr(self.runner.backend, "copies", 0)
                + self.job_copies,
                jobs=self.jobs_run,
                open_tx_local=stats.open_tx_local, open_tx_server=stats.open_tx_server,
                race_overlap=tuple(RaceOverlap(racers=k, rounds=r, overlapped=o, gated=g)
                                   for k, (r, o, g) in sorted(stats.overlap.items()))),
            budget=Budget(budget_s=self.cfg.budget_s, time_limit_s=self.cfg.time_limit_s(),
                          stopped_at_limit=bool(self.hard_end is not None
                                                and time.monotonic() >= self.hard_end)),
            unknown=tuple(self.runner.checker.unknown),
            findings=tuple(findings),
            example_database=db_use,
            discovery=discovery,
            invariants_found=tuple(found),
            interrupted=self.stopping,
            backend=self.runner.backend_info(),
        )
        return Outcome(verdict, report, Path(self.cfg.report_dir), failure, reproduced, stats, history)


    def _entries(self, findings: list[Finding],
                 mode: str) -> tuple[list[ViolationReport], list[FoundInvariant]]:
        """The report's violations, finding by finding in rank order (each with its own
        minimal example and counts), and one :class:`FoundInvariant` per finding."""
        own = {f.invariant for f in findings}
        entries: list[ViolationReport] = []
        found: list[FoundInvariant] = []
        for f in findings:
            # its own violations, then what was seen beside them that is no finding of its
            # own (the generic linearizable verdict on the same race)
            shown = sorted((v for v in f.failure.violations
                            if v.invariant == f.invariant or v.invariant not in own),
                           key=lambda v: (v.invariant != f.invariant, rank(v.invariant)))
            first = len(entries)
            for k, v in enumerate(shown):
                entries.append(violation_report(v, f.failure, f.reproduced, mode=mode,
                                                schedule=f.schedule if k == 0 else None))
            said = entries[first].reproduction if len(entries) > first else None
            found.append(FoundInvariant(
                invariant=f.invariant, kind=invariant_kind(f.invariant), violation=first,
                reproduced=said, seconds_to_detect=(round(f.found.detected_s, 3)
                                                    if f.found.detected_s is not None else None),
                from_example_database=f.found.from_database is not None))
        return entries, found

def violation_report(v: Violation, failure: Failure,
                     reproduced: tuple[int, int] | None, *, mode: str = "stress",
                     schedule: ScheduleSearch | None = None) -> ViolationReport:
    """A violation as the report stores it: the minimal steps and the ops involved, how
    often they reproduced and the best reproduction any mode gave."""
    recorded = recorded_schedules(failure.steps)
    schedules = [compact(r) for r in recorded if r]
    counted = f"{reproduced[0]}/{reproduced[1]}" if reproduced is not None else None
    stopped = reproduced[1] < REPLAY_TRIES if reproduced is not None else None
    best, best_mode, said = best_reproduction(counted, mode, schedule, stopped)
    alone = bool(failure.steps) and sequential(failure.history)
    if alone and said:
        said += "; sequential: one call at a time, no race needed"
    return violation_entry(
        v, failure.history, steps=tuple(public_steps(failure.steps)),
        schedule=" | ".join(schedules) if schedules else None,
        schedule_steps=sum(len(r) for r in recorded) if schedules else None,
        schedule_trace=(schedule_trace(failure.history, involved_ops(v)) if schedules
                        else None),
        reproduced=counted, replays_stopped_at_budget=stopped, schedule_mode=schedule,
        best_reproduced=best, best_mode=best_mode, reproduction=said,
        sequential=alone if failure.steps else None)


def schedule_trace(history: History, involved: set[int]) -> tuple[TraceStatement, ...]:
    """The SQL statements of the involved scheduled rounds, in the order they ran."""
    ran = {o.index: s.ran for o in history if (s := fact(o, Statements)) is not None}
    rounds = {o.round for o in history if o.index in involved and ran.get(o.index)}
    rows = sorted((o.round, seq, o.process, sql, switch, o.index) for o in history
                  if o.round in rounds for seq, sql, switch in ran.get(o.index, []))
    return tuple(TraceStatement(worker=w, sql=sql, op=i, switch=sw)
                 for _r, _s, w, sql, sw, i in rows)


def _fails_like(runner: Runner, steps: list[Step], invariant: str,
                tries: int) -> Failure | None:
    if invariant == "liveness":
        tries = 1  # a hang costs the whole op timeout per try, and repeats anyway
    for _ in range(tries):
        found, ex = runner.run_steps(steps, _others(invariant))
        if any(v.invariant == invariant for v in found):
            return Failure(list(ex.steps), ex.history, found, list(ex.traces))
    return None


def _ran(failure: Failure) -> list[tuple[Step, StepTrace]]:
    """The failure's steps but the closing audit, each with its trace (a step without one
    counts as busy and as referring to nothing)."""
    traces = failure.traces + [StepTrace(ops=1)] * (len(failure.steps) - len(failure.traces))
    return [(s, t) for s, t in zip(failure.steps, traces, strict=False) if not isinstance(s, Audit)]


def shrink(runner: Runner, failure: Failure, *, deadline: float, tries: int = SHRINK_TRIES,
           invariant: str | None = None) -> Failure:
    """Delta-debug the step list: drop chunks, then single steps, then simplify steps.

    A candidate counts as failing if *any* of ``tries`` runs shows the same invariant
    (``invariant``, default the failure's first), so a flaky race does not stop the
    shrink (nor does it ever surface as an error).
    """
    inv = invariant or failure.invariant
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

    def one_at_a_time() -> None:
        """Try the sequential form (every round's calls one after another, in order, then
        reversed): a bug that needs no race is reported as sequential (PROTOCOL.md), and
        replays whatever the machine does."""
        nonlocal steps, best
        for order in ("in-order", "reversed"):
            if not any(isinstance(s, Scheduled) and not s.sequential for s, _t in steps) \
                    or not more():
                break
            res = attempt([(_one_at_a_time(s, order), t) for s, t in steps])
            if res:
                steps, best = res

    one_at_a_time()  # first on the whole example
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
    # again on the shrunk steps: in a long example a later round can hide the bug in both
    # orders (a winner of the first race that is the holder at the next boundary)
    one_at_a_time()
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


def _one_at_a_time(step: Step, order: str) -> Step:
    """The step with its racing rounds run one call after another in ``order`` (no
    schedule to follow)."""
    if not isinstance(step, Scheduled):
        return step
    return replace(step, sequential=order, schedules=(), pct=None)


def sequential(history: History) -> bool:
    """Did every round of ``history`` run one call alone (no two calls in flight at once)?"""
    calls: dict[int, int] = {}
    for o in history:
        if o.round is not None:
            calls[o.round] = calls.get(o.round, 0) + 1
    return bool(calls) and max(calls.values()) == 1


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


def public_steps(steps: list[Step]) -> list[JSONObject]:
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

    if isinstance(step, Fault) and step.fault == "kill":
        # a timed kill lands where the victim happened to be; a kill right after one of its
        # commits lands there on every replay (the gap a store's split write leaves)
        if step.aim != "after-commit":
            out += [replace(step, aim="after-commit", delay_us=0, after_commits=n) for n in (1, 2)]
        elif (step.after_commits or 1) > 1:
            out.append(replace(step, after_commits=(step.after_commits or 1) - 1))
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


def replay_count(runner: Runner, failure: Failure, tries: int, *, invariant: str | None = None,
                 until: float | None = None) -> tuple[tuple[int, int], Failure | None]:
    """Run the minimal steps ``tries`` times (stopping at ``until``, time.monotonic(), or
    the campaign's end); how many showed the same invariant (``invariant``, default the
    failure's first)."""
    inv = invariant or failure.invariant
    hits, last = 0, None
    for done in range(tries):
        if runner.out_of_time() or (until is not None and time.monotonic() >= until):
            return (hits, done), last
        found, ex = runner.run_steps(failure.steps, _others(inv))
        if any(v.invariant == inv for v in found):
            hits += 1
            last = Failure(list(ex.steps), ex.history, found)
    return (hits, tries), last


def write_report(outcome: Outcome, *, argv_replay: str | None = None) -> Path:
    """report.json, history.jsonl, report.md and timeline.html in the report directory."""
    d = outcome.report_dir
    report = replace(outcome.report, replay=argv_replay or f"ferry-harness replay {d}")
    return write_report_dir(d, report, outcome.history)
