"""agent_bound: an independent SPEC leasing store (written from /work/shared/SPEC.md only).

Factory: ``make_store(path, *, clock, strict_tokens=True, max_releases=3, max_extends=5)``.

Choices on the SPEC section 9 freedoms
--------------------------------------
* Holder binding (stricter than bearer tokens): a claim is bound to the agent that made
  it (column ``claimed_by``, shown in TaskView as ``claimed_by``). Another agent that
  presents the holder's live token is refused with ``PermissionDenied`` and nothing
  changes. This check runs LAST in the holder guard (after the token comparison), so for
  every call that the reference order (section 5) refuses, this store refuses with the
  same class; it only additionally refuses the "right token, wrong agent" case.
  With ``strict_tokens=False`` a missing token is accepted from the bound agent.
* Salvage representation: ``salvaged(task_id)`` returns a list, in append order, of dicts
  ``{"by": agent_id, "what": "partial" | "late", "value": <JSON value>, "at": ms}``.
  "partial" comes from ``salvage()``; "late" is the result of a late ``fulfill`` that was
  refused with ``LeaseExpired``. Salvage lives in its own table (``salvage``) and is never
  deleted.
* When expiry is applied: the sweep (time-ordered, see below) runs in ``sweep()``,
  ``poll_next()``, ``claim()`` and ``dispatch()`` (each only after a read found something
  due), and a holder operation that sees ``now >= lease_expires_at`` applies the due
  expiries in the same transaction, commits, then raises ``LeaseExpired``. Reads
  (``get``/``inspect``/``salvaged``/``lock_holder``) never write; views carry
  ``is_logically_expired``.
* Refusal order: argument validation (``InvalidArgument``) first, then exactly section 5:
  NotFound, PermissionDenied (target_agent), WrongState, LeaseExpired, TokenRequired,
  InvalidToken, then PermissionDenied (holder binding), then LimitExceeded.
* Claim strategy: ``claim(task_id)`` is a single-statement CAS
  (``UPDATE ... WHERE task_id=? AND status='SUBMITTED' AND <ready>`` + rowcount == 1), in a
  short transaction that first inserts the fresh token into ``claim_tokens``; any due expiry
  is applied just before in its own short transaction. ``poll_next`` is one
  ``BEGIN IMMEDIATE`` transaction: sweep + pick oldest ready + token insert + update.
* Busy handling: ``sqlite3.connect(timeout=0.05)`` plus a Python retry loop with jittered
  exponential backoff (1 ms .. 50 ms) on "database is locked"/"busy" errors, for at most
  5 s of wall time per call, then ``StoreError``. Each retry re-reads the injected clock.

Choices where SPEC is silent
----------------------------
* Defaults: ``queue_ttl_ms=300_000``, ``exec_ttl_ms=60_000``, ``max_attempts=1``.
  Limits: TTLs are ints in [1, 10 years in ms]; ``max_attempts`` in [1, 1000]; at most
  1000 dependencies; JSON values at most 16 MiB serialised; ids/names at most 1024 chars.
  The clock must return an int (or integral float) in [0, 2**62], else ``StoreError``.
* JSON values: None/bool/int/finite float/str, lists/tuples, dicts with str keys.
  NaN/inf, non-str keys, sets, bytes, objects and cycles are ``InvalidArgument``.
  ``title``/``requester`` must be str; ``depends_on`` may be None (= no dependencies) or any
  non-string iterable of task-id strings (duplicates are dropped, order kept).
* ``attempt`` counts claims: every successful claim does ``attempt += 1`` (releases
  included). Lease expiry requeues iff ``attempt < max_attempts``, else TIMED_OUT. Claims
  are never refused because of ``attempt``; release is limited by ``max_releases`` instead.
* Lease expiry back to SUBMITTED sets ``queued_at = lease_expires_at`` (the instant the
  lease ended, not the instant some call noticed), so the task's logical state is a pure
  function of time. ``claimed_at``/``lease_expires_at``/``claimed_by``/token go to NULL
  whenever a task returns to SUBMITTED; they are kept on terminal states (so a COMPLETED
  task shows who completed it). ``completed_at`` of a timeout is the logical instant it
  happened (lease end or queue-window end), not the sweep time.
* The sweep processes due events in order of their due time (then insertion order), so a
  requeued task whose new queue window also ended times out in the same sweep, and a
  dependent whose own queue window ended before its dependency failed is TIMED_OUT (not
  FAILED). Dependents of a FAILED/TIMED_OUT task become FAILED (transitively) with reason
  "dependency <id> ended <STATUS>"; a task dispatched with an already-failed dependency is
  created FAILED. ``sweep()`` returns the number of distinct tasks whose row changed,
  cascaded dependents included.
* ``extend``: refused (LimitExceeded) when ``extend_count >= max_extends`` (count reset on
  each claim) or when ``now + exec_ttl_ms > created_at + 4 * queue_ttl_ms`` (equal allowed).
  ``release``: refused when ``release_count >= max_releases`` (counted over the task's life).
* A late ``fulfill`` (call sees ``now >= lease_expires_at``) raises ``LeaseExpired``; its
  result is kept as "late" salvage only if the caller presented the live token and is the
  bound agent (a stranger cannot inject salvage). If the expiry had already been applied by
  another call, the fulfill is refused per section 5 (WrongState / InvalidToken) and the
  result is not kept. Late ``fail``/``salvage`` are refused and not kept.
* ``fail`` needs a non-empty, non-whitespace str reason; ``release`` reason must be str.
* Tokens are retired (row token set NULL, history ``retired_at`` set) on release, expiry,
  fulfill and fail; a retired token is refused forever (InvalidToken, message says retired).
* ``inspect(agent_id)`` lists tasks with ``target_agent == agent_id`` or
  ``claimed_by == agent_id``; ``inspect()`` lists all; both in insertion order.
* Daemon locks: held on ``[t, expires_at)``; ``release_lock`` deletes only an unexpired
  lock owned by the caller (an expired lock is not "ours" any more -> False).
* Schema versioned by ``PRAGMA user_version`` (=1); a non-SQLite file, another version,
  an unwritable path or corruption raise ``StoreError``.
* WAL bound: ``wal_autocheckpoint=1000`` pages and ``journal_size_limit=4 MiB``; with no
  long reader the -wal stays below about ``WAL_BOUND_BYTES`` (8 MiB).
"""

from __future__ import annotations

import hmac
import json
import math
import random
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
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

SCHEMA_VERSION = 1
DEFAULT_QUEUE_TTL_MS = 300_000
DEFAULT_EXEC_TTL_MS = 60_000
MAX_TTL_MS = 2**62 - 1  # every TTL below 2**62 (PROTOCOL.md#limits)
MAX_ATTEMPTS = 1000
MAX_DEPS = 1000
MAX_ID_LEN = 1024
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_CLOCK = 2**62
BUSY_TOTAL_S = 5.0
WAL_BOUND_BYTES = 8 * 1024 * 1024

SUBMITTED, CLAIMED, COMPLETED, FAILED, TIMED_OUT = (
    "SUBMITTED", "CLAIMED", "COMPLETED", "FAILED", "TIMED_OUT")
TERMINAL = (COMPLETED, FAILED, TIMED_OUT)
_CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")


@dataclass(frozen=True)
class Claim:
    task_id: str
    agent_id: str
    token: str
    claimed_at: int
    lease_expires_at: int
    attempt: int


@dataclass(frozen=True)
class TaskView:
    task_id: str
    target_agent: str | None
    title: str
    payload: Any
    requester: str
    depends_on: tuple
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
    claimed_by: str | None
    release_reason: str | None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          TEXT NOT NULL UNIQUE,
    target_agent     TEXT,
    title            TEXT NOT NULL,
    payload          TEXT NOT NULL,
    requester        TEXT NOT NULL,
    depends_on       TEXT NOT NULL,
    queue_ttl_ms     INTEGER NOT NULL,
    exec_ttl_ms      INTEGER NOT NULL,
    max_attempts     INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    queued_at        INTEGER NOT NULL,
    claimed_at       INTEGER,
    lease_expires_at INTEGER,
    completed_at     INTEGER,
    attempt          INTEGER NOT NULL DEFAULT 0,
    extend_count     INTEGER NOT NULL DEFAULT 0,
    release_count    INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    error_reason     TEXT,
    release_reason   TEXT,
    claim_token      TEXT,
    claimed_by       TEXT,
    status           TEXT NOT NULL CHECK (status IN
                        ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT'))
);
CREATE INDEX IF NOT EXISTS tasks_status_lease ON tasks(status, lease_expires_at);
CREATE INDEX IF NOT EXISTS tasks_status_queue ON tasks(status, queued_at, seq);
CREATE TABLE IF NOT EXISTS task_deps (
    task_id TEXT NOT NULL REFERENCES tasks(task_id),
    dep_id  TEXT NOT NULL REFERENCES tasks(task_id),
    PRIMARY KEY (task_id, dep_id)
);
CREATE INDEX IF NOT EXISTS task_deps_dep ON task_deps(dep_id);
CREATE TABLE IF NOT EXISTS claim_tokens (
    token       TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks(task_id),
    agent_id    TEXT NOT NULL,
    issued_at   INTEGER NOT NULL,
    retired_at  INTEGER,
    retired_why TEXT
);
CREATE INDEX IF NOT EXISTS claim_tokens_task ON claim_tokens(task_id);
CREATE TABLE IF NOT EXISTS salvage (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id  TEXT NOT NULL REFERENCES tasks(task_id),
    by_agent TEXT NOT NULL,
    what     TEXT NOT NULL CHECK (what IN ('partial','late')),
    value    TEXT NOT NULL,
    at       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS salvage_task ON salvage(task_id, id);
CREATE TABLE IF NOT EXISTS daemon_locks (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
"""

_TASK_COLS = (
    "seq, task_id, target_agent, title, payload, requester, depends_on, queue_ttl_ms, "
    "exec_ttl_ms, max_attempts, created_at, queued_at, claimed_at, lease_expires_at, "
    "completed_at, attempt, extend_count, release_count, result, error_reason, "
    "release_reason, claim_token, claimed_by, status")

# A task is ready for :agent at :now (t is the tasks alias).
_READY = (
    "t.status = 'SUBMITTED' AND :now < t.queued_at + t.queue_ttl_ms "
    "AND (t.target_agent IS NULL OR t.target_agent = :agent) "
    "AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.dep_id "
    "WHERE d.task_id = t.task_id AND p.status != 'COMPLETED')")

_DUE_COUNT = (
    "SELECT (SELECT count(*) FROM tasks WHERE status='CLAIMED' AND lease_expires_at <= :now)"
    " + (SELECT count(*) FROM tasks WHERE status='SUBMITTED'"
    "    AND queued_at + queue_ttl_ms <= :now)"
    " + (SELECT count(*) FROM tasks t WHERE t.status='SUBMITTED' AND EXISTS ("
    "    SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.dep_id"
    "    WHERE d.task_id = t.task_id AND p.status IN ('FAILED','TIMED_OUT')))")

_NEXT_EVENT = (
    "SELECT task_id, status, due FROM ("
    " SELECT task_id, status, lease_expires_at AS due, seq FROM tasks"
    "  WHERE status='CLAIMED' AND lease_expires_at <= :now"
    " UNION ALL"
    " SELECT task_id, status, queued_at + queue_ttl_ms AS due, seq FROM tasks"
    "  WHERE status='SUBMITTED' AND queued_at + queue_ttl_ms <= :now"
    ") ORDER BY due, seq LIMIT 1")


class _CommitThenRaise(Exception):
    """Internal: commit the transaction's writes (an applied expiry), then raise exc."""

    def __init__(self, exc: FerryError):
        super().__init__(str(exc))
        self.exc = exc


def _is_busy(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return "locked" in msg or "busy" in msg


# ----------------------------------------------------------------------------- validation

def _check_str(name: str, value: Any, *, allow_empty: bool = False,
               max_len: int = MAX_ID_LEN) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a str, got {type(value).__name__}")
    if not allow_empty and value == "":
        raise InvalidArgument(f"{name} must be a non-empty string")
    if len(value) > max_len:
        raise InvalidArgument(f"{name} is too long ({len(value)} > {max_len} chars)")
    return value


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    if value < lo or value > hi:
        raise InvalidArgument(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _check_json_value(value: Any, depth: int = 0) -> None:
    if depth > 200:
        raise InvalidArgument("JSON value is nested too deeply (> 200 levels)")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"JSON value must not contain {value!r} (not valid JSON)")
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json_value(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(
                    f"JSON object keys must be str, got {type(key).__name__} key {key!r}")
            _check_json_value(item, depth + 1)
        return
    raise InvalidArgument(f"value of type {type(value).__name__} is not JSON-serialisable")


def _to_json(name: str, value: Any) -> str:
    try:
        _check_json_value(value)
        text = json.dumps(value, allow_nan=False, ensure_ascii=True, separators=(",", ":"))
    except InvalidArgument as exc:
        raise InvalidArgument(f"{name}: {exc}") from None
    except (TypeError, ValueError, RecursionError, OverflowError) as exc:
        raise InvalidArgument(f"{name} is not a JSON value: {exc}") from None
    if len(text) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{name} is too large ({len(text)} bytes > {MAX_JSON_BYTES})")
    return text


def _from_json(text: str | None) -> Any:
    if text is None:
        return None
    return json.loads(text)


def _check_token(token: Any) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str):
        raise InvalidArgument(f"token must be a str or None, got {type(token).__name__}")
    if len(token) > MAX_ID_LEN:
        raise InvalidArgument(f"token is too long ({len(token)} chars)")
    return token


# ----------------------------------------------------------------------------- the store

class AgentBoundStore:
    def __init__(self, path: str, *, clock: Callable[[], int], strict_tokens: bool = True,
                 max_releases: int = 3, max_extends: int = 5):
        if not isinstance(path, str) or path == "":
            raise InvalidArgument("path must be a non-empty str")
        if not callable(clock):
            raise InvalidArgument("clock must be a callable returning int milliseconds")
        self._clock = clock
        self.strict_tokens = bool(strict_tokens)
        self.max_releases = _check_int("max_releases", max_releases, 0, 10**6)
        self.max_extends = _check_int("max_extends", max_extends, 0, 10**6)
        self.wal_bound_bytes = WAL_BOUND_BYTES
        self._lock = threading.RLock()
        self._path = path
        try:
            self._conn = sqlite3.connect(path, timeout=0.05, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database at {path!r}: {exc}") from None
        try:
            self._setup()
        except FerryError:
            self._conn.close()
            raise
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(f"cannot use SQLite database at {path!r}: {exc}") from None

    # -- plumbing -------------------------------------------------------------------------

    def _setup(self) -> None:
        def pragma(sql: str):
            return self._retry(lambda: self._q(sql))

        mode = pragma("PRAGMA journal_mode=WAL")
        if (not mode or str(mode[0][0]).lower() != "wal") and self._path != ":memory:":
            raise StoreError(f"could not switch {self._path!r} to WAL mode (got {mode!r}); "
                             "is it on a network file system?")
        pragma("PRAGMA synchronous=NORMAL")
        pragma("PRAGMA foreign_keys=ON")
        pragma("PRAGMA wal_autocheckpoint=1000")
        pragma("PRAGMA journal_size_limit=4194304")

        def create(now: int) -> None:
            version = self._q("PRAGMA user_version")[0][0]
            if version == 0:
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        self._x(stmt)
                self._x(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise StoreError(
                    f"{self._path!r} has schema version {version}; this store supports "
                    f"version {SCHEMA_VERSION} only (newer or foreign database)")

        self._write(create, use_clock=False)

    def _now(self) -> int:
        try:
            value = self._clock()
        except Exception as exc:  # the injected clock is broken
            raise StoreError(f"clock() failed: {exc!r}") from None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CLOCK:
            raise StoreError(f"clock() must return int milliseconds in [0, 2**62], "
                             f"got {value!r}")
        return value

    def _conn_or_raise(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("store is closed")
        return self._conn

    def _q(self, sql: str, params: Any = ()) -> list:
        cur = self._conn_or_raise().execute(sql, params)
        try:
            return cur.fetchall()
        finally:
            cur.close()

    def _q1(self, sql: str, params: Any = ()):
        rows = self._q(sql, params)
        return rows[0] if rows else None

    def _x(self, sql: str, params: Any = ()) -> int:
        cur = self._conn_or_raise().execute(sql, params)
        try:
            return cur.rowcount
        finally:
            cur.close()

    def _rollback(self) -> None:
        conn = self._conn
        if conn is not None and conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _retry(self, fn: Callable[[], Any]) -> Any:
        """Run fn, retrying SQLITE_BUSY with jittered backoff for up to BUSY_TOTAL_S."""
        with self._lock:
            self._conn_or_raise()
            deadline = time.monotonic() + BUSY_TOTAL_S
            backoff = 0.001
            while True:
                try:
                    return fn()
                except sqlite3.OperationalError as exc:
                    self._rollback()
                    if not _is_busy(exc):
                        raise StoreError(f"SQLite error on {self._path!r}: {exc}") from None
                    if time.monotonic() >= deadline:
                        raise StoreError(
                            f"database {self._path!r} stayed locked for more than "
                            f"{BUSY_TOTAL_S:g} s: {exc}") from None
                    time.sleep(random.uniform(backoff / 2, backoff))
                    backoff = min(backoff * 2, 0.05)
                except sqlite3.Error as exc:
                    self._rollback()
                    raise StoreError(f"SQLite error on {self._path!r}: {exc}") from None
                except BaseException:
                    self._rollback()
                    raise

    def _write(self, body: Callable[[int], Any], *, use_clock: bool = True) -> Any:
        """One short BEGIN IMMEDIATE transaction running body(now)."""

        def attempt():
            now = self._now() if use_clock else 0
            conn = self._conn_or_raise()
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(now)
            except _CommitThenRaise as ctr:
                conn.execute("COMMIT")
                raise ctr.exc from None
            except BaseException:
                self._rollback()
                raise
            conn.execute("COMMIT")
            return result

        return self._retry(attempt)

    def _read(self, body: Callable[[int], Any]) -> Any:
        """A short read-only transaction (one snapshot); writes nothing."""

        def attempt():
            now = self._now()
            conn = self._conn_or_raise()
            conn.execute("BEGIN")
            try:
                result = body(now)
            finally:
                self._rollback()
            return result

        return self._retry(attempt)

    # -- row helpers ----------------------------------------------------------------------

    def _row(self, task_id: str):
        return self._q1(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?", (task_id,))

    @staticmethod
    def _as_dict(row) -> dict:
        keys = [k.strip() for k in _TASK_COLS.split(",")]
        return dict(zip(keys, row))

    def _view(self, row, now: int) -> TaskView:
        r = self._as_dict(row)
        status = r["status"]
        if status == CLAIMED:
            expired = now >= r["lease_expires_at"]
        elif status == SUBMITTED:
            expired = now >= r["queued_at"] + r["queue_ttl_ms"]
        else:
            expired = False
        return TaskView(
            task_id=r["task_id"], target_agent=r["target_agent"], title=r["title"],
            payload=_from_json(r["payload"]), requester=r["requester"],
            depends_on=tuple(json.loads(r["depends_on"])), queue_ttl_ms=r["queue_ttl_ms"],
            exec_ttl_ms=r["exec_ttl_ms"], max_attempts=r["max_attempts"],
            created_at=r["created_at"], queued_at=r["queued_at"], claimed_at=r["claimed_at"],
            lease_expires_at=r["lease_expires_at"], completed_at=r["completed_at"],
            attempt=r["attempt"], extend_count=r["extend_count"],
            release_count=r["release_count"], result=_from_json(r["result"]),
            error_reason=r["error_reason"], status=status, is_logically_expired=expired,
            claimed_by=r["claimed_by"], release_reason=r["release_reason"])

    def _retire(self, token: str | None, now: int, why: str) -> None:
        if token is not None:
            self._x("UPDATE claim_tokens SET retired_at = ?, retired_why = ? "
                    "WHERE token = ? AND retired_at IS NULL", (now, why, token))

    # -- expiry / sweep (inside a write transaction) --------------------------------------

    def _due_count(self, now: int) -> int:
        return self._q1(_DUE_COUNT, {"now": now})[0]

    def _cascade(self, parent_id: str, parent_status: str, at: int, changed: set) -> None:
        """Dependents (SUBMITTED) of a task that ended FAILED/TIMED_OUT at `at`."""
        deps = self._q(
            "SELECT t.task_id, t.queued_at + t.queue_ttl_ms FROM task_deps d "
            "JOIN tasks t ON t.task_id = d.task_id "
            "WHERE d.dep_id = ? AND t.status = 'SUBMITTED' ORDER BY t.seq", (parent_id,))
        for child_id, deadline in deps:
            if deadline <= at:  # its own queue window ended first
                n = self._x(
                    "UPDATE tasks SET status='TIMED_OUT', completed_at=?, error_reason=? "
                    "WHERE task_id=? AND status='SUBMITTED'",
                    (deadline, "queue window ended before the task was claimed", child_id))
                status, when = TIMED_OUT, deadline
            else:
                n = self._x(
                    "UPDATE tasks SET status='FAILED', completed_at=?, error_reason=? "
                    "WHERE task_id=? AND status='SUBMITTED'",
                    (at, f"dependency {parent_id} ended {parent_status}", child_id))
                status, when = FAILED, at
            if n == 1:
                changed.add(child_id)
                self._cascade(child_id, status, when, changed)

    def _sweep_locked(self, now: int) -> set:
        changed: set = set()
        while True:
            ev = self._q1(_NEXT_EVENT, {"now": now})
            if ev is None:
                break
            task_id, status, due = ev
            row = self._as_dict(self._row(task_id))
            if status == CLAIMED:
                self._retire(row["claim_token"], now, "expired")
                if row["attempt"] < row["max_attempts"]:
                    self._x(
                        "UPDATE tasks SET status='SUBMITTED', queued_at=?, claim_token=NULL, "
                        "claimed_by=NULL, claimed_at=NULL, lease_expires_at=NULL "
                        "WHERE task_id=? AND status='CLAIMED'", (due, task_id))
                else:
                    reason = (f"lease expired at {due} on attempt {row['attempt']} of "
                              f"{row['max_attempts']}")
                    self._x(
                        "UPDATE tasks SET status='TIMED_OUT', completed_at=?, error_reason=?, "
                        "claim_token=NULL WHERE task_id=? AND status='CLAIMED'",
                        (due, reason, task_id))
                    self._cascade(task_id, TIMED_OUT, due, changed)
            else:
                self._x(
                    "UPDATE tasks SET status='TIMED_OUT', completed_at=?, error_reason=? "
                    "WHERE task_id=? AND status='SUBMITTED'",
                    (due, "queue window ended before the task was claimed", task_id))
                self._cascade(task_id, TIMED_OUT, due, changed)
            changed.add(task_id)
        # Robustness: SUBMITTED tasks whose dependency already failed (should not exist).
        while True:
            orphan = self._q1(
                "SELECT t.task_id, p.task_id, p.status, p.completed_at FROM tasks t "
                "JOIN task_deps d ON d.task_id = t.task_id JOIN tasks p ON p.task_id = d.dep_id "
                "WHERE t.status='SUBMITTED' AND p.status IN ('FAILED','TIMED_OUT') "
                "ORDER BY t.seq LIMIT 1")
            if orphan is None:
                break
            _, pid, pstatus, pat = orphan
            self._cascade(pid, pstatus, pat if pat is not None else now, changed)
        return changed

    def _sweep_if_due(self, now: int) -> set:
        if self._due_count(now) == 0:
            return set()
        return self._sweep_locked(now)

    # -- claim helpers --------------------------------------------------------------------

    def _do_claim(self, task_id: str, agent_id: str, now: int) -> Claim | None:
        """Token into history, then the single-statement CAS; caller owns the txn."""
        token = str(uuid.uuid4())
        self._x("INSERT INTO claim_tokens(token, task_id, agent_id, issued_at) "
                "VALUES (?, ?, ?, ?)", (token, task_id, agent_id, now))
        n = self._x(
            "UPDATE tasks AS t SET status='CLAIMED', claim_token=:token, claimed_by=:agent, "
            "claimed_at=:now, lease_expires_at=:now + t.exec_ttl_ms, attempt=t.attempt + 1, "
            f"extend_count=0 WHERE t.task_id=:tid AND {_READY}",
            {"token": token, "agent": agent_id, "now": now, "tid": task_id})
        if n != 1:
            return None
        lease, attempt = self._q1(
            "SELECT lease_expires_at, attempt FROM tasks WHERE task_id=?", (task_id,))
        return Claim(task_id=task_id, agent_id=agent_id, token=token, claimed_at=now,
                     lease_expires_at=lease, attempt=attempt)

    # -- protocol: dispatch / claims ------------------------------------------------------

    def dispatch(self, target_agent, *, title="", payload=None, requester="", depends_on=(),
                 queue_ttl_ms=DEFAULT_QUEUE_TTL_MS, exec_ttl_ms=DEFAULT_EXEC_TTL_MS,
                 max_attempts=1) -> str:
        if target_agent is not None:
            _check_str("target_agent", target_agent)
        _check_str("title", title, allow_empty=True, max_len=MAX_JSON_BYTES)
        _check_str("requester", requester, allow_empty=True)
        payload_text = _to_json("payload", payload)
        _check_int("queue_ttl_ms", queue_ttl_ms, 1, MAX_TTL_MS)
        _check_int("exec_ttl_ms", exec_ttl_ms, 1, MAX_TTL_MS)
        _check_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
        if depends_on is None:
            deps: list = []
        else:
            if isinstance(depends_on, (str, bytes, bytearray, dict)):
                raise InvalidArgument("depends_on must be a list/tuple of task ids, "
                                      f"not {type(depends_on).__name__}")
            try:
                raw = list(depends_on)
            except TypeError:
                raise InvalidArgument("depends_on must be an iterable of task ids, got "
                                      f"{type(depends_on).__name__}") from None
            deps = []
            for d in raw:
                _check_str("depends_on item", d)
                if d not in deps:
                    deps.append(d)
            if len(deps) > MAX_DEPS:
                raise InvalidArgument(f"too many dependencies ({len(deps)} > {MAX_DEPS})")

        def body(now: int) -> str:
            for d in deps:
                if self._q1("SELECT 1 FROM tasks WHERE task_id=?", (d,)) is None:
                    raise NotFound(f"dependency {d!r} does not exist (dispatch it first)")
            self._sweep_if_due(now)
            failed_dep = None
            for d in deps:
                st = self._q1("SELECT status FROM tasks WHERE task_id=?", (d,))[0]
                if st in (FAILED, TIMED_OUT):
                    failed_dep = (d, st)
                    break
            task_id = str(uuid.uuid4())
            status, completed_at, reason = SUBMITTED, None, None
            if failed_dep is not None:
                status, completed_at = FAILED, now
                reason = f"dependency {failed_dep[0]} ended {failed_dep[1]}"
            self._x(
                "INSERT INTO tasks(task_id, target_agent, title, payload, requester, depends_on,"
                " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at, completed_at,"
                " error_reason, status) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (task_id, target_agent, title, payload_text, requester, json.dumps(deps),
                 queue_ttl_ms, exec_ttl_ms, max_attempts, now, now, completed_at, reason,
                 status))
            for d in deps:
                self._x("INSERT INTO task_deps(task_id, dep_id) VALUES (?, ?)", (task_id, d))
            return task_id

        return self._write(body)

    def poll_next(self, agent_id) -> Claim | None:
        _check_str("agent_id", agent_id)

        # Phase 1: a read. An idle poll (nothing due, nothing ready) writes nothing.
        def look(now: int) -> bool:
            if self._due_count(now) > 0:
                return True
            return self._q1(f"SELECT 1 FROM tasks t WHERE {_READY} LIMIT 1",
                            {"now": now, "agent": agent_id}) is not None

        if not self._read(look):
            return None

        # Phase 2: one BEGIN IMMEDIATE transaction: sweep, pick, claim.
        def body(now: int) -> Claim | None:
            self._sweep_if_due(now)
            pick = self._q1(
                f"SELECT t.task_id FROM tasks t WHERE {_READY} ORDER BY t.queued_at, t.seq "
                "LIMIT 1", {"now": now, "agent": agent_id})
            if pick is None:
                return None
            claim = self._do_claim(pick[0], agent_id, now)
            if claim is None:  # cannot happen under BEGIN IMMEDIATE
                raise StoreError(f"claim of picked task {pick[0]} did not apply")
            return claim

        return self._write(body)

    def claim(self, task_id, agent_id) -> Claim | None:
        _check_str("task_id", task_id)
        _check_str("agent_id", agent_id)

        def look(now: int) -> tuple:
            if self._q1("SELECT 1 FROM tasks WHERE task_id=?", (task_id,)) is None:
                raise NotFound(f"task {task_id!r} does not exist")
            due = self._due_count(now) > 0
            ready = self._q1(f"SELECT 1 FROM tasks t WHERE t.task_id=:tid AND {_READY}",
                             {"now": now, "agent": agent_id, "tid": task_id}) is not None
            return due, ready

        due, ready = self._read(look)
        if due:
            self._write(lambda now: self._sweep_if_due(now))
        elif not ready:
            return None

        # The claim itself: token into history, then one CAS UPDATE; rowcount decides.
        def body(now: int) -> Claim | None:
            claim = self._do_claim(task_id, agent_id, now)
            if claim is None:
                raise _NoClaim()
            return claim

        try:
            return self._write(body)
        except _NoClaim:
            return None

    # -- holder operations ----------------------------------------------------------------

    def _guard(self, now: int, task_id: str, agent_id: str, token: str | None,
               op: str) -> dict:
        """Section 5 holder guard. Returns the row dict when the caller holds the task.

        On an expired lease it returns the row with key "_expired" set; the caller then
        applies the expiry and raises LeaseExpired after committing.
        """
        row = self._row(task_id)
        if row is None:
            raise NotFound(f"task {task_id!r} does not exist")
        r = self._as_dict(row)
        if r["target_agent"] is not None and agent_id != r["target_agent"]:
            raise PermissionDenied(
                f"{op}: task {task_id} is for agent {r['target_agent']!r}, not {agent_id!r}")
        if r["status"] != CLAIMED:
            raise WrongState(f"{op}: task {task_id} is {r['status']}, not CLAIMED")
        if now >= r["lease_expires_at"]:
            r["_expired"] = True
            return r
        if token is None or token == "":
            if self.strict_tokens:
                raise TokenRequired(f"{op}: a claim token is required for task {task_id}")
        elif not hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                     (r["claim_token"] or "").encode("utf-8")):
            hist = self._q1("SELECT retired_at, retired_why FROM claim_tokens "
                            "WHERE token=? AND task_id=?", (token, task_id))
            if hist is not None and hist[0] is not None:
                raise InvalidToken(f"{op}: token for task {task_id} was retired "
                                   f"({hist[1]} at {hist[0]}); claim the task again")
            raise InvalidToken(f"{op}: token is not the current claim token of task {task_id}")
        if r["claimed_by"] != agent_id:
            raise PermissionDenied(
                f"{op}: task {task_id} is held by agent {r['claimed_by']!r}, not {agent_id!r}; "
                "claims are bound to the claiming agent")
        return r

    def _expire_and_raise(self, r: dict, now: int, op: str):
        self._sweep_locked(now)
        new_status = self._q1("SELECT status FROM tasks WHERE task_id=?", (r["task_id"],))[0]
        raise _CommitThenRaise(LeaseExpired(
            f"{op}: lease of task {r['task_id']} ended at {r['lease_expires_at']} "
            f"(now {now}); expiry applied, task is now {new_status}"))

    def _holder_update(self, r: dict, sql_set: str, params: tuple, op: str) -> None:
        n = self._x(f"UPDATE tasks SET {sql_set} WHERE task_id=? AND status='CLAIMED' "
                    "AND claim_token=? AND claimed_by=?",
                    params + (r["task_id"], r["claim_token"], r["claimed_by"]))
        if n != 1:
            raise WrongState(f"{op}: task {r['task_id']} changed concurrently")

    def _holder_args(self, task_id, agent_id, token):
        _check_str("task_id", task_id)
        _check_str("agent_id", agent_id)
        return _check_token(token)

    def fulfill(self, task_id, agent_id, token, result) -> None:
        token = self._holder_args(task_id, agent_id, token)
        result_text = _to_json("result", result)

        def body(now: int) -> None:
            r = self._guard(now, task_id, agent_id, token, "fulfill")
            if r.get("_expired"):
                live = r["claim_token"]
                if (token is not None and live is not None and r["claimed_by"] == agent_id
                        and hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                                live.encode("utf-8"))):
                    self._x("INSERT INTO salvage(task_id, by_agent, what, value, at) "
                            "VALUES (?, ?, 'late', ?, ?)", (task_id, agent_id, result_text, now))
                self._expire_and_raise(r, now, "fulfill")
            self._holder_update(r, "status='COMPLETED', result=?, completed_at=?, "
                                "claim_token=NULL", (result_text, now), "fulfill")
            self._retire(r["claim_token"], now, "completed")

        self._write(body)

    def fail(self, task_id, agent_id, token, reason) -> None:
        token = self._holder_args(task_id, agent_id, token)
        _check_str("reason", reason, allow_empty=True, max_len=MAX_JSON_BYTES)
        if reason.strip() == "":
            raise InvalidArgument("fail: reason must be a non-empty string")

        def body(now: int) -> None:
            r = self._guard(now, task_id, agent_id, token, "fail")
            if r.get("_expired"):
                self._expire_and_raise(r, now, "fail")
            self._holder_update(r, "status='FAILED', error_reason=?, completed_at=?, "
                                "claim_token=NULL", (reason, now), "fail")
            self._retire(r["claim_token"], now, "failed")
            self._cascade(task_id, FAILED, now, set())

        self._write(body)

    def release(self, task_id, agent_id, token, reason="") -> None:
        token = self._holder_args(task_id, agent_id, token)
        _check_str("reason", reason, allow_empty=True, max_len=MAX_JSON_BYTES)

        def body(now: int) -> None:
            r = self._guard(now, task_id, agent_id, token, "release")
            if r.get("_expired"):
                self._expire_and_raise(r, now, "release")
            if r["release_count"] >= self.max_releases:
                raise LimitExceeded(f"release: task {task_id} was already released "
                                    f"{r['release_count']} times (max {self.max_releases})")
            self._holder_update(
                r, "status='SUBMITTED', queued_at=?, claim_token=NULL, claimed_by=NULL, "
                "claimed_at=NULL, lease_expires_at=NULL, release_count=release_count+1, "
                "release_reason=?", (now, reason), "release")
            self._retire(r["claim_token"], now, "released")

        self._write(body)

    def extend(self, task_id, agent_id, token) -> int:
        token = self._holder_args(task_id, agent_id, token)

        def body(now: int) -> int:
            r = self._guard(now, task_id, agent_id, token, "extend")
            if r.get("_expired"):
                self._expire_and_raise(r, now, "extend")
            if r["extend_count"] >= self.max_extends:
                raise LimitExceeded(f"extend: lease of task {task_id} was already extended "
                                    f"{r['extend_count']} times (max {self.max_extends})")
            new_expiry = now + r["exec_ttl_ms"]
            cap = r["created_at"] + 4 * r["queue_ttl_ms"]
            if new_expiry > cap:
                raise LimitExceeded(f"extend: new expiry {new_expiry} would pass the task's "
                                    f"cap created_at + 4*queue_ttl_ms = {cap}")
            self._holder_update(r, "lease_expires_at=?, extend_count=extend_count+1",
                                (new_expiry,), "extend")
            return new_expiry

        return self._write(body)

    def salvage(self, task_id, agent_id, token, partial) -> None:
        token = self._holder_args(task_id, agent_id, token)
        text = _to_json("partial", partial)

        def body(now: int) -> None:
            r = self._guard(now, task_id, agent_id, token, "salvage")
            if r.get("_expired"):
                self._expire_and_raise(r, now, "salvage")
            # Re-check the holder condition in the same statement as the append.
            n = self._x(
                "INSERT INTO salvage(task_id, by_agent, what, value, at) "
                "SELECT ?, ?, 'partial', ?, ? WHERE EXISTS (SELECT 1 FROM tasks WHERE "
                "task_id=? AND status='CLAIMED' AND claim_token=? AND claimed_by=?)",
                (task_id, agent_id, text, now, task_id, r["claim_token"], r["claimed_by"]))
            if n != 1:
                raise WrongState(f"salvage: task {task_id} changed concurrently")

        self._write(body)

    # -- sweep / reads --------------------------------------------------------------------

    def sweep(self) -> int:
        def look(now: int) -> int:
            return self._due_count(now)

        if self._read(look) == 0:
            return 0
        return len(self._write(lambda now: self._sweep_if_due(now)))

    def get(self, task_id) -> TaskView:
        _check_str("task_id", task_id)

        def body(now: int) -> TaskView:
            row = self._row(task_id)
            if row is None:
                raise NotFound(f"task {task_id!r} does not exist")
            return self._view(row, now)

        return self._read(body)

    def inspect(self, agent_id=None) -> list:
        if agent_id is not None:
            _check_str("agent_id", agent_id)

        def body(now: int) -> list:
            if agent_id is None:
                rows = self._q(f"SELECT {_TASK_COLS} FROM tasks ORDER BY seq")
            else:
                rows = self._q(f"SELECT {_TASK_COLS} FROM tasks WHERE target_agent=? "
                               "OR claimed_by=? ORDER BY seq", (agent_id, agent_id))
            return [self._view(row, now) for row in rows]

        return self._read(body)

    def salvaged(self, task_id) -> list:
        _check_str("task_id", task_id)

        def body(now: int) -> list:
            if self._q1("SELECT 1 FROM tasks WHERE task_id=?", (task_id,)) is None:
                raise NotFound(f"task {task_id!r} does not exist")
            rows = self._q("SELECT by_agent, what, value, at FROM salvage WHERE task_id=? "
                           "ORDER BY id", (task_id,))
            return [{"by": b, "what": w, "value": json.loads(v), "at": a}
                    for b, w, v, a in rows]

        return self._read(body)

    # -- daemon locks ---------------------------------------------------------------------

    def acquire_lock(self, name, owner, ttl_ms) -> bool:
        _check_str("name", name)
        _check_str("owner", owner)
        _check_int("ttl_ms", ttl_ms, 1, MAX_TTL_MS)

        def attempt() -> bool:
            now = self._now()
            n = self._x(
                "INSERT INTO daemon_locks(name, owner, expires_at) VALUES (:name, :owner, :exp) "
                "ON CONFLICT(name) DO UPDATE SET owner=excluded.owner, "
                "expires_at=excluded.expires_at "
                "WHERE daemon_locks.expires_at <= :now OR daemon_locks.owner = excluded.owner",
                {"name": name, "owner": owner, "exp": now + ttl_ms, "now": now})
            return n == 1

        return self._retry(attempt)

    def release_lock(self, name, owner) -> bool:
        _check_str("name", name)
        _check_str("owner", owner)

        def attempt() -> bool:
            now = self._now()
            n = self._x("DELETE FROM daemon_locks WHERE name=? AND owner=? AND expires_at > ?",
                        (name, owner, now))
            return n == 1

        return self._retry(attempt)

    def lock_holder(self, name) -> str | None:
        _check_str("name", name)

        def body(now: int):
            row = self._q1("SELECT owner FROM daemon_locks WHERE name=? AND expires_at > ?",
                           (name, now))
            return row[0] if row else None

        return self._read(body)

    # -- maintenance ----------------------------------------------------------------------

    def checkpoint(self, mode="TRUNCATE") -> tuple:
        if not isinstance(mode, str) or mode.upper() not in _CHECKPOINT_MODES:
            raise InvalidArgument(f"checkpoint mode must be one of {_CHECKPOINT_MODES}, "
                                  f"got {mode!r}")
        row = self._retry(lambda: self._q1(f"PRAGMA wal_checkpoint({mode.upper()})"))
        return tuple(int(x) for x in row)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _NoClaim(Exception):
    """Internal: the CAS changed no row; roll the token insert back."""


def make_store(path: str, *, clock, strict_tokens: bool = True, max_releases: int = 3,
               max_extends: int = 5) -> AgentBoundStore:
    return AgentBoundStore(path, clock=clock, strict_tokens=strict_tokens,
                           max_releases=max_releases, max_extends=max_extends)


def make_declared(path: str, *, clock, **options):
    """The same store, declaring its stricter choice so ferry holds it to it (added by the
    ferry lead: the store itself is unchanged)."""
    store = make_store(path, clock=clock, **options)
    store.ferry_declares = frozenset({"holder-binding"})
    return store
