"""bearer_immediate -- an independent SPEC store for ferry's test corpus.

Written from /work/shared/SPEC.md alone (plus ``ferry_core.errors``), stdlib only.
Factory: ``make_store(path, *, clock, strict_tokens=True, max_releases=3, max_extends=5)``.

Design choices (SPEC section 9 freedoms and things SPEC leaves open)
--------------------------------------------------------------------
* Transactions: the connection is opened with ``isolation_level=None`` and every write
  (dispatch, poll/claim, holder ops, sweep, locks) runs in ONE short ``BEGIN IMMEDIATE``
  transaction that the call opens and commits (or rolls back) before it returns.  The clock
  is read *after* the write lock is taken, so time order equals commit order.
* Claim strategy: ``"immediate"`` -- one BEGIN IMMEDIATE transaction that sweeps every due
  expiry, picks the oldest ready task (``queued_at``, then insertion order) and updates it;
  the UPDATE repeats the readiness conditions and must change exactly one row.
* Idle polls write nothing: ``poll_next`` first runs ONE autocommit SELECT that asks "is any
  expiry due, or is any task ready for this agent?"; only if yes does it open the write.
  ``sweep()`` likewise counts due rows with a read first.  Reads (``get``, ``inspect``,
  ``salvaged``, ``lock_holder``) never write and never sweep.
* Bearer tokens: for an untargeted task, whoever presents the live token is the holder (the
  claim is not bound to the claiming agent's name).  For a targeted task a caller other than
  ``target_agent`` is refused with PermissionDenied.
* Busy handling: SQLite's default busy handler, ``sqlite3.connect(path, timeout=10.0)``,
  nothing else.  A lock that cannot be had within 10 s surfaces as ``StoreError``.
* When expiry is applied: by whichever call notices it.  poll_next / claim / sweep / dispatch
  apply *every* due expiry inside their write transaction; a holder operation applies the
  expiry of its own task (and what cascades from it) only when it refuses with LeaseExpired,
  in the same transaction, and then raises.  Reads never apply anything; views carry
  ``is_logically_expired``.
* Expiry timestamps are the *due* instants, not the instant some call noticed them, so the
  resulting rows do not depend on who applied the expiry:
    - lease expiry with attempts left -> SUBMITTED, token retired, ``queued_at =
      lease_expires_at`` (the task re-enters the queue at the moment its lease ended and gets
      a fresh queue window from there); ``claimed_at``/``lease_expires_at``/``claimed_by`` are
      cleared;
    - lease expiry without attempts left -> TIMED_OUT, ``completed_at = lease_expires_at``;
    - queue expiry -> TIMED_OUT, ``completed_at = queued_at + queue_ttl_ms``;
    - dependency cascade: a SUBMITTED dependent of a task that ended FAILED/TIMED_OUT at time
      p becomes FAILED at p (reason names the dependency) -- unless its own queue window had
      already closed by p, in which case it is TIMED_OUT at its own deadline.  Cascades are
      transitive.  Due expiries are processed in due-time order.
* ``sweep()`` returns the number of task rows whose state it changed (including dependents
  failed by a cascade and a requeue followed by a queue timeout counted twice: one per
  transition).
* ``attempt`` counts claims (the first claim has attempt 1).  A release does not refund the
  attempt; a released task can always be claimed again (even when attempt >= max_attempts),
  and its next lease expiry compares attempt < max_attempts as SPEC says.
* ``extend_count`` is per claim (reset by every claim); ``release_count`` is per task.
  Release is refused with LimitExceeded once ``release_count >= max_releases``; extend once
  ``extend_count >= max_extends`` or when ``now + exec_ttl_ms > created_at + 4*queue_ttl_ms``.
* A released task gets ``queued_at = now`` and a fresh queue window ``[now, now+queue_ttl_ms)``.
* Late fulfill: a fulfill whose lease is over is refused with LeaseExpired and its result is
  kept as salvage ``{"late_result": result}`` -- whether this fulfill applied the expiry itself
  or some earlier call (sweep/poll/claim) already had: if the presented token is a token of
  this task that was retired *by lease expiry*, any holder operation is refused with
  LeaseExpired (ahead of WrongState / InvalidToken -- a refusal-order difference SPEC 9
  allows), and a fulfill keeps its result (at most one late result per token).  A late
  result is only kept when the presented token really was the expired holder's token.
* ``salvaged(task_id)`` returns a list of one-key dicts in append order:
  ``{"partial": data}`` for salvage() calls and ``{"late_result": result}`` for a late
  fulfill's kept result.
* Dispatch: ``target_agent`` is None (any agent) or a non-empty str.  Unknown dependency ->
  NotFound.  Duplicate dependency ids are collapsed (first occurrence order kept).  If a
  dependency is already FAILED/TIMED_OUT the new task is stored and immediately FAILED with a
  reason naming it.  Dispatch applies due expiries first (it writes anyway) so that it sees
  dependencies in their true state.  Defaults: ``queue_ttl_ms=3_600_000`` (1 h),
  ``exec_ttl_ms=300_000`` (5 min), ``max_attempts=1``.
* Validation (InvalidArgument): ids/agents/lock names/owners are non-empty str without NUL,
  at most 256 chars; title/requester/reasons are str (title/reason <= 64 Ki chars); TTLs are
  int (not bool), 1 .. 10 years in ms; max_attempts 1 .. 1000; payload/result/partial must be
  strict JSON values (None, bool, int, finite float, str, list/tuple, dict with str keys;
  depth <= 100; <= 1 MiB serialized); depends_on is a list/tuple/set of task ids (not a
  str), at most 1000; tokens are str or None (None/"" -> TokenRequired in its §5 slot).
  The clock must return an int in [0, 2**62]; anything else is StoreError.
* Fulfill / fail / release also retire the token in the history table (reason recorded);
  every retired token is refused forever.
* ``inspect(agent_id)``: tasks whose ``target_agent`` is agent_id or whose current/final
  claimer (``claimed_by``) is agent_id; ``inspect()`` lists every task; insertion order.
* Views/claims are frozen dataclasses (``TaskView``, ``Claim``) that also support
  ``view["field"]`` and ``.to_dict()``.  TaskView extras: ``claimed_by``, ``release_reason``,
  ``queue_expires_at``.  ``depends_on`` is a list.
* Daemon locks: one UPSERT (``... WHERE daemon_locks.expires_at <= :now OR
  daemon_locks.owner = excluded.owner``), success iff one row changed; held on
  ``[now, now+ttl_ms)``.  ``release_lock`` deletes only an unexpired lock of that owner.
* WAL: ``journal_mode=WAL``, ``synchronous=NORMAL``, ``foreign_keys=ON``,
  ``wal_autocheckpoint=1000`` pages and ``journal_size_limit=4 MiB``: with normal traffic
  (short transactions, no long readers) the -wal stays under ``WAL_BOUND_BYTES`` (8 MiB).
* Schema: own tables, ``PRAGMA user_version = 0x62690001``; a file that is not SQLite, holds
  another schema, or a different version raises StoreError.

Capabilities: full set (sweep, DAG via depends_on, daemon locks).
"""

from __future__ import annotations

import hmac
import json
import math
import os
import sqlite3
import threading
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

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

NAME = "bearer_immediate"
STRATEGY = "immediate"
CAPABILITIES = frozenset({"sweep", "dag", "locks"})

SCHEMA_VERSION = 0x62690001
DEFAULT_QUEUE_TTL_MS = 3_600_000
DEFAULT_EXEC_TTL_MS = 300_000
MAX_TTL_MS = 2**62 - 1  # every TTL below 2**62 (PROTOCOL.md#limits)
MAX_CLOCK = 2**62
MAX_ATTEMPTS = 1000
MAX_ID_LEN = 256
MAX_TEXT_LEN = 65_536
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 100
MAX_DEPS = 1000
MAX_LIMIT = 1_000_000
WAL_BOUND_BYTES = 8 << 20
BUSY_TIMEOUT_S = 10.0

SUBMITTED = "SUBMITTED"
CLAIMED = "CLAIMED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
STATUSES = (SUBMITTED, CLAIMED, COMPLETED, FAILED, TIMED_OUT)
TERMINAL = (COMPLETED, FAILED, TIMED_OUT)

_SCHEMA = f"""
CREATE TABLE tasks (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          TEXT    NOT NULL UNIQUE,
    target_agent     TEXT,
    title            TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    requester        TEXT    NOT NULL,
    depends_on       TEXT    NOT NULL,
    queue_ttl_ms     INTEGER NOT NULL CHECK (queue_ttl_ms > 0),
    exec_ttl_ms      INTEGER NOT NULL CHECK (exec_ttl_ms > 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    created_at       INTEGER NOT NULL,
    queued_at        INTEGER NOT NULL,
    queue_expires_at INTEGER NOT NULL,
    claimed_at       INTEGER,
    lease_expires_at INTEGER,
    completed_at     INTEGER,
    attempt          INTEGER NOT NULL DEFAULT 0,
    extend_count     INTEGER NOT NULL DEFAULT 0,
    release_count    INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    error_reason     TEXT,
    release_reason   TEXT,
    status           TEXT    NOT NULL CHECK (status IN ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT')),
    claim_token      TEXT,
    claimed_by       TEXT,
    CHECK ((status = 'CLAIMED') = (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);
CREATE INDEX tasks_queue ON tasks(status, queued_at, seq);
CREATE INDEX tasks_lease ON tasks(status, lease_expires_at);
CREATE INDEX tasks_qexp  ON tasks(status, queue_expires_at);
CREATE INDEX tasks_target ON tasks(target_agent);
CREATE TABLE task_deps (
    task_id TEXT NOT NULL REFERENCES tasks(task_id),
    dep_id  TEXT NOT NULL REFERENCES tasks(task_id),
    PRIMARY KEY (task_id, dep_id)
) WITHOUT ROWID;
CREATE INDEX task_deps_rev ON task_deps(dep_id, task_id);
CREATE TABLE claim_tokens (
    token       TEXT    PRIMARY KEY,
    task_id     TEXT    NOT NULL REFERENCES tasks(task_id),
    agent_id    TEXT    NOT NULL,
    issued_at   INTEGER NOT NULL,
    retired_at  INTEGER,
    retired_why TEXT
);
CREATE INDEX claim_tokens_task ON claim_tokens(task_id);
CREATE TABLE salvage (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT    NOT NULL REFERENCES tasks(task_id),
    kind       TEXT    NOT NULL CHECK (kind IN ('partial','late_result')),
    data       TEXT    NOT NULL,
    token      TEXT,
    agent_id   TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX salvage_task ON salvage(task_id, seq);
CREATE UNIQUE INDEX salvage_late_once ON salvage(token) WHERE kind = 'late_result';
CREATE TABLE daemon_locks (
    name        TEXT    PRIMARY KEY,
    owner       TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL
);
PRAGMA user_version = {SCHEMA_VERSION};
"""
_OWN_TABLES = {"tasks", "task_deps", "claim_tokens", "salvage", "daemon_locks", "sqlite_sequence"}

# A task row is ready for :agent at :now.
_READY_WHERE = """
    t.status = 'SUBMITTED'
    AND t.queue_expires_at > :now
    AND (t.target_agent IS NULL OR t.target_agent = :agent)
    AND NOT EXISTS (
        SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.dep_id
        WHERE d.task_id = t.task_id AND p.status <> 'COMPLETED')
"""
_DUE_EXISTS = """
    EXISTS (SELECT 1 FROM tasks WHERE status = 'CLAIMED' AND lease_expires_at <= :now)
    OR EXISTS (SELECT 1 FROM tasks WHERE status = 'SUBMITTED' AND queue_expires_at <= :now)
"""
_DUE_LIST = """
    SELECT task_id, due, seq FROM (
        SELECT task_id, lease_expires_at AS due, seq FROM tasks
         WHERE status = 'CLAIMED' AND lease_expires_at <= :now
        UNION ALL
        SELECT task_id, queue_expires_at AS due, seq FROM tasks
         WHERE status = 'SUBMITTED' AND queue_expires_at <= :now
    ) ORDER BY due, seq
"""


# --------------------------------------------------------------------------- values


class _Mappingish:
    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def keys(self):
        return self.to_dict().keys()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Claim(_Mappingish):
    task_id: str
    agent_id: str
    token: str = field(repr=False)
    claimed_at: int
    lease_expires_at: int
    attempt: int


@dataclass(frozen=True)
class TaskView(_Mappingish):
    task_id: str
    target_agent: str | None
    title: str
    payload: Any
    requester: str
    depends_on: list
    queue_ttl_ms: int
    exec_ttl_ms: int
    max_attempts: int
    created_at: int
    queued_at: int
    claimed_at: int | None
    lease_expires_at: int | None
    completed_at: int | None
    attempt: int
    extend_count: int
    release_count: int
    result: Any
    error_reason: str | None
    status: str
    is_logically_expired: bool
    # extras
    claimed_by: str | None = None
    release_reason: str | None = None
    queue_expires_at: int | None = None


class _CommitThenRaise(Exception):
    """Internal: commit what the transaction did (an applied expiry), then raise ``exc``."""

    def __init__(self, exc: FerryError):
        super().__init__(str(exc))
        self.exc = exc


# --------------------------------------------------------------------------- validation


def _plain_str(value: Any) -> str:
    return value if type(value) is str else str.__str__(value)


def _check_text(value: Any, what: str, *, max_len: int = MAX_TEXT_LEN, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    value = _plain_str(value)
    if not allow_empty and value == "":
        raise InvalidArgument(f"{what} must not be empty")
    if len(value) > max_len:
        raise InvalidArgument(f"{what} is too long ({len(value)} chars, at most {max_len})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid Unicode text (lone surrogate?)") from None
    return value


def _check_id(value: Any, what: str) -> str:
    if value is None:
        raise InvalidArgument(f"{what} is required (got None)")
    value = _check_text(value, what, max_len=MAX_ID_LEN, allow_empty=False)
    if "\x00" in value:
        raise InvalidArgument(f"{what} must not contain NUL characters")
    return value


def _check_int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, got {type(value).__name__}")
    value = int(value)
    if value < lo or value > hi:
        raise InvalidArgument(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def _check_json_value(value: Any, what: str, depth: int = 0) -> None:
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{what} contains a non-finite float ({value!r}), which JSON cannot carry")
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json_value(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidArgument(f"{what} has a non-str object key {k!r}; JSON keys are strings")
            _check_json_value(v, what, depth + 1)
        return
    raise InvalidArgument(f"{what} contains a {type(value).__name__}, which is not a JSON value")


def _dump_json(value: Any, what: str) -> str:
    _check_json_value(value, what)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        raise InvalidArgument(f"{what} is not a JSON value: {exc}") from None
    if len(text) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{what} is too large ({len(text)} bytes of JSON, at most {MAX_JSON_BYTES})")
    return text


def _check_token(token: Any) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str):
        raise InvalidArgument(f"token must be a str or None, got {type(token).__name__}")
    token = _plain_str(token)
    if len(token) > 4 * MAX_ID_LEN:
        token = token[: 4 * MAX_ID_LEN]  # cannot match anything; keep comparisons bounded
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("token is not valid Unicode text") from None
    return token


def _tokens_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


# --------------------------------------------------------------------------- the store


def _api(method):
    """Serialize per store, refuse after close, and map SQLite failures to StoreError."""

    def wrapper(self, *args, **kwargs):
        with self._lock:
            if self._conn is None:
                raise StoreError(f"{NAME}: the store is closed; call make_store() again")
            try:
                return method(self, *args, **kwargs)
            except FerryError:
                raise
            except sqlite3.Error as exc:
                self._rollback_quietly()
                raise StoreError(f"{NAME}: {method.__name__} failed in SQLite: {exc}") from exc
            except RecursionError as exc:
                self._rollback_quietly()
                raise InvalidArgument(f"{method.__name__}: argument nested too deeply") from exc

    wrapper.__name__ = method.__name__
    wrapper.__qualname__ = method.__qualname__
    wrapper.__doc__ = method.__doc__
    return wrapper


class BearerImmediateStore:
    strategy = STRATEGY
    capabilities = CAPABILITIES

    def __init__(
        self,
        path: str,
        *,
        clock: Callable[[], int],
        strict_tokens: bool = True,
        max_releases: int = 3,
        max_extends: int = 5,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgument(f"path must be a str or os.PathLike, got {type(path).__name__}")
        if not callable(clock):
            raise InvalidArgument("clock must be a callable returning integer milliseconds")
        self._clock = clock
        self._strict = bool(strict_tokens)
        self._max_releases = _check_int(max_releases, "max_releases", 0, MAX_LIMIT)
        self._max_extends = _check_int(max_extends, "max_extends", 0, MAX_LIMIT)
        self._lock = threading.RLock()
        self.path = os.fspath(path)
        self._conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{NAME}: cannot open database {self.path!r}: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            self._setup(conn)
        except FerryError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(
                f"{NAME}: cannot use {self.path!r} as a store (not a SQLite database, unwritable "
                f"or corrupt?): {exc}"
            ) from exc
        self._conn = conn

    # ------------------------------------------------------------------ plumbing

    def _setup(self, conn: sqlite3.Connection) -> None:
        mode = conn.execute("PRAGMA journal_mode").fetchall()[0][0]
        if str(mode).lower() != "wal":
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{NAME}: could not switch {self.path!r} to WAL (journal_mode={mode})")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA wal_autocheckpoint=1000")
        conn.execute("PRAGMA journal_size_limit=4194304").fetchall()
        version = conn.execute("PRAGMA user_version").fetchall()[0][0]
        if version == SCHEMA_VERSION:
            return
        if version != 0:
            raise StoreError(
                f"{NAME}: {self.path!r} has schema version {version:#x}, expected {SCHEMA_VERSION:#x} "
                "(another program's database or a newer schema)"
            )
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchall()[0][0]
            if version == 0:
                names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
                if names:
                    raise StoreError(
                        f"{NAME}: {self.path!r} already holds other tables ({sorted(names)[:5]}); "
                        "refusing to mix schemas"
                    )
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
            elif version != SCHEMA_VERSION:
                raise StoreError(f"{NAME}: {self.path!r} has schema version {version:#x}")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _rollback_quietly(self) -> None:
        conn = self._conn
        if conn is not None and conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _now(self) -> int:
        try:
            now = self._clock()
        except Exception as exc:  # the injected clock itself failed
            raise StoreError(f"{NAME}: the clock raised {exc!r}") from exc
        if isinstance(now, bool) or not isinstance(now, int) or not 0 <= now <= MAX_CLOCK:
            raise StoreError(f"{NAME}: the clock must return an int in [0, 2**62] ms, got {now!r}")
        return int(now)

    def _write(self, fn: Callable[[sqlite3.Connection, int], Any]) -> Any:
        """Run ``fn(conn, now)`` inside one short BEGIN IMMEDIATE transaction."""
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = self._now()
            out = fn(conn, now)
        except _CommitThenRaise as ctr:
            conn.execute("COMMIT")
            raise ctr.exc from None
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except BaseException:
            self._rollback_quietly()
            raise
        return out

    @staticmethod
    def _rows(conn: sqlite3.Connection, sql: str, params: Any = ()) -> list[sqlite3.Row]:
        return conn.execute(sql, params).fetchall()  # always drain: no statement outlives the call

    def _one(self, conn: sqlite3.Connection, sql: str, params: Any = ()) -> sqlite3.Row | None:
        rows = self._rows(conn, sql, params)
        return rows[0] if rows else None

    @staticmethod
    def _changed(cur: sqlite3.Cursor, what: str) -> None:
        if cur.rowcount != 1:
            raise StoreError(f"{NAME}: {what}: expected exactly one row to change, {cur.rowcount} did")

    # ------------------------------------------------------------------ expiry machinery

    def _retire(self, conn, token: str | None, at: int, why: str) -> None:
        if token is not None:
            conn.execute(
                "UPDATE claim_tokens SET retired_at = ?, retired_why = ? WHERE token = ? AND retired_at IS NULL",
                (at, why, token),
            )

    def _timeout_queue(self, conn, row, now: int) -> int:
        q = row["queue_expires_at"]
        cur = conn.execute(
            "UPDATE tasks SET status = 'TIMED_OUT', completed_at = ?, error_reason = ? "
            "WHERE task_id = ? AND status = 'SUBMITTED' AND queue_expires_at <= ?",
            (q, f"queue window closed at {q}: not claimed within queue_ttl_ms={row['queue_ttl_ms']}",
             row["task_id"], now),
        )
        if cur.rowcount != 1:
            return 0
        return 1 + self._cascade(conn, row["task_id"], TIMED_OUT, q, now)

    def _cascade(self, conn, dep_id: str, dep_status: str, at: int, now: int) -> int:
        """Fail (transitively) the SUBMITTED dependents of a task that ended FAILED/TIMED_OUT at ``at``."""
        changed = 0
        stack = [(dep_id, dep_status, at)]
        while stack:
            pid, pstatus, pat = stack.pop()
            deps = self._rows(
                conn,
                "SELECT t.task_id, t.queue_expires_at, t.queue_ttl_ms, t.created_at FROM task_deps d "
                "JOIN tasks t ON t.task_id = d.task_id WHERE d.dep_id = ? AND t.status = 'SUBMITTED' "
                "ORDER BY t.seq",
                (pid,),
            )
            for r in deps:
                if r["queue_expires_at"] <= pat:
                    # its own queue window closed first
                    n = self._timeout_queue(conn, r, now)
                    changed += n
                    continue
                t = max(pat, r["created_at"])
                cur = conn.execute(
                    "UPDATE tasks SET status = 'FAILED', completed_at = ?, error_reason = ? "
                    "WHERE task_id = ? AND status = 'SUBMITTED'",
                    (t, f"dependency {pid} ended {pstatus}", r["task_id"]),
                )
                if cur.rowcount == 1:
                    changed += 1
                    stack.append((r["task_id"], FAILED, t))
        return changed

    def _expire_task(self, conn, task_id: str, now: int) -> int:
        """Apply every due expiry of one task (lease, then queue) with due-time stamps."""
        changed = 0
        row = self._one(conn, "SELECT * FROM tasks WHERE task_id = ?", (task_id,))
        if row is None:
            return 0
        if row["status"] == CLAIMED and row["lease_expires_at"] <= now:
            e = row["lease_expires_at"]
            self._retire(conn, row["claim_token"], e, "expired")
            if row["attempt"] < row["max_attempts"]:
                cur = conn.execute(
                    "UPDATE tasks SET status = 'SUBMITTED', claim_token = NULL, claimed_by = NULL, "
                    "claimed_at = NULL, lease_expires_at = NULL, queued_at = ?, queue_expires_at = ? "
                    "WHERE task_id = ? AND status = 'CLAIMED' AND claim_token = ?",
                    (e, e + row["queue_ttl_ms"], task_id, row["claim_token"]),
                )
                self._changed(cur, "lease expiry (requeue)")
                changed += 1
                row = self._one(conn, "SELECT * FROM tasks WHERE task_id = ?", (task_id,))
            else:
                cur = conn.execute(
                    "UPDATE tasks SET status = 'TIMED_OUT', claim_token = NULL, completed_at = ?, "
                    "error_reason = ? WHERE task_id = ? AND status = 'CLAIMED' AND claim_token = ?",
                    (e, f"lease expired at {e} on attempt {row['attempt']} of {row['max_attempts']}",
                     task_id, row["claim_token"]),
                )
                self._changed(cur, "lease expiry (time out)")
                return changed + 1 + self._cascade(conn, task_id, TIMED_OUT, e, now)
        if row["status"] == SUBMITTED and row["queue_expires_at"] <= now:
            changed += self._timeout_queue(conn, row, now)
        return changed

    def _sweep_tx(self, conn, now: int) -> int:
        changed = 0
        while True:
            due = self._rows(conn, _DUE_LIST, {"now": now})
            if not due:
                return changed
            for r in due:
                changed += self._expire_task(conn, r["task_id"], now)

    # ------------------------------------------------------------------ views

    def _view(self, row, now: int) -> TaskView:
        status = row["status"]
        if status == CLAIMED:
            expired = now >= row["lease_expires_at"]
        elif status == SUBMITTED:
            expired = now >= row["queue_expires_at"]
        else:
            expired = False
        return TaskView(
            task_id=row["task_id"],
            target_agent=row["target_agent"],
            title=row["title"],
            payload=json.loads(row["payload"]),
            requester=row["requester"],
            depends_on=json.loads(row["depends_on"]),
            queue_ttl_ms=row["queue_ttl_ms"],
            exec_ttl_ms=row["exec_ttl_ms"],
            max_attempts=row["max_attempts"],
            created_at=row["created_at"],
            queued_at=row["queued_at"],
            claimed_at=row["claimed_at"],
            lease_expires_at=row["lease_expires_at"],
            completed_at=row["completed_at"],
            attempt=row["attempt"],
            extend_count=row["extend_count"],
            release_count=row["release_count"],
            result=None if row["result"] is None else json.loads(row["result"]),
            error_reason=row["error_reason"],
            status=status,
            is_logically_expired=bool(expired),
            claimed_by=row["claimed_by"],
            release_reason=row["release_reason"],
            queue_expires_at=row["queue_expires_at"],
        )

    # ------------------------------------------------------------------ dispatch

    @_api
    def dispatch(
        self,
        target_agent: str | None,
        *,
        title: str = "",
        payload: Any = None,
        requester: str = "",
        depends_on: Any = (),
        queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS,
        exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS,
        max_attempts: int = 1,
    ) -> str:
        """Insert a SUBMITTED task and return its id."""
        if target_agent is not None:
            target_agent = _check_id(target_agent, "target_agent")
        title = _check_text(title, "title")
        requester = _check_text(requester, "requester", max_len=MAX_ID_LEN)
        payload_json = _dump_json(payload, "payload")
        queue_ttl_ms = _check_int(queue_ttl_ms, "queue_ttl_ms", 1, MAX_TTL_MS)
        exec_ttl_ms = _check_int(exec_ttl_ms, "exec_ttl_ms", 1, MAX_TTL_MS)
        max_attempts = _check_int(max_attempts, "max_attempts", 1, MAX_ATTEMPTS)
        if depends_on is None:
            depends_on = ()
        if isinstance(depends_on, (str, bytes, dict)) or not isinstance(depends_on, (list, tuple, set, frozenset)):
            raise InvalidArgument(
                f"depends_on must be a list/tuple of task ids, got {type(depends_on).__name__}"
            )
        if len(depends_on) > MAX_DEPS:
            raise InvalidArgument(f"depends_on has {len(depends_on)} ids, at most {MAX_DEPS}")
        deps: list[str] = []
        for d in (sorted(depends_on, key=str) if isinstance(depends_on, (set, frozenset)) else depends_on):
            d = _check_id(d, "depends_on entry")
            if d not in deps:
                deps.append(d)
        task_id = str(uuid.uuid4())

        def tx(conn, now):
            self._sweep_tx(conn, now)
            dep_rows = []
            for d in deps:
                r = self._one(conn, "SELECT task_id, status FROM tasks WHERE task_id = ?", (d,))
                if r is None:
                    raise NotFound(f"dispatch: dependency {d!r} does not exist (dispatch it first)")
                dep_rows.append(r)
            conn.execute(
                "INSERT INTO tasks (task_id, target_agent, title, payload, requester, depends_on, "
                "queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at, queue_expires_at, status) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?, 'SUBMITTED')",
                (task_id, target_agent, title, payload_json, requester, json.dumps(deps),
                 queue_ttl_ms, exec_ttl_ms, max_attempts, now, now, now + queue_ttl_ms),
            )
            conn.executemany(
                "INSERT INTO task_deps (task_id, dep_id) VALUES (?, ?)", [(task_id, d) for d in deps]
            )
            for r in dep_rows:
                if r["status"] in (FAILED, TIMED_OUT):
                    conn.execute(
                        "UPDATE tasks SET status = 'FAILED', completed_at = ?, error_reason = ? "
                        "WHERE task_id = ? AND status = 'SUBMITTED'",
                        (now, f"dependency {r['task_id']} ended {r['status']}", task_id),
                    )
                    break
            return task_id

        return self._write(tx)

    # ------------------------------------------------------------------ claiming

    def _claim_row(self, conn, task_id: str, agent_id: str, now: int) -> Claim:
        row = self._one(conn, "SELECT exec_ttl_ms, attempt FROM tasks WHERE task_id = ?", (task_id,))
        token = str(uuid.uuid4())
        expires = now + row["exec_ttl_ms"]
        # token history first: its PRIMARY KEY makes a reissued token impossible
        conn.execute(
            "INSERT INTO claim_tokens (token, task_id, agent_id, issued_at) VALUES (?,?,?,?)",
            (token, task_id, agent_id, now),
        )
        cur = conn.execute(
            "UPDATE tasks SET status = 'CLAIMED', claim_token = :token, claimed_by = :agent, "
            "claimed_at = :now, lease_expires_at = :exp, attempt = attempt + 1, extend_count = 0 "
            "WHERE task_id = :task_id AND status = 'SUBMITTED' AND task_id IN "
            f"(SELECT t.task_id FROM tasks t WHERE t.task_id = :task_id AND {_READY_WHERE})",
            {"token": token, "agent": agent_id, "now": now, "exp": expires, "task_id": task_id},
        )
        self._changed(cur, "claim")
        return Claim(
            task_id=task_id,
            agent_id=agent_id,
            token=token,
            claimed_at=now,
            lease_expires_at=expires,
            attempt=row["attempt"] + 1,
        )

    @_api
    def poll_next(self, agent_id: str) -> Claim | None:
        """Sweep, then claim the oldest ready task for this agent (None when there is none)."""
        agent_id = _check_id(agent_id, "agent_id")
        conn = self._conn
        now = self._now()
        # phase 1: a read -- an idle poll stops here and writes nothing
        probe = self._one(
            conn,
            f"SELECT ({_DUE_EXISTS}) AS due, EXISTS (SELECT 1 FROM tasks t WHERE {_READY_WHERE}) AS ready",
            {"now": now, "agent": agent_id},
        )
        if not probe["due"] and not probe["ready"]:
            return None

        def tx(conn, now):
            self._sweep_tx(conn, now)
            r = self._one(
                conn,
                f"SELECT t.task_id FROM tasks t WHERE {_READY_WHERE} ORDER BY t.queued_at, t.seq LIMIT 1",
                {"now": now, "agent": agent_id},
            )
            if r is None:
                return None
            return self._claim_row(conn, r["task_id"], agent_id, now)

        return self._write(tx)

    @_api
    def claim(self, task_id: str, agent_id: str) -> Claim | None:
        """Claim this one task if it is ready for this agent, else None."""
        task_id = _check_id(task_id, "task_id")
        agent_id = _check_id(agent_id, "agent_id")

        def tx(conn, now):
            if self._one(conn, "SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)) is None:
                raise NotFound(f"claim: no task {task_id!r}")
            self._sweep_tx(conn, now)
            r = self._one(
                conn,
                f"SELECT t.task_id FROM tasks t WHERE t.task_id = :task_id AND {_READY_WHERE}",
                {"now": now, "agent": agent_id, "task_id": task_id},
            )
            if r is None:
                return None
            return self._claim_row(conn, task_id, agent_id, now)

        return self._write(tx)

    # ------------------------------------------------------------------ holder operations

    def _holder(self, op: str, task_id: Any, agent_id: Any, token: Any, late_result: str | None, body) -> Any:
        """The §5 holder guard inside one BEGIN IMMEDIATE transaction, then ``body``."""
        task_id = _check_id(task_id, "task_id")
        agent_id = _check_id(agent_id, "agent_id")
        token = _check_token(token)

        def tx(conn, now):
            row = self._one(conn, "SELECT * FROM tasks WHERE task_id = ?", (task_id,))
            if row is None:
                raise NotFound(f"{op}: no task {task_id!r}")
            if row["target_agent"] is not None and row["target_agent"] != agent_id:
                raise PermissionDenied(
                    f"{op}: task {task_id} is for agent {row['target_agent']!r}, not {agent_id!r}"
                )
            live = row["claim_token"]
            presented_is_live = bool(token) and live is not None and _tokens_equal(token, live)
            expired_earlier = False
            if token and not presented_is_live:
                expired_earlier = (
                    self._one(
                        conn,
                        "SELECT 1 FROM claim_tokens WHERE token = ? AND task_id = ? AND retired_why = 'expired'",
                        (token, task_id),
                    )
                    is not None
                )
            if row["status"] == CLAIMED and now >= row["lease_expires_at"]:
                e = row["lease_expires_at"]
                self._expire_task(conn, task_id, now)
                kept = ""
                if late_result is not None and (presented_is_live or expired_earlier):
                    kept = self._keep_late(conn, task_id, agent_id, token, late_result, now)
                raise _CommitThenRaise(
                    LeaseExpired(
                        f"{op}: the lease on task {task_id} ended at {e} (now {now}); the expiry has "
                        f"been applied{kept}"
                    )
                )
            if expired_earlier:
                kept = ""
                if late_result is not None:
                    kept = self._keep_late(conn, task_id, agent_id, token, late_result, now)
                raise _CommitThenRaise(
                    LeaseExpired(
                        f"{op}: your claim on task {task_id} already expired (the task is now "
                        f"{row['status']}){kept}"
                    )
                )
            if row["status"] != CLAIMED:
                raise WrongState(f"{op}: task {task_id} is {row['status']}, not CLAIMED")
            if not token:
                if self._strict:
                    raise TokenRequired(f"{op}: task {task_id} needs the claim token returned by the claim")
            elif not presented_is_live:
                raise InvalidToken(
                    f"{op}: that token is not the current claim token of task {task_id} "
                    "(wrong, forged or retired)"
                )
            return body(conn, now, row)

        return self._write(tx)

    def _keep_late(self, conn, task_id, agent_id, token, result_json, now) -> str:
        cur = conn.execute(
            "INSERT OR IGNORE INTO salvage (task_id, kind, data, token, agent_id, created_at) "
            "VALUES (?, 'late_result', ?, ?, ?, ?)",
            (task_id, result_json, token, agent_id, now),
        )
        if cur.rowcount == 1:
            return "; your result was kept as salvage (see salvaged())"
        return "; a late result for this claim was already kept as salvage"

    @staticmethod
    def _guarded_update(conn, sql_set: str, params: tuple, task_id: str, live: str, now: int, what: str):
        cur = conn.execute(
            f"UPDATE tasks SET {sql_set} WHERE task_id = ? AND status = 'CLAIMED' AND claim_token = ? "
            "AND lease_expires_at > ?",
            (*params, task_id, live, now),
        )
        BearerImmediateStore._changed(cur, what)

    @_api
    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any) -> None:
        """CLAIMED -> COMPLETED with ``result``."""
        result_json = _dump_json(result, "result")

        def body(conn, now, row):
            live = row["claim_token"]
            self._guarded_update(
                conn,
                "status = 'COMPLETED', result = ?, completed_at = ?, claim_token = NULL",
                (result_json, now), row["task_id"], live, now, "fulfill",
            )
            self._retire(conn, live, now, "completed")
            return None

        return self._holder("fulfill", task_id, agent_id, token, result_json, body)

    @_api
    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str) -> None:
        """CLAIMED -> FAILED; dependents fail too."""
        if reason is None:
            raise InvalidArgument("fail: a reason is required")
        reason = _check_text(reason, "reason")
        if not reason.strip():
            raise InvalidArgument("fail: the reason must not be empty")

        def body(conn, now, row):
            live = row["claim_token"]
            self._guarded_update(
                conn,
                "status = 'FAILED', error_reason = ?, completed_at = ?, claim_token = NULL",
                (reason, now), row["task_id"], live, now, "fail",
            )
            self._retire(conn, live, now, "failed")
            self._cascade(conn, row["task_id"], FAILED, now, now)
            return None

        return self._holder("fail", task_id, agent_id, token, None, body)

    @_api
    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """CLAIMED -> SUBMITTED at the tail of the queue; the token is retired."""
        if reason is None:
            reason = ""
        reason = _check_text(reason, "reason")

        def body(conn, now, row):
            if row["release_count"] >= self._max_releases:
                raise LimitExceeded(
                    f"release: task {row['task_id']} was already released {row['release_count']} "
                    f"times (max_releases={self._max_releases}); fulfill or fail it instead"
                )
            live = row["claim_token"]
            self._guarded_update(
                conn,
                "status = 'SUBMITTED', claim_token = NULL, claimed_by = NULL, claimed_at = NULL, "
                "lease_expires_at = NULL, queued_at = ?, queue_expires_at = ?, "
                "release_count = release_count + 1, release_reason = ?",
                (now, now + row["queue_ttl_ms"], reason), row["task_id"], live, now, "release",
            )
            self._retire(conn, live, now, "released")
            return None

        return self._holder("release", task_id, agent_id, token, None, body)

    @_api
    def extend(self, task_id: str, agent_id: str, token: str | None) -> int:
        """New lease expiry ``now + exec_ttl_ms``; returns it."""

        def body(conn, now, row):
            if row["extend_count"] >= self._max_extends:
                raise LimitExceeded(
                    f"extend: this claim on task {row['task_id']} was already extended "
                    f"{row['extend_count']} times (max_extends={self._max_extends})"
                )
            new_exp = now + row["exec_ttl_ms"]
            cap = row["created_at"] + 4 * row["queue_ttl_ms"]
            if new_exp > cap:
                raise LimitExceeded(
                    f"extend: the new expiry {new_exp} would pass created_at + 4*queue_ttl_ms = {cap} "
                    f"for task {row['task_id']}"
                )
            self._guarded_update(
                conn,
                "lease_expires_at = ?, extend_count = extend_count + 1",
                (new_exp,), row["task_id"], row["claim_token"], now, "extend",
            )
            return new_exp

        return self._holder("extend", task_id, agent_id, token, None, body)

    @_api
    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        """Append a partial artifact (kept forever)."""
        partial_json = _dump_json(partial, "partial")

        def body(conn, now, row):
            cur = conn.execute(
                "INSERT INTO salvage (task_id, kind, data, token, agent_id, created_at) "
                "SELECT task_id, 'partial', ?, claim_token, ?, ? FROM tasks "
                "WHERE task_id = ? AND status = 'CLAIMED' AND claim_token = ? AND lease_expires_at > ?",
                (partial_json, agent_id, now, row["task_id"], row["claim_token"], now),
            )
            self._changed(cur, "salvage")
            return None

        return self._holder("salvage", task_id, agent_id, token, None, body)

    # ------------------------------------------------------------------ sweep

    @_api
    def sweep(self) -> int:
        """Apply due expiries; return how many task rows changed state."""
        now = self._now()
        probe = self._one(self._conn, f"SELECT ({_DUE_EXISTS}) AS due", {"now": now})
        if not probe["due"]:
            return 0
        return self._write(self._sweep_tx)

    # ------------------------------------------------------------------ reads

    @_api
    def get(self, task_id: str) -> TaskView:
        task_id = _check_id(task_id, "task_id")
        now = self._now()
        row = self._one(self._conn, "SELECT * FROM tasks WHERE task_id = ?", (task_id,))
        if row is None:
            raise NotFound(f"get: no task {task_id!r}")
        return self._view(row, now)

    @_api
    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        now = self._now()
        if agent_id is None:
            rows = self._rows(self._conn, "SELECT * FROM tasks ORDER BY seq")
        else:
            agent_id = _check_id(agent_id, "agent_id")
            rows = self._rows(
                self._conn,
                "SELECT * FROM tasks WHERE target_agent = ? OR claimed_by = ? ORDER BY seq",
                (agent_id, agent_id),
            )
        return [self._view(r, now) for r in rows]

    @_api
    def salvaged(self, task_id: str) -> list:
        task_id = _check_id(task_id, "task_id")
        rows = self._rows(
            self._conn,
            "SELECT t.seq AS tseq, s.kind, s.data FROM tasks t LEFT JOIN salvage s ON s.task_id = t.task_id "
            "WHERE t.task_id = ? ORDER BY s.seq",
            (task_id,),
        )
        if not rows:
            raise NotFound(f"salvaged: no task {task_id!r}")
        return [{r["kind"]: json.loads(r["data"])} for r in rows if r["kind"] is not None]

    # ------------------------------------------------------------------ daemon locks

    @_api
    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        name = _check_id(name, "lock name")
        owner = _check_id(owner, "lock owner")
        ttl_ms = _check_int(ttl_ms, "ttl_ms", 1, MAX_TTL_MS)

        def tx(conn, now):
            conn.execute(
                "INSERT INTO daemon_locks (name, owner, expires_at, acquired_at) "
                "VALUES (:name, :owner, :exp, :now) "
                "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at, "
                "acquired_at = CASE WHEN daemon_locks.owner = excluded.owner AND daemon_locks.expires_at > :now "
                "THEN daemon_locks.acquired_at ELSE excluded.acquired_at END "
                "WHERE daemon_locks.expires_at <= :now OR daemon_locks.owner = excluded.owner",
                {"name": name, "owner": owner, "exp": now + ttl_ms, "now": now},
            )
            return self._one(conn, "SELECT changes()")[0] == 1

        return self._write(tx)

    @_api
    def release_lock(self, name: str, owner: str) -> bool:
        name = _check_id(name, "lock name")
        owner = _check_id(owner, "lock owner")

        def tx(conn, now):
            cur = conn.execute(
                "DELETE FROM daemon_locks WHERE name = ? AND owner = ? AND expires_at > ?", (name, owner, now)
            )
            return cur.rowcount == 1

        return self._write(tx)

    @_api
    def lock_holder(self, name: str) -> str | None:
        name = _check_id(name, "lock name")
        now = self._now()
        row = self._one(
            self._conn, "SELECT owner FROM daemon_locks WHERE name = ? AND expires_at > ?", (name, now)
        )
        return None if row is None else row["owner"]

    # ------------------------------------------------------------------ maintenance

    @_api
    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if not isinstance(mode, str) or mode.upper() not in ("PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise InvalidArgument(f"checkpoint mode must be PASSIVE, FULL, RESTART or TRUNCATE, got {mode!r}")
        row = self._one(self._conn, f"PRAGMA wal_checkpoint({mode.upper()})")
        return (int(row[0]), int(row[1]), int(row[2]))

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                finally:
                    conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_store(path: str, *, clock: Callable[[], int], **options: Any) -> BearerImmediateStore:
    """Factory used by ferry's harness: each worker process calls it and gets its own connection."""
    return BearerImmediateStore(path, clock=clock, **options)
