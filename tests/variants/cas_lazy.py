"""cas_lazy: an independent SPEC leasing store (autocommit single-statement CAS, lazy expiry).

Written from /work/shared/SPEC.md alone, to validate ferry's checker against a store its
authors did not write.  Stdlib only, plus ``ferry_core.errors``.

Factory: ``make_store(path, *, clock, strict_tokens=True, max_releases=3, max_extends=5)``.

Choices (SPEC §9 freedoms and things SPEC leaves open)
------------------------------------------------------
* Claim strategy: autocommit single-statement CAS.  The claim is one
  ``UPDATE tasks ... WHERE task_id=? AND status='SUBMITTED' AND <in queue window> AND
  <target ok> AND <all deps COMPLETED> RETURNING ...``; success iff exactly one row came back.
  The fresh uuid4 token is written into ``token_history`` (token PRIMARY KEY) by a
  ``BEFORE UPDATE OF claim_token`` trigger, i.e. before the row changes and inside the same
  statement/transaction: a duplicate token aborts the whole claim, so no token is ever issued
  twice.  poll_next reads the oldest candidate, then CASes it; a lost race re-reads (bounded).
* Holder operations are one guarded statement (UPDATE, or INSERT..SELECT for salvage) whose
  WHERE repeats status='CLAIMED', lease_expires_at > now, token equality (SQL function
  ``ct_eq`` = ``hmac.compare_digest``), target agent and the op's limit.  Only when 0 rows
  changed is the row read to pick the refusal class.
* Expiry is lazy: applied ONLY by sweep(), poll_next() (which sweeps first, two-phase:
  COUNT read, write only if > 0) and claim() (for its own task).  A holder op after the lease
  ended refuses with LeaseExpired and does NOT write the expiry.  Exception: a late fulfill
  (row still CLAIMED with this token, lease over) keeps its result as a "late" salvage entry
  (one atomic INSERT..SELECT guarded by those same conditions), then raises LeaseExpired.
  If the expiry was already applied by someone else, the token is retired and the late
  fulfill is refused with InvalidToken without keeping anything.
* Expiry is time-deterministic (independent of which call applies it, or when):
  a lease that ended at L goes back to SUBMITTED with ``queued_at = L`` if
  ``attempt < max_attempts`` (and TIMED_OUT at ``L + queue_ttl_ms`` if that queue window is
  also over by now); else TIMED_OUT.  ``completed_at`` of a TIMED_OUT task is the logical
  instant it timed out (L, or queued_at + queue_ttl_ms), not the time the sweep ran.
* ``attempt`` counts claims (each claim +1).  Release does not refund an attempt; the
  max_attempts cap is consulted only when a lease expires.  extend_count resets on each
  claim; release_count is per task, never reset.
* Limits: release refused (LimitExceeded) once release_count >= max_releases (3 releases ok);
  extend refused once extend_count >= max_extends (5 extends ok per claim) or when
  ``now + exec_ttl_ms > created_at + 4 * queue_ttl_ms`` (equal is allowed).
* Refusal order (differs from SPEC §5; allowed by §9): argument validation (InvalidArgument)
  -> NotFound -> PermissionDenied (target_agent set and caller differs) -> TokenRequired
  (None/"" with strict_tokens) -> InvalidToken (row token NULL or different) -> WrongState
  (status != CLAIMED) -> LeaseExpired -> LimitExceeded.  Each class raised corresponds to a
  check that really fails.  With strict_tokens=False a missing token skips the token check.
* Token: bearer credential (SPEC default): any agent presenting the live token of an
  untargeted task is its holder.  Release and expiry NULL the row's token; fulfill/fail keep
  it in the row (a second fulfill with it is WrongState), it can never act again since the
  status is terminal.
* DAG: dependencies must exist at dispatch (NotFound).  A dependency already FAILED or
  TIMED_OUT at dispatch makes the new task FAILED at once.  Later, an AFTER UPDATE trigger
  (with PRAGMA recursive_triggers=ON, so it is transitive) turns SUBMITTED dependents of a
  task that became FAILED/TIMED_OUT into FAILED, reason "dependency <id> ended <status>",
  atomically with the change that caused it.
* salvaged(task_id) returns a list of lists ``[kind, agent_id, data, created_at]`` in append
  order; kind is "salvage" (salvage()) or "late" (a late fulfill's result); data is the
  JSON-decoded value (tuples come back as lists); created_at is the clock at the call.
* sweep() returns the number of tasks whose expiry it applied (cascaded dependent failures
  are not counted).
* inspect(agent_id) returns tasks whose target_agent is agent_id or whose last claimer was
  agent_id; inspect() returns all tasks; both in insertion order.
* Daemon locks: one UPSERT, held on [acquired, expires_at).  release_lock only deletes an
  unexpired lock of that owner (returns False for an expired one, leaving the row).
* Busy handling: ``sqlite3.connect(path, timeout=5.0)`` and nothing else; a timeout surfaces
  as StoreError.  Every transaction is autocommit or one short BEGIN IMMEDIATE (dispatch,
  schema creation).  Cursors are always drained.
* Defaults: queue_ttl_ms=3_600_000, exec_ttl_ms=300_000, max_attempts=1.
  Bounds: TTLs 1..2**40 ms, max_attempts 1..1000, clock 0..2**62, ids <= 1024 chars,
  title/requester <= 65536 chars, JSON values <= 16 MiB serialized, <= 1000 dependencies.
  JSON values: None/bool/int/finite float/str/list/tuple/dict with str keys.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import sqlite3
import uuid
from collections.abc import Callable
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

SCHEMA_VERSION = 1
APPLICATION_ID = 0x0CA51A2F

DEFAULT_QUEUE_TTL_MS = 3_600_000
DEFAULT_EXEC_TTL_MS = 300_000
MAX_TTL_MS = 2**62 - 1  # every TTL below 2**62 (PROTOCOL.md#limits)
MAX_CLOCK = 2**62
MAX_ATTEMPTS = 1000
MAX_ID_LEN = 1024
MAX_TEXT_LEN = 65536
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_DEPS = 1000
MAX_JSON_DEPTH = 200
MAX_LIMIT = 1_000_000

_CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS tasks (
        seq              INTEGER PRIMARY KEY,
        task_id          TEXT NOT NULL UNIQUE,
        target_agent     TEXT,
        title            TEXT NOT NULL DEFAULT '',
        payload          TEXT NOT NULL,
        requester        TEXT NOT NULL DEFAULT '',
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
        claimed_by       TEXT,
        claim_token      TEXT,
        status           TEXT NOT NULL CHECK (status IN
                           ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT'))
    )""",
    "CREATE INDEX IF NOT EXISTS tasks_ready ON tasks(status, queued_at, seq)",
    "CREATE INDEX IF NOT EXISTS tasks_lease ON tasks(status, lease_expires_at)",
    """CREATE TABLE IF NOT EXISTS task_deps (
        task_id TEXT NOT NULL REFERENCES tasks(task_id),
        dep_id  TEXT NOT NULL REFERENCES tasks(task_id),
        PRIMARY KEY (task_id, dep_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS task_deps_rev ON task_deps(dep_id, task_id)",
    """CREATE TABLE IF NOT EXISTS token_history (
        token     TEXT PRIMARY KEY,
        task_id   TEXT NOT NULL REFERENCES tasks(task_id),
        agent_id  TEXT,
        issued_at INTEGER
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS salvage (
        id         INTEGER PRIMARY KEY,
        task_id    TEXT NOT NULL REFERENCES tasks(task_id),
        kind       TEXT NOT NULL,
        agent_id   TEXT NOT NULL,
        data       TEXT NOT NULL,
        created_at INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS salvage_task ON salvage(task_id, id)",
    """CREATE TABLE IF NOT EXISTS daemon_locks (
        name       TEXT PRIMARY KEY,
        owner      TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    )""",
    # The token enters history before the row changes, in the same statement: a duplicate
    # token (PRIMARY KEY) aborts the claim, so no token is ever issued twice.
    """CREATE TRIGGER IF NOT EXISTS trg_token_history
       BEFORE UPDATE OF claim_token ON tasks
       WHEN NEW.claim_token IS NOT NULL
            AND (OLD.claim_token IS NULL OR NEW.claim_token <> OLD.claim_token)
       BEGIN
         INSERT INTO token_history(token, task_id, agent_id, issued_at)
         VALUES (NEW.claim_token, NEW.task_id, NEW.claimed_by, NEW.claimed_at);
       END""",
    # A dependency that ends FAILED/TIMED_OUT fails its waiting dependents (transitively,
    # with recursive_triggers=ON), atomically with the change that caused it.
    """CREATE TRIGGER IF NOT EXISTS trg_dep_cascade
       AFTER UPDATE OF status ON tasks
       WHEN NEW.status IN ('FAILED','TIMED_OUT')
            AND OLD.status NOT IN ('FAILED','TIMED_OUT','COMPLETED')
       BEGIN
         UPDATE tasks
            SET status = 'FAILED',
                error_reason = 'dependency ' || NEW.task_id || ' ended ' || NEW.status,
                completed_at = MAX(COALESCE(NEW.completed_at, 0), created_at)
          WHERE status = 'SUBMITTED'
            AND task_id IN (SELECT task_id FROM task_deps WHERE dep_id = NEW.task_id);
       END""",
]

_TASK_COLS = (
    "seq, task_id, target_agent, title, payload, requester, queue_ttl_ms, exec_ttl_ms, "
    "max_attempts, created_at, queued_at, claimed_at, lease_expires_at, completed_at, "
    "attempt, extend_count, release_count, result, error_reason, release_reason, "
    "claimed_by, claim_token, status"
)

# Ready-for-claim conditions (named params :now, :agent), repeated inside every CAS.
_READY_WHERE = (
    "status = 'SUBMITTED' AND :now < queued_at + queue_ttl_ms "
    "AND (target_agent IS NULL OR target_agent = :agent) "
    "AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.dep_id "
    "                WHERE d.task_id = tasks.task_id AND p.status <> 'COMPLETED')"
)

_DUE_WHERE = (
    "((status = 'CLAIMED' AND lease_expires_at <= :now) "
    " OR (status = 'SUBMITTED' AND queued_at + queue_ttl_ms <= :now))"
)

_REQUEUE = (
    "(status = 'CLAIMED' AND attempt < max_attempts AND :now < lease_expires_at + queue_ttl_ms)"
)

# Time-deterministic expiry: the outcome does not depend on when it is applied.
_EXPIRE_SET = f"""
    status = CASE WHEN {_REQUEUE} THEN 'SUBMITTED' ELSE 'TIMED_OUT' END,
    queued_at = CASE WHEN status = 'CLAIMED' THEN lease_expires_at ELSE queued_at END,
    completed_at = CASE
        WHEN {_REQUEUE} THEN NULL
        WHEN status = 'CLAIMED' AND attempt < max_attempts THEN lease_expires_at + queue_ttl_ms
        WHEN status = 'CLAIMED' THEN lease_expires_at
        ELSE queued_at + queue_ttl_ms END,
    error_reason = CASE
        WHEN {_REQUEUE} THEN error_reason
        WHEN status = 'CLAIMED' AND attempt < max_attempts
            THEN 'requeued after lease expiry, then queue window ended'
        WHEN status = 'CLAIMED'
            THEN 'lease expired on attempt ' || attempt || ' of ' || max_attempts
        ELSE 'queue window ended before any claim' END,
    lease_expires_at = CASE WHEN {_REQUEUE} THEN NULL ELSE lease_expires_at END,
    claim_token = NULL
"""

_HOLDER_GUARD = (
    "task_id = :task_id AND status = 'CLAIMED' AND :now < lease_expires_at "
    "AND (target_agent IS NULL OR target_agent = :agent)"
)


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
    claimed_by: str | None = None
    release_reason: str | None = None


# ---------------------------------------------------------------- validation helpers


def _check_json(value: Any, what: str) -> str:
    def walk(v: Any, depth: int) -> None:
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgument(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
        if v is None or isinstance(v, (bool, str)):
            if isinstance(v, str):
                _check_utf8(v, what)
            return
        if isinstance(v, int):
            return
        if isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidArgument(f"{what} contains a non-finite float ({v!r}), not JSON")
            return
        if isinstance(v, (list, tuple)):
            for x in v:
                walk(x, depth + 1)
            return
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise InvalidArgument(
                        f"{what} has a non-string object key {k!r}; JSON keys are strings")
                _check_utf8(k, what)
                walk(x, depth + 1)
            return
        raise InvalidArgument(f"{what} contains {type(v).__name__}, which is not a JSON value")

    walk(value, 0)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError, OverflowError) as e:
        raise InvalidArgument(f"{what} is not JSON-serialisable: {e}") from None
    if len(text.encode("utf-8", "surrogatepass")) > MAX_JSON_BYTES:
        raise InvalidArgument(f"{what} is larger than {MAX_JSON_BYTES} bytes as JSON")
    return text


def _check_utf8(s: str, what: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} contains a lone surrogate; it cannot be stored") from None


def _check_str(v: Any, what: str, *, allow_empty: bool = False, max_len: int = MAX_ID_LEN) -> str:
    if not isinstance(v, str):
        raise InvalidArgument(f"{what} must be a string, got {type(v).__name__}")
    if not allow_empty and v == "":
        raise InvalidArgument(f"{what} must not be empty")
    if len(v) > max_len:
        raise InvalidArgument(f"{what} is longer than {max_len} characters")
    _check_utf8(v, what)
    return v


def _check_int(v: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidArgument(f"{what} must be an int, got {type(v).__name__}")
    if v < lo or v > hi:
        raise InvalidArgument(f"{what} must be between {lo} and {hi}, got {v}")
    return int(v)


def _ct_eq(a: Any, b: Any) -> int:
    if a is None or b is None:
        return 0
    return 1 if hmac.compare_digest(str(a).encode("utf-8"), str(b).encode("utf-8")) else 0


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# ---------------------------------------------------------------- the store


class CasLazyStore:
    def __init__(self, path: Any, *, clock: Callable[[], int], strict_tokens: bool = True,
                 max_releases: int = 3, max_extends: int = 5) -> None:
        if not callable(clock):
            raise InvalidArgument("clock must be a callable returning integer milliseconds")
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise InvalidArgument(f"path must be a str or path-like, got {type(path).__name__}")
        self._clock = clock
        self._strict = bool(strict_tokens)
        self._max_releases = _check_int(max_releases, "max_releases", 0, MAX_LIMIT)
        self._max_extends = _check_int(max_extends, "max_extends", 0, MAX_LIMIT)
        self._conn: sqlite3.Connection | None = None
        try:
            if isinstance(path, (str, os.PathLike)) and os.path.isdir(os.fspath(path)):
                raise StoreError(f"{os.fspath(path)!r} is a directory, not a database file")
            conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open database {path!r}: {e}") from None
        self._conn = conn
        try:
            self._init_db()
        except FerryError:
            self._conn.close()
            self._conn = None
            raise
        except sqlite3.Error as e:
            self._conn.close()
            self._conn = None
            raise StoreError(f"cannot use {path!r} as a cas_lazy store: {e}") from None

    # -- setup ---------------------------------------------------------------

    def _init_db(self) -> None:
        c = self._conn
        assert c is not None
        app_id = c.execute("PRAGMA application_id").fetchone()[0]
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if app_id not in (0, APPLICATION_ID):
            raise StoreError(f"database belongs to another application (id {app_id:#x})")
        if version > SCHEMA_VERSION:
            raise StoreError(f"database schema version {version} is newer than this store's "
                             f"({SCHEMA_VERSION}); upgrade the store")
        mode = c.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot switch the database to WAL mode (got {mode!r})")
        c.execute("PRAGMA synchronous=NORMAL")
        c.execute("PRAGMA foreign_keys=ON")
        c.execute("PRAGMA recursive_triggers=ON")
        c.create_function("ct_eq", 2, _ct_eq, deterministic=True)
        if version < SCHEMA_VERSION or app_id != APPLICATION_ID:
            c.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _SCHEMA:
                    c.execute(stmt)
                c.execute(f"PRAGMA application_id={APPLICATION_ID}")
                c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
        cols = {r[1] for r in c.execute("PRAGMA table_info(tasks)").fetchall()}
        if not {"seq", "claim_token", "claimed_by", "release_reason"} <= cols:
            raise StoreError("the 'tasks' table does not have this store's schema")

    # -- plumbing -------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("store is closed")
        return self._conn

    def _now(self) -> int:
        t = self._clock()
        if isinstance(t, float) and t.is_integer():
            t = int(t)
        if isinstance(t, bool) or not isinstance(t, int) or t < 0 or t > MAX_CLOCK:
            raise StoreError(f"clock returned {t!r}; expected integer ms in 0..{MAX_CLOCK}")
        return t

    def _q(self, sql: str, params: Any = ()) -> list:
        """Run one statement to completion (autocommit) and return all rows."""
        c = self._db()
        try:
            cur = c.execute(sql, params)
            try:
                return cur.fetchall()
            finally:
                cur.close()
        except sqlite3.Error as e:
            if c.in_transaction:
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreError(f"database error: {e}") from None

    def _exec(self, sql: str, params: Any = ()) -> int:
        """Run one write statement (autocommit); return the number of rows it changed."""
        c = self._db()
        try:
            cur = c.execute(sql, params)
            try:
                cur.fetchall()
                return cur.rowcount
            finally:
                cur.close()
        except sqlite3.Error as e:
            if c.in_transaction:
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreError(f"database error: {e}") from None

    def _row(self, task_id: str) -> sqlite3.Row | None:
        rows = self._q(f"SELECT {_TASK_COLS} FROM tasks WHERE task_id = ?", (task_id,))
        return rows[0] if rows else None

    @staticmethod
    def _cols(row: tuple) -> dict:
        names = [n.strip() for n in _TASK_COLS.split(",")]
        return dict(zip(names, row, strict=True))

    # -- dispatch -------------------------------------------------------------

    def dispatch(self, target_agent: str | None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (),
                 queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS,
                 exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS, max_attempts: int = 1) -> str:
        if target_agent is not None:
            _check_str(target_agent, "target_agent")
        _check_str(title, "title", allow_empty=True, max_len=MAX_TEXT_LEN)
        _check_str(requester, "requester", allow_empty=True, max_len=MAX_TEXT_LEN)
        payload_text = _check_json(payload, "payload")
        qttl = _check_int(queue_ttl_ms, "queue_ttl_ms", 1, MAX_TTL_MS)
        ettl = _check_int(exec_ttl_ms, "exec_ttl_ms", 1, MAX_TTL_MS)
        attempts = _check_int(max_attempts, "max_attempts", 1, MAX_ATTEMPTS)
        if depends_on is None:
            depends_on = ()
        if isinstance(depends_on, (str, bytes)) or not hasattr(depends_on, "__iter__"):
            raise InvalidArgument("depends_on must be an iterable of task ids (not a string)")
        deps: list[str] = []
        for d in depends_on:
            _check_str(d, "depends_on entry")
            if d not in deps:
                deps.append(d)
            if len(deps) > MAX_DEPS:
                raise InvalidArgument(f"at most {MAX_DEPS} dependencies per task")
        now = self._now()
        task_id = str(uuid.uuid4())
        c = self._db()
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                failed_dep = None
                for d in deps:
                    r = c.execute("SELECT status FROM tasks WHERE task_id = ?", (d,)).fetchone()
                    if r is None:
                        raise NotFound(f"dependency {d!r} does not exist; dispatch it first")
                    if r[0] in ("FAILED", "TIMED_OUT") and failed_dep is None:
                        failed_dep = (d, r[0])
                status = "SUBMITTED" if failed_dep is None else "FAILED"
                reason = None if failed_dep is None else \
                    f"dependency {failed_dep[0]} ended {failed_dep[1]}"
                c.execute(
                    "INSERT INTO tasks(task_id, target_agent, title, payload, requester, "
                    "queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at, "
                    "completed_at, error_reason, status) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (task_id, target_agent, title, payload_text, requester, qttl, ettl,
                     attempts, now, now, None if failed_dep is None else now, reason, status))
                c.executemany("INSERT INTO task_deps(task_id, dep_id) VALUES (?, ?)",
                              [(task_id, d) for d in deps])
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise
        except sqlite3.Error as e:
            raise StoreError(f"database error during dispatch: {e}") from None
        return task_id

    # -- expiry ---------------------------------------------------------------

    def sweep(self) -> int:
        now = self._now()
        return self._sweep(now)

    def _sweep(self, now: int) -> int:
        # Two-phase: a read first; write only when something is due (idle polls write nothing).
        due = self._q(f"SELECT COUNT(*) FROM tasks WHERE {_DUE_WHERE}", {"now": now})[0][0]
        if not due:
            return 0
        return self._exec(f"UPDATE tasks SET {_EXPIRE_SET} WHERE {_DUE_WHERE}", {"now": now})

    # -- claiming -------------------------------------------------------------

    def _cas_claim(self, task_id: str, agent_id: str, now: int) -> Claim | None:
        for _ in range(8):
            token = str(uuid.uuid4())
            try:
                rows = self._q_raw(
                    "UPDATE tasks SET status = 'CLAIMED', claim_token = :token, "
                    "claimed_by = :agent, claimed_at = :now, "
                    "lease_expires_at = :now + exec_ttl_ms, attempt = attempt + 1, "
                    f"extend_count = 0 WHERE task_id = :task_id AND {_READY_WHERE} "
                    "RETURNING claimed_at, lease_expires_at, attempt",
                    {"token": token, "agent": agent_id, "now": now, "task_id": task_id})
            except sqlite3.IntegrityError:
                continue  # token collided with history: the claim aborted whole; retry fresh
            except sqlite3.Error as e:
                raise StoreError(f"database error during claim: {e}") from None
            if len(rows) != 1:
                return None
            claimed_at, lease, attempt = rows[0]
            return Claim(task_id, agent_id, token, int(claimed_at), int(lease), int(attempt))
        raise StoreError("could not mint a fresh claim token")

    def _q_raw(self, sql: str, params: Any) -> list:
        c = self._db()
        try:
            cur = c.execute(sql, params)
            try:
                return cur.fetchall()
            finally:
                cur.close()
        except sqlite3.Error:
            if c.in_transaction:
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    def poll_next(self, agent_id: str) -> Claim | None:
        _check_str(agent_id, "agent_id")
        now = self._now()
        self._sweep(now)
        for _ in range(64):
            rows = self._q(
                f"SELECT task_id FROM tasks WHERE {_READY_WHERE} ORDER BY queued_at, seq LIMIT 1",
                {"now": now, "agent": agent_id})
            if not rows:
                return None
            claim = self._cas_claim(rows[0][0], agent_id, now)
            if claim is not None:
                return claim
        return None

    def claim(self, task_id: str, agent_id: str) -> Claim | None:
        _check_str(task_id, "task_id")
        _check_str(agent_id, "agent_id")
        now = self._now()
        for _ in range(4):
            rows = self._q(
                f"SELECT {_DUE_WHERE} FROM tasks WHERE task_id = :task_id",
                {"now": now, "task_id": task_id})
            if not rows:
                raise NotFound(f"task {task_id!r} does not exist")
            if rows[0][0]:
                self._exec(f"UPDATE tasks SET {_EXPIRE_SET} WHERE task_id = :task_id "
                           f"AND {_DUE_WHERE}", {"now": now, "task_id": task_id})
            claim = self._cas_claim(task_id, agent_id, now)
            if claim is not None:
                return claim
            again = self._q(f"SELECT {_DUE_WHERE} FROM tasks WHERE task_id = :task_id",
                            {"now": now, "task_id": task_id})
            if not again or not again[0][0]:
                return None
        return None

    # -- holder operations ----------------------------------------------------

    def _holder_args(self, task_id: Any, agent_id: Any, token: Any) -> None:
        _check_str(task_id, "task_id")
        _check_str(agent_id, "agent_id")
        if token is not None:
            _check_str(token, "token", allow_empty=True)

    def _token_where(self, token: str | None) -> str:
        if not token and not self._strict:
            return ""
        return " AND ct_eq(claim_token, :token) = 1"

    def _refuse(self, op: str, task_id: str, agent_id: str, token: str | None, now: int,
                limit_check: Callable[[dict, int], str | None] | None = None) -> FerryError | None:
        """Read the row (after 0 rows changed) and pick the refusal class; None = no check fails."""
        r = self._row(task_id)
        if r is None:
            return NotFound(f"task {task_id!r} does not exist")
        row = self._cols(r)
        if row["target_agent"] is not None and row["target_agent"] != agent_id:
            return PermissionDenied(f"{op}: task {task_id} is for agent "
                                    f"{row['target_agent']!r}, not {agent_id!r}")
        if not token:
            if self._strict:
                return TokenRequired(f"{op}: a claim token is required (strict_tokens is on); "
                                     "pass the token from your Claim")
        elif not _ct_eq(row["claim_token"], token):
            return InvalidToken(f"{op}: token is not task {task_id}'s current claim token "
                                "(wrong, forged or retired); claim the task again")
        if row["status"] != "CLAIMED":
            return WrongState(f"{op}: task {task_id} is {row['status']}, not CLAIMED")
        if now >= row["lease_expires_at"]:
            return LeaseExpired(f"{op}: the lease on task {task_id} ended at "
                                f"{row['lease_expires_at']} (now {now})")
        if limit_check is not None:
            msg = limit_check(row, now)
            if msg:
                return LimitExceeded(f"{op}: {msg}")
        return None

    def _guarded(self, op: str, task_id: str, agent_id: str, token: str | None, set_sql: str,
                 params: dict, extra_where: str = "", returning: str = "",
                 limit_check: Callable[[dict, int], str | None] | None = None,
                 late_result: str | None = None) -> list:
        now = params["now"]
        base = {"task_id": task_id, "agent": agent_id, "token": token, **params}
        for _ in range(4):
            if not token and self._strict:
                rows: list = []
            else:
                sql = (f"UPDATE tasks SET {set_sql} WHERE {_HOLDER_GUARD}"
                       f"{self._token_where(token)}{extra_where}")
                if returning:
                    rows = self._q(sql + f" RETURNING {returning}", base)
                else:
                    rows = [()] * self._exec(sql, base)
            if len(rows) == 1:
                return rows
            if late_result is not None and (token or not self._strict):
                # A late fulfill: keep the result as salvage, atomically guarded by the row
                # still being CLAIMED under this token with its lease over.
                kept = self._exec(
                    "INSERT INTO salvage(task_id, kind, agent_id, data, created_at) "
                    "SELECT task_id, 'late', :agent, :data, :now FROM tasks "
                    "WHERE task_id = :task_id AND status = 'CLAIMED' "
                    "AND lease_expires_at <= :now "
                    "AND (target_agent IS NULL OR target_agent = :agent)"
                    + self._token_where(token),
                    {**base, "data": late_result})
                if kept == 1:
                    raise LeaseExpired(
                        f"{op}: the lease on task {task_id} is over (now {now}); the task was "
                        "not completed, but your result was kept as late salvage")
            err = self._refuse(op, task_id, agent_id, token, now, limit_check)
            if err is not None:
                raise err
        raise WrongState(f"{op}: task {task_id} changed concurrently; try again")

    def fulfill(self, task_id: str, agent_id: str, token: str, result: Any) -> None:
        self._holder_args(task_id, agent_id, token)
        text = _check_json(result, "result")
        now = self._now()
        self._guarded("fulfill", task_id, agent_id, token,
                      "status = 'COMPLETED', result = :result, completed_at = :now",
                      {"now": now, "result": text}, late_result=text)

    def fail(self, task_id: str, agent_id: str, token: str, reason: str) -> None:
        self._holder_args(task_id, agent_id, token)
        if reason is None or (isinstance(reason, str) and reason.strip() == ""):
            raise InvalidArgument("fail needs a non-empty reason saying what went wrong")
        _check_str(reason, "reason", max_len=MAX_TEXT_LEN)
        now = self._now()
        self._guarded("fail", task_id, agent_id, token,
                      "status = 'FAILED', error_reason = :reason, completed_at = :now",
                      {"now": now, "reason": reason})

    def release(self, task_id: str, agent_id: str, token: str, reason: str = "") -> None:
        self._holder_args(task_id, agent_id, token)
        if reason is None:
            reason = ""
        _check_str(reason, "reason", allow_empty=True, max_len=MAX_TEXT_LEN)
        now = self._now()
        maxr = self._max_releases

        def limit(row: dict, _now: int) -> str | None:
            if row["release_count"] >= maxr:
                return (f"task {task_id} was already released {row['release_count']} times "
                        f"(max_releases={maxr}); fulfill or fail it instead")
            return None

        self._guarded("release", task_id, agent_id, token,
                      "status = 'SUBMITTED', claim_token = NULL, queued_at = :now, "
                      "lease_expires_at = NULL, release_count = release_count + 1, "
                      "release_reason = :reason",
                      {"now": now, "reason": reason, "maxr": maxr},
                      extra_where=" AND release_count < :maxr", limit_check=limit)

    def extend(self, task_id: str, agent_id: str, token: str) -> int:
        self._holder_args(task_id, agent_id, token)
        now = self._now()
        maxe = self._max_extends

        def limit(row: dict, t: int) -> str | None:
            if row["extend_count"] >= maxe:
                return (f"the lease on task {task_id} was already extended "
                        f"{row['extend_count']} times this claim (max_extends={maxe})")
            cap = row["created_at"] + 4 * row["queue_ttl_ms"]
            if t + row["exec_ttl_ms"] > cap:
                return (f"a new expiry {t + row['exec_ttl_ms']} would pass the task's hard "
                        f"deadline created_at + 4*queue_ttl_ms = {cap}")
            return None

        rows = self._guarded(
            "extend", task_id, agent_id, token,
            "lease_expires_at = :now + exec_ttl_ms, extend_count = extend_count + 1",
            {"now": now, "maxe": maxe},
            extra_where=(" AND extend_count < :maxe "
                         "AND :now + exec_ttl_ms <= created_at + 4 * queue_ttl_ms"),
            returning="lease_expires_at", limit_check=limit)
        return int(rows[0][0])

    def salvage(self, task_id: str, agent_id: str, token: str, partial: Any) -> None:
        self._holder_args(task_id, agent_id, token)
        text = _check_json(partial, "partial")
        now = self._now()
        base = {"task_id": task_id, "agent": agent_id, "token": token, "now": now, "data": text}
        for _ in range(4):
            if token or not self._strict:
                n = self._exec(
                    "INSERT INTO salvage(task_id, kind, agent_id, data, created_at) "
                    f"SELECT task_id, 'salvage', :agent, :data, :now FROM tasks "
                    f"WHERE {_HOLDER_GUARD}{self._token_where(token)}", base)
                if n == 1:
                    return
            err = self._refuse("salvage", task_id, agent_id, token, now)
            if err is not None:
                raise err
        raise WrongState(f"salvage: task {task_id} changed concurrently; try again")

    # -- reads ----------------------------------------------------------------

    def _view(self, r: tuple, now: int, deps: tuple) -> TaskView:
        row = self._cols(r)
        st = row["status"]
        expired = bool(
            (st == "CLAIMED" and now >= row["lease_expires_at"])
            or (st == "SUBMITTED" and now >= row["queued_at"] + row["queue_ttl_ms"]))
        return TaskView(
            task_id=row["task_id"], target_agent=row["target_agent"], title=row["title"],
            payload=_loads(row["payload"]), requester=row["requester"], depends_on=deps,
            queue_ttl_ms=row["queue_ttl_ms"], exec_ttl_ms=row["exec_ttl_ms"],
            max_attempts=row["max_attempts"], created_at=row["created_at"],
            queued_at=row["queued_at"], claimed_at=row["claimed_at"],
            lease_expires_at=row["lease_expires_at"], completed_at=row["completed_at"],
            attempt=row["attempt"], extend_count=row["extend_count"],
            release_count=row["release_count"], result=_loads(row["result"]),
            error_reason=row["error_reason"], status=st, is_logically_expired=expired,
            claimed_by=row["claimed_by"], release_reason=row["release_reason"])

    def _read_many(self, where: str, params: Any) -> list[tuple]:
        # One read transaction so rows and deps come from the same snapshot.
        c = self._db()
        try:
            c.execute("BEGIN")
            try:
                rows = c.execute(f"SELECT {_TASK_COLS} FROM tasks {where} ORDER BY seq",
                                 params).fetchall()
                deps = c.execute(
                    "SELECT d.task_id, d.dep_id FROM task_deps d JOIN tasks p "
                    "ON p.task_id = d.dep_id ORDER BY p.seq").fetchall() if rows else []
            finally:
                c.execute("COMMIT")
        except sqlite3.Error as e:
            if c.in_transaction:
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreError(f"database error: {e}") from None
        by_task: dict[str, list[str]] = {}
        for t, d in deps:
            by_task.setdefault(t, []).append(d)
        return [(r, tuple(by_task.get(r[1], ()))) for r in rows]

    def get(self, task_id: str) -> TaskView:
        _check_str(task_id, "task_id")
        now = self._now()
        got = self._read_many("WHERE task_id = ?", (task_id,))
        if not got:
            raise NotFound(f"task {task_id!r} does not exist")
        return self._view(got[0][0], now, got[0][1])

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        if agent_id is not None:
            _check_str(agent_id, "agent_id")
        now = self._now()
        if agent_id is None:
            got = self._read_many("", ())
        else:
            got = self._read_many("WHERE target_agent = ? OR claimed_by = ?",
                                  (agent_id, agent_id))
        return [self._view(r, now, d) for r, d in got]

    def salvaged(self, task_id: str) -> list:
        _check_str(task_id, "task_id")
        c = self._db()
        try:
            c.execute("BEGIN")
            try:
                exists = c.execute("SELECT 1 FROM tasks WHERE task_id = ?",
                                   (task_id,)).fetchone()
                rows = c.execute("SELECT kind, agent_id, data, created_at FROM salvage "
                                 "WHERE task_id = ? ORDER BY id", (task_id,)).fetchall()
            finally:
                c.execute("COMMIT")
        except sqlite3.Error as e:
            if c.in_transaction:
                try:
                    c.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise StoreError(f"database error: {e}") from None
        if exists is None:
            raise NotFound(f"task {task_id!r} does not exist")
        return [[k, a, json.loads(d), int(t)] for k, a, d, t in rows]

    # -- daemon locks ---------------------------------------------------------

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        _check_str(name, "lock name")
        _check_str(owner, "lock owner")
        ttl = _check_int(ttl_ms, "ttl_ms", 1, MAX_TTL_MS)
        now = self._now()
        n = self._exec(
            "INSERT INTO daemon_locks(name, owner, expires_at) VALUES (:name, :owner, :exp) "
            "ON CONFLICT(name) DO UPDATE SET owner = excluded.owner, "
            "expires_at = excluded.expires_at "
            "WHERE daemon_locks.expires_at <= :now OR daemon_locks.owner = excluded.owner",
            {"name": name, "owner": owner, "exp": now + ttl, "now": now})
        return n == 1

    def release_lock(self, name: str, owner: str) -> bool:
        _check_str(name, "lock name")
        _check_str(owner, "lock owner")
        now = self._now()
        n = self._exec("DELETE FROM daemon_locks WHERE name = ? AND owner = ? AND expires_at > ?",
                       (name, owner, now))
        return n == 1

    def lock_holder(self, name: str) -> str | None:
        _check_str(name, "lock name")
        now = self._now()
        rows = self._q("SELECT owner FROM daemon_locks WHERE name = ? AND expires_at > ?",
                       (name, now))
        return rows[0][0] if rows else None

    # -- maintenance ----------------------------------------------------------

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        if not isinstance(mode, str) or mode.upper() not in _CHECKPOINT_MODES:
            raise InvalidArgument(f"checkpoint mode must be one of {_CHECKPOINT_MODES}, "
                                  f"got {mode!r}")
        rows = self._q(f"PRAGMA wal_checkpoint({mode.upper()})")
        b, log, done = rows[0]
        return (int(b), int(log), int(done))

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def __enter__(self) -> CasLazyStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_store(path: str, *, clock: Callable[[], int], **options: Any) -> CasLazyStore:
    return CasLazyStore(path, clock=clock, **options)
