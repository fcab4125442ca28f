"""minimal_slow -- an independent SPEC store for ferry's test corpus.

Written from /work/shared/SPEC.md alone (plus ``ferry_core.errors``), stdlib only.
Factory: ``make_store(path, *, clock, strict_tokens=True, max_releases=3, max_extends=5)``.

Capabilities left out on purpose (variant "minimal_slow")
--------------------------------------------------------
* no ``sweep()`` method;
* no dependencies: ``dispatch`` has no ``depends_on`` parameter at all (views still carry
  ``depends_on=[]`` so they have every SPEC section 2 field);
* no daemon locks (no ``acquire_lock`` / ``release_lock`` / ``lock_holder``).

Choices on the SPEC section 9 freedoms
--------------------------------------
* Token: a **bearer credential**. For an untargeted task whoever presents the live token is
  the holder, whatever ``agent_id`` it gives. For a targeted task the caller must be the
  ``target_agent`` (``PermissionDenied`` otherwise), as SPEC section 5 says.
* Salvage representation: ``salvaged(task_id)`` returns a ``list[str]`` in append order, each
  entry the JSON text of what was kept: ``json.dumps(partial)`` for a ``salvage()`` call and
  ``json.dumps({"late_result": result})`` for a late ``fulfill``.
* When expiry is applied: due expiries (lease and queue window) are applied by
  ``poll_next`` and ``claim`` -- both first count due rows (and look for a ready task) with
  one plain read, and only open a ``BEGIN IMMEDIATE`` write when something is due or
  ready; the write transaction then applies *all* due expiries and claims. A holder
  operation that finds its own task's lease over applies that task's expiry (and, if the
  requeued task is already past its new queue window, that queue expiry too), commits, and
  raises ``LeaseExpired``. Reads (get / inspect / salvaged) never write.
* Refusal order: exactly SPEC section 5's (NotFound, PermissionDenied, WrongState,
  LeaseExpired, TokenRequired, InvalidToken), then the operation's own limits
  (LimitExceeded).  Pure argument validation (types, empty fail reason, non-JSON result
  / partial) happens *before* any database access and raises ``InvalidArgument``.
* Claim strategy: "immediate" -- one short ``BEGIN IMMEDIATE`` transaction that applies due
  expiries, picks the oldest ready task (``ORDER BY queued_at, seq``), inserts the new
  token into the history table and runs the conditional
  ``UPDATE ... WHERE task_id=? AND status='SUBMITTED' AND <still ready>`` checking
  ``rowcount == 1``.
* Busy handling: only SQLite's own busy handler, ``sqlite3.connect(path, timeout=10.0)``.
  (One exception at open time: ``PRAGMA journal_mode=WAL`` on a brand-new file can get
  SQLITE_BUSY without SQLite calling the busy handler when several processes open the new
  file at once, so that single setup statement is retried for up to 10 s; ``time`` is used
  only for this, never for task times.)
  Transactions are managed by hand (``isolation_level=None``); every write is one
  ``BEGIN IMMEDIATE ... COMMIT`` inside a single call.  Any ``sqlite3.Error`` (including
  "database is locked" after 10 s) surfaces as ``StoreError``.
* ``checkpoint(mode)`` runs ``PRAGMA wal_checkpoint(MODE)`` on the store's connection and
  returns the row as a tuple of three ints.

Choices where SPEC is open
--------------------------
* Defaults: ``queue_ttl_ms=3_600_000`` (1 h), ``exec_ttl_ms=300_000`` (5 min),
  ``max_attempts=1``, ``max_releases=3`` per task, ``max_extends=5`` per claim.
* Bounds: TTLs are ints (not bool) in ``[1, 10**12]``; ``max_attempts`` in ``[1, 10_000]``;
  the clock must return an int in ``[0, 2**62]`` (an integral float is accepted and
  converted) -- so every stored time stays far inside int64.
* Strings: agent ids / ``target_agent`` are non-empty ``str`` of at most 1024 chars;
  ``target_agent=None`` means any agent (an empty string is refused); title, requester and
  reasons are ``str`` of at most 65536 chars; task ids must be ``str`` (an unknown one is
  ``NotFound``).  Strings that cannot be encoded as UTF-8 (lone surrogates) are refused.
* JSON: payload / result / partial must be made only of ``None``, ``bool``, ``int``,
  finite ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys (tuples, sets, NaN,
  non-str keys are ``InvalidArgument``), nested at most 200 deep, at most 4 MiB as JSON.
* ``attempt`` counts claims (it is incremented by every claim and never reset); a lease
  expiry requeues iff ``attempt < max_attempts``.  Release does not refund an attempt.
* Lease expiry with attempts left: ``SUBMITTED``, token and ``claimed_by`` NULL,
  ``claimed_at`` / ``lease_expires_at`` NULL, and ``queued_at = lease_expires_at`` (the
  logical instant of the requeue, so the result does not depend on *when* the expiry is
  applied lazily); the task gets a fresh queue window from then.  Without attempts left:
  ``TIMED_OUT`` with ``completed_at = lease_expires_at``.  Queue-window expiry:
  ``TIMED_OUT`` with ``completed_at = queued_at + queue_ttl_ms``.  Both set
  ``error_reason``.
* Release: ``LimitExceeded`` once ``release_count >= max_releases``; otherwise
  ``SUBMITTED``, token retired, ``queued_at = now`` (fresh queue window), ``claimed_at`` /
  ``lease_expires_at`` / ``claimed_by`` NULL; the reason is kept in ``release_reason``
  (``error_reason`` is left alone).
* Extend: ``LimitExceeded`` once ``extend_count >= max_extends`` (``extend_count`` resets on
  each claim) or when ``now + exec_ttl_ms > created_at + 4 * queue_ttl_ms`` (equal is
  allowed).  Returns the new ``lease_expires_at``.
* Fail: ``reason`` must be a non-empty ``str`` (only the exact empty string counts as
  empty).  Terminal transitions also NULL the row's token (it stays in history).
* Late fulfill: when a ``fulfill`` is refused with ``LeaseExpired``, its result is kept as
  salvage only if the presented token is the expired claim's own token (a stranger's
  result is not kept).  A late ``fail`` / ``salvage`` is refused and keeps nothing.  If
  another call already applied the expiry, the old holder's ``fulfill`` meets a
  ``SUBMITTED`` / ``TIMED_OUT`` task (``WrongState``) or a re-claimed one
  (``InvalidToken``) and, following section 5's order, nothing is kept.
* ``claim(task_id, agent_id)`` of a task that exists but is not ready for this agent
  (wrong state, wrong target, queue window over) returns ``None``.
* ``inspect(agent_id)``: ``None`` lists every task; otherwise the tasks whose
  ``target_agent`` is that agent or that the agent currently holds (``claimed_by``), in
  insertion order.
* Views are frozen dataclasses; ``TaskView`` adds ``claimed_by``, ``queue_expires_at``,
  ``release_reason`` and ``depends_on=[]``.  ``is_logically_expired`` is true for a
  ``CLAIMED`` task with ``now >= lease_expires_at`` and a ``SUBMITTED`` task with
  ``now >= queued_at + queue_ttl_ms``; ``status`` is the stored one.
* Schema: ``PRAGMA user_version = 1``; a file with a newer version, or a version-1 file
  without our tables, or a non-SQLite file, raises ``StoreError``.
* ``close()`` is idempotent; any other call after it raises ``StoreError``.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
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

DEFAULT_QUEUE_TTL_MS = 3_600_000
DEFAULT_EXEC_TTL_MS = 300_000
MAX_TTL_MS = 2**62 - 1  # every TTL below 2**62 (PROTOCOL.md#limits)
MAX_ATTEMPTS = 10_000
MAX_CLOCK = 2**62
MAX_NAME = 1024
MAX_TEXT = 65536
MAX_JSON_CHARS = 4 * 1024 * 1024
MAX_JSON_DEPTH = 200
SCHEMA_VERSION = 1

SUBMITTED, CLAIMED, COMPLETED, FAILED, TIMED_OUT = (
    "SUBMITTED", "CLAIMED", "COMPLETED", "FAILED", "TIMED_OUT")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          TEXT NOT NULL UNIQUE,
    target_agent     TEXT,
    title            TEXT NOT NULL,
    payload          TEXT NOT NULL,
    requester        TEXT NOT NULL,
    queue_ttl_ms     INTEGER NOT NULL,
    exec_ttl_ms      INTEGER NOT NULL,
    max_attempts     INTEGER NOT NULL,
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
    status           TEXT NOT NULL CHECK (status IN
                       ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT')),
    claim_token      TEXT,
    claimed_by       TEXT
);
CREATE INDEX IF NOT EXISTS tasks_lease ON tasks(status, lease_expires_at);
CREATE INDEX IF NOT EXISTS tasks_queue ON tasks(status, queue_expires_at);
CREATE INDEX IF NOT EXISTS tasks_order ON tasks(status, queued_at, seq);
CREATE TABLE IF NOT EXISTS claim_tokens (
    token     TEXT PRIMARY KEY,
    task_id   TEXT NOT NULL REFERENCES tasks(task_id),
    agent_id  TEXT NOT NULL,
    issued_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS salvage (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT NOT NULL REFERENCES tasks(task_id),
    entry      TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS salvage_task ON salvage(task_id, id);
"""

# Lease expiry: back to SUBMITTED (queued_at = the instant the lease ended) if attempts are
# left, else TIMED_OUT.  All SET expressions see the old row values.
_EXPIRE_LEASES = """
UPDATE tasks SET
    status = CASE WHEN attempt < max_attempts THEN 'SUBMITTED' ELSE 'TIMED_OUT' END,
    queued_at = CASE WHEN attempt < max_attempts THEN lease_expires_at ELSE queued_at END,
    queue_expires_at = CASE WHEN attempt < max_attempts
                            THEN lease_expires_at + queue_ttl_ms ELSE queue_expires_at END,
    completed_at = CASE WHEN attempt < max_attempts THEN NULL ELSE lease_expires_at END,
    error_reason = CASE WHEN attempt < max_attempts THEN error_reason
                        ELSE 'lease expired at ' || lease_expires_at || ' on attempt '
                             || attempt || ' of ' || max_attempts END,
    claimed_at = CASE WHEN attempt < max_attempts THEN NULL ELSE claimed_at END,
    lease_expires_at = CASE WHEN attempt < max_attempts THEN NULL ELSE lease_expires_at END,
    claimed_by = NULL,
    claim_token = NULL
WHERE status = 'CLAIMED' AND lease_expires_at <= :now
"""

_EXPIRE_QUEUE = """
UPDATE tasks SET
    status = 'TIMED_OUT',
    completed_at = queue_expires_at,
    error_reason = 'queue window expired at ' || queue_expires_at
                   || ' (queued_at ' || queued_at || ' + queue_ttl_ms ' || queue_ttl_ms || ')'
WHERE status = 'SUBMITTED' AND queue_expires_at <= :now
"""

_IDLE_CHECK = """
SELECT
  (SELECT count(*) FROM tasks WHERE status = 'CLAIMED' AND lease_expires_at <= :now)
  + (SELECT count(*) FROM tasks WHERE status = 'SUBMITTED' AND queue_expires_at <= :now),
  EXISTS (SELECT 1 FROM tasks WHERE status = 'SUBMITTED' AND queue_expires_at > :now
          AND (target_agent IS NULL OR target_agent = :agent))
"""

_READY = ("status = 'SUBMITTED' AND queue_expires_at > :now "
          "AND (target_agent IS NULL OR target_agent = :agent)")

_TASK_COLS = ("seq, task_id, target_agent, title, payload, requester, queue_ttl_ms, "
              "exec_ttl_ms, max_attempts, created_at, queued_at, queue_expires_at, "
              "claimed_at, lease_expires_at, completed_at, attempt, extend_count, "
              "release_count, result, error_reason, release_reason, status, claim_token, "
              "claimed_by")


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
    status: str
    target_agent: str | None
    title: str
    payload: Any
    requester: str
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
    is_logically_expired: bool
    claimed_by: str | None = None
    queue_expires_at: int | None = None
    release_reason: str | None = None
    depends_on: list = field(default_factory=list)


class _CommitThenRaise(Exception):
    """Raised inside a write body: commit what was done, then raise ``exc``."""

    def __init__(self, exc: FerryError):
        super().__init__(str(exc))
        self.exc = exc


class _RollbackReturn(Exception):
    """Raised inside a write body: roll back, then return ``value``."""

    def __init__(self, value: Any):
        super().__init__("rollback")
        self.value = value


# ---------------------------------------------------------------- validation helpers

def _check_text(value: Any, what: str, *, limit: int = MAX_TEXT, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    if nonempty and value == "":
        raise InvalidArgument(f"{what} must not be empty")
    if len(value) > limit:
        raise InvalidArgument(f"{what} is too long ({len(value)} chars, limit {limit})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid Unicode text (lone surrogate?)") from None
    return value


def _check_agent(value: Any, what: str = "agent_id") -> str:
    return _check_text(value, what, limit=MAX_NAME, nonempty=True)


def _check_task_id(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"task_id must be a str, got {type(value).__name__}")
    return value


def _check_int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{what} must be in [{lo}, {hi}], got {value}")
    return value


def _check_json_value(value: Any, what: str, depth: int = 0) -> None:
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{what} contains a non-finite float ({value!r}), not JSON")
        return
    if isinstance(value, list):
        for item in value:
            _check_json_value(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(
                    f"{what} has a non-str object key {key!r}; JSON keys are strings")
            _check_json_value(item, what, depth + 1)
        return
    raise InvalidArgument(f"{what} contains a {type(value).__name__}, which is not a JSON value")


def _to_json(value: Any, what: str) -> str:
    _check_json_value(value, what)
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{what} is not JSON-serialisable: {exc}") from None
    if len(text) > MAX_JSON_CHARS:
        raise InvalidArgument(f"{what} is too large ({len(text)} chars of JSON, "
                              f"limit {MAX_JSON_CHARS})")
    return text


def _same_token(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"),
                               b.encode("utf-8", "surrogatepass"))


# ---------------------------------------------------------------- the store

class MinimalSlowStore:
    def __init__(self, path: Any, *, clock: Callable[[], int], strict_tokens: bool = True,
                 max_releases: int = 3, max_extends: int = 5):
        if not callable(clock):
            raise InvalidArgument("clock must be a callable returning int milliseconds")
        if not isinstance(path, (str, os.PathLike)) or os.fspath(path) in ("", b""):
            raise InvalidArgument("path must be a non-empty str or os.PathLike")
        if not isinstance(strict_tokens, bool):
            raise InvalidArgument("strict_tokens must be a bool")
        self._max_releases = _check_int(max_releases, "max_releases", 0, 1_000_000)
        self._max_extends = _check_int(max_extends, "max_extends", 0, 1_000_000)
        self._clock = clock
        self._strict = strict_tokens
        self._mutex = threading.RLock()
        self._path = os.fspath(path)
        try:
            conn = sqlite3.connect(self._path, timeout=10.0, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database at {self._path!r}: {exc}") from None
        self._conn: sqlite3.Connection | None = conn
        try:
            self._setup(conn)
        except FerryError:
            conn.close()
            self._conn = None
            raise
        except sqlite3.Error as exc:
            conn.close()
            self._conn = None
            raise StoreError(f"cannot use {self._path!r} as a ferry store: {exc}") from None

    # -- setup
    def _setup(self, conn: sqlite3.Connection) -> None:
        mode = self._switch_to_wal(conn)
        if str(mode).lower() != "wal" and self._path != ":memory:":
            raise StoreError(f"could not switch {self._path!r} to WAL (journal_mode={mode})")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        version = self._fetchall(conn, "PRAGMA user_version")[0][0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self._path!r} has schema version {version}, newer than this "
                             f"store's {SCHEMA_VERSION}")
        if version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = self._fetchall(conn, "PRAGMA user_version")[0][0]
                if version == 0:
                    tables = self._fetchall(
                        conn, "SELECT name FROM sqlite_master WHERE type='table' "
                              "AND name IN ('tasks','claim_tokens','salvage')")
                    other = self._fetchall(
                        conn, "SELECT count(*) FROM sqlite_master WHERE type='table' "
                              "AND name NOT LIKE 'sqlite_%'")[0][0]
                    if other and not tables:
                        raise StoreError(f"{self._path!r} is a SQLite database of another "
                                         "application (unknown tables, user_version 0)")
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                elif version > SCHEMA_VERSION:
                    raise StoreError(f"{self._path!r} has newer schema version {version}")
                conn.execute("COMMIT")
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        names = {r[0] for r in self._fetchall(
            conn, "SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"tasks", "claim_tokens", "salvage"} <= names:
            raise StoreError(f"{self._path!r} has user_version {SCHEMA_VERSION} but not this "
                             "store's tables")

    def _switch_to_wal(self, conn: sqlite3.Connection) -> str:
        # Changing the journal mode of a brand-new file can fail with SQLITE_BUSY without
        # SQLite ever calling the busy handler (several processes opening the same new file
        # at once).  Only this one-time open step is retried (bounded, ~10 s); every store
        # operation relies on the busy handler alone.
        deadline = time.monotonic() + 10.0
        while True:
            try:
                return self._fetchall(conn, "PRAGMA journal_mode=WAL")[0][0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    # -- plumbing
    @staticmethod
    def _fetchall(conn: sqlite3.Connection, sql: str, params: Any = ()) -> list:
        cur = conn.execute(sql, params)
        try:
            return cur.fetchall()
        finally:
            cur.close()

    def _c(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("store is closed")
        return self._conn

    def _now(self) -> int:
        t = self._clock()
        if isinstance(t, float) and not isinstance(t, bool) and t.is_integer():
            t = int(t)
        if isinstance(t, bool) or not isinstance(t, int):
            raise StoreError(f"clock returned {t!r}; it must return int milliseconds")
        if not 0 <= t <= MAX_CLOCK:
            raise StoreError(f"clock returned {t}, outside [0, 2**62]")
        return t

    def _read(self, sql: str, params: Any = ()) -> list:
        with self._mutex:
            conn = self._c()
            try:
                return self._fetchall(conn, sql, params)
            except sqlite3.Error as exc:
                raise StoreError(f"read failed: {exc}") from None

    def _write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``body`` inside one short BEGIN IMMEDIATE transaction."""
        with self._mutex:
            conn = self._c()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"could not start a write transaction: {exc}") from None
            try:
                value = body(conn)
            except _CommitThenRaise as ctr:
                self._commit(conn)
                raise ctr.exc from None
            except _RollbackReturn as rr:
                self._rollback(conn)
                return rr.value
            except FerryError:
                self._rollback(conn)
                raise
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreError(f"write failed and was rolled back: {exc}") from None
            except BaseException:
                self._rollback(conn)
                raise
            self._commit(conn)
            return value

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _commit(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise StoreError(f"commit failed, nothing was changed: {exc}") from None

    def _row(self, conn: sqlite3.Connection, task_id: str) -> dict | None:
        cur = conn.execute(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?", (task_id,))
        try:
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        finally:
            cur.close()
        return dict(zip(names, rows[0])) if rows else None

    @staticmethod
    def _apply_due(conn: sqlite3.Connection, now: int) -> int:
        n = conn.execute(_EXPIRE_LEASES, {"now": now}).rowcount
        n += conn.execute(_EXPIRE_QUEUE, {"now": now}).rowcount
        return n

    @staticmethod
    def _apply_due_one(conn: sqlite3.Connection, now: int, task_id: str) -> int:
        n = conn.execute(_EXPIRE_LEASES + " AND task_id = :tid",
                         {"now": now, "tid": task_id}).rowcount
        n += conn.execute(_EXPIRE_QUEUE + " AND task_id = :tid",
                          {"now": now, "tid": task_id}).rowcount
        return n

    def _claim_in_tx(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                     now: int) -> Claim:
        for _ in range(3):
            token = str(uuid.uuid4())
            try:
                conn.execute("INSERT INTO claim_tokens(token, task_id, agent_id, issued_at) "
                             "VALUES (?, ?, ?, ?)", (token, task_id, agent_id, now))
                break
            except sqlite3.IntegrityError:
                continue  # astronomically unlikely: never issue a token twice
        else:
            raise StoreError("could not draw a fresh claim token")
        cur = conn.execute(
            "UPDATE tasks SET status = 'CLAIMED', claim_token = :tok, claimed_by = :agent, "
            "claimed_at = :now, lease_expires_at = :now + exec_ttl_ms, "
            "attempt = attempt + 1, extend_count = 0 "
            f"WHERE task_id = :tid AND {_READY}",
            {"tok": token, "agent": agent_id, "now": now, "tid": task_id})
        if cur.rowcount != 1:
            raise _RollbackReturn(None)
        row = self._row(conn, task_id)
        assert row is not None
        return Claim(task_id=task_id, agent_id=agent_id, token=token,
                     claimed_at=row["claimed_at"], lease_expires_at=row["lease_expires_at"],
                     attempt=row["attempt"])

    def _view(self, row: dict, now: int) -> TaskView:
        status = row["status"]
        expired = ((status == CLAIMED and row["lease_expires_at"] is not None
                    and now >= row["lease_expires_at"])
                   or (status == SUBMITTED and now >= row["queue_expires_at"]))
        return TaskView(
            task_id=row["task_id"], status=status, target_agent=row["target_agent"],
            title=row["title"], payload=json.loads(row["payload"]),
            requester=row["requester"], queue_ttl_ms=row["queue_ttl_ms"],
            exec_ttl_ms=row["exec_ttl_ms"], max_attempts=row["max_attempts"],
            created_at=row["created_at"], queued_at=row["queued_at"],
            claimed_at=row["claimed_at"], lease_expires_at=row["lease_expires_at"],
            completed_at=row["completed_at"], attempt=row["attempt"],
            extend_count=row["extend_count"], release_count=row["release_count"],
            result=None if row["result"] is None else json.loads(row["result"]),
            error_reason=row["error_reason"], is_logically_expired=bool(expired),
            claimed_by=row["claimed_by"], queue_expires_at=row["queue_expires_at"],
            release_reason=row["release_reason"], depends_on=[])

    # ---------------------------------------------------------------- protocol
    def dispatch(self, target_agent: str | None, *, title: str = "", payload: Any = None,
                 requester: str = "", queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS,
                 exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS, max_attempts: int = 1) -> str:
        if target_agent is not None:
            _check_agent(target_agent, "target_agent")
        _check_text(title, "title")
        _check_text(requester, "requester")
        payload_text = _to_json(payload, "payload")
        _check_int(queue_ttl_ms, "queue_ttl_ms", 1, MAX_TTL_MS)
        _check_int(exec_ttl_ms, "exec_ttl_ms", 1, MAX_TTL_MS)
        _check_int(max_attempts, "max_attempts", 1, MAX_ATTEMPTS)
        task_id = str(uuid.uuid4())

        def body(conn: sqlite3.Connection) -> str:
            now = self._now()
            conn.execute(
                "INSERT INTO tasks(task_id, target_agent, title, payload, requester, "
                "queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at, "
                "queue_expires_at, status) VALUES (?,?,?,?,?,?,?,?,?,?,?, 'SUBMITTED')",
                (task_id, target_agent, title, payload_text, requester, queue_ttl_ms,
                 exec_ttl_ms, max_attempts, now, now, now + queue_ttl_ms))
            return task_id

        return self._write(body)

    def poll_next(self, agent_id: str) -> Claim | None:
        _check_agent(agent_id)
        with self._mutex:
            now = self._now()
            due, ready = self._read(_IDLE_CHECK, {"now": now, "agent": agent_id})[0]
            if not due and not ready:
                return None  # idle: nothing written

            def body(conn: sqlite3.Connection) -> Claim | None:
                now2 = self._now()
                self._apply_due(conn, now2)
                rows = self._fetchall(
                    conn, f"SELECT task_id FROM tasks WHERE {_READY} "
                          "ORDER BY queued_at, seq LIMIT 1", {"now": now2, "agent": agent_id})
                if not rows:
                    return None  # commits the applied expiries, if any
                return self._claim_in_tx(conn, rows[0][0], agent_id, now2)

            return self._write(body)

    def claim(self, task_id: str, agent_id: str) -> Claim | None:
        _check_task_id(task_id)
        _check_agent(agent_id)
        with self._mutex:
            now = self._now()
            rows = self._read(
                "SELECT (SELECT count(*) FROM tasks WHERE status = 'CLAIMED' "
                "        AND lease_expires_at <= :now)"
                "     + (SELECT count(*) FROM tasks WHERE status = 'SUBMITTED' "
                "        AND queue_expires_at <= :now),"
                f"  (SELECT count(*) FROM tasks WHERE task_id = :tid),"
                f"  (SELECT count(*) FROM tasks WHERE task_id = :tid AND {_READY})",
                {"now": now, "tid": task_id, "agent": agent_id})
            due, exists, ready = rows[0]
            if not exists:
                raise NotFound(f"no task {task_id!r}")
            if not due and not ready:
                return None  # nothing to do: nothing written

            def body(conn: sqlite3.Connection) -> Claim | None:
                now2 = self._now()
                self._apply_due(conn, now2)
                ok = self._fetchall(conn, f"SELECT 1 FROM tasks WHERE task_id = :tid "
                                          f"AND {_READY}",
                                    {"now": now2, "tid": task_id, "agent": agent_id})
                if not ok:
                    return None  # commits the applied expiries, if any
                return self._claim_in_tx(conn, task_id, agent_id, now2)

            return self._write(body)

    # -- holder operations
    def _holder(self, op: str, task_id: Any, agent_id: Any, token: Any,
                action: Callable[[sqlite3.Connection, dict, int], Any],
                late_result_json: str | None = None) -> Any:
        _check_task_id(task_id)
        _check_agent(agent_id)
        if token is not None and not isinstance(token, str):
            raise InvalidArgument(f"token must be a str or None, got {type(token).__name__}")

        def body(conn: sqlite3.Connection) -> Any:
            now = self._now()
            row = self._row(conn, task_id)
            if row is None:
                raise NotFound(f"{op}: no task {task_id!r}")
            if row["target_agent"] is not None and agent_id != row["target_agent"]:
                raise PermissionDenied(
                    f"{op}: task {task_id} is for agent {row['target_agent']!r}, "
                    f"not {agent_id!r}")
            if row["status"] != CLAIMED:
                raise WrongState(f"{op}: task {task_id} is {row['status']}, not CLAIMED")
            row_token = row["claim_token"]
            if now >= row["lease_expires_at"]:
                own = (isinstance(token, str) and token != "" and row_token is not None
                       and _same_token(token, row_token))
                self._apply_due_one(conn, now, task_id)
                kept = ""
                if late_result_json is not None and own:
                    conn.execute("INSERT INTO salvage(task_id, entry, created_at) "
                                 "VALUES (?, ?, ?)",
                                 (task_id, '{"late_result": ' + late_result_json + "}", now))
                    kept = "; the late result was kept as salvage"
                after = self._row(conn, task_id)
                raise _CommitThenRaise(LeaseExpired(
                    f"{op}: the lease on task {task_id} ended at {row['lease_expires_at']} "
                    f"(now {now}); the task is now {after['status'] if after else '?'}{kept}"))
            if token is None or token == "":
                if self._strict:
                    raise TokenRequired(f"{op}: task {task_id} needs the claim token")
                if agent_id != row["claimed_by"]:
                    raise InvalidToken(f"{op}: no token given and {agent_id!r} is not the "
                                       f"agent that claimed task {task_id}")
            elif row_token is None or not _same_token(token, row_token):
                hist = self._fetchall(conn, "SELECT task_id FROM claim_tokens WHERE token = ?",
                                      (token,))
                if hist and hist[0][0] == task_id:
                    why = "it is a retired token of this task"
                elif hist:
                    why = "it belongs to another task"
                else:
                    why = "it was never issued"
                raise InvalidToken(f"{op}: wrong token for task {task_id}: {why}")
            return action(conn, row, now)

        return self._write(body)

    @staticmethod
    def _guarded_update(conn: sqlite3.Connection, row: dict, sets: str, params: dict,
                        op: str) -> None:
        params = dict(params, tid=row["task_id"], tok=row["claim_token"])
        cur = conn.execute(f"UPDATE tasks SET {sets} WHERE task_id = :tid "
                           "AND status = 'CLAIMED' AND claim_token = :tok "
                           "AND lease_expires_at > :now", params)
        if cur.rowcount != 1:
            raise WrongState(f"{op}: task {row['task_id']} changed under us; nothing done")

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any) -> None:
        result_json = _to_json(result, "result")

        def action(conn: sqlite3.Connection, row: dict, now: int) -> None:
            self._guarded_update(
                conn, row, "status = 'COMPLETED', result = :res, completed_at = :now, "
                           "claim_token = NULL", {"res": result_json, "now": now}, "fulfill")

        self._holder("fulfill", task_id, agent_id, token, action, late_result_json=result_json)

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str) -> None:
        _check_text(reason, "reason", nonempty=True)

        def action(conn: sqlite3.Connection, row: dict, now: int) -> None:
            self._guarded_update(
                conn, row, "status = 'FAILED', error_reason = :why, completed_at = :now, "
                           "claim_token = NULL", {"why": reason, "now": now}, "fail")

        self._holder("fail", task_id, agent_id, token, action)

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        _check_text(reason, "reason")

        def action(conn: sqlite3.Connection, row: dict, now: int) -> None:
            if row["release_count"] >= self._max_releases:
                raise LimitExceeded(f"release: task {task_id} was already released "
                                    f"{row['release_count']} times (max {self._max_releases})")
            self._guarded_update(
                conn, row, "status = 'SUBMITTED', claim_token = NULL, claimed_by = NULL, "
                           "claimed_at = NULL, lease_expires_at = NULL, queued_at = :now, "
                           "queue_expires_at = :now + queue_ttl_ms, "
                           "release_count = release_count + 1, release_reason = :why",
                {"now": now, "why": reason}, "release")

        self._holder("release", task_id, agent_id, token, action)

    def extend(self, task_id: str, agent_id: str, token: str | None) -> int:
        def action(conn: sqlite3.Connection, row: dict, now: int) -> int:
            if row["extend_count"] >= self._max_extends:
                raise LimitExceeded(f"extend: this claim on task {task_id} was already "
                                    f"extended {row['extend_count']} times "
                                    f"(max {self._max_extends})")
            new = now + row["exec_ttl_ms"]
            cap = row["created_at"] + 4 * row["queue_ttl_ms"]
            if new > cap:
                raise LimitExceeded(f"extend: new expiry {new} would pass created_at + "
                                    f"4 * queue_ttl_ms = {cap}")
            self._guarded_update(
                conn, row, "lease_expires_at = :new, extend_count = extend_count + 1",
                {"new": new, "now": now}, "extend")
            return new

        return self._holder("extend", task_id, agent_id, token, action)

    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        partial_json = _to_json(partial, "partial")

        def action(conn: sqlite3.Connection, row: dict, now: int) -> None:
            # touch the row under the same guard so a racing change is detected
            self._guarded_update(conn, row, "claim_token = claim_token", {"now": now},
                                 "salvage")
            conn.execute("INSERT INTO salvage(task_id, entry, created_at) VALUES (?, ?, ?)",
                         (task_id, partial_json, now))

        self._holder("salvage", task_id, agent_id, token, action)

    # -- reads (never write, never apply expiry)
    def get(self, task_id: str) -> TaskView:
        _check_task_id(task_id)
        with self._mutex:
            now = self._now()
            cur_rows = self._read(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?",
                                  (task_id,))
            if not cur_rows:
                raise NotFound(f"no task {task_id!r}")
            names = [c.strip() for c in _TASK_COLS.split(",")]
            return self._view(dict(zip(names, cur_rows[0])), now)

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        if agent_id is not None:
            _check_agent(agent_id)
        names = [c.strip() for c in _TASK_COLS.split(",")]
        with self._mutex:
            now = self._now()
            if agent_id is None:
                rows = self._read(f"SELECT {_TASK_COLS} FROM tasks ORDER BY seq")
            else:
                rows = self._read(f"SELECT {_TASK_COLS} FROM tasks WHERE target_agent = ? "
                                  "OR claimed_by = ? ORDER BY seq", (agent_id, agent_id))
            return [self._view(dict(zip(names, r)), now) for r in rows]

    def salvaged(self, task_id: str) -> list[str]:
        _check_task_id(task_id)
        with self._mutex:
            rows = self._read(
                "SELECT (SELECT count(*) FROM tasks WHERE task_id = :tid), s.entry "
                "FROM (SELECT 1) LEFT JOIN salvage s ON s.task_id = :tid ORDER BY s.id",
                {"tid": task_id})
            if not rows or not rows[0][0]:
                raise NotFound(f"no task {task_id!r}")
            return [r[1] for r in rows if r[1] is not None]

    # -- maintenance
    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if not isinstance(mode, str) or mode.upper() not in (
                "PASSIVE", "FULL", "RESTART", "TRUNCATE"):
            raise InvalidArgument("checkpoint mode must be one of PASSIVE, FULL, RESTART, "
                                  f"TRUNCATE, got {mode!r}")
        row = self._read(f"PRAGMA wal_checkpoint({mode.upper()})")[0]
        return (int(row[0]), int(row[1]), int(row[2]))

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None


def make_store(path: str, *, clock: Callable[[], int], **options: Any) -> MinimalSlowStore:
    """Factory (SPEC section 4): each worker process calls it and gets its own connection."""
    return MinimalSlowStore(path, clock=clock, **options)
