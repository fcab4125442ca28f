"""two_conn_slow30 -- an independent SPEC store for ferry's test corpus.

Written from /work/shared/SPEC.md alone (plus ``ferry_core.errors``). Stdlib only.

Choices made (SPEC §9 freedoms and points SPEC leaves open)
-------------------------------------------------------------
Connections / SQLite
  * Two connections per store, both ``timeout=30.0`` (SQLite's default busy handler):
    - a writer (``isolation_level=None``); every multi-statement write is one
      ``BEGIN IMMEDIATE`` ... ``COMMIT``; single-statement writes (daemon locks) autocommit;
    - a read-only reader (``file:...?mode=ro``) used by get / inspect / salvaged /
      lock_holder and by the read phase of the two-phase idle check (poll_next, claim,
      sweep). Every read is one explicit deferred ``BEGIN`` ... ``COMMIT`` snapshot, closed
      before the call returns.
  * ``journal_mode=WAL``, ``synchronous=NORMAL``, ``foreign_keys=ON``,
    ``wal_autocheckpoint=1000`` pages, ``journal_size_limit=4 MiB``.  Stated WAL bound:
    with no reader pinning a snapshot, the -wal stays below ~1000 pages plus one
    transaction (about 4 MiB with 4 KiB pages) and is truncated back to <= 4 MiB after each
    checkpoint; after ``checkpoint("TRUNCATE")`` with no reader open it is 0 bytes.
  * ``checkpoint(mode)`` runs ``PRAGMA wal_checkpoint(mode)`` on the writer connection, so a
    TRUNCATE waits for other processes' readers up to the 30 s busy timeout (intended).
  * Any sqlite3 error (busy beyond 30 s, not a database, unwritable, corrupt...) is
    raised as ``StoreError``; the open transaction is rolled back first.
Claims
  * Strategy "cas": in one short ``BEGIN IMMEDIATE`` transaction the fresh token (``str(uuid4())``)
    is inserted into ``claim_tokens`` (token PRIMARY KEY), then a single
    ``UPDATE tasks ... WHERE task_id=? AND status='SUBMITTED' AND <queue window open> AND
    <target matches> AND <all deps COMPLETED>``; success iff ``changes()==1``, otherwise the
    token insert is rolled back (savepoint) -- that token was never handed out.
  * ``attempt`` counts claims (1 on the first claim, +1 on every claim, released or not).
    Lease expiry: back to SUBMITTED if ``attempt < max_attempts`` else TIMED_OUT.
  * ``claim()`` of a task that is not ready for this agent (wrong target, deps pending,
    held, terminal, queue window over) returns None; only an unknown id raises NotFound.
Tokens
  * Bearer credentials (SPEC §9): whoever presents the live token of an untargeted task is
    its holder; the ``agent_id`` of a holder op is only checked against ``target_agent``.
  * Stored as given (not hashed), compared with ``hmac.compare_digest`` on UTF-8 bytes.
  * Retired (row token set to NULL, history row gets ``retired_at`` / ``retire_reason``) on
    release, expiry, fulfill and fail. A retired token is refused forever (InvalidToken).
  * ``strict_tokens`` is always on: a None / "" token is TokenRequired.
Expiry
  * Applied by any non-read call that notices it: poll_next and sweep (all due rows,
    two-phase: count with a read first, write only if > 0), claim (that task), holder ops
    (their task, on the LeaseExpired path -- even when the presented token is wrong, since a
    due expiry may be applied by anyone), dispatch (its dependencies). Reads never write.
  * Expiry is evaluated in logical time: a lease that ended at ``lease_expires_at`` re-queues
    the task with ``queued_at = lease_expires_at`` (not the time the expiry is noticed), so
    the outcome does not depend on who noticed it when. TIMED_OUT tasks get
    ``completed_at`` = the instant they logically timed out. Due events in one sweep are
    applied in order of that instant.
  * Dependency failure cascades eagerly and transitively in the same transaction: when a
    task becomes FAILED / TIMED_OUT, its SUBMITTED dependents become FAILED with reason
    "dependency <id> ended <STATUS>". dispatch() with a dependency that is already FAILED /
    TIMED_OUT inserts the new task directly as FAILED (same reason).
  * ``sweep()`` returns the number of task rows whose status changed (cascades included).
Late work
  * A late ``fulfill`` (LeaseExpired path) keeps its result as salvage (kind "late_result")
    only if the presented token is the task's (expiring) token; a wrong-token caller's
    result is not kept (holder-guard: it changes nothing). A late ``fail`` reason or late
    ``salvage`` partial is refused and not kept.
  * ``salvaged(task_id)`` -> list of dicts ``{"seq": n, "kind": "partial"|"late_result",
    "agent": agent_id, "payload": data}`` in append order, ``seq`` = 1, 2, ... per task.
Limits / validation (InvalidArgument unless noted)
  * Defaults: ``queue_ttl_ms=3_600_000`` (1 h), ``exec_ttl_ms=300_000`` (5 min),
    ``max_attempts=1``; ``max_releases=3`` per task (4th release -> LimitExceeded),
    ``max_extends=5`` per claim (6th extend -> LimitExceeded); extend also refused when the
    new expiry would be > ``created_at + 4 * queue_ttl_ms`` (equal is allowed).
  * TTLs: ints (not bool) in [1, 10 years in ms]; max_attempts in [1, 1000]; lock ttl in
    [1, 10 years]. Clock values must be ints in [0, 2**62].
  * Ids / agent names / lock names / owners: non-empty str, <= 256 chars, no NUL, valid
    UTF-8. target_agent: None or such a string. title <= 4096, requester <= 256 (may be "").
    fail reason: non-empty after strip, <= 4096. release reason <= 4096.
  * JSON values (payload, result, partial): None/bool/int/finite float/str/list/tuple/dict
    with str keys, nesting <= 100, serialized <= 1 MiB. Tuples come back as lists.
  * depends_on: an iterable of task id strings (not a str / bytes / mapping), <= 1000 ids,
    duplicates collapsed (order kept); unknown id -> NotFound.
  * Argument validation happens before any database check (so an empty fail reason on an
    unknown task is InvalidArgument).
Other
  * Task ids are ``"t-" + uuid4().hex[:16]``.
  * ``inspect(agent_id)`` returns tasks whose ``target_agent`` is that agent or whose
    ``claimed_by`` is it (the current holder; kept on terminal tasks, cleared when a task goes
    back to SUBMITTED); ``inspect()`` returns all; both in insertion order.
  * Views are frozen dataclasses (TaskView has extras ``claimed_by`` and ``release_reason``;
    ``depends_on`` is a list). Claim: task_id, agent_id, token, claimed_at,
    lease_expires_at, attempt.
  * ``release_lock`` returns True only if the caller held the lock unexpired (``expires_at >
    now``); ``lock_holder`` reports the owner only while ``expires_at > now``.
  * Full capability set: sweep, DAG (depends_on), daemon locks.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import sqlite3
import threading
import urllib.parse
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

APPLICATION_ID = 0x46525932  # "FRY2"
SCHEMA_VERSION = 1

DEFAULT_QUEUE_TTL_MS = 3_600_000
DEFAULT_EXEC_TTL_MS = 300_000
MAX_TTL_MS = 2**62 - 1  # every TTL below 2**62 (PROTOCOL.md#limits)
MAX_CLOCK = 2**62
MAX_ATTEMPTS = 1000
MAX_NAME = 256
MAX_TEXT = 4096
MAX_DEPS = 1000
MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 100
BUSY_TIMEOUT_S = 30.0
WAL_AUTOCHECKPOINT_PAGES = 1000
JOURNAL_SIZE_LIMIT = 4 * 1024 * 1024

SUBMITTED = "SUBMITTED"
CLAIMED = "CLAIMED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
TERMINAL = (COMPLETED, FAILED, TIMED_OUT)

CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")


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
    claimed_by: str | None = None
    release_reason: str | None = None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


SCHEMA = """
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
    status           TEXT NOT NULL CHECK (status IN
                        ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT')),
    created_at       INTEGER NOT NULL,
    queued_at        INTEGER NOT NULL,
    claimed_at       INTEGER,
    lease_expires_at INTEGER,
    completed_at     INTEGER,
    deadline         INTEGER,
    attempt          INTEGER NOT NULL DEFAULT 0,
    extend_count     INTEGER NOT NULL DEFAULT 0,
    release_count    INTEGER NOT NULL DEFAULT 0,
    claimed_by       TEXT,
    claim_token      TEXT,
    result           TEXT,
    error_reason     TEXT,
    release_reason   TEXT
);
CREATE INDEX IF NOT EXISTS tasks_ready ON tasks(status, queued_at, seq);
CREATE INDEX IF NOT EXISTS tasks_deadline ON tasks(deadline) WHERE deadline IS NOT NULL;
CREATE TABLE IF NOT EXISTS task_deps (
    task_id TEXT NOT NULL REFERENCES tasks(task_id),
    dep_id  TEXT NOT NULL REFERENCES tasks(task_id),
    pos     INTEGER NOT NULL,
    PRIMARY KEY (task_id, dep_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS task_deps_dep ON task_deps(dep_id);
CREATE TABLE IF NOT EXISTS claim_tokens (
    token         TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL REFERENCES tasks(task_id),
    agent_id      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    issued_at     INTEGER NOT NULL,
    retired_at    INTEGER,
    retire_reason TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS salvage (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id    TEXT NOT NULL REFERENCES tasks(task_id),
    kind       TEXT NOT NULL CHECK (kind IN ('partial','late_result')),
    agent_id   TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS salvage_task ON salvage(task_id, id);
CREATE TABLE IF NOT EXISTS daemon_locks (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
"""

TASK_COLS = (
    "seq, task_id, target_agent, title, payload, requester, queue_ttl_ms, exec_ttl_ms, "
    "max_attempts, status, created_at, queued_at, claimed_at, lease_expires_at, "
    "completed_at, deadline, attempt, extend_count, release_count, claimed_by, "
    "claim_token, result, error_reason, release_reason"
)

READY_SQL = (
    "status = 'SUBMITTED' AND queued_at + queue_ttl_ms > :now "
    "AND (target_agent IS NULL OR target_agent = :agent) "
    "AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.dep_id "
    "                WHERE d.task_id = tasks.task_id AND p.status <> 'COMPLETED')"
)


class _CommitThenRaise(Exception):
    """Internal: commit what the transaction did (an expiry), then raise ``exc``."""

    def __init__(self, exc: FerryError):
        super().__init__(str(exc))
        self.exc = exc


# --------------------------------------------------------------------------- validation

def _check_name(value: Any, what: str, *, allow_empty: bool = False, limit: int = MAX_NAME) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    if not value and not allow_empty:
        raise InvalidArgument(f"{what} must be a non-empty string")
    if len(value) > limit:
        raise InvalidArgument(f"{what} is too long ({len(value)} chars, limit {limit})")
    if "\x00" in value:
        raise InvalidArgument(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid Unicode text (lone surrogate?)") from None
    return value


def _check_text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {type(value).__name__}")
    if len(value) > limit:
        raise InvalidArgument(f"{what} is too long ({len(value)} chars, limit {limit})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} is not valid Unicode text (lone surrogate?)") from None
    return value


def _check_int(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, got {type(value).__name__}")
    if value < lo or value > hi:
        raise InvalidArgument(f"{what} must be between {lo} and {hi}, got {value}")
    return int(value)


def _check_json_value(value: Any, what: str, depth: int = 0) -> None:
    if depth > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{what} nests deeper than {MAX_JSON_DEPTH} levels (or is circular)")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"{what} contains a non-finite float ({value!r}); JSON has no NaN/Infinity")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"{what} contains a string that is not valid Unicode") from None
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json_value(item, what, depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidArgument(f"{what} has a non-string object key {k!r}; JSON keys are strings")
            _check_json_value(k, what, depth + 1)
            _check_json_value(v, what, depth + 1)
        return
    raise InvalidArgument(f"{what} is not a JSON value: {type(value).__name__} is not serializable")


def _to_json(value: Any, what: str) -> str:
    _check_json_value(value, what)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as e:  # pragma: no cover - guarded above
        raise InvalidArgument(f"{what} is not JSON-serializable: {e}") from None
    if len(text.encode("utf-8")) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{what} is too large (limit {MAX_JSON_BYTES} bytes of JSON)")
    return text


def _from_json(text: str | None) -> Any:
    if text is None:
        return None
    return json.loads(text)


def _check_token(token: Any) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str):
        raise InvalidArgument(f"token must be a str (the claim token), got {type(token).__name__}")
    if len(token) > MAX_NAME:
        raise InvalidArgument(f"token is too long ({len(token)} chars)")
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("token is not valid Unicode text") from None
    return token


# --------------------------------------------------------------------------- store

class Store:
    def __init__(self, path: Any, *, clock: Callable[[], int],
                 max_releases: int = 3, max_extends: int = 5):
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str) or not path:
            raise InvalidArgument(f"path must be a non-empty str, got {path!r}")
        if path == ":memory:" or path.startswith("file:"):
            raise InvalidArgument("path must be a plain file path (WAL needs a real file)")
        if "\x00" in path:
            raise InvalidArgument("path must not contain NUL characters")
        if not callable(clock):
            raise InvalidArgument("clock must be a callable returning int milliseconds")
        self._clock = clock
        self._max_releases = _check_int(max_releases, "max_releases", 0, 1_000_000)
        self._max_extends = _check_int(max_extends, "max_extends", 0, 1_000_000)
        self._path = path
        self._lock = threading.RLock()
        self._w: sqlite3.Connection | None = None
        self._r: sqlite3.Connection | None = None
        try:
            self._open()
        except FerryError:
            self._close_quietly()
            raise
        except (sqlite3.Error, OSError) as e:
            self._close_quietly()
            raise StoreError(f"cannot open ferry store at {path!r}: {e}") from None

    # ---- setup

    def _open(self) -> None:
        if os.path.isdir(self._path):
            raise StoreError(f"{self._path!r} is a directory, not a database file")
        w = sqlite3.connect(self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                            check_same_thread=False)
        self._w = w
        mode = w.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"cannot switch {self._path!r} to WAL mode (got {mode!r}); "
                             "is it on a network or read-only file system?")
        w.execute("PRAGMA synchronous=NORMAL")
        w.execute("PRAGMA foreign_keys=ON")
        w.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        w.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
        w.execute("BEGIN IMMEDIATE")
        try:
            app_id = w.execute("PRAGMA application_id").fetchone()[0]
            version = w.execute("PRAGMA user_version").fetchone()[0]
            n_objects = w.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id == 0 and n_objects == 0:
                for stmt in SCHEMA.split(";"):
                    if stmt.strip():
                        w.execute(stmt)
                w.execute(f"PRAGMA application_id={APPLICATION_ID}")
                w.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif app_id != APPLICATION_ID:
                raise StoreError(f"{self._path!r} is an SQLite database that was not made by this "
                                 f"store (application_id={app_id}); refusing to touch it")
            elif version > SCHEMA_VERSION:
                raise StoreError(f"{self._path!r} has schema version {version}, newer than this "
                                 f"store understands ({SCHEMA_VERSION}); upgrade the store")
            w.execute("COMMIT")
        except BaseException:
            if w.in_transaction:
                w.execute("ROLLBACK")
            raise
        uri = "file:" + urllib.parse.quote(os.path.abspath(self._path)) + "?mode=ro"
        r = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                            check_same_thread=False)
        self._r = r
        r.execute("PRAGMA query_only=ON")

    def _close_quietly(self) -> None:
        for c in (self._r, self._w):
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
        self._r = self._w = None

    def close(self) -> None:
        with self._lock:
            if self._w is None and self._r is None:
                return
            try:
                if self._r is not None:
                    self._r.close()
                if self._w is not None:
                    self._w.close()
            except sqlite3.Error as e:
                raise StoreError(f"error while closing the store: {e}") from None
            finally:
                self._r = self._w = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- plumbing

    def _now(self) -> int:
        try:
            t = self._clock()
        except FerryError:
            raise
        except Exception as e:
            raise StoreError(f"the injected clock failed: {e!r}") from None
        if isinstance(t, float) and t.is_integer():
            t = int(t)
        if isinstance(t, bool) or not isinstance(t, int):
            raise InvalidArgument(f"clock() must return int milliseconds, got {type(t).__name__}")
        if t < 0 or t > MAX_CLOCK:
            raise InvalidArgument(f"clock() returned {t}, outside [0, 2**62]")
        return t

    def _conns(self) -> tuple[sqlite3.Connection, sqlite3.Connection]:
        if self._w is None or self._r is None:
            raise StoreError("the store is closed")
        return self._w, self._r

    def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn(reader) inside one deferred BEGIN ... COMMIT snapshot."""
        with self._lock:
            _, r = self._conns()
            try:
                r.execute("BEGIN")
                try:
                    out = fn(r)
                finally:
                    if r.in_transaction:
                        r.execute("COMMIT")
                return out
            except FerryError:
                raise
            except sqlite3.Error as e:
                self._rollback(r)
                raise StoreError(f"database read failed: {e}") from None

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn(writer) inside one BEGIN IMMEDIATE ... COMMIT."""
        with self._lock:
            w, _ = self._conns()
            try:
                w.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                self._rollback(w)
                raise StoreError(f"could not start a write transaction "
                                 f"(busy for {BUSY_TIMEOUT_S:.0f}s?): {e}") from None
            try:
                out = fn(w)
            except _CommitThenRaise as cr:
                try:
                    w.execute("COMMIT")
                except sqlite3.Error as e:
                    self._rollback(w)
                    raise StoreError(f"commit failed: {e}") from None
                raise cr.exc from None
            except FerryError:
                self._rollback(w)
                raise
            except sqlite3.Error as e:
                self._rollback(w)
                raise StoreError(f"database write failed: {e}") from None
            except BaseException:
                self._rollback(w)
                raise
            try:
                w.execute("COMMIT")
            except sqlite3.Error as e:
                self._rollback(w)
                raise StoreError(f"commit failed: {e}") from None
            return out

    @staticmethod
    def _rollback(c: sqlite3.Connection) -> None:
        try:
            if c.in_transaction:
                c.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    @staticmethod
    def _row(c: sqlite3.Connection, task_id: str) -> dict | None:
        cur = c.execute(f"SELECT {TASK_COLS} FROM tasks WHERE task_id = ?", (task_id,))
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row))

    # ---- expiry (writer, inside a transaction)

    def _retire(self, w: sqlite3.Connection, token: str | None, now: int, why: str) -> None:
        if token is not None:
            w.execute("UPDATE claim_tokens SET retired_at = ?, retire_reason = ? "
                      "WHERE token = ? AND retired_at IS NULL", (now, why, token))

    def _cascade(self, w: sqlite3.Connection, failed_id: str, status: str, at: int) -> int:
        changed = 0
        stack = [(failed_id, status)]
        while stack:
            dep_id, dep_status = stack.pop()
            kids = [r[0] for r in w.execute(
                "SELECT t.task_id FROM task_deps d JOIN tasks t ON t.task_id = d.task_id "
                "WHERE d.dep_id = ? AND t.status = 'SUBMITTED' ORDER BY t.seq", (dep_id,))]
            for kid in kids:
                cur = w.execute(
                    "UPDATE tasks SET status = 'FAILED', completed_at = ?, deadline = NULL, "
                    "error_reason = ? WHERE task_id = ? AND status = 'SUBMITTED'",
                    (at, f"dependency {dep_id} ended {dep_status}", kid))
                if cur.rowcount == 1:
                    changed += 1
                    stack.append((kid, FAILED))
        return changed

    def _expire_row(self, w: sqlite3.Connection, row: dict, now: int) -> int:
        """Apply whatever expiry is due on this row at `now`. Returns rows changed."""
        tid = row["task_id"]
        if row["status"] == CLAIMED and row["lease_expires_at"] is not None \
                and row["lease_expires_at"] <= now:
            lease_end = row["lease_expires_at"]
            self._retire(w, row["claim_token"], now, "expired")
            if row["attempt"] < row["max_attempts"]:
                q_deadline = lease_end + row["queue_ttl_ms"]
                if q_deadline <= now:
                    w.execute(
                        "UPDATE tasks SET status='TIMED_OUT', queued_at=?, claim_token=NULL, "
                        "claimed_by=NULL, claimed_at=NULL, lease_expires_at=NULL, extend_count=0, "
                        "deadline=NULL, completed_at=?, error_reason=? WHERE task_id=?",
                        (lease_end, q_deadline,
                         f"lease expired at {lease_end} (attempt {row['attempt']} of "
                         f"{row['max_attempts']}), then nobody claimed it before its queue "
                         f"window closed at {q_deadline}", tid))
                    return 1 + self._cascade(w, tid, TIMED_OUT, q_deadline)
                w.execute(
                    "UPDATE tasks SET status='SUBMITTED', queued_at=?, claim_token=NULL, "
                    "claimed_by=NULL, claimed_at=NULL, lease_expires_at=NULL, extend_count=0, "
                    "deadline=? WHERE task_id=?", (lease_end, q_deadline, tid))
                return 1
            w.execute(
                "UPDATE tasks SET status='TIMED_OUT', claim_token=NULL, deadline=NULL, "
                "completed_at=?, error_reason=? WHERE task_id=?",
                (lease_end, f"lease expired at {lease_end} on attempt {row['attempt']} of "
                            f"{row['max_attempts']}", tid))
            return 1 + self._cascade(w, tid, TIMED_OUT, lease_end)
        if row["status"] == SUBMITTED:
            q_deadline = row["queued_at"] + row["queue_ttl_ms"]
            if q_deadline <= now:
                w.execute(
                    "UPDATE tasks SET status='TIMED_OUT', deadline=NULL, completed_at=?, "
                    "error_reason=? WHERE task_id=?",
                    (q_deadline, f"not claimed before its queue window closed at {q_deadline}",
                     tid))
                return 1 + self._cascade(w, tid, TIMED_OUT, q_deadline)
            bad = w.execute(
                "SELECT p.task_id, p.status FROM task_deps d JOIN tasks p ON p.task_id = d.dep_id "
                "WHERE d.task_id = ? AND p.status IN ('FAILED','TIMED_OUT') ORDER BY d.pos LIMIT 1",
                (tid,)).fetchone()
            if bad is not None:
                w.execute("UPDATE tasks SET status='FAILED', deadline=NULL, completed_at=?, "
                          "error_reason=? WHERE task_id=? AND status='SUBMITTED'",
                          (now, f"dependency {bad[0]} ended {bad[1]}", tid))
                return 1 + self._cascade(w, tid, FAILED, now)
        return 0

    def _sweep_in_txn(self, w: sqlite3.Connection, now: int) -> int:
        changed = 0
        ids = [r[0] for r in w.execute(
            "SELECT task_id FROM tasks WHERE deadline <= ? ORDER BY deadline, seq", (now,))]
        for tid in ids:
            row = self._row(w, tid)
            if row is not None:
                changed += self._expire_row(w, row, now)
        return changed

    @staticmethod
    def _due_count(c: sqlite3.Connection, now: int) -> int:
        return c.execute("SELECT count(*) FROM tasks WHERE deadline <= ?", (now,)).fetchone()[0]

    # ---- dispatch

    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (),
                 queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS, exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS,
                 max_attempts: int = 1) -> str:
        if target_agent is not None:
            _check_name(target_agent, "target_agent")
        _check_text(title, "title")
        _check_name(requester, "requester", allow_empty=True)
        payload_text = _to_json(payload, "payload")
        _check_int(queue_ttl_ms, "queue_ttl_ms", 1, MAX_TTL_MS)
        _check_int(exec_ttl_ms, "exec_ttl_ms", 1, MAX_TTL_MS)
        _check_int(max_attempts, "max_attempts", 1, MAX_ATTEMPTS)
        if depends_on is None:
            depends_on = ()
        if isinstance(depends_on, (str, bytes, bytearray, dict)) or not hasattr(depends_on, "__iter__"):
            raise InvalidArgument("depends_on must be a list/tuple/set of task id strings, "
                                  f"got {type(depends_on).__name__}")
        deps: list[str] = []
        seen: set[str] = set()
        for i, d in enumerate(depends_on):
            if i >= MAX_DEPS * 4:
                raise InvalidArgument(f"depends_on has too many entries (limit {MAX_DEPS})")
            _check_name(d, "depends_on entry")
            if d not in seen:
                seen.add(d)
                deps.append(d)
        if len(deps) > MAX_DEPS:
            raise InvalidArgument(f"depends_on has {len(deps)} task ids (limit {MAX_DEPS})")

        def tx(w: sqlite3.Connection) -> str:
            now = self._now()
            for d in deps:
                if w.execute("SELECT 1 FROM tasks WHERE task_id=?", (d,)).fetchone() is None:
                    raise NotFound(f"dependency {d!r} does not exist; dispatch its task first")
            # dispatch noticed these: apply due expiries on its dependencies
            for d in deps:
                row = self._row(w, d)  # re-read: an earlier expiry may have cascaded here
                if row["deadline"] is not None and row["deadline"] <= now:
                    self._expire_row(w, row, now)
            failed_dep = None
            for d in deps:
                st = w.execute("SELECT status FROM tasks WHERE task_id=?", (d,)).fetchone()[0]
                if st in (FAILED, TIMED_OUT):
                    failed_dep = (d, st)
                    break
            for _ in range(8):
                tid = "t-" + uuid.uuid4().hex[:16]
                if w.execute("SELECT 1 FROM tasks WHERE task_id=?", (tid,)).fetchone() is None:
                    break
            else:  # pragma: no cover
                raise StoreError("could not generate a unique task id")
            if failed_dep is None:
                status, deadline, completed, reason = SUBMITTED, now + queue_ttl_ms, None, None
            else:
                status, deadline, completed = FAILED, None, now
                reason = f"dependency {failed_dep[0]} ended {failed_dep[1]}"
            w.execute(
                "INSERT INTO tasks (task_id, target_agent, title, payload, requester, queue_ttl_ms, "
                "exec_ttl_ms, max_attempts, status, created_at, queued_at, deadline, completed_at, "
                "error_reason) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (tid, target_agent, title, payload_text, requester, queue_ttl_ms, exec_ttl_ms,
                 max_attempts, status, now, now, deadline, completed, reason))
            w.executemany("INSERT INTO task_deps (task_id, dep_id, pos) VALUES (?,?,?)",
                          [(tid, d, i) for i, d in enumerate(deps)])
            return tid

        return self._write(tx)

    # ---- claiming

    def _try_claim(self, task_id: str, agent_id: str, apply_expiry: bool) -> tuple[Claim | None, bool]:
        """One BEGIN IMMEDIATE: (optionally apply this task's due expiry), insert a fresh token,
        CAS-update. Returns (claim or None, task_exists)."""

        def tx(w: sqlite3.Connection):
            now = self._now()
            if apply_expiry:
                row = self._row(w, task_id)
                if row is None:
                    return None, False
                if row["deadline"] is not None and row["deadline"] <= now:
                    self._expire_row(w, row, now)
            token = str(uuid.uuid4())
            w.execute("SAVEPOINT claim_cas")
            w.execute("INSERT INTO claim_tokens (token, task_id, agent_id, attempt, issued_at) "
                      "SELECT :tok, task_id, :agent, attempt + 1, :now FROM tasks WHERE task_id = :id",
                      {"tok": token, "agent": agent_id, "now": now, "id": task_id})
            cur = w.execute(
                "UPDATE tasks SET status='CLAIMED', claim_token=:tok, claimed_by=:agent, "
                "claimed_at=:now, lease_expires_at=:now + exec_ttl_ms, deadline=:now + exec_ttl_ms, "
                "attempt=attempt + 1, extend_count=0 "
                f"WHERE task_id=:id AND {READY_SQL}",
                {"tok": token, "agent": agent_id, "now": now, "id": task_id})
            if cur.rowcount != 1:
                w.execute("ROLLBACK TO claim_cas")
                w.execute("RELEASE claim_cas")
                return None, True
            w.execute("RELEASE claim_cas")
            lease, attempt = w.execute(
                "SELECT lease_expires_at, attempt FROM tasks WHERE task_id=?", (task_id,)).fetchone()
            return Claim(task_id=task_id, agent_id=agent_id, token=token, claimed_at=now,
                         lease_expires_at=lease, attempt=attempt), True

        return self._write(tx)

    def claim(self, task_id: str, agent_id: str) -> Claim | None:
        _check_name(task_id, "task_id")
        _check_name(agent_id, "agent_id")
        with self._lock:
            now = self._now()

            def rd(r):
                row = self._row(r, task_id)
                if row is None:
                    return None
                due = row["deadline"] is not None and row["deadline"] <= now
                ready = r.execute(f"SELECT 1 FROM tasks WHERE task_id=:id AND {READY_SQL}",
                                  {"id": task_id, "now": now, "agent": agent_id}).fetchone() is not None
                return due, ready

            st = self._read(rd)
            if st is None:
                raise NotFound(f"task {task_id!r} does not exist")
            due, ready = st
            if not due and not ready:
                return None  # nothing to do: no write
            claim, exists = self._try_claim(task_id, agent_id, apply_expiry=due)
            if not exists:
                raise NotFound(f"task {task_id!r} does not exist")
            return claim

    def poll_next(self, agent_id: str) -> Claim | None:
        _check_name(agent_id, "agent_id")
        with self._lock:
            for _round in range(64):
                now = self._now()

                def rd(r):
                    due = self._due_count(r, now)
                    cands = [x[0] for x in r.execute(
                        f"SELECT task_id FROM tasks WHERE {READY_SQL} ORDER BY queued_at, seq LIMIT 16",
                        {"now": now, "agent": agent_id})]
                    return due, cands

                due, cands = self._read(rd)
                if due > 0:
                    self._write(lambda w: self._sweep_in_txn(w, self._now()))
                    due, cands = self._read(rd)
                if not cands:
                    return None
                for tid in cands:
                    c, _ = self._try_claim(tid, agent_id, apply_expiry=False)
                    if c is not None:
                        return c
            return None

    def sweep(self) -> int:
        with self._lock:
            now = self._now()
            due = self._read(lambda r: self._due_count(r, now))
            if due == 0:
                return 0
            return self._write(lambda w: self._sweep_in_txn(w, self._now()))

    # ---- holder operations

    def _holder(self, op: str, task_id: Any, agent_id: Any, token: Any,
                act: Callable[[sqlite3.Connection, dict, int], Any],
                on_expired: Callable[[sqlite3.Connection, dict, int, bool], None] | None = None) -> Any:
        _check_name(task_id, "task_id")
        _check_name(agent_id, "agent_id")
        token = _check_token(token)

        def tx(w: sqlite3.Connection):
            now = self._now()
            row = self._row(w, task_id)
            if row is None:
                raise NotFound(f"{op}: task {task_id!r} does not exist")
            if row["target_agent"] is not None and row["target_agent"] != agent_id:
                raise PermissionDenied(f"{op}: task {task_id} is for agent {row['target_agent']!r}, "
                                       f"not {agent_id!r}")
            if row["status"] != CLAIMED:
                raise WrongState(f"{op}: task {task_id} is {row['status']}, not CLAIMED"
                                 + ("; claim it first" if row["status"] == SUBMITTED else ""))
            token_ok = (token is not None and row["claim_token"] is not None and
                        hmac.compare_digest(token.encode("utf-8"), row["claim_token"].encode("utf-8")))
            if row["lease_expires_at"] <= now:
                if on_expired is not None:
                    on_expired(w, row, now, token_ok)
                self._expire_row(w, row, now)
                raise _CommitThenRaise(LeaseExpired(
                    f"{op}: the lease on task {task_id} ended at {row['lease_expires_at']} "
                    f"(now {now}); the expiry has been applied"
                    + ("; the late result was kept as salvage" if on_expired is not None and token_ok
                       else "")))
            if not token:
                raise TokenRequired(f"{op}: task {task_id} needs the claim token from claim()/poll_next()")
            if not token_ok:
                hist = w.execute("SELECT task_id, retired_at, retire_reason FROM claim_tokens "
                                 "WHERE token=?", (token,)).fetchone()
                if hist is not None and hist[1] is not None:
                    msg = (f"{op}: that token was retired ({hist[2]} at {hist[1]}) and is never "
                           f"accepted again; claim the task anew")
                elif hist is not None and hist[0] != task_id:
                    msg = f"{op}: that token belongs to another task ({hist[0]}), not {task_id}"
                else:
                    msg = f"{op}: wrong claim token for task {task_id}"
                raise InvalidToken(msg)
            return act(w, row, now)

        return self._write(tx)

    @staticmethod
    def _guarded_update(w: sqlite3.Connection, sql: str, params: tuple, row: dict, now: int) -> None:
        cur = w.execute(sql + " WHERE task_id=? AND status='CLAIMED' AND claim_token=? "
                              "AND lease_expires_at > ?",
                        params + (row["task_id"], row["claim_token"], now))
        if cur.rowcount != 1:  # cannot happen under BEGIN IMMEDIATE; never trust a Python check
            raise WrongState(f"task {row['task_id']} changed under us; nothing was done")

    def fulfill(self, task_id: str, agent_id: str, token: str, result: Any = None) -> None:
        result_text = _to_json(result, "result")

        def act(w, row, now):
            self._guarded_update(w, "UPDATE tasks SET status='COMPLETED', completed_at=?, result=?, "
                                    "claim_token=NULL, deadline=NULL", (now, result_text), row, now)
            self._retire(w, row["claim_token"], now, "completed")

        def late(w, row, now, token_ok):
            if token_ok:
                w.execute("INSERT INTO salvage (task_id, kind, agent_id, payload, created_at) "
                          "VALUES (?, 'late_result', ?, ?, ?)",
                          (row["task_id"], agent_id, result_text, now))

        self._holder("fulfill", task_id, agent_id, token, act, late)

    def fail(self, task_id: str, agent_id: str, token: str, reason: str = "") -> None:
        _check_text(reason, "reason")
        if not reason.strip():
            raise InvalidArgument("fail: reason must be a non-empty string saying why the task failed")

        def act(w, row, now):
            self._guarded_update(w, "UPDATE tasks SET status='FAILED', completed_at=?, error_reason=?, "
                                    "claim_token=NULL, deadline=NULL", (now, reason), row, now)
            self._retire(w, row["claim_token"], now, "failed")
            self._cascade(w, row["task_id"], FAILED, now)

        self._holder("fail", task_id, agent_id, token, act)

    def release(self, task_id: str, agent_id: str, token: str, reason: str = "") -> None:
        if reason is None:
            reason = ""
        _check_text(reason, "reason")

        def act(w, row, now):
            if row["release_count"] >= self._max_releases:
                raise LimitExceeded(f"release: task {task_id} was already released "
                                    f"{row['release_count']} times (limit {self._max_releases}); "
                                    "fulfill or fail it instead")
            self._guarded_update(
                w, "UPDATE tasks SET status='SUBMITTED', queued_at=?, deadline=?, claim_token=NULL, "
                   "claimed_by=NULL, claimed_at=NULL, lease_expires_at=NULL, extend_count=0, "
                   "release_count=release_count+1, release_reason=?",
                (now, now + row["queue_ttl_ms"], reason), row, now)
            self._retire(w, row["claim_token"], now, "released")

        self._holder("release", task_id, agent_id, token, act)

    def extend(self, task_id: str, agent_id: str, token: str) -> int:
        def act(w, row, now):
            if row["extend_count"] >= self._max_extends:
                raise LimitExceeded(f"extend: the lease on task {task_id} was already extended "
                                    f"{row['extend_count']} times this claim (limit {self._max_extends})")
            new_exp = now + row["exec_ttl_ms"]
            cap = row["created_at"] + 4 * row["queue_ttl_ms"]
            if new_exp > cap:
                raise LimitExceeded(f"extend: new expiry {new_exp} would pass the task's lifetime cap "
                                    f"{cap} (created_at + 4 * queue_ttl_ms)")
            self._guarded_update(w, "UPDATE tasks SET lease_expires_at=?, deadline=?, "
                                    "extend_count=extend_count+1", (new_exp, new_exp), row, now)
            return new_exp

        return self._holder("extend", task_id, agent_id, token, act)

    def salvage(self, task_id: str, agent_id: str, token: str, partial: Any = None) -> None:
        partial_text = _to_json(partial, "partial")

        def act(w, row, now):
            w.execute("INSERT INTO salvage (task_id, kind, agent_id, payload, created_at) "
                      "VALUES (?, 'partial', ?, ?, ?)", (task_id, agent_id, partial_text, now))

        self._holder("salvage", task_id, agent_id, token, act)

    # ---- reads

    def _view(self, r: sqlite3.Connection, row: dict, now: int) -> TaskView:
        deps = [x[0] for x in r.execute(
            "SELECT dep_id FROM task_deps WHERE task_id=? ORDER BY pos", (row["task_id"],))]
        st = row["status"]
        expired = ((st == CLAIMED and row["lease_expires_at"] is not None
                    and now >= row["lease_expires_at"])
                   or (st == SUBMITTED and now >= row["queued_at"] + row["queue_ttl_ms"]))
        return TaskView(
            task_id=row["task_id"], target_agent=row["target_agent"], title=row["title"],
            payload=_from_json(row["payload"]), requester=row["requester"], depends_on=deps,
            queue_ttl_ms=row["queue_ttl_ms"], exec_ttl_ms=row["exec_ttl_ms"],
            max_attempts=row["max_attempts"], created_at=row["created_at"],
            queued_at=row["queued_at"], claimed_at=row["claimed_at"],
            lease_expires_at=row["lease_expires_at"], completed_at=row["completed_at"],
            attempt=row["attempt"], extend_count=row["extend_count"],
            release_count=row["release_count"], result=_from_json(row["result"]),
            error_reason=row["error_reason"], status=st, is_logically_expired=bool(expired),
            claimed_by=row["claimed_by"], release_reason=row["release_reason"])

    def get(self, task_id: str) -> TaskView:
        _check_name(task_id, "task_id")
        with self._lock:
            now = self._now()

            def rd(r):
                row = self._row(r, task_id)
                return None if row is None else self._view(r, row, now)

            v = self._read(rd)
            if v is None:
                raise NotFound(f"task {task_id!r} does not exist")
            return v

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        if agent_id is not None:
            _check_name(agent_id, "agent_id")
        with self._lock:
            now = self._now()

            def rd(r):
                if agent_id is None:
                    cur = r.execute(f"SELECT {TASK_COLS} FROM tasks ORDER BY seq")
                else:
                    cur = r.execute(f"SELECT {TASK_COLS} FROM tasks WHERE target_agent=? OR "
                                    "claimed_by=? ORDER BY seq", (agent_id, agent_id))
                names = [d[0] for d in cur.description]
                rows = [dict(zip(names, x)) for x in cur.fetchall()]
                return [self._view(r, row, now) for row in rows]

            return self._read(rd)

    def salvaged(self, task_id: str) -> list[dict]:
        _check_name(task_id, "task_id")

        def rd(r):
            if r.execute("SELECT 1 FROM tasks WHERE task_id=?", (task_id,)).fetchone() is None:
                return None
            return [{"seq": i + 1, "kind": k, "agent": a, "payload": _from_json(p)}
                    for i, (k, a, p) in enumerate(r.execute(
                        "SELECT kind, agent_id, payload FROM salvage WHERE task_id=? ORDER BY id",
                        (task_id,)))]

        out = self._read(rd)
        if out is None:
            raise NotFound(f"task {task_id!r} does not exist")
        return out

    # ---- daemon locks

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        _check_name(name, "lock name")
        _check_name(owner, "lock owner")
        _check_int(ttl_ms, "ttl_ms", 1, MAX_TTL_MS)
        with self._lock:
            w, _ = self._conns()
            now = self._now()
            try:
                cur = w.execute(
                    "INSERT INTO daemon_locks (name, owner, acquired_at, expires_at) "
                    "VALUES (:name, :owner, :now, :exp) "
                    "ON CONFLICT(name) DO UPDATE SET owner=excluded.owner, "
                    "acquired_at=CASE WHEN daemon_locks.owner=excluded.owner AND "
                    "daemon_locks.expires_at > :now THEN daemon_locks.acquired_at "
                    "ELSE excluded.acquired_at END, expires_at=excluded.expires_at "
                    "WHERE daemon_locks.expires_at <= :now OR daemon_locks.owner = excluded.owner",
                    {"name": name, "owner": owner, "now": now, "exp": now + ttl_ms})
                return cur.rowcount == 1
            except sqlite3.Error as e:
                self._rollback(w)
                raise StoreError(f"acquire_lock failed: {e}") from None

    def release_lock(self, name: str, owner: str) -> bool:
        _check_name(name, "lock name")
        _check_name(owner, "lock owner")
        with self._lock:
            w, _ = self._conns()
            now = self._now()
            try:
                cur = w.execute("DELETE FROM daemon_locks WHERE name=? AND owner=? AND expires_at > ?",
                                (name, owner, now))
                return cur.rowcount == 1
            except sqlite3.Error as e:
                self._rollback(w)
                raise StoreError(f"release_lock failed: {e}") from None

    def lock_holder(self, name: str) -> str | None:
        _check_name(name, "lock name")
        with self._lock:
            now = self._now()
            row = self._read(lambda r: r.execute(
                "SELECT owner FROM daemon_locks WHERE name=? AND expires_at > ?",
                (name, now)).fetchone())
            return None if row is None else row[0]

    # ---- maintenance

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if not isinstance(mode, str) or mode.upper() not in CHECKPOINT_MODES:
            raise InvalidArgument(f"checkpoint mode must be one of {CHECKPOINT_MODES}, got {mode!r}")
        with self._lock:
            w, _ = self._conns()
            try:
                row = w.execute(f"PRAGMA wal_checkpoint({mode.upper()})").fetchone()
            except sqlite3.Error as e:
                raise StoreError(f"checkpoint failed: {e}") from None
            return (int(row[0]), int(row[1]), int(row[2]))


def make_store(path: str, *, clock: Callable[[], int], max_releases: int = 3,
               max_extends: int = 5) -> Store:
    return Store(path, clock=clock, max_releases=max_releases, max_extends=max_extends)
