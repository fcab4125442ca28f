"""``ferry-harness new-target NAME``: a working store to start from, and its gate.

Writes ``NAME.py`` (a compact SQLite-WAL leasing store that passes ferry: every protocol
operation with a docstring pointing into PROTOCOL.md, a ``make_store(path, *, clock)``
factory, a capability declaration, comments where your own logic goes) and
``test_NAME_gate.py`` (the gate: plain ``pytest`` runs ferry's scenarios and a fuzz
campaign against it). The first run is green; from there you change the store and the gate
tells you what broke. Existing files are never overwritten.
"""

from __future__ import annotations

import string
from pathlib import Path

RESERVED = frozenset({"ferry_core", "ferry_harness", "ferry_scenarios", "tests", "test", "conftest",
                      "sqlite3", "pytest", "hypothesis"})


def protocol_document() -> Path | None:
    """PROTOCOL.md of this ferry, when it is installed from a checkout."""
    path = Path(__file__).resolve().parents[2] / "PROTOCOL.md"
    return path if path.exists() else None


def render(name: str) -> dict[str, str]:
    """File name -> text of the two files for store module ``name``."""
    cls = "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Store"
    if not cls.endswith("Store"):
        cls += "Store"
    doc = protocol_document()
    where = (f"ferry's PROTOCOL.md (here: {doc})" if doc else
             "PROTOCOL.md in the ferry repository")
    values = {"name": name, "cls": cls, "protocol": where}
    return {f"{name}.py": string.Template(STORE_TEMPLATE).substitute(values),
            f"test_{name}_gate.py": string.Template(GATE_TEMPLATE).substitute(values)}


GATE_TEMPLATE = '''\
"""The ferry gate for ${name}: `pytest test_${name}_gate.py`.

Collected as one test per ferry scenario plus one fuzz campaign (`gate::fuzz`), so -k, --co,
-x, --lf and -n work as usual. A failure reads `[single-winner] what happened (see
PROTOCOL.md#single-winner) — report: ferry-reports/...`; `ferry-harness replay` on that
directory runs it again. Budget: `pytest --ferry-budget 60`, or `budget=` below; the other
options are in `pytest --help` under "ferry".
"""

from ferry_harness import ferry_gate

gate = ferry_gate("${name}:make_store")
'''


STORE_TEMPLATE = '''\
"""${cls}: a leasing store on one SQLite file in WAL mode, checked by ferry.

Written by `ferry-harness new-target ${name}` as a starting point that passes: every method
names the section of the protocol it implements (PROTOCOL.md#poll_next and so on: the
anchors are the headings of ${protocol}).
Keep the factory's signature, change the rest.

What it implements is declared in FERRY_CAPABILITIES: the core operations with leases,
queue windows, targeted tasks, results, limits and typed refusals. The methods at the end
(salvage, salvaged, daemon locks) and dependencies (`depends_on`) are stubs: implement one,
add its name (and `dag` for dependencies) to FERRY_CAPABILITIES, and the gate checks it.

The patterns that keep it correct under concurrency (PROTOCOL.md#sqlite-rules):
- a claim is a compare-and-swap: the UPDATE repeats every readiness condition, so of N
  processes racing for one task exactly one changes the row (see `_take`);
- every other write runs inside one short BEGIN IMMEDIATE transaction that reads, checks
  and writes while holding SQLite's write lock (see `_tx`);
- a poll with nothing to do only reads (PROTOCOL.md#two-phase-idle-polls);
- every query is read to the end, and no transaction outlives its call.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from ferry_core import errors

SUBMITTED, CLAIMED, COMPLETED, FAILED, TIMED_OUT = (
    "SUBMITTED", "CLAIMED", "COMPLETED", "FAILED", "TIMED_OUT")
MAX_RELEASES, MAX_EXTENDS = 3, 5  # PROTOCOL.md#limits
MAX_MS = 2**62  # TTLs are positive int64 milliseconds
CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")

# What this store implements (PROTOCOL.md#ferry_capabilities). Add an operation or feature
# here once you implement it; ferry then generates it and holds the store to it.
FERRY_CAPABILITIES = frozenset({
    "dispatch", "poll_next", "claim", "fulfill", "fail", "release", "extend", "sweep",
    "get", "inspect", "checkpoint",
    "lease", "queue-ttl", "targets", "results", "limits", "typed-refusals",
})

# A task that is ready for :agent at :now (PROTOCOL.md#readiness).
READY = ("status = 'SUBMITTED' AND queued_at + queue_ttl_ms > :now"
         " AND (target_agent IS NULL OR target_agent = :agent)")
# An expiry that is due but not yet applied (PROTOCOL.md#lazy-expiry).
DUE = ("(status = 'CLAIMED' AND lease_expires_at <= :now)"
       " OR (status = 'SUBMITTED' AND queued_at + queue_ttl_ms <= :now)")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tasks (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,   -- dispatch order (breaks queued_at ties)
        task_id TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL,
        target_agent TEXT, title TEXT, payload TEXT, requester TEXT,
        queue_ttl_ms INTEGER NOT NULL, exec_ttl_ms INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        created_at INTEGER NOT NULL, queued_at INTEGER NOT NULL,
        claimed_by TEXT, claimed_at INTEGER, lease_expires_at INTEGER, completed_at INTEGER,
        attempt INTEGER NOT NULL DEFAULT 0, extend_count INTEGER NOT NULL DEFAULT 0,
        release_count INTEGER NOT NULL DEFAULT 0,
        result TEXT, error_reason TEXT,
        claim_token TEXT                         -- the live token; never shown by a read
    )""",
    "CREATE INDEX IF NOT EXISTS tasks_queue ON tasks(status, queued_at, seq)",
    # every token ever issued (PROTOCOL.md#token-unique): the PRIMARY KEY makes a repeat
    # impossible rather than unlikely
    "CREATE TABLE IF NOT EXISTS tokens (token TEXT PRIMARY KEY, task_id TEXT NOT NULL)",
)

VIEW_COLUMNS = (
    "task_id", "status", "target_agent", "title", "payload", "requester", "queue_ttl_ms",
    "exec_ttl_ms", "max_attempts", "created_at", "queued_at", "claimed_by", "claimed_at",
    "lease_expires_at", "completed_at", "attempt", "extend_count", "release_count", "result",
    "error_reason")


class _Lost(Exception):
    """The compare-and-swap changed no row: someone else took the task first."""


class ${cls}:
    """A leasing store (PROTOCOL.md#operations). One instance per process, one connection."""

    ferry_capabilities = FERRY_CAPABILITIES
    # Stricter choices ferry can hold you to
    # (PROTOCOL.md#stricter-choices-a-store-can-declare):
    # ferry_declares = frozenset({"holder-binding", "refusal-order"})

    def __init__(self, path: str, *, clock: Callable[[], int]) -> None:
        """Open (and create) the database in WAL mode (PROTOCOL.md#the-factory)."""
        self.clock = clock
        try:
            # isolation_level=None: no implicit transactions; we BEGIN and COMMIT ourselves.
            # timeout: SQLite's busy handler waits this long for the write lock.
            self._db = sqlite3.connect(path, isolation_level=None, timeout=10.0)
            self._db.execute("PRAGMA journal_mode=WAL").fetchall()
            self._db.execute("PRAGMA synchronous=NORMAL").fetchall()
            with self._tx() as db:
                for statement in SCHEMA:
                    db.execute(statement)
        except sqlite3.Error as exc:
            raise errors.StoreError(f"cannot open {path!r}: {exc}") from None

    # ------------------------------------------------------------------ plumbing
    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction: BEGIN IMMEDIATE takes the write lock first, so what
        is read inside cannot change before the COMMIT. Any exception rolls back."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise errors.StoreError(f"the database stayed locked: {exc}; retry") from None
        try:
            yield self._db
        except sqlite3.Error as exc:  # never let a raw sqlite3 error escape (typed-errors)
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise errors.StoreError(f"write failed: {exc}; retry") from None
        except BaseException:  # a refusal (or _Lost): nothing was written
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise errors.StoreError(f"commit failed: {exc}; retry") from None

    def _read(self, sql: str, params: Any = ()) -> list[tuple]:
        """A read in autocommit, fetched to the end (no snapshot outlives the call)."""
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise errors.StoreError(f"read failed: {exc}; retry") from None

    def _apply_expiries(self, db: sqlite3.Connection, now: int) -> int:
        """Apply every due expiry, as if at its own instant (PROTOCOL.md#lazy-expiry).
        Call inside `_tx`. Returns how many tasks changed."""
        n = db.execute(  # a lease ran out, attempts left: back to the queue at its end
            "UPDATE tasks SET status = 'SUBMITTED', queued_at = lease_expires_at,"
            " claimed_by = NULL, claimed_at = NULL, lease_expires_at = NULL,"
            " claim_token = NULL, extend_count = 0"
            " WHERE status = 'CLAIMED' AND lease_expires_at <= :now AND attempt < max_attempts",
            {"now": now}).rowcount
        n += db.execute(  # a lease ran out, no attempts left
            "UPDATE tasks SET status = 'TIMED_OUT', completed_at = lease_expires_at,"
            " claim_token = NULL, error_reason = 'the last lease ran out'"
            " WHERE status = 'CLAIMED' AND lease_expires_at <= :now", {"now": now}).rowcount
        n += db.execute(  # nobody claimed it within its queue window
            "UPDATE tasks SET status = 'TIMED_OUT', completed_at = queued_at + queue_ttl_ms,"
            " error_reason = 'nobody claimed it in time'"
            " WHERE status = 'SUBMITTED' AND queued_at + queue_ttl_ms <= :now",
            {"now": now}).rowcount
        return n

    def _due(self, now: int) -> bool:
        return bool(self._read(f"SELECT 1 FROM tasks WHERE {DUE} LIMIT 1", {"now": now}))

    def _take(self, task_id: str, agent_id: str, now: int) -> dict[str, Any] | None:
        """Claim one task if it is still ready: a compare-and-swap (PROTOCOL.md#sqlite-rules).

        The readiness check is repeated in the UPDATE itself, so when several processes try
        the same task only one UPDATE finds it still SUBMITTED; the others change no row and
        get None (the caller moves on to the next task)."""
        token = str(uuid.uuid4())
        params = {"task_id": task_id, "agent": agent_id, "now": now, "token": token}
        sql = ("UPDATE tasks SET status = 'CLAIMED', claimed_by = :agent, claimed_at = :now,"
               " lease_expires_at = :now + exec_ttl_ms, attempt = attempt + 1,"
               " extend_count = 0, claim_token = :token WHERE task_id = :task_id")
        sql += " AND status = 'SUBMITTED'"  # the compare-and-swap: only a waiting row is taken
        sql += " AND queued_at + queue_ttl_ms > :now"  # still inside its queue window
        sql += " AND (target_agent IS NULL OR target_agent = :agent)"  # and meant for us
        try:
            with self._tx() as db:
                # the token is recorded before the row changes (PROTOCOL.md#claim)
                db.execute("INSERT INTO tokens(token, task_id) VALUES (?, ?)", (token, task_id))
                rows = db.execute(sql + " RETURNING lease_expires_at, attempt", params).fetchall()
                if len(rows) != 1:
                    raise _Lost
        except _Lost:
            return None
        expires, attempt = rows[0]
        return {"task_id": task_id, "agent_id": agent_id, "token": token, "claimed_at": now,
                "lease_expires_at": expires, "attempt": attempt}

    def _guard(self, db: sqlite3.Connection, task_id: Any, agent_id: Any, token: Any,
               now: int) -> dict[str, Any]:
        """The holder guard, in the reference order (PROTOCOL.md#the-holder-guard). Call
        inside `_tx`: the write lock is held, so the row cannot change before the write."""
        _text("task_id", task_id)
        _text("agent_id", agent_id)
        if token is not None and not isinstance(token, str):
            raise errors.InvalidArgument(f"token must be a string, got {type(token).__name__}")
        rows = db.execute("SELECT status, target_agent, lease_expires_at, claim_token,"
                          " extend_count, release_count, exec_ttl_ms, created_at,"
                          " queue_ttl_ms FROM tasks WHERE task_id = ?", (task_id,)).fetchall()
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        keys = ("status", "target_agent", "lease_expires_at", "claim_token", "extend_count",
                "release_count", "exec_ttl_ms", "created_at", "queue_ttl_ms")
        row = dict(zip(keys, rows[0], strict=True))
        if row["target_agent"] is not None and row["target_agent"] != agent_id:
            raise errors.PermissionDenied(f"task {task_id} is for {row['target_agent']!r} only")
        if row["status"] != CLAIMED:
            raise errors.WrongState(f"task {task_id} is {row['status']}, not CLAIMED")
        if now >= row["lease_expires_at"]:  # half-open: at lease_expires_at the lease is over
            raise errors.LeaseExpired(f"the lease on task {task_id} ended at "
                                      f"{row['lease_expires_at']}; poll for new work")
        if token is None:
            raise errors.TokenRequired(f"task {task_id}: pass the token from your claim")
        if not hmac.compare_digest(token, row["claim_token"] or ""):
            raise errors.InvalidToken(f"task {task_id}: that token is not the live one")
        return row

    # ------------------------------------------------------------------ operations
    def dispatch(self, target_agent: str | None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int = 3_600_000,
                 exec_ttl_ms: int = 60_000, max_attempts: int = 1) -> str:
        """Create a SUBMITTED task and return its new id (PROTOCOL.md#dispatch)."""
        if target_agent is not None:
            _text("target_agent", target_agent)
        for key, value in (("queue_ttl_ms", queue_ttl_ms), ("exec_ttl_ms", exec_ttl_ms),
                           ("max_attempts", max_attempts)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < MAX_MS:
                raise errors.InvalidArgument(f"{key} must be a positive integer, got {value!r}")
        if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, (list, tuple)):
            raise errors.InvalidArgument(f"depends_on must be a list of ids, got {depends_on!r}")
        if depends_on:  # YOUR LOGIC: PROTOCOL.md#dependencies-and-the-failure-cascade
            raise errors.InvalidArgument("this store does not implement depends_on yet")
        body = _json("payload", payload)
        now = self.clock()
        task_id = str(uuid.uuid4())
        with self._tx() as db:
            db.execute(
                "INSERT INTO tasks(task_id, status, target_agent, title, payload, requester,"
                " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at)"
                " VALUES (?, 'SUBMITTED', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (task_id, target_agent, str(title), body, str(requester), queue_ttl_ms,
                 exec_ttl_ms, max_attempts, now, now))
        return task_id

    def poll_next(self, agent_id: str) -> dict[str, Any] | None:
        """Claim the oldest task ready for `agent_id`, or None (PROTOCOL.md#poll_next)."""
        _text("agent_id", agent_id)
        now = self.clock()
        params = {"now": now, "agent": agent_id}
        # phase 1, read only: an idle poll writes nothing (PROTOCOL.md#two-phase-idle-polls)
        if self._due(now):
            with self._tx() as db:
                self._apply_expiries(db, now)
        while True:
            # phase 2: try the oldest ready tasks; a task lost to another process is no
            # longer ready, so the next read moves on (never "nothing" while work remains)
            ready = self._read(f"SELECT task_id FROM tasks WHERE {READY}"
                               " ORDER BY queued_at, seq LIMIT 8", params)
            if not ready:
                return None
            for (task_id,) in ready:
                claim = self._take(task_id, agent_id, now)
                if claim is not None:
                    return claim

    def claim(self, task_id: str, agent_id: str) -> dict[str, Any] | None:
        """Claim exactly this task if it is ready for `agent_id`, else None
        (PROTOCOL.md#claim)."""
        _text("task_id", task_id)
        _text("agent_id", agent_id)
        now = self.clock()
        if not self._read("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)):
            raise errors.NotFound(f"task {task_id!r} does not exist")
        if self._due(now):
            with self._tx() as db:
                self._apply_expiries(db, now)
        return self._take(task_id, agent_id, now)

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any) -> None:
        """Complete the task with `result` (PROTOCOL.md#fulfill)."""
        body = _json("result", result)
        now = self.clock()
        with self._tx() as db:
            self._guard(db, task_id, agent_id, token, now)
            # YOUR LOGIC: deliver the result somewhere else too, in this transaction
            db.execute("UPDATE tasks SET status = 'COMPLETED', result = ?, completed_at = ?,"
                       " claim_token = NULL WHERE task_id = ?", (body, now, task_id))

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str) -> None:
        """Give the task up as FAILED with `reason` (PROTOCOL.md#fail)."""
        if not isinstance(reason, str) or not reason.strip():
            raise errors.InvalidArgument("fail needs a non-blank reason")
        now = self.clock()
        with self._tx() as db:
            self._guard(db, task_id, agent_id, token, now)
            db.execute("UPDATE tasks SET status = 'FAILED', error_reason = ?, completed_at = ?,"
                       " claim_token = NULL WHERE task_id = ?", (reason, now, task_id))

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """Give the task back to the tail of the queue (PROTOCOL.md#release)."""
        now = self.clock()
        with self._tx() as db:
            row = self._guard(db, task_id, agent_id, token, now)
            if row["release_count"] >= MAX_RELEASES:
                raise errors.LimitExceeded(f"task {task_id} was released {MAX_RELEASES} "
                                           "times already; fulfill or fail it")
            db.execute("UPDATE tasks SET status = 'SUBMITTED', queued_at = ?, claimed_by = NULL,"
                       " claimed_at = NULL, lease_expires_at = NULL, claim_token = NULL,"
                       " extend_count = 0, release_count = release_count + 1"
                       " WHERE task_id = ?", (now, task_id))

    def extend(self, task_id: str, agent_id: str, token: str | None) -> int:
        """Renew the lease to now + exec_ttl_ms and return its new end (PROTOCOL.md#extend)."""
        now = self.clock()
        with self._tx() as db:
            row = self._guard(db, task_id, agent_id, token, now)
            new_end = now + row["exec_ttl_ms"]
            if row["extend_count"] >= MAX_EXTENDS:
                raise errors.LimitExceeded(f"task {task_id}: {MAX_EXTENDS} extends per claim")
            if new_end > row["created_at"] + 4 * row["queue_ttl_ms"]:
                raise errors.LimitExceeded(f"task {task_id}: the extend cap is reached")
            db.execute("UPDATE tasks SET lease_expires_at = ?, extend_count = extend_count + 1"
                       " WHERE task_id = ?", (new_end, task_id))
        return new_end

    def sweep(self) -> int:
        """Apply every due expiry; how many tasks changed (PROTOCOL.md#sweep)."""
        now = self.clock()
        if not self._due(now):  # nothing due: write nothing
            return 0
        with self._tx() as db:
            return self._apply_expiries(db, now)

    def get(self, task_id: str) -> dict[str, Any]:
        """The task's view at now; never writes (PROTOCOL.md#get)."""
        _text("task_id", task_id)
        rows = self._read(f"SELECT {', '.join(VIEW_COLUMNS)} FROM tasks WHERE task_id = ?",
                          (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        return self._view(rows[0], self.clock())

    def inspect(self, agent_id: str | None = None) -> list[dict[str, Any]]:
        """Every task once, oldest first; never writes (PROTOCOL.md#inspect)."""
        now = self.clock()
        where, params = "", ()
        if agent_id is not None:
            where, params = " WHERE target_agent = ? OR claimed_by = ?", (agent_id, agent_id)
        rows = self._read(f"SELECT {', '.join(VIEW_COLUMNS)} FROM tasks{where} ORDER BY seq",
                          params)
        return [self._view(r, now) for r in rows]

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """PRAGMA wal_checkpoint on this connection (PROTOCOL.md#checkpoint)."""
        if mode not in CHECKPOINT_MODES:
            raise errors.InvalidArgument(f"checkpoint mode must be one of {CHECKPOINT_MODES}")
        # RESTART and TRUNCATE wait for readers through the busy handler: wait briefly, then
        # report busy=1 instead of hanging while another process reads
        self._read("PRAGMA busy_timeout = 200")
        try:
            [row] = self._read(f"PRAGMA wal_checkpoint({mode})")
        finally:
            self._read("PRAGMA busy_timeout = 10000")
        return tuple(row)

    def close(self) -> None:
        """Close the connection (PROTOCOL.md#close)."""
        self._db.close()

    # ------------------------------------------------------------------ not implemented yet
    # Implement one, then add its name to FERRY_CAPABILITIES so ferry checks it.
    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        """Keep a partial artifact of a held task (PROTOCOL.md#salvage)."""
        raise NotImplementedError("salvage: see PROTOCOL.md#salvage")

    def salvaged(self, task_id: str) -> list[Any]:
        """Everything kept for a task, oldest first (PROTOCOL.md#salvaged); late results
        belong here too (PROTOCOL.md#late-results)."""
        raise NotImplementedError("salvaged: see PROTOCOL.md#salvaged")

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take a daemon lock for [now, now + ttl_ms) with one UPSERT
        (PROTOCOL.md#acquire_lock)."""
        raise NotImplementedError("acquire_lock: see PROTOCOL.md#acquire_lock")

    def release_lock(self, name: str, owner: str) -> bool:
        """Drop the lock if `owner` holds it now (PROTOCOL.md#release_lock)."""
        raise NotImplementedError("release_lock: see PROTOCOL.md#release_lock")

    def lock_holder(self, name: str) -> str | None:
        """The unexpired owner of the lock, or None (PROTOCOL.md#lock_holder)."""
        raise NotImplementedError("lock_holder: see PROTOCOL.md#lock_holder")

    # ------------------------------------------------------------------ views
    def _view(self, row: tuple, now: int) -> dict[str, Any]:
        """A TaskView (PROTOCOL.md#taskview-fields): never the token; an out-of-date row
        says is_logically_expired."""
        v = dict(zip(VIEW_COLUMNS, row, strict=True))
        v["payload"] = json.loads(v["payload"]) if v["payload"] is not None else None
        v["result"] = json.loads(v["result"]) if v["result"] is not None else None
        v["depends_on"] = []
        v["is_logically_expired"] = (
            (v["status"] == CLAIMED and now >= v["lease_expires_at"])
            or (v["status"] == SUBMITTED and now >= v["queued_at"] + v["queue_ttl_ms"]))
        return v


def _text(key: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument(f"{key} must be a non-empty string, got {value!r}")


def _json(key: str, value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"{key} must be JSON-serialisable: {exc}") from None


def make_store(path: str, *, clock: Callable[[], int]) -> ${cls}:
    """The factory ferry calls in every worker process (PROTOCOL.md#the-factory):
    `ferry-harness fuzz --target ${name}:make_store`."""
    return ${cls}(path, clock=clock)
'''
