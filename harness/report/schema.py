"""The run report: one typed schema for every kind of run, and its one JSON codec.

A fuzz campaign, a named scenario, an offline ``check`` of a recorded history and a crash
campaign all describe their run with :class:`Report` (``kind`` says which); the renderers
(:mod:`ferry_harness.report.markdown`, :mod:`ferry_harness.report.timeline`) read only this type.
:func:`report_to_json` writes the ``report.json`` (``crash.json``) users read — its keys
keep the names and values they always had, and a section a kind does not have is left
out; :func:`report_from_json` reads one back, tolerating missing keys and wrongly typed
values (old, partial or hand-written reports still render: what cannot be read is left
at its default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ferry_harness.check.history import Op
from ferry_harness.check.invariant import Violation
from ferry_harness.check.ops import JSONObject
from ferry_harness.check.rules import anchor_for

REPORT_KINDS = ("fuzz", "scenario", "check", "crash")


# --------------------------------------------------------------------------- sections
@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Which ferry wrote the report (:func:`ferry_harness.runtime.provenance.provenance`)."""

    version: str | None = None  # the ferry package version, e.g. "0.1.0"
    commit: str | None = None  # the git commit of the checkout, None for an installed copy
    dirty: str | None = None  # "yes" if the checkout had uncommitted changes, "no", or None


@dataclass(frozen=True, kw_only=True)
class TraceStatement:
    """One SQL statement of a scheduled round, in the order the statements ran."""

    worker: int  # the worker process id that ran it
    sql: str  # the statement text (stripped, at most 500 characters)
    op: int | None  # the history index of the op it belongs to
    switch: bool  # the scheduler switched to this worker just before it


@dataclass(frozen=True, kw_only=True)
class ScheduleSearch:
    """A stress-mode example that replayed unreliably, re-run in schedule mode."""

    found: bool  # an interleaving showing the same invariant was found
    steps: tuple[Mapping[str, Any], ...] | None = None  # the steps that showed it (found)
    schedule: str | None = None  # its decisions, rounds joined by " | " (found)
    reproduced: str | None = None  # "hits/tries" of its exact replays (found)
    tried: int  # PCT interleavings tried
    why: str | None = None  # why none was found (found is False)
    replay: str | None = None  # the command that replays it (found)


@dataclass(frozen=True, kw_only=True)
class ViolationReport:
    """One broken invariant, with what shows it."""

    invariant: str  # the invariant id (PROTOCOL.md#invariants), e.g. "single-winner"
    message: str  # what went wrong, in one sentence
    ops: tuple[int, ...] = ()  # history indices of the ops that show it
    detail: Mapping[str, Any] = field(default_factory=dict)  # the checker's detail
    # (object, linearized_prefix, partition_ops, model_state, …)
    # the minimal generator steps (JSON objects as the generator writes them); [] for a
    # scenario (a script, see Report.script); None where there are none (check, crash)
    steps: tuple[Mapping[str, Any], ...] | None = None
    history: tuple[Op, ...] | None = None  # the ops involved (None: not recorded: crash)
    schedule: str | None = None  # schedule mode: the decisions, rounds joined by " | "
    schedule_steps: int | None = None  # schedule mode: how many decisions in all
    schedule_trace: tuple[TraceStatement, ...] | None = None  # schedule mode: the statements
    reproduced: str | None = None  # "hits/tries" of the minimal example's replays
    replays_stopped_at_budget: bool | None = None  # the replays were cut by the budget
    schedule_mode: ScheduleSearch | None = None  # the schedule-mode re-run, if one was tried
    best_reproduced: str | None = None  # the best "hits/tries" any mode gave
    best_mode: str | None = None  # the mode that gave it: "stress" or "schedule"
    # what every report says, e.g. "10/10 in schedule mode (2/10 in stress)"
    reproduction: str | None = None
    # the minimal example fails with every call alone, one after another (no race needed);
    # None: no generated steps (a scenario, check, crash)
    sequential: bool | None = None

    @property
    def protocol(self) -> str:
        """Where the broken rule is explained: the PROTOCOL.md section of its rule
        (harness/check/rules.py), else the invariant's own section."""
        return anchor_for(self.invariant, self.message)


def best_reproduction(reproduced: str | None, mode: str | None,
                      schedule: ScheduleSearch | None,
                      stopped: bool | None = None) -> tuple[str | None, str | None, str | None]:
    """(best "hits/tries", its mode, the sentence reports show) from the replays in the
    run's ``mode`` and the schedule-mode re-run: the better count leads, the other follows.

    >>> best_reproduction("2/10", "stress", ScheduleSearch(found=True, reproduced="10/10", tried=1))
    ('10/10', 'schedule', '10/10 in schedule mode (2/10 in stress)')
    """
    mode = mode or "stress"
    cut = " (stopped at budget)" if stopped else ""
    if reproduced is None:
        return None, None, None
    other = schedule.reproduced if schedule is not None and schedule.found else None
    if other is not None and _ratio(other) > _ratio(reproduced):
        return other, "schedule", f"{other} in schedule mode ({reproduced} in {mode}{cut})"
    if other is not None:
        return reproduced, mode, f"{reproduced} in {mode}{cut} ({other} in schedule mode)"
    return reproduced, mode, f"{reproduced}{cut}"


def _ratio(hits_tries: str) -> float:
    hits, _, tries = hits_tries.partition("/")
    try:
        return int(hits) / int(tries) if int(tries) else 0.0
    except ValueError:
        return 0.0


def said_reproduced(v: ViolationReport, mode: str | None = None) -> str | None:
    """What a report says about how often ``v`` reproduced: the sentence the run stored,
    else (an older report) the same sentence made from its counts."""
    if v.reproduction:
        return v.reproduction
    return best_reproduction(v.reproduced, mode, v.schedule_mode, v.replays_stopped_at_budget)[2]


@dataclass(frozen=True, kw_only=True)
class FoundInvariant:
    """One distinct invariant a run found, in the order reports name them (safety first,
    PROTOCOL.md#several-findings)."""

    invariant: str  # the invariant id
    kind: str  # "safety", "liveness" or "robustness"
    violation: int  # index in Report.violations of its first entry (its minimal example)
    reproduced: str | None = None  # the sentence of that entry's best reproduction
    seconds_to_detect: float | None = None  # from the start of the campaign to it (s)
    from_example_database: bool = False  # first shown again by a saved example


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """What a fuzz campaign exercised, over every searched example."""

    ops: Mapping[str, int] = field(default_factory=dict)  # operation name -> calls
    steps: Mapping[str, int] = field(default_factory=dict)  # step kind -> steps
    # (kinds such as "race_claim", "lease boundary -1", "holder race", "hostile …")


@dataclass(frozen=True, kw_only=True)
class RaceOverlap:
    """The race rounds of one size, and how many really raced.

    A round *overlapped* when every racer's store call, measured in its worker on
    CLOCK_MONOTONIC, was running at one common instant (a call held by the race gate
    counts from its release); it was *gated* when the race gate held every racer at its
    first SQL statement and released them together (ferry_harness.runtime.gate). A target
    whose SQL bypasses Python's ``sqlite3.connect`` is never gated: its overlap is chance.
    """

    racers: int  # calls in the round (2, 3, 4 ...)
    rounds: int  # race rounds of that size
    overlapped: int  # of those, the rounds whose racers' calls all overlapped in time
    gated: int = 0  # of those rounds, the ones the gate released together


@dataclass(frozen=True, kw_only=True)
class Stall:
    """An operation that ran long enough to keep the other workers waiting."""

    op: str  # the operation, as the executor names it
    seconds: float  # how long it ran (s)


@dataclass(frozen=True, kw_only=True)
class FuzzStats:
    """The numbers of a fuzz campaign (counts over the whole campaign)."""

    examples: int = 0  # examples searched (generated or replayed from the database)
    shrink_runs: int = 0  # step lists run while shrinking
    replay_runs: int = 0  # runs replaying the minimal example
    steps: int = 0  # generator steps run, in all phases
    ops: int = 0  # operations run, in all phases
    race_rounds: int = 0  # rounds in which several workers raced at a barrier
    seconds: float = 0.0  # wall time of the campaign (s)
    race_rounds_per_s: float = 0.0  # race_rounds / seconds
    pool_start_s: float = 0.0  # time to start the worker pool (s)
    first_example_s: float = 0.0  # wall time of the first example (s)
    steady_example_s: float | None = None  # median wall time of the later examples (s)
    workers_replaced: int = 0  # workers killed and replaced (faults, hangs, deaths)
    refusals: Mapping[str, int] = field(default_factory=dict)  # refusal class -> count
    coverage: Coverage = field(default_factory=Coverage)  # what the search exercised
    faults: Mapping[str, int] = field(default_factory=dict)  # fault kind/landing -> count
    stalls: tuple[Stall, ...] = ()  # operations that stalled the others (longest first)
    examples_per_s: float = 0.0  # examples / seconds
    ops_per_s: float = 0.0  # ops / seconds
    # controller processes the search was split over (fuzz --jobs): the counts above are
    # every job's; the shrink, replays and report ran in the first job only
    jobs: int = 1
    # where the controllers' time went, s: opening each example's stores (setup), rounds
    # of calls (the store calls and the pipes, wake-ups and barriers around them), the
    # checker; other: generation (Hypothesis), probes, shrink and report bookkeeping. With
    # several jobs these add up every job's time (their sum is more than ``seconds``)
    setup_s: float = 0.0
    rounds_s: float = 0.0
    checking_s: float = 0.0
    other_s: float = 0.0
    database_dir: str | None = None  # where the examples' database files were made (--db-dir)
    database_filesystem: str | None = None  # its file system ("tmpfs": in memory; "ext4", …)
    # examples whose SQLite database started as a copy of the one the target's first store
    # made (ferry_harness.runtime.backend.SqliteBackend); 0: every one was made fresh
    database_template_copies: int = 0
    # a Postgres target: steps after which "no connection idle in transaction" was judged
    # from the workers' psycopg connections alone / by a look at the server's
    # pg_stat_activity (ferry_harness.runtime.pgconns); 0 / 0 on SQLite
    open_tx_local: int = 0
    open_tx_server: int = 0
    race_overlap: tuple[RaceOverlap, ...] = ()  # per race size (fewest racers first)


@dataclass(frozen=True, kw_only=True)
class ScenarioStats:
    """The numbers of one scenario run."""

    rounds: int = 0  # rounds the scenario's script ran
    ops: int = 0  # operations in its history
    seconds: float = 0.0  # wall time of the scenario (s)
    refusals: Mapping[str, int] = field(default_factory=dict)  # refusal class -> count


@dataclass(frozen=True, kw_only=True)
class CheckStats:
    """The numbers of an offline check of a recorded history."""

    ops: int = 0  # operations in the history
    seconds: float = 0.0  # time the checker took (s)
    ops_per_s: float | None = None  # ops / seconds (None when seconds is 0)
    refusals: Mapping[str, int] = field(default_factory=dict)  # refusal class -> count


Stats = FuzzStats | ScenarioStats | CheckStats


@dataclass(frozen=True, kw_only=True)
class BackendInfo:
    """Which database backend a fuzz run used, when it is not SQLite
    (PROTOCOL.md#postgres-targets): the SQLite-only checks it skipped, and what the WAL
    invariants meant on it."""

    name: str = "sqlite"  # "postgres"
    server: str | None = None  # the server used (a throwaway cluster, or --pg-uri redacted)
    isolation: str | None = None  # how examples were kept apart ("a fresh schema per example")
    skipped: Mapping[str, str] = field(default_factory=dict)  # check -> why it was skipped
    meanings: Mapping[str, str] = field(default_factory=dict)  # invariant -> its meaning here


@dataclass(frozen=True, kw_only=True)
class Budget:
    """The time a fuzz campaign was given and whether it ran into it."""

    budget_s: float | None = None  # --budget: the search stops then (s); None: unbounded
    time_limit_s: float | None = None  # the whole run ends by then: budget × 1.1 + 10 s
    stopped_at_limit: bool = False  # the run reached the time limit


@dataclass(frozen=True, kw_only=True)
class ExampleDatabaseUse:
    """What the example database (failing step lists saved by earlier runs) did."""

    replayed: int = 0  # saved failures replayed before generating
    failure_from_database: bool = False  # the reported failure is one of them
    saved_steps: int | None = None  # steps of the saved example that failed again
    saved_invariant: str | None = None  # the invariant it was saved under
    failed_on_try: int | None = None  # which try showed a violation again (of tries)
    tries: int | None = None  # tries it was given
    shown: str | None = None  # the invariant that try showed


@dataclass(frozen=True, kw_only=True)
class Discovery:
    """How the first failure was found."""

    steps: int = 0  # steps of the smallest failing example before shrinking
    seconds_to_detect: float = 0.0  # from the start of the campaign to the first failure (s)
    examples_until_found: int = 0  # examples searched until it, counting it


@dataclass(frozen=True, kw_only=True)
class ScenarioInfo:
    """The named scenario a scenario report is about (``scenarios/``)."""

    name: str  # the scenario's name, e.g. "thundering-herd"
    invariant: str  # the invariant it probes
    description: str  # what it does
    source: str  # the rule it stages (a PROTOCOL.md section)
    status: str  # "pass", "fail", "skip" or "error" (could not run)
    explanation: str  # why it ended so


# --------------------------------------------------------------------------- the report
@dataclass(frozen=True, kw_only=True)
class Report:
    """One run's report. Sections a kind has not are None (and absent from the JSON)."""

    kind: str  # "fuzz", "scenario", "check" or "crash" (REPORT_KINDS)
    # "pass", "fail", "unknown" (nothing decided: never a pass) or "interrupted" (Ctrl-C
    # or SIGTERM before anything was found: never a pass; with a violation it is "fail")
    verdict: str
    ferry: Provenance = field(default_factory=Provenance)  # which ferry wrote it
    target: str = ""  # the --target (module:factory), or what was checked
    target_path: str | None = None  # fuzz: the directory the target was imported from
    mode: str | None = None  # "stress", "schedule", "scenario NAME" or "check"
    seed: int | None = None  # fuzz: the campaign's seed
    workers: int | None = None  # worker processes
    faults: tuple[str, ...] | None = None  # fuzz: the fault kinds injected (--faults)
    capabilities: tuple[str, ...] | None = None  # the target's operations and features
    capabilities_from: str | None = None  # check: where the capabilities came from
    scenario: ScenarioInfo | None = None  # scenario: which one
    config: Mapping[str, Any] | None = None  # crash: the CrashConfig fields
    summary: Mapping[str, Any] | None = None  # crash: the campaign's tally (kills, orphans…)
    invariants: Mapping[str, str] | None = None  # invariant id -> "checked (N evaluations)",
    # "not exercised (why)" or "skipped (why)"
    violations: tuple[ViolationReport, ...] = ()  # what broke (empty on a pass)
    stats: Stats | None = None  # the run's numbers
    budget: Budget | None = None  # fuzz: the time budget
    unknown: tuple[str, ...] | None = None  # what stayed undecided (why the verdict is unknown)
    findings: tuple[str, ...] | None = None  # notes about the store or the run (stalls, …)
    example_database: ExampleDatabaseUse | None = None  # fuzz: the example database's part
    discovery: Discovery | None = None  # fuzz, on a failure: how it was found
    # fuzz: every distinct invariant found, safety first (PROTOCOL.md#several-findings)
    invariants_found: tuple[FoundInvariant, ...] | None = None
    interrupted: bool | None = None  # fuzz: Ctrl-C or SIGTERM stopped the run
    script: tuple[str, ...] | None = None  # scenario: what its script did, line by line
    replay: str | None = None  # the command that replays the run
    command: str | None = None  # crash: the command line that runs the campaign again
    backend: BackendInfo | None = None  # fuzz on a Postgres target: which backend ran


def involved_ops(v: Violation) -> set[int]:
    """The history indices that show a violation: its own ops and the partition the
    search judged (a report keeps exactly these history lines)."""
    return set(v.ops) | set(v.detail.get("partition_ops", []))


def violation_entry(v: Violation, history: Iterable[Op] | None, **more: Any) -> ViolationReport:
    """``v`` as a report stores it, with the history lines that show it (``None``: none
    recorded) and any further fields (``steps``, ``reproduced``, …) in ``more``.

    >>> violation_entry(Violation("single-winner", "two winners"), None).invariant
    'single-winner'
    """
    if history is not None:
        shown = involved_ops(v)
        by_index = {o.index: o for o in history}
        more["history"] = tuple(by_index[i] for i in sorted(shown) if i in by_index)
    return ViolationReport(invariant=v.invariant, message=v.message, ops=tuple(v.ops),
                           detail=v.detail, **more)


# --------------------------------------------------------------------------- to JSON
def report_to_json(report: Report) -> JSONObject:
    """The report as the JSON object written to report.json (crash.json)."""
    out: JSONObject = {}
    for f in fields(Report):
        value = getattr(report, f.name)
        if value is None and not (f.name == "target_path" and report.kind == "fuzz"):
            continue
        out[f.name] = _encode(value)
    return out


def _encode(value: Any) -> Any:
    if isinstance(value, Op):
        return value.to_dict()
    if isinstance(value, ViolationReport):
        out = {}
        for f in fields(value):
            if f.name == "steps":  # protocol goes where Violation.to_dict put it
                out["protocol"] = value.protocol
            v = getattr(value, f.name)
            if v is not None:
                out[f.name] = _encode(v)
        if "protocol" not in out:
            out["protocol"] = value.protocol
        return out
    if isinstance(value, ScheduleSearch | ExampleDatabaseUse):  # optional fields: left out
        return {f.name: _encode(getattr(value, f.name)) for f in fields(value)
                if getattr(value, f.name) is not None}
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _encode(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


# --------------------------------------------------------------------------- from JSON
def report_from_json(data: Any) -> Report:
    """Read a report.json (crash.json) object back; any key may be missing or malformed."""
    d = data if isinstance(data, Mapping) else {}
    kind = d.get("kind")
    if kind not in REPORT_KINDS:
        kind = ("scenario" if isinstance(d.get("scenario"), Mapping)
                else "crash" if isinstance(d.get("summary"), Mapping)
                else "check" if d.get("mode") == "check" else "fuzz")
    stats_type = {"fuzz": FuzzStats, "scenario": ScenarioStats, "check": CheckStats}.get(kind)
    verdict = d.get("verdict")
    return Report(
        kind=kind,
        verdict=verdict if isinstance(verdict, str) and verdict else "unknown",
        ferry=_section(Provenance, d.get("ferry")) or Provenance(),
        target=_str(d.get("target")) or "",
        target_path=_str(d.get("target_path")),
        mode=_str(d.get("mode")),
        seed=_int(d.get("seed")),
        workers=_int(d.get("workers")),
        faults=_strings(d.get("faults")),
        capabilities=_strings(d.get("capabilities")),
        capabilities_from=_str(d.get("capabilities_from")),
        scenario=_scenario(d.get("scenario")),
        config=dict(d["config"]) if isinstance(d.get("config"), Mapping) else None,
        summary=dict(d["summary"]) if isinstance(d.get("summary"), Mapping) else None,
        invariants=({str(k): str(v) for k, v in d["invariants"].items()}
                    if isinstance(d.get("invariants"), Mapping) else None),
        violations=tuple(_violation(v) for v in _list(d.get("violations"))
                         if isinstance(v, Mapping)),
        stats=_stats(stats_type, d.get("stats")) if stats_type else None,
        budget=_section(Budget, d.get("budget")),
        unknown=_strings(d.get("unknown")),
        findings=_strings([d["findings"]] if isinstance(d.get("findings"), str)
                          else d.get("findings")),
        example_database=_section(ExampleDatabaseUse, d.get("example_database")),
        discovery=_section(Discovery, d.get("discovery")),
        invariants_found=(tuple(_found(f) for f in d["invariants_found"] if isinstance(f, Mapping))
                          if isinstance(d.get("invariants_found"), list) else None),
        interrupted=(d["interrupted"] if isinstance(d.get("interrupted"), bool) else None),
        script=_strings(d.get("script")),
        replay=_str(d.get("replay")),
        command=_str(d.get("command")),
        backend=_section(BackendInfo, d.get("backend")),
    )


def _violation(d: Mapping[str, Any]) -> ViolationReport:
    trace = d.get("schedule_trace")
    return ViolationReport(
        invariant=_str(d.get("invariant")) or "?",
        message=_str(d.get("message")) or "",
        ops=tuple(i for i in _list(d.get("ops")) if isinstance(i, int) and not isinstance(i, bool)),
        detail=dict(d["detail"]) if isinstance(d.get("detail"), Mapping) else {},
        steps=(tuple(_step(s) for s in d["steps"]) if isinstance(d.get("steps"), list) else None),
        history=(tuple(o for o in map(op_from_json, d["history"]) if o is not None)
                 if isinstance(d.get("history"), list) else None),
        schedule=_str(d.get("schedule")),
        schedule_steps=_int(d.get("schedule_steps")),
        schedule_trace=(tuple(_trace(t) for t in trace if isinstance(t, Mapping))
                        if isinstance(trace, list) else None),
        reproduced=_str(d.get("reproduced")),
        replays_stopped_at_budget=(d["replays_stopped_at_budget"]
                                   if isinstance(d.get("replays_stopped_at_budget"), bool)
                                   else None),
        schedule_mode=_schedule_search(d.get("schedule_mode")),
        best_reproduced=_str(d.get("best_reproduced")),
        best_mode=_str(d.get("best_mode")),
        reproduction=_str(d.get("reproduction")),
        sequential=d["sequential"] if isinstance(d.get("sequential"), bool) else None,
    )


def _found(d: Mapping[str, Any]) -> FoundInvariant:
    seconds = d.get("seconds_to_detect")
    return FoundInvariant(invariant=_str(d.get("invariant")) or "?",
                          kind=_str(d.get("kind")) or "safety",
                          violation=_int(d.get("violation")) or 0,
                          reproduced=_str(d.get("reproduced")),
                          seconds_to_detect=(float(seconds) if isinstance(seconds, int | float)
                                             and not isinstance(seconds, bool) else None),
                          from_example_database=d.get("from_example_database") is True)


def op_from_json(d: Any) -> Op | None:
    """One history line (``Op.to_dict``) back as an Op; None if it is not one."""
    if isinstance(d, Op):
        return d
    if not isinstance(d, Mapping):
        return None
    try:
        return Op.from_dict({k: v for k, v in d.items() if k in _OP_FIELDS})
    except (TypeError, ValueError):
        return None


_OP_FIELDS = frozenset(f.name for f in fields(Op))


def _step(s: Any) -> Mapping[str, Any]:
    """A generator step stays the JSON object it is; anything else is kept as its text."""
    return dict(s) if isinstance(s, Mapping) else {"kind": str(s)}


def _trace(t: Mapping[str, Any]) -> TraceStatement:
    return TraceStatement(worker=_int(t.get("worker")) or 0, sql=str(t.get("sql", "")),
                          op=_int(t.get("op")), switch=bool(t.get("switch")))


def _schedule_search(d: Any) -> ScheduleSearch | None:
    if not isinstance(d, Mapping):
        return None
    steps = d.get("steps")
    return ScheduleSearch(found=bool(d.get("found")), tried=_int(d.get("tried")) or 0,
                          why=_str(d.get("why")),
                          steps=tuple(_step(s) for s in steps) if isinstance(steps, list) else None,
                          schedule=_str(d.get("schedule")), reproduced=_str(d.get("reproduced")),
                          replay=_str(d.get("replay")))


def _scenario(d: Any) -> ScenarioInfo | None:
    if not isinstance(d, Mapping):
        return None
    return ScenarioInfo(**{f.name: _str(d.get(f.name)) or "" for f in fields(ScenarioInfo)})


def _stats(cls: type, d: Any) -> Stats | None:
    if not isinstance(d, Mapping):
        return None
    kw: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        if f.name == "coverage":
            v = _section(Coverage, v)
        elif f.name == "stalls":
            v = tuple(Stall(op=str(s.get("op")), seconds=float(s.get("seconds") or 0))
                      for s in _list(v) if isinstance(s, Mapping))
        elif f.name == "race_overlap":
            v = tuple(RaceOverlap(**{k: _int(r.get(k)) or 0 for k in _OVERLAP_FIELDS})
                      for r in _list(v) if isinstance(r, Mapping))
        elif f.name in ("refusals", "faults"):
            v = dict(v) if isinstance(v, Mapping) else None
        elif isinstance(v, Mapping | list):
            v = None
        if v is not None or f.name == "steady_example_s" or f.name == "ops_per_s":
            kw[f.name] = v
    return cls(**kw)


_OVERLAP_FIELDS = tuple(f.name for f in fields(RaceOverlap))


def _section(cls: type, d: Any) -> Any:
    """A flat section (its fields plain values) from a JSON object; None if not one."""
    if not isinstance(d, Mapping):
        return None
    names = {f.name for f in fields(cls)}
    return cls(**{k: (dict(v) if isinstance(v, Mapping) else v)
                  for k, v in d.items() if k in names})


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list | tuple) else []


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _strings(v: Any) -> tuple[str, ...] | None:
    return tuple(str(x) for x in v) if isinstance(v, Sequence) and not isinstance(v, str) \
        else None
