"""The shapes of bench's records: a run, its delivery check, a goal row, the ceiling, the
machine, the whole result (``bench.json``) and the progress events.

They are ``TypedDict``s, not dataclasses, because ``bench.json`` *is* these dicts: the
matrix fills a run's ratios in after its ceiling sample is known, the report and the plots
read the file back, and every key here is a key ``bench.json`` documents. ``total=False``
marks the records whose keys arrive in stages (or only for ferry_core).
"""

from __future__ import annotations

from typing import Any, TypedDict


class Latency(TypedDict):
    """``latency_summary``: milliseconds."""

    p50: float
    p99: float
    p999: float
    max: float
    mean: float
    count: int


class Verified(TypedDict, total=False):
    """Every task completed exactly once, as the workers saw it (and, on ferry_core, as
    its database says: the ``db_*`` keys)."""

    ok: bool
    tasks: int
    completed_distinct: int
    claimed_distinct: int
    claimed_twice: int
    completed_twice: int
    never_completed: int
    db_ok: bool
    db_completed: int
    db_tasks_in_db: int
    db_tokens_issued: int


class DbVerified(TypedDict):
    """ferry_core's database read back after a run."""

    ok: bool
    completed: int
    tasks_in_db: int
    tokens_issued: int


class RunRecord(TypedDict, total=False):
    """One run of the matrix: the runner's keys, then the matrix's (``rep``, ``label``, the
    ceiling ratios, the scaling)."""

    workers: int
    strategy: str
    busy_policy: str
    tasks: int
    claims: int
    fulfilled: int
    claims_per_s: float
    lifecycles_per_s: float
    seconds: float
    latency_ms: Latency
    fulfill_latency_ms: Latency
    latency_hist: list[int]
    cas_miss_ratio: float
    cas_attempts: int
    cas_misses: int
    cas_miss_source: str
    claim_empty: int
    poll_none_while_tasks_left: int
    busy_errors: int
    other_errors: int
    jain_fairness: float
    per_worker_claims: list[int]
    wal_bytes: int
    wal_bytes_max: int
    cpu_s: float
    lifecycles_per_cpu_s: float
    cpu_util: float
    preemptions: int
    voluntary_switches: int
    error: str | None
    target: str
    #: "sqlite" or "postgres" (a schema of a server: no ``-wal``, so the ``wal_bytes`` are
    #: 0, and no ratio to the SQLite ceilings: ``ceiling*``, ``raw_half``,
    #: ``lifecycle_ratio`` and ``same_sql_*`` are left out)
    backend: str
    verified: Verified
    rep: int
    label: str
    ceiling: float
    ceiling_ratio: float
    raw_half: float
    lifecycle_ratio: float
    same_sql_per_s: float
    same_sql_ratio: float
    #: claim p99 / p99.9 (ms) of the bare same-SQL replay at this worker count in this
    #: repetition: the tail the machine's SQLite and file system put on the same statements
    same_sql_p99_ms: float
    same_sql_p999_ms: float
    vs_1_worker: float


class SameSqlRun(TypedDict, total=False):
    """ferry_core's lifecycle statements replayed bare by W processes."""

    workers: int
    tasks: int
    lifecycles: int
    lifecycles_per_s: float
    seconds: float
    latency_ms: Latency  # a whole lifecycle: claiming poll + fulfill
    claim_latency_ms: Latency  # the claiming poll's statements (busy waits included)
    fulfill_latency_ms: Latency  # the fulfill's statements
    busy_errors: int
    jain_fairness: float
    cpu_s: float
    lifecycles_per_cpu_s: float
    verified: bool
    error: str | None
    rep: int


class GoalRow(TypedDict):
    """Issue 19's acceptance for one run at 1, 8 or 16 workers."""

    rep: int
    workers: int
    label: str
    target: str
    strategy: str
    busy_policy: str
    tasks: int
    lifecycles_per_s: float
    raw_half: float
    lifecycle_ratio: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    jain: float
    cas_miss: float
    checks: dict[str, bool]
    met: bool


class SameSqlCeiling(TypedDict):
    """ferry_core's lifecycle SQL, traced and replayed bare (the same-SQL ceiling)."""

    by_workers: dict[str, list[float]]  # worker count -> lifecycles/s per repetition
    runs: list[SameSqlRun]
    poll: list[str]
    fulfill: list[str]
    trace_events: list[Any]  # the statements as traced from the store
    settings: dict[str, Any]  # the connection's PRAGMAs
    method: str


class Ceiling(TypedDict, total=False):
    """The raw write ceiling of the machine, and ferry_core's same-SQL ceiling."""

    updates_per_s: float
    raw_half_per_s: float
    samples_per_s: list[float]
    statement: str
    method: str
    same_sql: SameSqlCeiling
    ferry_core_claim_update_per_s: float
    ferry_core_claim_update_note: str


class Machine(TypedDict, total=False):
    """``bench.json``'s ``machine``."""

    cpu_count: int | None
    cpus_usable: int
    cpu_model: str
    platform: str
    python: str
    sqlite: str
    db_dir_fs: str
    loadavg_start: list[float]
    loadavg_end: list[float]
    ferry_commit: str
    ferry: Any  # provenance(): as every report.json records it
    started_utc: str


class BenchResult(TypedDict, total=False):
    """``bench.json``: the matrix's result."""

    target: str
    targets: list[str]
    ferry_core: bool
    tasks: int
    repeat: int
    workers: list[int]
    strategies: list[str]
    busy_policies: list[str]
    runs: list[RunRecord]
    ceiling: Ceiling
    machine: Machine
    goal: list[GoalRow]
    notes: list[str]


class ProgressEvent(TypedDict, total=False):
    """What a running matrix tells its progress line."""

    phase: str  # "dispatch", "drain", "ceiling", "run" or "result"
    label: str
    done: int
    tasks: int
    elapsed: float
    index: int
    total: int
    record: RunRecord
