"""One correct SQLite-WAL store with a switch for every freedom PROTOCOL.md grants.

Written from PROTOCOL.md and README's table "What ferry holds a store to" alone (not from
ferry_core or ferry's model), so that ferry's precision is measured on every allowed
behaviour instead of on the few that the hand-written variants happen to choose. Every
switch below names one freedom (a "may", a (b) row of README's table) or one capability
subset of PROTOCOL.md#capability-declarations; `Config` holds one value per switch.

The harness imports a factory by name, so every configuration in `COMBOS` is exposed as
a module attribute (`tests.variants.configurable:combo_07`); `python -m
tests.variants.configurable` prints each combo's switch values.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ferry_core.errors import (
    FerryError,
    InvalidArgument,
    InvalidToken,
    LeaseExpired,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    StoreError,
    TokenRequired,
    WrongState,
)
from tests.covering import generate

# --------------------------------------------------------------------------- switches
#: Every switch and its choices; the first choice of each is the default. The comment
#: names the PROTOCOL.md section (or README row) that allows every choice.
SWITCHES: dict[str, tuple[str, ...]] = {
    # #bearer-token-or-agent-binding, #declaring-holder-binding (README row 1)
    "binding": ("bearer", "bound", "bound_declared"),
    # #which-refusal-class, #declaring-refusal-order (README row 2)
    "refusal_order": ("reference", "reference_declared", "token_first", "state_last"),
    # #when-expiry-is-applied (README row 3)
    "expiry_by": ("sweep_claim", "sweep_claim_holder", "every_write"),
    # #late-results (README row 4): "required" keeps only what must be kept;
    # "after_applied" also keeps a late result refused after the expiry was applied;
    # "after_applied_le" also refuses a token whose lease ended, presented after the task
    # was claimed again, with LeaseExpired (#which-refusal-class) and keeps its result.
    "late_result": ("required", "after_applied", "after_applied_le"),
    # #keeping-late-failure-reasons (README row 4)
    "late_fail": ("drop", "keep"),
    # #salvage-entries, #salvage-representation (README row 5)
    "salvage_shape": ("dict", "value", "list", "json_text"),
    # issue 24 item 1: the new window may start anywhere from lease_expires_at to the
    # instant the expiry is applied.
    "queued_at": ("lease_end", "now"),
    # #dependencies-and-the-failure-cascade (README row 9): FAILED at dispatch, or
    # SUBMITTED until the next sweep() (no other call materialises it)
    "dead_dep": ("failed_now", "until_sweep"),
    # #sweep, README row 11: what sweep() counts is not checked
    "sweep_return": ("tasks_changed", "expiries_only"),
    # #two-phase-idle-polls (README row 8): how the read phase asks
    "idle_poll": ("count", "exists", "candidates"),
    # #sqlite-rules "the claim is atomic", #claim-strategy-and-busy-handling
    "claim": ("cas", "immediate"),
    # #claim-strategy-and-busy-handling
    "busy": ("sqlite_10s", "sqlite_1s", "sqlite_30s", "retry_loop"),
    # #dispatch: "not a positive integer"; issue 24 item 3 (refusal or a working acceptance)
    "huge_ttl": ("refuse", "accept"),
    # #claim-fields, #taskview-fields "Shape": dataclass instances or plain dicts
    "shape": ("dict", "dataclass"),
    # #the-factory "its own connection(s)"
    "connections": ("one", "two"),
    # #release_lock-on-an-expired-lock (README row 10): the owner's release of its expired
    # lock nobody took since leaves it (False) or drops it (True)
    "lock_release": ("keep_expired", "drop_expired"),
    # #invalidargument (a store without `results`): a non-JSON result refused or accepted
    "bad_result": ("refuse", "accept"),
    # #declaring-refusal-order "Argument checks are not in this order": a token that is not
    # a string refused by the guard (InvalidToken) or as a bad argument first
    "token_type": ("guard", "argument"),
    # #limits "without either, a store may still apply it or not": the extend cap on a
    # store without `lease` or without `queue-ttl`
    "extend_cap": ("apply", "skip"),
    # #capability-declarations: each feature left out (declared in ferry_capabilities),
    # each operation missing (simply not defined), or everything
    "caps": (
        "full", "declared_full",
        "no_lease", "no_queue_ttl", "no_targets", "no_results", "no_limits",
        "no_typed_refusals", "no_dag_feature",
        "no_claim", "no_sweep", "no_dag", "locks_only", "poll_only", "no_inspect",
        "no_salvage", "no_locks",
    ),
}

ALL_OPS: frozenset[str] = frozenset({
    "dispatch", "poll_next", "claim", "fulfill", "fail", "release", "extend", "salvage",
    "sweep", "get", "inspect", "salvaged", "acquire_lock", "release_lock", "lock_holder",
    "checkpoint",
})
ALL_FEATURES: frozenset[str] = frozenset(
    {"lease", "queue-ttl", "targets", "results", "limits", "typed-refusals", "dag"})
_LOCK_OPS = frozenset({"acquire_lock", "release_lock", "lock_holder"})

#: caps value -> (operations the store defines, features it has, declared in
#: ferry_capabilities?). A missing operation is simply not defined (detection, as
#: PROTOCOL.md#missing-methods says); a missing feature is declared.
_CAPS: dict[str, tuple[frozenset[str], frozenset[str], bool]] = {
    "full": (ALL_OPS, ALL_FEATURES, False),
    "declared_full": (ALL_OPS, ALL_FEATURES, True),
    "no_lease": (ALL_OPS, ALL_FEATURES - {"lease"}, True),
    "no_queue_ttl": (ALL_OPS, ALL_FEATURES - {"queue-ttl"}, True),
    "no_targets": (ALL_OPS, ALL_FEATURES - {"targets"}, True),
    "no_results": (ALL_OPS, ALL_FEATURES - {"results"}, True),
    "no_limits": (ALL_OPS, ALL_FEATURES - {"limits"}, True),
    "no_typed_refusals": (ALL_OPS, ALL_FEATURES - {"typed-refusals"}, True),
    "no_dag_feature": (ALL_OPS, ALL_FEATURES - {"dag"}, True),
    "no_claim": (ALL_OPS - {"claim"}, ALL_FEATURES, False),
    "no_sweep": (ALL_OPS - {"sweep"}, ALL_FEATURES, False),
    "no_dag": (ALL_OPS, ALL_FEATURES - {"dag"}, False),  # dispatch has no depends_on
    "locks_only": (_LOCK_OPS | {"checkpoint"}, frozenset(), False),
    "poll_only": (frozenset({"dispatch", "poll_next", "fulfill", "get", "checkpoint"}),
                  ALL_FEATURES - {"dag"}, False),
    "no_inspect": (ALL_OPS - {"inspect"}, ALL_FEATURES, False),
    "no_salvage": (ALL_OPS - {"salvage", "salvaged"}, ALL_FEATURES, False),
    "no_locks": (ALL_OPS - _LOCK_OPS, ALL_FEATURES, False),
}


def meaningful(caps: str) -> frozenset[str]:
    """The switches that change behaviour under a capability subset (the others are
    pinned to their default, so a combo's name never claims a behaviour it lacks)."""
    ops, feats, _ = _CAPS[caps]
    if caps == "locks_only":
        return frozenset({"busy", "connections", "caps", "lock_release"})
    out = set(SWITCHES)
    if not _LOCK_OPS <= ops:
        out.discard("lock_release")
    if "results" in feats or "fulfill" not in ops:
        out.discard("bad_result")
    if "typed-refusals" not in feats:
        out.discard("token_type")
    if "limits" not in feats or {"lease", "queue-ttl"} <= feats or "extend" not in ops:
        out.discard("extend_cap")
    if "lease" not in feats:
        out -= {"late_result", "late_fail", "queued_at"}
        if "queue-ttl" not in feats:
            out.discard("expiry_by")
    if "queue-ttl" not in feats:
        out.discard("queued_at")
    if "dag" not in feats:
        out.discard("dead_dep")
    if "sweep" not in ops:
        out.discard("sweep_return")
    if "salvaged" not in ops:
        out -= {"salvage_shape", "late_result", "late_fail"}
    if "fail" not in ops:
        out.discard("late_fail")
    if "typed-refusals" not in feats:
        out.discard("refusal_order")
    return frozenset(out)


def allowed(values: Mapping[str, str]) -> bool:
    """False for choices that contradict each other (PROTOCOL.md gives them no meaning)."""
    if values.get("caps") == "no_typed_refusals" and values.get("binding") == "bound_declared":
        return False  # holder-binding names classes; the target cannot tell classes apart
    if (values.get("refusal_order") == "reference_declared"
            and values.get("late_result") == "after_applied_le"):
        return False  # the LeaseExpired freedom holds only without refusal-order
    return True


@dataclass(frozen=True)
class Config:
    """One value per switch (see SWITCHES)."""

    binding: str = "bearer"
    refusal_order: str = "reference"
    expiry_by: str = "sweep_claim"
    late_result: str = "required"
    late_fail: str = "drop"
    salvage_shape: str = "dict"
    queued_at: str = "lease_end"
    dead_dep: str = "failed_now"
    sweep_return: str = "tasks_changed"
    idle_poll: str = "count"
    claim: str = "cas"
    busy: str = "sqlite_10s"
    huge_ttl: str = "refuse"
    shape: str = "dict"
    connections: str = "one"
    lock_release: str = "keep_expired"
    bad_result: str = "refuse"
    token_type: str = "guard"
    extend_cap: str = "apply"
    caps: str = "full"

    def __post_init__(self) -> None:
        for name, choices in SWITCHES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"{name}={getattr(self, name)!r}: not one of {choices}")

    def normalized(self) -> Config:
        """The same store with every switch its capabilities make meaningless pinned to
        the default."""
        keep = meaningful(self.caps)
        return dataclasses.replace(self, **{
            name: SWITCHES[name][0] for name in SWITCHES if name not in keep})

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


# --------------------------------------------------------------------------- shapes
@dataclass(frozen=True)
class ClaimRecord:
    """A Claim as a dataclass (the `shape=dataclass` choice)."""

    task_id: str
    agent_id: str
    token: str
    claimed_at: int
    lease_expires_at: int | None
    attempt: int


@dataclass(frozen=True)
class ViewRecord:
    """A TaskView as a dataclass (the `shape=dataclass` choice)."""

    task_id: str
    status: str
    target_agent: str | None
    title: str
    payload: Any
    requester: str
    depends_on: list[str]
    queue_ttl_ms: int
    exec_ttl_ms: int
    max_attempts: int
    created_at: int
    queued_at: int | None
    claimed_by: str | None
    claimed_at: int | None
    lease_expires_at: int | None
    completed_at: int | None
    attempt: int
    extend_count: int
    release_count: int
    result: Any
    error_reason: str | None
    is_logically_expired: bool


# --------------------------------------------------------------------------- store
_SCHEMA = """
CREATE TABLE IF NOT EXISTS cfg_tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    target_agent TEXT, title TEXT NOT NULL, payload TEXT, requester TEXT NOT NULL,
    depends_on TEXT NOT NULL,
    queue_ttl_ms INTEGER NOT NULL, exec_ttl_ms INTEGER NOT NULL, max_attempts INTEGER NOT NULL,
    created_at INTEGER NOT NULL, queued_at INTEGER,
    claimed_by TEXT, claimed_at INTEGER, lease_start INTEGER, completed_at INTEGER,
    attempt INTEGER NOT NULL DEFAULT 0, extend_count INTEGER NOT NULL DEFAULT 0,
    release_count INTEGER NOT NULL DEFAULT 0,
    result TEXT, error_reason TEXT, claim_token TEXT
);
CREATE INDEX IF NOT EXISTS cfg_tasks_status ON cfg_tasks(status, queued_at, seq);
CREATE TABLE IF NOT EXISTS cfg_deps (task_id TEXT NOT NULL, dep_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS cfg_deps_task ON cfg_deps(task_id);
CREATE INDEX IF NOT EXISTS cfg_deps_dep ON cfg_deps(dep_id);
CREATE TABLE IF NOT EXISTS cfg_tokens (
    token TEXT PRIMARY KEY, task_id TEXT NOT NULL, agent_id TEXT NOT NULL, why TEXT
);
CREATE TABLE IF NOT EXISTS cfg_salvage (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT NOT NULL, agent_id TEXT NOT NULL,
    kind TEXT NOT NULL, data TEXT NOT NULL, created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS cfg_salvage_task ON cfg_salvage(task_id, id);
CREATE TABLE IF NOT EXISTS cfg_locks (
    name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at INTEGER NOT NULL
);
"""

_TASK_COLS = ("seq", "task_id", "status", "target_agent", "title", "payload", "requester",
              "depends_on", "queue_ttl_ms", "exec_ttl_ms", "max_attempts", "created_at",
              "queued_at", "claimed_by", "claimed_at", "lease_start", "completed_at",
              "attempt", "extend_count", "release_count", "result", "error_reason",
              "claim_token")
_SELECT = "SELECT " + ", ".join(_TASK_COLS) + " FROM cfg_tasks"
_MAX_RELEASES, _MAX_EXTENDS, _EXTEND_CAP_FACTOR = 3, 5, 4
_HUGE_TTL = 2 ** 62
_INT64_MAX = 2 ** 63 - 1
_WAL_RESET_BYTES = 8 * 1024 * 1024
_CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")
_BUSY_MS = {"sqlite_10s": 10_000, "sqlite_1s": 1_000, "sqlite_30s": 30_000, "retry_loop": 0}
_RETRY_DEADLINE_S = 10.0
_FINAL = ("COMPLETED", "FAILED", "TIMED_OUT")


class _Refuse(Exception):
    """Carries a refusal out of a transaction that must still commit (a late result)."""

    def __init__(self, exc: FerryError) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _row(values: tuple) -> dict[str, Any]:
    return dict(zip(_TASK_COLS, values))


class ConfigurableStore:
    """A protocol store whose every freedom is chosen by `Config`."""

    def __init__(self, path: str, *, clock: Callable[[], int], config: Config = Config()) -> None:
        self._cfg = config
        self._clock = clock
        _, self._feats, _ = _CAPS[config.caps]
        self._writes = 0
        self._path = os.fspath(path)
        try:
            self._w = self._connect()
            self._r = self._connect() if config.connections == "two" else self._w
            self._retrying(self._init_schema)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {self._path!r} as this store's database: {exc}") from exc

    # ----------------------------------------------------------------- plumbing
    def _connect(self) -> sqlite3.Connection:
        busy_ms = _BUSY_MS[self._cfg.busy]
        con = sqlite3.connect(self._path, isolation_level=None, timeout=busy_ms / 1000,
                              check_same_thread=False)
        con.execute(f"PRAGMA busy_timeout={busy_ms}")
        return con

    def _init_schema(self) -> None:
        w = self._w
        mode = w.execute("PRAGMA journal_mode").fetchall()[0][0]
        if str(mode).lower() != "wal":
            w.execute("PRAGMA journal_mode=WAL").fetchall()
        w.execute("PRAGMA synchronous=NORMAL")
        w.execute("PRAGMA journal_size_limit=67108864")
        names = {r[0] for r in w.execute(
            "SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
        if "cfg_tasks" in names:
            return
        if names and not names <= {"sqlite_sequence"}:
            raise StoreError(f"{self._path!r} belongs to another application "
                             f"(tables {sorted(names)}); use a fresh file")
        w.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    w.execute(stmt)
            w.execute("COMMIT")
        except BaseException:
            if w.in_transaction:
                w.execute("ROLLBACK")
            raise

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        """Run one call; busy handling is the `busy` switch. No raw sqlite3 error escapes."""
        deadline = time.monotonic() + _RETRY_DEADLINE_S
        delay = 0.0005
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                for con in {id(self._w): self._w, id(self._r): self._r}.values():
                    if con.in_transaction:
                        try:
                            con.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                msg = str(exc).lower()
                busy = "locked" in msg or "busy" in msg
                if busy and self._cfg.busy == "retry_loop" and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.02)
                    continue
                raise StoreError(f"the database stayed unusable: {exc}; retry later") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"database error: {exc}") from exc

    def _tx(self, body: Callable[[], Any]) -> Any:
        """`body` inside one BEGIN IMMEDIATE transaction on the write connection. A body
        that raises `_Refuse` still commits (a late result kept as salvage)."""
        w = self._w

        def run() -> Any:
            w.execute("BEGIN IMMEDIATE")
            try:
                out = body()
            except _Refuse as refusal:
                w.execute("COMMIT")
                self._after_write()
                return refusal
            except BaseException:
                if w.in_transaction:
                    w.execute("ROLLBACK")
                raise
            w.execute("COMMIT")
            self._after_write()
            return out

        out = self._retrying(run)
        if isinstance(out, _Refuse):
            raise out.exc
        return out

    def _after_write(self) -> None:
        """Bound the WAL (#bound-the-wal): reset it once it passes 8 MiB."""
        self._writes += 1
        if self._writes % 64:
            return
        try:
            if os.path.getsize(self._path + "-wal") > _WAL_RESET_BYTES:
                self._w.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except (OSError, sqlite3.Error):
            pass

    def _refusal(self, cls: type[FerryError], msg: str) -> FerryError:
        if "typed-refusals" not in self._feats:
            return WrongState(f"refused: {msg}")  # one catch-all class
        return cls(msg)

    def _has(self, feature: str) -> bool:
        return feature in self._feats

    # ----------------------------------------------------------------- time arithmetic
    def _lease_end(self, row: Mapping[str, Any]) -> int | None:
        if row["lease_start"] is None or not self._has("lease"):
            return None
        return row["lease_start"] + row["exec_ttl_ms"]

    def _window_end(self, row: Mapping[str, Any]) -> int | None:
        if row["queued_at"] is None or not self._has("queue-ttl"):
            return None
        return row["queued_at"] + row["queue_ttl_ms"]

    def _lease_over(self, row: Mapping[str, Any], now: int) -> bool:
        end = self._lease_end(row)
        return row["status"] == "CLAIMED" and end is not None and now >= end

    def _window_over(self, row: Mapping[str, Any], now: int) -> bool:
        end = self._window_end(row)
        return row["status"] == "SUBMITTED" and end is not None and now >= end

    # SQL filters (approximate in REAL arithmetic only for TTLs near 2**63, where the
    # exact instants are decided in Python afterwards).
    def _due_filters(self, sweep: bool = False) -> list[str]:
        """What counts as due. A dependent dispatched onto a dead dependency is work for
        every call under `dead_dep=failed_now`, for `sweep` alone under `until_sweep`."""
        out = []
        if self._has("lease"):
            out.append("(status = 'CLAIMED' AND lease_start + exec_ttl_ms <= :now)")
        if self._has("queue-ttl"):
            out.append("(status = 'SUBMITTED' AND queued_at + queue_ttl_ms <= :now)")
        if self._has("dag") and (sweep or self._cfg.dead_dep == "failed_now"):
            out.append("(status = 'SUBMITTED' AND EXISTS (SELECT 1 FROM cfg_deps d JOIN "
                       "cfg_tasks t ON t.task_id = d.dep_id WHERE d.task_id = "
                       "cfg_tasks.task_id AND t.status IN ('FAILED', 'TIMED_OUT')))")
        return out

    def _ready_filter(self) -> str:
        parts = ["status = 'SUBMITTED'"]
        if self._has("queue-ttl"):
            parts.append("queued_at + queue_ttl_ms > :now")
        if self._has("targets"):
            parts.append("(target_agent IS NULL OR target_agent = :agent)")
        if self._has("dag"):
            parts.append("NOT EXISTS (SELECT 1 FROM cfg_deps d JOIN cfg_tasks t ON "
                         "t.task_id = d.dep_id WHERE d.task_id = cfg_tasks.task_id AND "
                         "t.status != 'COMPLETED')")
        return " AND ".join(parts)

    # ----------------------------------------------------------------- expiry
    def _apply_due(self, now: int, sweep: bool = False) -> int:
        """Apply every due expiry and cascade in the order of their instants. Returns the
        number of tasks changed, or of expiries applied (the `sweep_return` switch)."""
        filters = self._due_filters(sweep)
        changed = expiries = 0
        if not filters:
            return 0
        sql = f"{_SELECT} WHERE " + " OR ".join(filters)
        while True:
            rows = [_row(r) for r in self._w.execute(sql, {"now": now}).fetchall()]
            events = []
            for row in rows:
                if self._lease_over(row, now):
                    events.append((self._lease_end(row), row["seq"], "lease", row))
                elif self._window_over(row, now):
                    dead = self._dead_dep(row["task_id"]) if self._has("dag") else None
                    if dead is not None:  # its cascade was in effect since its dispatch
                        events.append((row["created_at"], row["seq"], "dead", (row, dead)))
                    else:
                        events.append((self._window_end(row), row["seq"], "queue", row))
                elif row["status"] == "SUBMITTED" and self._has("dag"):
                    dead = self._dead_dep(row["task_id"])
                    if dead is not None:  # dispatched onto a dead dependency
                        events.append((row["created_at"], row["seq"], "dead", (row, dead)))
            if not events:
                break
            instant, _, kind, item = min(events, key=lambda e: (e[0], e[1]))
            if kind == "lease":
                changed += 1 + self._expire_lease(item, instant, now)
                expiries += 1
            elif kind == "queue":
                self._set_final(item["task_id"], "TIMED_OUT", instant,
                                "queue window over: nobody claimed it in time")
                changed += 1 + self._cascade(item["task_id"], instant)
                expiries += 1
            else:
                row, (dep_id, dep_status) = item
                self._set_final(row["task_id"], "FAILED", instant,
                                f"dependency {dep_id} ended {dep_status}")
                changed += 1 + self._cascade(row["task_id"], instant)
        return changed if self._cfg.sweep_return == "tasks_changed" else expiries

    def _dead_dep(self, task_id: str) -> tuple[str, str] | None:
        rows = self._w.execute(
            "SELECT t.task_id, t.status FROM cfg_deps d JOIN cfg_tasks t ON t.task_id = "
            "d.dep_id WHERE d.task_id = ? AND t.status IN ('FAILED', 'TIMED_OUT') "
            "ORDER BY t.seq", (task_id,)).fetchall()
        return (rows[0][0], rows[0][1]) if rows else None

    def _expire_lease(self, row: dict[str, Any], end: int, now: int) -> int:
        self._w.execute("UPDATE cfg_tokens SET why = 'expired' WHERE token = ?",
                        (row["claim_token"],))
        if row["attempt"] < row["max_attempts"]:
            queued = end if self._cfg.queued_at == "lease_end" else now
            self._w.execute(
                "UPDATE cfg_tasks SET status = 'SUBMITTED', queued_at = ?, claimed_by = NULL,"
                " claimed_at = NULL, lease_start = NULL, claim_token = NULL, extend_count = 0"
                " WHERE task_id = ? AND status = 'CLAIMED'", (queued, row["task_id"]))
            return 0
        self._set_final(row["task_id"], "TIMED_OUT", end, "lease expired, no attempts left")
        return self._cascade(row["task_id"], end)

    def _set_final(self, task_id: str, status: str, at: int, reason: str | None) -> None:
        self._w.execute(
            "UPDATE cfg_tasks SET status = ?, completed_at = ?, error_reason = ?, "
            "claim_token = NULL WHERE task_id = ?", (status, at, reason, task_id))

    def _cascade(self, dead_id: str, instant: int) -> int:
        """Fail every SUBMITTED dependent of `dead_id`, transitively, at `instant`."""
        if not self._has("dag"):
            return 0
        changed = 0
        todo = [dead_id]
        while todo:
            dep = todo.pop()
            status = self._w.execute("SELECT status FROM cfg_tasks WHERE task_id = ?",
                                     (dep,)).fetchall()[0][0]
            rows = [_row(r) for r in self._w.execute(
                f"{_SELECT} WHERE status = 'SUBMITTED' AND task_id IN "
                "(SELECT task_id FROM cfg_deps WHERE dep_id = ?) ORDER BY seq",
                (dep,)).fetchall()]
            for row in rows:
                end = self._window_end(row)
                if end is not None and end <= instant:
                    self._set_final(row["task_id"], "TIMED_OUT", end,
                                    "queue window over: nobody claimed it in time")
                else:
                    self._set_final(row["task_id"], "FAILED", max(instant, row["created_at"]),
                                    f"dependency {dep} ended {status}")
                changed += 1
                todo.append(row["task_id"])
        return changed

    def _anything_due(self, now: int, sweep: bool = False) -> bool:
        filters = self._due_filters(sweep)
        if not filters:
            return False
        return bool(self._r.execute(
            "SELECT EXISTS (SELECT 1 FROM cfg_tasks WHERE " + " OR ".join(filters) + ")",
            {"now": now}).fetchall()[0][0])

    # ----------------------------------------------------------------- views
    def _view(self, row: Mapping[str, Any], now: int) -> Any:
        lease_end = self._lease_end(row)
        expired = self._lease_over(row, now) or self._window_over(row, now)
        fields = {
            "task_id": row["task_id"], "status": row["status"],
            "target_agent": row["target_agent"], "title": row["title"],
            "payload": json.loads(row["payload"]) if row["payload"] is not None else None,
            "requester": row["requester"], "depends_on": json.loads(row["depends_on"]),
            "queue_ttl_ms": row["queue_ttl_ms"], "exec_ttl_ms": row["exec_ttl_ms"],
            "max_attempts": row["max_attempts"], "created_at": row["created_at"],
            "queued_at": row["queued_at"], "claimed_by": row["claimed_by"],
            "claimed_at": row["claimed_at"],
            "lease_expires_at": lease_end if row["status"] == "CLAIMED" else None,
            "completed_at": row["completed_at"], "attempt": row["attempt"],
            "extend_count": row["extend_count"], "release_count": row["release_count"],
            "result": json.loads(row["result"]) if row["result"] is not None else None,
            "error_reason": row["error_reason"], "is_logically_expired": bool(expired),
        }
        return ViewRecord(**fields) if self._cfg.shape == "dataclass" else fields

    def _claim_out(self, task_id: str, agent: str, token: str, now: int, ttl: int,
                   attempt: int) -> Any:
        fields = {"task_id": task_id, "agent_id": agent, "token": token, "claimed_at": now,
                  "lease_expires_at": now + ttl, "attempt": attempt}
        return ClaimRecord(**fields) if self._cfg.shape == "dataclass" else fields

    def _salvage_entry(self, row: tuple) -> Any:
        task_id, agent_id, kind, data, created_at = row
        value = json.loads(data)
        shape = self._cfg.salvage_shape
        if shape == "value":
            return value
        if shape == "list":
            return [kind, agent_id, value, created_at]
        entry = {"task_id": task_id, "agent_id": agent_id, "kind": kind, "data": value,
                 "created_at": created_at}
        return json.dumps(entry) if shape == "json_text" else entry

    # ----------------------------------------------------------------- validation
    def _ttl(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidArgument(f"{name} must be a positive integer number of ms, "
                                  f"got {value!r}")
        if value > _INT64_MAX or (value >= _HUGE_TTL and self._cfg.huge_ttl == "refuse"):
            raise InvalidArgument(f"{name}={value} is too large: this store keeps instants "
                                  f"as SQLite integers, so TTLs must stay below 2**62 ms")
        return value

    @staticmethod
    def _json(name: str, value: Any) -> str:
        try:
            return json.dumps(value, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"{name} must be a JSON value: {exc}") from exc

    # ----------------------------------------------------------------- dispatch
    def _dispatch(self, target_agent: str | None, title: str, payload: Any, requester: str,
                  depends_on: Iterable[str], queue_ttl_ms: int, exec_ttl_ms: int,
                  max_attempts: int) -> str:
        now = self._clock()
        if target_agent is not None and not isinstance(target_agent, str):
            raise InvalidArgument(f"target_agent must be a str or None, got {target_agent!r}")
        if not isinstance(title, str) or not isinstance(requester, str):
            raise InvalidArgument("title and requester must be strings")
        if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Iterable):
            raise InvalidArgument("depends_on must be a list of task ids, not "
                                  f"{type(depends_on).__name__}")
        deps = list(depends_on)
        if any(not isinstance(d, str) for d in deps):
            raise InvalidArgument("depends_on must hold task ids (str)")
        deps = list(dict.fromkeys(deps))
        if deps and not self._has("dag"):
            raise InvalidArgument("this store keeps no dependencies; dispatch without depends_on")
        qttl = self._ttl("queue_ttl_ms", queue_ttl_ms)
        ettl = self._ttl("exec_ttl_ms", exec_ttl_ms)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not (
                1 <= max_attempts <= _INT64_MAX):
            raise InvalidArgument(f"max_attempts must be a positive integer, got {max_attempts!r}")
        payload_json = self._json("payload", payload)
        if not self._has("targets"):
            target_agent = None
        task_id = str(uuid.uuid4())

        def body() -> str:
            if self._cfg.expiry_by == "every_write" or (
                    deps and self._cfg.dead_dep == "failed_now"):
                self._apply_due(now)
            status, reason, done = "SUBMITTED", None, None
            for dep in deps:
                found = self._w.execute("SELECT status FROM cfg_tasks WHERE task_id = ?",
                                        (dep,)).fetchall()
                if not found:
                    raise NotFound(f"dependency {dep!r} does not exist; dispatch it first")
                if (found[0][0] in ("FAILED", "TIMED_OUT") and status == "SUBMITTED"
                        and self._cfg.dead_dep == "failed_now"):
                    status, reason, done = "FAILED", f"dependency {dep} ended {found[0][0]}", now
            self._w.execute(
                "INSERT INTO cfg_tasks (task_id, status, target_agent, title, payload, "
                "requester, depends_on, queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, "
                "queued_at, completed_at, error_reason) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (task_id, status, target_agent, title, payload_json, requester,
                 json.dumps(deps), qttl, ettl, max_attempts, now, now, done, reason))
            self._w.executemany("INSERT INTO cfg_deps (task_id, dep_id) VALUES (?, ?)",
                                [(task_id, d) for d in deps])
            return task_id

        return self._tx(body)

    # ----------------------------------------------------------------- claiming
    def _has_ready(self, now: int, agent: str) -> bool:
        args = {"now": now, "agent": agent}
        where = self._ready_filter()
        strategy = self._cfg.idle_poll
        if strategy == "count":
            return self._r.execute(f"SELECT COUNT(*) FROM cfg_tasks WHERE {where}",
                                   args).fetchall()[0][0] > 0
        if strategy == "exists":
            return bool(self._r.execute(
                f"SELECT EXISTS (SELECT 1 FROM cfg_tasks WHERE {where})", args).fetchall()[0][0])
        return bool(self._r.execute(
            f"SELECT task_id FROM cfg_tasks WHERE {where} ORDER BY queued_at, seq LIMIT 8",
            args).fetchall())

    def _take(self, task_id: str, agent: str, now: int) -> Any:
        """The claim write itself: a fresh token recorded first, then one conditional
        UPDATE (the compare-and-swap); None when the task is no longer ready."""
        token = str(uuid.uuid4())
        self._w.execute("INSERT INTO cfg_tokens (token, task_id, agent_id) VALUES (?, ?, ?)",
                        (token, task_id, agent))
        cur = self._w.execute(
            "UPDATE cfg_tasks SET status = 'CLAIMED', claimed_by = :agent, claimed_at = :now,"
            " lease_start = :now, attempt = attempt + 1, extend_count = 0, claim_token = :tok"
            f" WHERE task_id = :id AND {self._ready_filter()}"
            " RETURNING exec_ttl_ms, attempt",
            {"agent": agent, "now": now, "tok": token, "id": task_id})
        got = cur.fetchall()
        if len(got) != 1:
            return None
        return self._claim_out(task_id, agent, token, now, got[0][0], got[0][1])

    def _candidates(self, now: int, agent: str, task_id: str | None) -> list[str]:
        where = self._ready_filter()
        args: dict[str, Any] = {"now": now, "agent": agent}
        if task_id is not None:
            where += " AND task_id = :id"
            args["id"] = task_id
        return [r[0] for r in self._w.execute(
            f"SELECT task_id FROM cfg_tasks WHERE {where} ORDER BY queued_at, seq",
            args).fetchall()]

    def _claim_call(self, agent: str, task_id: str | None) -> Any:
        now = self._clock()
        if not isinstance(agent, str):
            raise InvalidArgument(f"agent_id must be a str, got {agent!r}")

        def exists() -> bool:
            return bool(self._r.execute("SELECT 1 FROM cfg_tasks WHERE task_id = ?",
                                        (task_id,)).fetchall())

        if task_id is not None and not self._retrying(exists):
            raise NotFound(f"task {task_id!r} does not exist")
        due = self._retrying(lambda: self._anything_due(now))
        if not due and not self._retrying(lambda: self._has_ready(now, agent)):
            return None  # the idle poll: read only
        if self._cfg.claim == "immediate":
            def body() -> Any:
                self._apply_due(now)
                for cand in self._candidates(now, agent, task_id):
                    got = self._take(cand, agent, now)
                    if got is not None:
                        return got
                return None
            return self._tx(body)
        if due:
            self._tx(lambda: self._apply_due(now))

        def cas() -> Any:
            for _ in range(100):
                cands = self._candidates(now, agent, task_id)
                if not cands:
                    return None
                for cand in cands:
                    got = self._take(cand, agent, now)
                    if got is not None:
                        return got
            return None

        return self._retrying(cas)

    # ----------------------------------------------------------------- holder guard
    def _checks(self, row: Mapping[str, Any], agent: str, token: Any, now: int
                ) -> list[tuple[str, FerryError | None]]:
        """Each check of #the-holder-guard with its refusal (None: it passes), in the
        order the `refusal_order` switch chooses."""
        tid = row["task_id"]
        status = row["status"]
        live = row["claim_token"]
        target = (PermissionDenied(f"task {tid} is reserved for {row['target_agent']!r}, "
                                   f"not {agent!r}")
                  if self._has("targets") and row["target_agent"] is not None
                  and agent != row["target_agent"] else None)
        state = (WrongState(f"task {tid} is {status}, not CLAIMED")
                 if status != "CLAIMED" else None)
        lease = (LeaseExpired(f"the lease on {tid} ended at {self._lease_end(row)}; "
                              "claim it again") if self._lease_over(row, now) else None)
        binding = (PermissionDenied(f"task {tid} is held by {row['claimed_by']!r}, not {agent!r}")
                   if self._cfg.binding != "bearer" and status == "CLAIMED"
                   and agent != row["claimed_by"] else None)
        present = (TokenRequired(f"{tid}: pass the token from your claim")
                   if token is None or token == "" else None)
        equal = None
        if present is None and (not isinstance(token, str) or live is None
                                or not hmac.compare_digest(token.encode(), live.encode())):
            equal = InvalidToken(f"{tid}: that token is not the live one (retired or wrong)")
        checks = {"target": target, "state": state, "lease": lease, "binding": binding,
                  "present": present, "equal": equal}
        declared_binding = self._cfg.binding == "bound_declared"
        order = self._cfg.refusal_order
        if order in ("reference", "reference_declared"):
            names = (["target", "state", "lease"] + (["binding"] if declared_binding else [])
                     + ["present", "equal"] + ([] if declared_binding else ["binding"]))
        elif order == "token_first":
            names = ["present", "equal", "target", "state", "lease", "binding"]
        else:
            names = ["target", "lease", "binding", "present", "equal", "state"]
        return [(n, checks[n]) for n in names]

    def _holder(self, op: str, task_id: str, agent: str, token: Any, now: int,
                action: Callable[[dict[str, Any]], Any], kept: str | None = None) -> Any:
        """Run holder operation `op` in one write transaction: guard, maybe keep a late
        value (`kept`: JSON text), maybe apply due expiries, then `action(row)`."""
        if self._cfg.token_type == "argument" and token is not None and not isinstance(token, str):
            raise self._refusal(InvalidArgument, f"token must be a str or None, got {token!r}")

        def body() -> Any:
            found = self._w.execute(f"{_SELECT} WHERE task_id = ?", (task_id,)).fetchall()
            if not found:
                raise NotFound(f"task {task_id!r} does not exist")
            row = _row(found[0])
            failing = [(n, e) for n, e in self._checks(row, agent, token, now) if e is not None]
            lease_over = self._lease_over(row, now)
            if failing:
                name, exc = failing[0]
                names = [n for n, _ in failing]
                if "typed-refusals" in self._feats:
                    late_token = name == "lease"
                else:  # one catch-all class: a late holder is one whose lease alone ended
                    late_token = lease_over and not {"target", "binding"} & set(names)
                own = self._cfg.binding == "bearer" or agent == row["claimed_by"]
                live_token = isinstance(token, str) and token == row["claim_token"]
                keep = False
                if late_token and live_token and own:
                    keep = op == "fulfill" or (op == "fail" and self._cfg.late_fail == "keep")
                elif name in ("state", "equal", "binding"):
                    keep, exc = self._after_applied(op, row, agent, token, exc)
                if keep and kept is not None and "salvaged" in _CAPS[self._cfg.caps][0]:
                    self._add_salvage(task_id, agent, "late_" + op, kept, now)
                applies = isinstance(exc, LeaseExpired) or (
                    lease_over and "typed-refusals" not in self._feats)
                if applies and self._cfg.expiry_by != "sweep_claim":
                    self._apply_due(now)
                if keep or applies:
                    raise _Refuse(self._refusal(type(exc), str(exc)))
                raise self._refusal(type(exc), str(exc))
            if self._cfg.expiry_by == "every_write":
                self._apply_due(now)  # cannot touch this task: its lease is live
            return action(row)

        return self._tx(body)

    def _after_applied(self, op: str, row: Mapping[str, Any], agent: str, token: Any,
                       exc: FerryError) -> tuple[bool, FerryError]:
        """A late token refused after its expiry was applied: keeping its value is
        allowed (#late-results); so is LeaseExpired once the task was claimed again."""
        if not isinstance(token, str) or self._cfg.late_result == "required" and op == "fulfill":
            return False, exc
        if op == "fail" and self._cfg.late_fail != "keep":
            return False, exc
        if op not in ("fulfill", "fail"):
            return False, exc
        hist = self._w.execute("SELECT agent_id, why FROM cfg_tokens WHERE token = ? AND "
                               "task_id = ?", (token, row["task_id"])).fetchall()
        if not hist or hist[0][1] != "expired":
            return False, exc
        if self._cfg.binding != "bearer" and hist[0][0] != agent:
            return False, exc
        if (self._cfg.late_result == "after_applied_le" and row["status"] == "CLAIMED"
                and row["claim_token"] != token):
            exc = LeaseExpired(f"the lease of that token on {row['task_id']} ended; "
                               "the task was claimed again")
        return True, exc

    def _add_salvage(self, task_id: str, agent: str, kind: str, data: str, now: int) -> None:
        self._w.execute("INSERT INTO cfg_salvage (task_id, agent_id, kind, data, created_at) "
                        "VALUES (?, ?, ?, ?, ?)", (task_id, agent, kind, data, now))

    def _guarded_update(self, sql: str, args: tuple, row: Mapping[str, Any]) -> None:
        cur = self._w.execute(sql + " WHERE task_id = ? AND status = 'CLAIMED' AND "
                              "claim_token = ?", (*args, row["task_id"], row["claim_token"]))
        if cur.rowcount != 1:  # cannot happen inside BEGIN IMMEDIATE; never write twice
            raise StoreError(f"task {row['task_id']} changed under a write transaction")

    def _retire(self, token: str, why: str) -> None:
        self._w.execute("UPDATE cfg_tokens SET why = ? WHERE token = ?", (why, token))

    # ----------------------------------------------------------------- holder operations
    def _fulfill(self, task_id: str, agent_id: str, token: str, result: Any) -> None:
        now = self._clock()
        if self._cfg.bad_result == "accept" and not self._has("results"):
            try:  # kept nowhere: a result that is not JSON is simply not stored
                data: str | None = self._json("result", result)
            except InvalidArgument:
                data = None
        else:
            data = self._json("result", result)

        def action(row: dict[str, Any]) -> None:
            stored = data if self._has("results") else None
            self._guarded_update("UPDATE cfg_tasks SET status = 'COMPLETED', result = ?, "
                                 "completed_at = ?, claim_token = NULL", (stored, now), row)
            self._retire(row["claim_token"], "finished")

        self._holder("fulfill", task_id, agent_id, token, now, action, kept=data)

    def _fail(self, task_id: str, agent_id: str, token: str, reason: str) -> None:
        now = self._clock()
        if not isinstance(reason, str) or not reason.strip():
            raise self._refusal(InvalidArgument, "fail needs a non-blank reason")
        data = self._json("reason", reason)

        def action(row: dict[str, Any]) -> None:
            self._guarded_update("UPDATE cfg_tasks SET status = 'FAILED', error_reason = ?, "
                                 "completed_at = ?, claim_token = NULL", (reason, now), row)
            self._retire(row["claim_token"], "finished")
            self._cascade(task_id, now)

        self._holder("fail", task_id, agent_id, token, now, action, kept=data)

    def _release(self, task_id: str, agent_id: str, token: str, reason: str = "") -> None:
        now = self._clock()

        def action(row: dict[str, Any]) -> None:
            if self._has("limits") and row["release_count"] >= _MAX_RELEASES:
                raise self._refusal(LimitExceeded, f"task {task_id} was released "
                                    f"{_MAX_RELEASES} times; fulfill or fail it")
            self._guarded_update(
                "UPDATE cfg_tasks SET status = 'SUBMITTED', queued_at = ?, claimed_by = NULL, "
                "claimed_at = NULL, lease_start = NULL, claim_token = NULL, extend_count = 0, "
                "release_count = release_count + 1", (now,), row)
            self._retire(row["claim_token"], "released")

        self._holder("release", task_id, agent_id, token, now, action)

    def _extend(self, task_id: str, agent_id: str, token: str) -> int:
        now = self._clock()

        def action(row: dict[str, Any]) -> int:
            new_end = now + row["exec_ttl_ms"]
            if self._has("limits"):
                if row["extend_count"] >= _MAX_EXTENDS:
                    raise self._refusal(LimitExceeded, f"this claim of {task_id} was extended "
                                        f"{_MAX_EXTENDS} times already")
                capped = self._cfg.extend_cap == "apply" or (
                    self._has("lease") and self._has("queue-ttl"))
                if capped and new_end > row["created_at"] + _EXTEND_CAP_FACTOR * row["queue_ttl_ms"]:
                    raise self._refusal(LimitExceeded, f"{task_id}: extending past created_at "
                                        "+ 4 * queue_ttl_ms is not allowed")
            self._guarded_update("UPDATE cfg_tasks SET lease_start = ?, extend_count = "
                                 "extend_count + 1", (now,), row)
            return new_end

        return self._holder("extend", task_id, agent_id, token, now, action)

    def _salvage(self, task_id: str, agent_id: str, token: str, partial: Any) -> None:
        now = self._clock()
        data = self._json("partial", partial)

        def action(row: dict[str, Any]) -> None:
            self._add_salvage(task_id, agent_id, "partial", data, now)

        self._holder("salvage", task_id, agent_id, token, now, action)

    # ----------------------------------------------------------------- sweep and reads
    def _sweep(self) -> int:
        now = self._clock()
        if not self._retrying(lambda: self._anything_due(now, sweep=True)):
            return 0
        return self._tx(lambda: self._apply_due(now, sweep=True))

    def _get(self, task_id: str) -> Any:
        now = self._clock()
        found = self._retrying(lambda: self._r.execute(
            f"{_SELECT} WHERE task_id = ?", (task_id,)).fetchall())
        if not found:
            raise self._refusal(NotFound, f"task {task_id!r} does not exist")
        return self._view(_row(found[0]), now)

    def _inspect(self, agent_id: str | None = None) -> list[Any]:
        now = self._clock()
        if agent_id is None:
            rows = self._retrying(lambda: self._r.execute(
                f"{_SELECT} ORDER BY seq").fetchall())
        else:
            rows = self._retrying(lambda: self._r.execute(
                f"{_SELECT} WHERE target_agent = ? OR claimed_by = ? ORDER BY seq",
                (agent_id, agent_id)).fetchall())
        return [self._view(_row(r), now) for r in rows]

    def _salvaged(self, task_id: str) -> list[Any]:
        def read() -> tuple[list, list]:
            found = self._r.execute("SELECT 1 FROM cfg_tasks WHERE task_id = ?",
                                    (task_id,)).fetchall()
            rows = self._r.execute("SELECT task_id, agent_id, kind, data, created_at FROM "
                                   "cfg_salvage WHERE task_id = ? ORDER BY id",
                                   (task_id,)).fetchall()
            return found, rows

        found, rows = self._retrying(read)
        if not found:
            raise self._refusal(NotFound, f"task {task_id!r} does not exist")
        return [self._salvage_entry(r) for r in rows]

    # ----------------------------------------------------------------- locks
    def _acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        now = self._clock()
        expires = min(now + int(ttl_ms), _INT64_MAX)

        def run() -> bool:
            return bool(self._w.execute(
                "INSERT INTO cfg_locks (name, owner, expires_at) VALUES (:n, :o, :e) "
                "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, expires_at = "
                "excluded.expires_at WHERE cfg_locks.expires_at <= :now OR cfg_locks.owner = "
                "excluded.owner RETURNING 1", {"n": name, "o": owner, "e": expires,
                                               "now": now}).fetchall())

        got = self._retrying(run)
        self._after_write()
        return got

    def _release_lock(self, name: str, owner: str) -> bool:
        now = self._clock()

        def held() -> bool:
            return bool(self._r.execute(
                "SELECT 1 FROM cfg_locks WHERE name = ? AND owner = ? AND expires_at > ?",
                (name, owner, now)).fetchall())

        if self._cfg.lock_release == "drop_expired":  # ours, live or run out: drop it
            return self._retrying(lambda: self._w.execute(
                "DELETE FROM cfg_locks WHERE name = ? AND owner = ?", (name, owner)).rowcount == 1)
        if not self._retrying(held):
            return False  # not ours (any more): write nothing
        return self._retrying(lambda: self._w.execute(
            "DELETE FROM cfg_locks WHERE name = ? AND owner = ? AND expires_at > ?",
            (name, owner, now)).rowcount == 1)

    def _lock_holder(self, name: str) -> str | None:
        now = self._clock()
        rows = self._retrying(lambda: self._r.execute(
            "SELECT owner FROM cfg_locks WHERE name = ? AND expires_at > ?",
            (name, now)).fetchall())
        return rows[0][0] if rows else None

    # ----------------------------------------------------------------- checkpoint, close
    def _checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if not isinstance(mode, str) or mode.upper() not in _CHECKPOINT_MODES:
            raise InvalidArgument(f"checkpoint mode must be one of {_CHECKPOINT_MODES}, "
                                  f"got {mode!r}")
        row = self._retrying(lambda: self._w.execute(
            f"PRAGMA wal_checkpoint({mode.upper()})").fetchall()[0])
        return int(row[0]), int(row[1]), int(row[2])

    def close(self) -> None:
        """Close every connection this store opened."""
        for con in {id(self._w): self._w, id(self._r): self._r}.values():
            try:
                con.close()
            except sqlite3.Error:
                pass


# ------------------------------------------------------------- per-combo classes
def _public_dispatch_with_deps(self: ConfigurableStore, target_agent: str | None, *,
                               title: str = "", payload: Any = None, requester: str = "",
                               depends_on: Iterable[str] = (), queue_ttl_ms: int = 60_000,
                               exec_ttl_ms: int = 30_000, max_attempts: int = 1) -> str:
    return self._dispatch(target_agent, title, payload, requester, depends_on,
                          queue_ttl_ms, exec_ttl_ms, max_attempts)


def _public_dispatch_no_deps(self: ConfigurableStore, target_agent: str | None, *,
                             title: str = "", payload: Any = None, requester: str = "",
                             queue_ttl_ms: int = 60_000, exec_ttl_ms: int = 30_000,
                             max_attempts: int = 1) -> str:
    return self._dispatch(target_agent, title, payload, requester, (), queue_ttl_ms,
                          exec_ttl_ms, max_attempts)


def _op_methods(dag_dispatch: bool) -> dict[str, Callable[..., Any]]:
    return {
        "dispatch": _public_dispatch_with_deps if dag_dispatch else _public_dispatch_no_deps,
        "poll_next": lambda self, agent_id: self._claim_call(agent_id, None),
        "claim": lambda self, task_id, agent_id: self._claim_call(agent_id, task_id),
        "fulfill": ConfigurableStore._fulfill,
        "fail": ConfigurableStore._fail,
        "release": ConfigurableStore._release,
        "extend": ConfigurableStore._extend,
        "salvage": ConfigurableStore._salvage,
        "sweep": ConfigurableStore._sweep,
        "get": ConfigurableStore._get,
        "inspect": ConfigurableStore._inspect,
        "salvaged": ConfigurableStore._salvaged,
        "acquire_lock": ConfigurableStore._acquire_lock,
        "release_lock": ConfigurableStore._release_lock,
        "lock_holder": ConfigurableStore._lock_holder,
        "checkpoint": ConfigurableStore._checkpoint,
    }


def store_class(config: Config) -> type[ConfigurableStore]:
    """A subclass that defines exactly the operations `config.caps` keeps and declares
    what PROTOCOL.md tells such a store to declare."""
    ops, feats, declared = _CAPS[config.caps]
    namespace: dict[str, Any] = {
        name: fn for name, fn in _op_methods("dag" in feats or declared).items()
        if name in ops}
    declares = set()
    if config.binding == "bound_declared":
        declares.add("holder-binding")
    if config.refusal_order == "reference_declared":
        declares.add("refusal-order")
    if declares:
        namespace["ferry_declares"] = frozenset(declares)
    if declared:
        namespace["ferry_capabilities"] = frozenset(ops | feats)
    return type(f"ConfigurableStore_{config.caps}", (ConfigurableStore,), namespace)


def make_factory(config: Config) -> Callable[..., ConfigurableStore]:
    """`factory(path, *, clock)` for one configuration (what the harness calls)."""
    cls = store_class(config)

    def factory(path: str, *, clock: Callable[[], int]) -> ConfigurableStore:
        return cls(path, clock=clock, config=config)

    factory.config = config  # type: ignore[attr-defined]
    factory.__doc__ = f"ConfigurableStore with {config.describe()}"
    return factory


# ------------------------------------------------------------- the combos
def pairwise_configs() -> list[Config]:
    """The pairwise covering array over SWITCHES (tests/covering.py), as Configs."""
    rows = generate(SWITCHES, pivot="caps", meaningful=meaningful, allowed=allowed)
    return [Config(**row) for row in rows]


#: combo name -> its switch values; the order is the generator's (densest first)
COMBOS: dict[str, Config] = {f"combo_{i:02d}": cfg for i, cfg in enumerate(pairwise_configs())}

for _name, _cfg in COMBOS.items():
    globals()[_name] = make_factory(_cfg)


def describe_combos() -> str:
    """One line per combo: its name and the switches it sets away from the default."""
    default = Config()
    lines = []
    for name, cfg in COMBOS.items():
        diff = [f"{k}={v}" for k, v in dataclasses.asdict(cfg).items()
                if getattr(default, k) != v]
        lines.append(f"{name}: {', '.join(diff) or '(all defaults)'}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe_combos())
