"""PgLeaseStore: ferry_core's leasing store on a PostgreSQL schema (same API as LeaseStore).

What changes from the SQLite store, and why the semantics stay the same:

- SQLite serialises every write behind one lock; PostgreSQL runs them at once (READ
  COMMITTED). So every write that decides something is ONE conditional statement whose
  WHERE clause is re-checked on the row's newest version when it had to wait for a
  concurrent writer (a CAS): the claim (``UPDATE … WHERE seq = (SELECT … FOR NO KEY UPDATE
  SKIP LOCKED) AND <still ready> … RETURNING``), every holder write (the token in the
  WHERE clause), the expiry of one instant's leases, the lock UPSERT.
- The bookkeeping that follows a holder write (token history, token retirement) is done
  by row triggers, inside the same statement.
- Readiness is computed, not counted: a task is ready when none of its dependencies is
  anything but COMPLETED (``NOT EXISTS`` in the claim's WHERE clause), so a dependency that
  completes while its dependent's ``dispatch`` is still uncommitted cannot leave the
  dependent waiting forever (the SQLite store keeps a counter: its writers are serialised).
  A dependency that fails in that window leaves the dependent SUBMITTED and never ready
  until the next ``sweep()``, which fails it (PROTOCOL.md#dependencies-and-the-failure-cascade
  allows either) at the instant the cascade took effect (the later of the dependency's
  end and the dependent's dispatch), in time order with the other due events: FAILED if
  its queue window was still open then, else TIMED_OUT.
- ``dispatch`` locks its dependencies only as the foreign key does (``KEY SHARE``), which
  the claim's ``FOR NO KEY UPDATE`` does not conflict with: ``SKIP LOCKED`` passes over a
  row only while another write is changing it (a claim, an expiry), never over a ready
  task because a dispatch depends on it (with ``FOR UPDATE`` it would take a younger one).
- A claimer that skipped a row another claimer has locked (``SKIP LOCKED``) and found
  nothing reads again and retries while a task is ready, so it never reports "nothing"
  while work remains (PROTOCOL.md#poll_next).
- Time never comes from the server: ``now`` is read once per call from ``clock`` and
  passed into every statement as a parameter (PROTOCOL.md#time).
- Reads are single autocommit statements: no transaction or snapshot outlives a call.
- A deadlock or serialization failure between two concurrent transactions is retried;
  a row lock waited on longer than ``busy_timeout_ms`` (``lock_timeout``) is ``StoreError``.
- Unlike SQLite, which writes inside the calling process, a statement the client has sent
  runs to its end in the server even when the client is then frozen (SIGSTOP) or killed:
  a paused holder's ``fulfill`` can complete while it is stopped (its effect still falls
  inside the call). ``fulfill``, ``release``, ``extend``, ``salvage``, the claims and the
  lock calls write with single autocommit statements, which no pause can hold open;
  ``fail``, ``dispatch``, a sweep and a late call's expiry are short transactions a client
  frozen between their statements holds open (other writers of those rows wait, up to
  ``busy_timeout_ms``).

psycopg 3 is imported when a store is made, so ``import ferry_core`` never needs it.
"""

from __future__ import annotations

import hmac
import re
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from . import errors
from .clock import Clock, SystemClock
from .schema import RETIRE_TOKEN_SET
from .store import (
    CHECKPOINT_MODES,
    DEFAULT_EXEC_TTL_MS,
    DEFAULT_QUEUE_TTL_MS,
    TTL_LIMIT_MS,
    _from_json,
    _name,
    _non_negative_int,
    _positive_int,
    _StoreFront,
    _to_json,
)
from .types import CLAIMED, SUBMITTED, Claim, ClaimStats, Salvage, TaskView

if TYPE_CHECKING:  # psycopg is optional: imported by the constructor
    import psycopg

#: 2: tasks_ready_order; 3: a fulfill leaves the token history be (an older schema gets
#: what is new on open)
PG_SCHEMA_VERSION = 3
PG_OWN_TABLES = frozenset({"tasks", "task_deps", "claim_tokens", "salvage", "daemon_locks",
                           "ferry_meta"})
STRATEGIES = ("cas",)
_RETRIES = 50  # deadlocks / serialization failures retried before StoreError
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _ddl(s: str) -> str:
    """The schema's tables and triggers; ``s`` is the quoted schema name (trigger bodies
    name their tables with it, so they never depend on a session's search_path)."""
    return f"""
CREATE TABLE IF NOT EXISTS {s}.tasks (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id          TEXT    NOT NULL UNIQUE,
    status           TEXT    NOT NULL CHECK (status IN
                         ('SUBMITTED','CLAIMED','COMPLETED','FAILED','TIMED_OUT')),
    target_agent     TEXT,
    title            TEXT    NOT NULL DEFAULT '',
    payload          TEXT,
    requester        TEXT    NOT NULL DEFAULT '',
    queue_ttl_ms     BIGINT  NOT NULL,
    exec_ttl_ms      BIGINT  NOT NULL,
    max_attempts     BIGINT  NOT NULL,
    created_at       BIGINT  NOT NULL,
    queued_at        BIGINT  NOT NULL,
    queue_deadline   BIGINT  NOT NULL,
    claimed_by       TEXT,
    claimed_at       BIGINT,
    lease_expires_at BIGINT,
    completed_at     BIGINT,
    attempt          BIGINT  NOT NULL DEFAULT 0,
    extend_count     BIGINT  NOT NULL DEFAULT 0,
    release_count    BIGINT  NOT NULL DEFAULT 0,
    result           TEXT,
    error_reason     TEXT,
    claim_token      TEXT
);
CREATE TABLE IF NOT EXISTS {s}.task_deps (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id    TEXT NOT NULL REFERENCES {s}.tasks(task_id),
    depends_on TEXT NOT NULL REFERENCES {s}.tasks(task_id),
    UNIQUE (task_id, depends_on)
);
CREATE INDEX IF NOT EXISTS task_deps_by_dep ON {s}.task_deps(depends_on);
CREATE TABLE IF NOT EXISTS {s}.claim_tokens (
    token       TEXT PRIMARY KEY,
    task_id     TEXT   NOT NULL,
    agent_id    TEXT   NOT NULL,
    issued_at   BIGINT NOT NULL,
    retired_at  BIGINT,
    retired_why TEXT
);
CREATE TABLE IF NOT EXISTS {s}.salvage (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id    TEXT   NOT NULL,
    agent_id   TEXT   NOT NULL,
    kind       TEXT   NOT NULL,
    data       TEXT,
    created_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS salvage_by_task ON {s}.salvage(task_id, id);
CREATE TABLE IF NOT EXISTS {s}.daemon_locks (
    name        TEXT PRIMARY KEY,
    owner       TEXT   NOT NULL,
    expires_at  BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_ready
    ON {s}.tasks(target_agent, queued_at, seq) WHERE status = 'SUBMITTED';
-- the claim's "oldest ready task for me or for anyone" (target_agent IS NULL OR = me) can
-- use no (target_agent, ...) order: this one walks the queue in order, so a claim reads the
-- rows ahead of its pick, not every ready row (a sort of the whole queue per claim)
CREATE INDEX IF NOT EXISTS tasks_ready_order
    ON {s}.tasks(queued_at, seq) WHERE status = 'SUBMITTED';
CREATE INDEX IF NOT EXISTS tasks_lease_due
    ON {s}.tasks(lease_expires_at) WHERE status = 'CLAIMED';
CREATE INDEX IF NOT EXISTS tasks_queue_due
    ON {s}.tasks(queue_deadline) WHERE status = 'SUBMITTED';

-- PROTOCOL.md#the-holder-guard: the token enters the history before the claiming row
-- changes, in the same statement; the primary key makes a second issue impossible.
CREATE OR REPLACE FUNCTION {s}.ferry_token_issued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {s}.claim_tokens(token, task_id, agent_id, issued_at)
    VALUES (NEW.claim_token, NEW.task_id, NEW.claimed_by, NEW.claimed_at);
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS claim_token_history ON {s}.tasks;
CREATE TRIGGER claim_token_history
    BEFORE UPDATE OF claim_token ON {s}.tasks FOR EACH ROW
    WHEN (NEW.claim_token IS NOT NULL AND NEW.claim_token IS DISTINCT FROM OLD.claim_token)
    EXECUTE FUNCTION {s}.ferry_token_issued();

CREATE OR REPLACE FUNCTION {s}.ferry_token_retired() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.claim_tokens SET
        {RETIRE_TOKEN_SET}
    WHERE token = OLD.claim_token AND retired_why IS NULL;
    RETURN NULL;
END $$;
-- as ferry_core.schema's version 3: a fulfill leaves the history row be (the COMPLETED
-- task row records that retirement)
DROP TRIGGER IF EXISTS claim_token_retired ON {s}.tasks;
CREATE TRIGGER claim_token_retired
    AFTER UPDATE OF claim_token ON {s}.tasks FOR EACH ROW
    WHEN (OLD.claim_token IS NOT NULL AND NEW.claim_token IS NULL
          AND NEW.status <> 'COMPLETED')
    EXECUTE FUNCTION {s}.ferry_token_retired();

CREATE TABLE IF NOT EXISTS {s}.ferry_meta (version INTEGER NOT NULL);
"""


_VIEW_COLUMNS = """
    task_id, status, target_agent, title, payload, requester, queue_ttl_ms, exec_ttl_ms,
    max_attempts, created_at, queued_at, queue_deadline, claimed_by, claimed_at,
    lease_expires_at, completed_at, attempt, extend_count, release_count, result,
    error_reason,
    ARRAY(SELECT depends_on FROM task_deps d WHERE d.task_id = tasks.task_id ORDER BY d.id)
"""
_GUARD_COLUMNS = "status, target_agent, claimed_by, lease_expires_at, claim_token"

# -------------------------------------------------------------------- statements
_READY = ("status='SUBMITTED' AND queue_deadline > %(now)s"
          " AND (target_agent IS NULL OR target_agent = %(agent)s)"
          " AND NOT EXISTS(SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.depends_on"
          "  WHERE d.task_id = tasks.task_id AND p.status <> 'COMPLETED')")
_DUE = ("(EXISTS(SELECT 1 FROM tasks WHERE status='CLAIMED' AND lease_expires_at <= %(now)s)"
        " OR EXISTS(SELECT 1 FROM tasks WHERE status='SUBMITTED' AND queue_deadline <= %(now)s))")
_CLAIM_FIELDS = (
    "status='CLAIMED', claimed_by=%(agent)s, claim_token=%(token)s, claimed_at=%(now)s,"
    " lease_expires_at=%(now)s + exec_ttl_ms, attempt=attempt + 1, extend_count=0")
_CLAIM_ONE = (f"UPDATE tasks SET {_CLAIM_FIELDS} WHERE task_id=%(task_id)s AND {_READY}"
              " RETURNING claimed_at, lease_expires_at, attempt")
_CLAIM_NEXT = (
    f"UPDATE tasks SET {_CLAIM_FIELDS}"
    f" WHERE seq = (SELECT seq FROM tasks WHERE {_READY} ORDER BY queued_at, seq LIMIT 1"
    f"  FOR NO KEY UPDATE SKIP LOCKED) AND {_READY}"
    " RETURNING task_id, claimed_at, lease_expires_at, attempt")
_CLAIM_NEXT_UNLESS_DUE = _CLAIM_NEXT.replace(" RETURNING ", f" AND NOT {_DUE} RETURNING ", 1)
_READY_SQL = f"SELECT EXISTS(SELECT 1 FROM tasks WHERE {_READY})"
_POLL_CHECK = f"SELECT {_DUE}, EXISTS(SELECT 1 FROM tasks WHERE {_READY})"
#: a SUBMITTED task with a dead dependency: its dispatch raced the dependency's end
_STUCK = ("EXISTS(SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.depends_on"
          " JOIN tasks c ON c.task_id = d.task_id"
          " WHERE c.status = 'SUBMITTED' AND p.status IN ('FAILED','TIMED_OUT')"
          " AND greatest(p.completed_at, c.created_at) <= %(now)s)")
_SWEEP_CHECK = f"SELECT {_DUE} OR {_STUCK}"
#: the claim and the sweep's check in one statement (one snapshot): it takes effect only
#: when no sweep is due, and says why when it did not — (claimed_at, lease_expires_at,
#: attempt; NULLs if nothing changed), was a sweep due, does the task exist
_CLAIM_ONE_OR_WHY = (
    f"WITH due AS (SELECT {_DUE} OR {_STUCK} AS d),"
    f" won AS ({_CLAIM_ONE.replace(' RETURNING ', ' AND NOT (SELECT d FROM due) RETURNING ', 1)})"
    " SELECT won.claimed_at, won.lease_expires_at, won.attempt, (SELECT d FROM due),"
    " EXISTS(SELECT 1 FROM tasks WHERE task_id=%(task_id)s) FROM (SELECT 1) one"
    " LEFT JOIN won ON true")
#: a dispatch of one task with no dependencies, in one statement, when no sweep is due
#: (otherwise nothing is written and the dispatch's transaction applies the sweep first)
_DISPATCH_ONE_UNLESS_DUE = (
    "WITH ins AS (INSERT INTO tasks(task_id, status, target_agent, title, payload, requester,"
    " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at, queue_deadline)"
    " SELECT %(task_id)s, 'SUBMITTED', %(target)s, %(title)s, %(payload)s, %(requester)s,"
    " %(qttl)s, %(ettl)s, %(attempts)s, %(now)s, %(now)s, %(deadline)s"
    f" WHERE NOT {_DUE} RETURNING 1) SELECT count(*) FROM ins")
_NEXT_DUE_SQL = (
    "SELECT least("
    "(SELECT min(lease_expires_at) FROM tasks WHERE status='CLAIMED' AND lease_expires_at <= %(now)s),"
    " (SELECT min(queue_deadline) FROM tasks WHERE status='SUBMITTED' AND queue_deadline <= %(now)s))")
#: the leases that ended at %(t)s go back to the queue (window from t) or time out; the
#: retirement trigger records the token as retired by 'expiry' at t
_REQUEUE_SQL = (
    "UPDATE tasks SET"
    " status = CASE WHEN attempt < max_attempts THEN 'SUBMITTED' ELSE 'TIMED_OUT' END,"
    " queued_at = %(t)s, queue_deadline = %(t)s + queue_ttl_ms,"
    " completed_at = CASE WHEN attempt < max_attempts THEN NULL ELSE %(t)s END,"
    " error_reason = CASE WHEN attempt < max_attempts THEN NULL"
    "   ELSE 'lease expired on attempt ' || attempt || ' of ' || max_attempts END,"
    " claim_token = NULL, claimed_by = NULL, claimed_at = NULL,"
    " lease_expires_at = NULL, extend_count = 0"
    " WHERE status='CLAIMED' AND lease_expires_at = %(t)s")
_QUEUE_TIMEOUT_SQL = (
    "UPDATE tasks SET status='TIMED_OUT', completed_at=%(t)s,"
    " error_reason='queue window ended before any claim'"
    " WHERE status='SUBMITTED' AND queue_deadline = %(t)s")
#: a dead dependency cascades from the later of its end and the dependent's dispatch: a
#: dispatch that raced the dependency's end (see the module doc) is failed at that instant
_DEAD_DEP = ("FROM task_deps d JOIN tasks p ON p.task_id = d.depends_on"
             " WHERE d.task_id = tasks.task_id AND p.status IN ('FAILED','TIMED_OUT')"
             " AND greatest(p.completed_at, tasks.created_at) <= %(t)s")
_CASCADE_SQL = (
    "UPDATE tasks SET status='FAILED', completed_at=%(t)s, error_reason=("
    f"  SELECT 'dependency ' || p.task_id || ' ended ' || p.status {_DEAD_DEP}"
    "  ORDER BY d.id LIMIT 1)"
    f" WHERE status='SUBMITTED' AND EXISTS (SELECT 1 {_DEAD_DEP})")
#: the earliest such instant at or before %(now)s (what a sweep looks for besides expiries)
_STUCK_AT_SQL = (
    "SELECT min(greatest(p.completed_at, c.created_at)) FROM task_deps d"
    " JOIN tasks p ON p.task_id = d.depends_on JOIN tasks c ON c.task_id = d.task_id"
    " WHERE c.status = 'SUBMITTED' AND p.status IN ('FAILED','TIMED_OUT')"
    " AND greatest(p.completed_at, c.created_at) <= %(now)s")
_HOLDER_WHERE = (" WHERE task_id=%(task_id)s AND status='CLAIMED'"
                 " AND claim_token = %(row_token)s AND lease_expires_at > %(now)s")
_LATE_TOKEN_SQL = ("SELECT 1 FROM claim_tokens WHERE token=%s AND task_id=%s AND agent_id=%s"
                   " AND retired_why='expiry'")


def _schema_from_uri(uri: str) -> str | None:
    """The first schema of ``options=-c search_path=…`` in a libpq URI, if any."""
    from psycopg.conninfo import conninfo_to_dict  # optional dependency: see module doc

    opts = str(conninfo_to_dict(uri).get("options") or "")
    m = re.search(r"(?:-c\s*|--)search_path\s*=\s*([^\s,]+)", opts)
    if not m:
        return None
    first = m.group(1).strip().strip('"')
    return None if first.startswith("$") else first


class PgLeaseStore(_StoreFront):
    """A leasing job store on a PostgreSQL schema, safe across processes; the same
    operations, refusals and views as ``LeaseStore`` (PROTOCOL.md#operations).

    ``uri`` is a libpq connection URI (``postgresql://user@host/db``, or
    ``postgresql://postgres@/postgres?host=/socket/dir``). The store's tables live in
    ONE schema, chosen by, in this order:

    1. ``schema=``: created if missing; the connection's ``search_path`` is set to it;
    2. else the first schema of the URI's ``options=-c search_path=s,…`` (the way the
       harness hands one schema per example to a factory, ``factory(uri, clock=clock)``):
       created if missing, the URI's search_path is left as it is;
    3. else ``public``.

    Tables are created on first open (under an advisory lock, so concurrent first opens
    are safe); a schema holding tables of another application is refused. Construct one
    per process; every instance opens its own connection (autocommit).

    ``busy_timeout_ms`` becomes the connection's ``lock_timeout``: a row lock waited on
    longer is a ``StoreError``, as a busy SQLite file is. ``claim_strategy`` is accepted
    for symmetry with ``LeaseStore`` and must be ``"cas"``.
    """

    ferry_declares = frozenset({"holder-binding", "refusal-order"})
    #: the harness hands this factory a libpq URI with the example's schema, not a file
    #: path (PROTOCOL.md#postgres-targets)
    ferry_backend = "postgres"

    def __init__(
        self,
        uri: str,
        *,
        clock: Clock | None = None,
        schema: str | None = None,
        strict_tokens: bool = True,
        claim_strategy: str = "cas",
        busy_timeout_ms: int = 5000,
        max_extends: int = 5,
        max_releases: int = 3,
    ) -> None:
        if claim_strategy not in STRATEGIES:
            raise errors.InvalidArgument(
                f"claim_strategy must be one of {STRATEGIES}, got {claim_strategy!r}")
        if not isinstance(uri, str) or not uri:
            raise errors.InvalidArgument(f"uri must be a libpq URI string, got {uri!r}")
        try:
            import psycopg  # optional dependency: pip install 'psycopg[binary]'
        except ImportError:
            raise errors.StoreError(
                "PgLeaseStore needs psycopg 3: pip install 'psycopg[binary]'") from None
        self._psycopg = psycopg
        self.uri = uri
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.strict_tokens = bool(strict_tokens)
        self.claim_strategy = claim_strategy
        self.busy_timeout_ms = _non_negative_int("busy_timeout_ms", busy_timeout_ms)
        self.max_extends = _non_negative_int("max_extends", max_extends)
        self.max_releases = _non_negative_int("max_releases", max_releases)
        set_path = schema is not None
        try:
            found = schema if set_path else _schema_from_uri(uri)
        except psycopg.ProgrammingError as exc:
            raise errors.StoreError(f"not a usable libpq URI: {exc}") from None
        self.schema = found or "public"
        if not _SCHEMA_NAME.match(self.schema):
            raise errors.InvalidArgument(
                f"schema must be a plain SQL identifier (letters, digits, _), got {self.schema!r}")
        self._claim_attempts = self._claim_misses = self._claim_empty = 0
        self._claimed_last = False
        self._conn = self._open(set_path)

    # ------------------------------------------------------------------ connection
    def _open(self, set_path: bool) -> psycopg.Connection:
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(self.uri, autocommit=True)
        except psycopg.Error as exc:
            raise errors.StoreError(f"cannot connect to {self._where()}: {exc}".strip()) from None
        try:
            q = f'"{self.schema}"'
            # one round trip: the settings and the first readiness look (plain text, no
            # parameters: the schema name is a checked identifier)
            first = f"SET lock_timeout = {int(self.busy_timeout_ms)}; "
            if set_path:
                first += f"SET search_path TO {q}; "
            if not self._schema_ready(conn, first):
                self._make_schema(conn)
        except errors.StoreError:
            conn.close()
            raise
        except psycopg.Error as exc:
            conn.close()
            raise errors.StoreError(
                f"cannot use schema {self.schema!r} of {self._where()} as a ferry store: {exc}"
            ) from None
        # the store runs a dozen fixed statements: each is planned once per connection,
        # from its first run (psycopg's default waits for the 5th; measured 25-30 % off a
        # call on a fresh connection, as a short-lived worker or a harness example has)
        conn.prepare_threshold = 0
        return conn

    def _make_schema(self, conn: psycopg.Connection) -> None:
        """Create the tables under the schema's advisory lock. A process that finds
        another one making them waits for it in shared mode, so processes opening side
        by side look at the finished schema together rather than one after another."""
        key = ("ferry_core:" + self.schema,)
        with conn.transaction():
            if conn.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))",
                            key).fetchone()[0]:
                self._make_tables(conn)
                return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock_shared(hashtext(%s))", key)
            if self._schema_ready(conn):
                return
        with conn.transaction():  # its maker gave up: make them here
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", key)
            self._make_tables(conn)

    def _make_tables(self, conn: psycopg.Connection) -> None:
        """Inside the exclusive advisory lock: create what is missing (another process
        may have made it while this one waited for the lock)."""
        if self._schema_ready(conn):
            return
        q = f'"{self.schema}"'
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
        conn.execute(_ddl(q))
        conn.execute(f"DELETE FROM {q}.ferry_meta")
        conn.execute(f"INSERT INTO {q}.ferry_meta(version) VALUES (%s)", (PG_SCHEMA_VERSION,))

    def _schema_ready(self, conn: psycopg.Connection, before: str = "") -> bool:
        """True when the schema holds this store's tables at this version; refuses a
        newer version and tables of another application. ``before``: statements sent in
        the same round trip."""
        cur = conn.execute(
            f"{before}SELECT tablename FROM pg_tables WHERE schemaname = '{self.schema}'")
        while cur.nextset():  # to the last statement's rows
            pass
        tables = {r[0] for r in cur.fetchall()}
        foreign = tables - PG_OWN_TABLES
        if foreign:
            raise errors.StoreError(
                f"schema {self.schema!r} holds tables of another application "
                f"({sorted(foreign)[:3]}); give ferry a schema of its own")
        if "ferry_meta" not in tables:
            return False
        rows = conn.execute(f'SELECT max(version) FROM "{self.schema}".ferry_meta').fetchall()
        version = rows[0][0] or 0
        if version > PG_SCHEMA_VERSION:
            raise errors.StoreError(
                f"schema {self.schema!r} has ferry_core schema version {version}, newer than "
                f"this ferry_core ({PG_SCHEMA_VERSION}); upgrade ferry_core to open it")
        return version == PG_SCHEMA_VERSION

    def _where(self) -> str:
        """The server and schema, for messages (no password: libpq URIs may carry one)."""
        return re.sub(r"//[^@/]*:[^@/]*@", "//***@", self.uri) + f" (schema {self.schema})"

    @staticmethod
    def ferry_reset(conn: psycopg.Connection, schema: str) -> None:
        """For ferry-harness (PROTOCOL.md#postgres-targets): empty ``schema`` between two
        examples — every task, dependency, token, salvage and lock row deleted, the
        tables, triggers and version row kept, as a first open of an empty schema leaves
        it — on ``conn`` (ferry's, inside its transaction), with no store open on it.
        A few DELETEs instead of a new schema's DDL (measured ~0.2 ms against 7-45 ms).

        >>> PgLeaseStore.ferry_reset(admin_conn, "ex_3")  # doctest: +SKIP
        """
        if not _SCHEMA_NAME.match(schema):
            raise errors.InvalidArgument(f"not a plain SQL identifier: {schema!r}")
        q = f'"{schema}"'
        conn.execute("; ".join(f"DELETE FROM {q}.{t}" for t in (
            "task_deps", "claim_tokens", "salvage", "daemon_locks", "tasks")))

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards."""
        self._conn.close()

    def __enter__(self) -> PgLeaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _store_error(self, exc: Exception) -> errors.StoreError:
        if isinstance(exc, self._psycopg.errors.LockNotAvailable):
            return errors.StoreError(
                f"a row of {self._where()} stayed locked longer than busy_timeout_ms="
                f"{self.busy_timeout_ms}: look for a long transaction in another process, "
                "or raise busy_timeout_ms")
        return errors.StoreError(f"PostgreSQL error on {self._where()}: {exc}".strip())

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (one statement or one transaction); retry it when PostgreSQL broke a
        deadlock or a serialization conflict by aborting it (nothing of it was kept)."""
        pe = self._psycopg.errors
        for attempt in range(_RETRIES):
            try:
                return fn()
            except (pe.DeadlockDetected, pe.SerializationFailure):
                time.sleep(0.0005 * (attempt + 1))
            except self._psycopg.Error as exc:
                raise self._store_error(exc) from None
        raise errors.StoreError(f"{self._where()}: a write kept deadlocking; try again")

    def _rows(self, sql: str, args: Any = None) -> list[tuple]:
        """One autocommit statement, every row fetched."""
        return self._retrying(lambda: self._conn.execute(sql, args).fetchall())

    def _in_tx(self, body: Callable[[psycopg.Connection], Any]) -> Any:
        """``body(conn)`` in one transaction, retried whole after a deadlock."""
        def run() -> Any:
            with self._conn.transaction():
                return body(self._conn)
        return self._retrying(run)

    def in_transaction(self) -> bool:
        """True while the connection has a transaction open (never between calls)."""
        return (self._conn.info.transaction_status
                != self._psycopg.pq.TransactionStatus.IDLE)

    # ------------------------------------------------------------------ dispatch
    def dispatch_many(
        self,
        payloads: Iterable[Any],
        *,
        target_agent: str | None = None,
        title: str = "",
        requester: str = "",
        depends_on: Iterable[str] = (),
        queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS,
        exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS,
        max_attempts: int = 1,
    ) -> list[str]:
        """Insert one task per payload in ONE transaction; their ids, in order (as
        ``LeaseStore.dispatch_many``: all or nothing, ``[]`` and no write for none)."""
        if target_agent is not None:
            _name("target_agent", target_agent)
        if not isinstance(title, str) or not isinstance(requester, str):
            raise errors.InvalidArgument("title and requester must be strings")
        _positive_int("queue_ttl_ms", queue_ttl_ms, TTL_LIMIT_MS)
        _positive_int("exec_ttl_ms", exec_ttl_ms, TTL_LIMIT_MS)
        _positive_int("max_attempts", max_attempts, 1_000_000)
        if depends_on is None:
            depends_on = ()
        if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Iterable):
            raise errors.InvalidArgument(
                f"depends_on must be a list of task ids, got {type(depends_on).__name__}")
        deps = list(dict.fromkeys(depends_on))
        for dep in deps:
            _name("dependency id", dep)
        if isinstance(payloads, (str, bytes)) or not isinstance(payloads, Iterable):
            raise errors.InvalidArgument(
                f"payloads must be a list of payloads, got {type(payloads).__name__}")
        payload_jsons = [_to_json("payload", p) for p in payloads]
        if not payload_jsons:
            return []
        now = self._now()
        task_ids = [uuid.uuid4().hex for _ in payload_jsons]
        if len(task_ids) == 1 and not deps and self._rows(_DISPATCH_ONE_UNLESS_DUE, {
                "task_id": task_ids[0], "target": target_agent, "title": title,
                "payload": payload_jsons[0], "requester": requester, "qttl": queue_ttl_ms,
                "ettl": exec_ttl_ms, "attempts": max_attempts, "now": now,
                "deadline": now + queue_ttl_ms})[0][0]:
            return task_ids  # one round trip; else a sweep is due: the transaction below

        def body(conn: psycopg.Connection) -> None:
            self._apply_due(conn, now)
            found = dict(conn.execute(
                "SELECT task_id, status FROM tasks WHERE task_id = ANY(%s)",
                (deps,)).fetchall()) if deps else {}
            for dep in deps:
                if dep not in found:
                    raise errors.NotFound(f"dependency {dep!r} does not exist; dispatch it first")
            dead = [d for d in deps if found[d] in ("FAILED", "TIMED_OUT")]
            status, reason, done_at = SUBMITTED, None, None
            if dead:
                status, done_at = "FAILED", now
                reason = f"dependency {dead[0]} ended {found[dead[0]]}"
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO tasks(task_id, status, target_agent, title, payload, requester,"
                    " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at,"
                    " queue_deadline, error_reason, completed_at)"
                    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                    [(task_id, status, target_agent, title, payload_json, requester,
                      queue_ttl_ms, exec_ttl_ms, max_attempts, now, now, now + queue_ttl_ms,
                      reason, done_at)
                     for task_id, payload_json in zip(task_ids, payload_jsons, strict=True)])
                if deps:
                    cur.executemany(
                        "INSERT INTO task_deps(task_id, depends_on) VALUES (%s,%s)",
                        [(task_id, d) for task_id in task_ids for d in deps])

        self._in_tx(body)
        return task_ids

    # ------------------------------------------------------------------ sweep
    def _apply_due(self, conn: psycopg.Connection, now: int, stuck: bool = False) -> int:
        """Inside a transaction: apply due events in time order, cascading failures, each
        at the instant it happened (not at ``now``), as ``LeaseStore._apply_due``; with
        ``stuck`` (a sweep) the cascades of dispatches that raced a dependency's end too."""
        changed = 0
        while True:
            t = conn.execute(_NEXT_DUE_SQL, {"now": now}).fetchall()[0][0]
            if stuck:
                s = conn.execute(_STUCK_AT_SQL, {"now": now}).fetchall()[0][0]
                t = s if t is None else t if s is None else min(s, t)
            if t is None:
                return changed
            changed += conn.execute(_REQUEUE_SQL, {"t": t}).rowcount
            changed += conn.execute(_QUEUE_TIMEOUT_SQL, {"t": t}).rowcount
            changed += self._cascade(conn, t)

    @staticmethod
    def _cascade(conn: psycopg.Connection, at: int) -> int:
        """Fail every SUBMITTED task with a FAILED/TIMED_OUT dependency, transitively."""
        total = 0
        while True:
            n = conn.execute(_CASCADE_SQL, {"t": at}).rowcount
            if n <= 0:
                return total
            total += n

    def sweep(self) -> int:
        """Apply every due expiry (PROTOCOL.md#sweep); a read first, so an idle sweep writes nothing."""
        return self.sweep_at(self._now())

    def sweep_at(self, now: int) -> int:
        """The two-phase sweep at a given instant (read first, write only when due, or
        when a dependent waits on a dead dependency)."""
        if not self._rows(_SWEEP_CHECK, {"now": now})[0][0]:
            return 0
        return self._in_tx(lambda conn: self._apply_due(conn, now, stuck=True))

    # ------------------------------------------------------------------ claiming
    def claim_stats(self) -> ClaimStats:
        """Counts of this instance's claiming statements since it was opened (``ClaimStats``)."""
        return ClaimStats(attempts=self._claim_attempts, misses=self._claim_misses,
                          empty=self._claim_empty)

    def _claim_next(self, agent_id: str, now: int, sql: str) -> Claim | None:
        token = str(uuid.uuid4())
        rows = self._rows(sql, {"agent": agent_id, "token": token, "now": now})
        if not rows:
            if sql is not _CLAIM_NEXT_UNLESS_DUE:
                self._claim_attempts += 1
                self._claim_empty += 1
            return None
        self._claim_attempts += 1
        task_id, claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)

    def poll_next(self, agent_id: str) -> Claim | None:
        """Sweep, then claim the oldest ready task for this agent; None when there is none.

        Two phases as ``LeaseStore.poll_next``: one read says whether anything is due or
        ready (an idle poll ends there and writes nothing); then the sweep, if due, and the
        one-statement claim. A claim that skipped locked rows and found nothing reads
        again: while a task is ready it tries again (the task was being taken by another
        claimer, which either took it or let it go)."""
        if not isinstance(agent_id, str) or not agent_id:
            _name("agent_id", agent_id)
        now = self._now()
        try:
            if self._claimed_last:
                claim = self._claim_next(agent_id, now, _CLAIM_NEXT_UNLESS_DUE)
                if claim is not None:
                    return claim
            claim = self._poll_two_phase(agent_id, now)
            self._claimed_last = claim is not None
            return claim
        except BaseException:
            self._claimed_last = False
            raise

    def _poll_two_phase(self, agent_id: str, now: int) -> Claim | None:
        args = {"now": now, "agent": agent_id}
        due, ready = self._rows(_POLL_CHECK, args)[0]
        if due:
            self._in_tx(lambda conn: self._apply_due(conn, now))
        elif not ready:
            return None  # idle: one read, no transaction id
        for _ in range(10_000):
            claim = self._claim_next(agent_id, now, _CLAIM_NEXT)
            if claim is not None or not self._rows(_READY_SQL, args)[0][0]:
                return claim
        raise errors.StoreError("poll_next found a ready task 10000 times and never took it; "
                                "is a claimer holding its row lock?")

    def claim(self, task_id: str, agent_id: str, *, sweep: bool = True) -> Claim | None:
        """Claim this one task if it is ready for this agent; None if it is not (one
        conditional UPDATE: of N concurrent claims exactly one changes the row).
        ``sweep=False`` skips the sweep before it, as in ``LeaseStore.claim``."""
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        now = self._now()
        token = str(uuid.uuid4())
        args = {"agent": agent_id, "token": token, "now": now, "task_id": task_id}
        exists: bool | None = None
        if sweep:
            # sweep-then-claim in one round trip when no sweep is due (one snapshot: the
            # claim, and why it changed nothing); when one was due, as two: the sweep
            # (which looks again: another process may have swept meanwhile), the claim
            claimed_at, expires, attempt, due, exists = self._rows(_CLAIM_ONE_OR_WHY, args)[0]
            rows = [] if claimed_at is None else [(claimed_at, expires, attempt)]
            if not rows and due and exists:
                self.sweep_at(now)
                rows = self._rows(_CLAIM_ONE, args)
        else:
            rows = self._rows(_CLAIM_ONE, args)
        self._claim_attempts += 1
        if len(rows) == 1:
            claimed_at, expires, attempt = rows[0]
            return Claim(task_id, agent_id, token, claimed_at, expires, attempt)
        self._claim_misses += 1
        if exists is None:
            exists = bool(self._rows("SELECT 1 FROM tasks WHERE task_id=%s", (task_id,)))
        if not exists:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        return None

    # ------------------------------------------------------------------ holder operations
    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        """PROTOCOL.md#the-holder-guard checks in order; returns the guard row. Raises
        LeaseExpired unapplied."""
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        if token is not None and not isinstance(token, str):
            raise errors.InvalidArgument(f"token must be a string or None, got {type(token).__name__}")
        rows = self._rows(f"SELECT {_GUARD_COLUMNS} FROM tasks WHERE task_id=%s", (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        status, target, holder, expires, row_token = rows[0]
        if target is not None and target != agent_id:
            raise errors.PermissionDenied(
                f"task {task_id} is for agent {target!r}, not {agent_id!r}")
        if status != CLAIMED:
            raise errors.WrongState(f"task {task_id} is {status}, not CLAIMED; claim it first")
        if now >= expires:
            raise errors.LeaseExpired(
                f"lease on task {task_id} ended at {expires} (now {now}); poll for new work")
        if holder != agent_id:
            raise errors.PermissionDenied(
                f"task {task_id} is held by {holder!r}, not {agent_id!r}")
        if token is None:
            if self.strict_tokens:
                raise errors.TokenRequired(
                    f"task {task_id}: pass the claim token you got from claim/poll_next")
        elif not hmac.compare_digest(token.encode(), row_token.encode()):
            raise errors.InvalidToken(
                f"task {task_id}: token is not the current claim token (retired or forged)")
        return rows[0]

    def _holder_write(self, op: str, task_id: str, agent_id: str, token: str | None,
                      write: Callable[[psycopg.Connection, str, int, bool], Any],
                      late_result: Any = None, has_late: bool = False,
                      autocommit: bool = True) -> Any:
        """``write(conn, row_token, now, bound)``: first with the caller's own token and
        name in the WHERE clause (``bound``: a call that succeeds is that statement alone);
        when it changed nothing, the guard names the refusal, or (the world moved in
        between) the guarded write is tried again. ``autocommit``: ``write`` is one
        conditional statement per decision (its own transaction); else one transaction."""
        now = self._now()
        run = self._retrying if autocommit else self._in_tx
        if (isinstance(token, str) and token and isinstance(task_id, str) and task_id
                and isinstance(agent_id, str) and agent_id):
            out = run(lambda: write(self._conn, token, now, True)) if autocommit \
                else run(lambda conn: write(conn, token, now, True))
            if out is not None:
                return out
        for _ in range(3):
            try:
                row = self._guard(task_id, agent_id, token, now)
            except errors.LeaseExpired:
                def expire(conn: psycopg.Connection) -> None:
                    self._apply_due(conn, now)
                    if has_late:
                        self._keep_late(conn, task_id, agent_id, token, late_result, now)
                self._in_tx(expire)
                raise
            except errors.FerryError:
                if has_late:
                    self._keep_late_retired(task_id, agent_id, token, late_result, now)
                raise
            rt = row[4]
            out = run(lambda rt=rt: write(self._conn, rt, now, False)) if autocommit \
                else run(lambda conn, rt=rt: write(conn, rt, now, False))
            if out is not None:
                return out
        raise errors.StoreError(f"{op} on task {task_id} kept racing; try again")

    def _keep_late(self, conn: psycopg.Connection, task_id: str, agent_id: str,
                   token: str | None, result: Any, now: int) -> None:
        """A late result from the token's own holder is salvage, never silently dropped."""
        if token is None:
            return
        if conn.execute(_LATE_TOKEN_SQL, (token, task_id, agent_id)).fetchall():
            conn.execute(
                "INSERT INTO salvage(task_id, agent_id, kind, data, created_at)"
                " VALUES (%s,%s,'late_result',%s,%s)",
                (task_id, agent_id, _to_json("result", result), now))

    def _keep_late_retired(self, task_id: str, agent_id: str, token: str | None,
                           result: Any, now: int) -> None:
        if not isinstance(token, str) or not self._rows(
                _LATE_TOKEN_SQL, (token, task_id, agent_id)):
            return
        self._in_tx(lambda conn: self._keep_late(conn, task_id, agent_id, token, result, now))

    @staticmethod
    def _holder_where(bound: bool) -> str:
        return _HOLDER_WHERE + (" AND claimed_by=%(agent)s" if bound else "")

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """CLAIMED -> COMPLETED with ``result``. A late result is refused but kept as salvage."""
        result_json = _to_json("result", result)

        def write(conn: psycopg.Connection, row_token: str, now: int, bound: bool) -> bool | None:
            n = conn.execute(
                "UPDATE tasks SET status='COMPLETED', result=%(result)s, completed_at=%(now)s,"
                " claim_token=NULL" + self._holder_where(bound),
                {"task_id": task_id, "row_token": row_token, "now": now, "result": result_json,
                 "agent": agent_id}).rowcount
            return True if n == 1 else None  # triggers retire the token, unblock dependents

        self._holder_write("fulfill", task_id, agent_id, token, write,
                           late_result=result, has_late=True)

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str) -> None:
        """CLAIMED -> FAILED; dependents fail with a reason naming this task."""
        if not isinstance(reason, str) or not reason.strip():
            raise errors.InvalidArgument("fail needs a non-empty reason saying what went wrong")

        def write(conn: psycopg.Connection, row_token: str, now: int, bound: bool) -> bool | None:
            n = conn.execute(
                "UPDATE tasks SET status='FAILED', error_reason=%(reason)s,"
                " completed_at=%(now)s, claim_token=NULL" + self._holder_where(bound),
                {"task_id": task_id, "row_token": row_token, "now": now, "reason": reason,
                 "agent": agent_id}).rowcount
            if n != 1:
                return None
            self._cascade(conn, now)
            return True

        self._holder_write("fail", task_id, agent_id, token, write, autocommit=False)

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """CLAIMED -> SUBMITTED at the tail of the queue; the token is retired for good."""
        if not isinstance(reason, str):
            raise errors.InvalidArgument("reason must be a string")

        def write(conn: psycopg.Connection, row_token: str, now: int, bound: bool) -> bool | None:
            if not bound:  # the guard passed: name the limit before trying
                count = conn.execute("SELECT release_count FROM tasks WHERE task_id=%s",
                                     (task_id,)).fetchall()[0][0]
                if count >= self.max_releases:
                    raise errors.LimitExceeded(
                        f"task {task_id} was released {count} times (max_releases="
                        f"{self.max_releases}); fail it instead")
            n = conn.execute(
                "UPDATE tasks SET status='SUBMITTED', claim_token=NULL, claimed_by=NULL,"
                " claimed_at=NULL, lease_expires_at=NULL, extend_count=0,"
                " release_count=release_count + 1, queued_at=%(now)s,"
                " queue_deadline=%(now)s + queue_ttl_ms" + self._holder_where(bound)
                + " AND release_count < %(max)s",
                {"task_id": task_id, "row_token": row_token, "now": now,
                 "max": self.max_releases, "agent": agent_id}).rowcount
            return True if n == 1 else None

        self._holder_write("release", task_id, agent_id, token, write)

    def extend(self, task_id: str, agent_id: str, token: str | None) -> int:
        """Renew the lease to ``now + exec_ttl_ms``; returns the new expiry."""

        def write(conn: psycopg.Connection, row_token: str, now: int, bound: bool) -> int | None:
            if not bound:  # the guard passed: name the limit before trying
                count, ttl, created, qttl = conn.execute(
                    "SELECT extend_count, exec_ttl_ms, created_at, queue_ttl_ms FROM tasks"
                    " WHERE task_id=%s", (task_id,)).fetchall()[0]
                if count >= self.max_extends:
                    raise errors.LimitExceeded(
                        f"task {task_id}: lease already extended {count} times (max_extends="
                        f"{self.max_extends}); finish or release it")
                if now + ttl > created + 4 * qttl:
                    raise errors.LimitExceeded(
                        f"task {task_id}: extending to {now + ttl} would pass the hard limit "
                        f"created_at + 4 * queue_ttl_ms = {created + 4 * qttl}")
            rows = conn.execute(  # the limits are repeated here (numeric: 4 * ttl may pass int8)
                "UPDATE tasks SET lease_expires_at=%(now)s + exec_ttl_ms,"
                " extend_count=extend_count + 1" + self._holder_where(bound)
                + " AND extend_count < %(max)s AND %(now)s::numeric + exec_ttl_ms"
                "   <= created_at + 4 * queue_ttl_ms::numeric"
                " RETURNING lease_expires_at",
                {"task_id": task_id, "row_token": row_token, "now": now,
                 "max": self.max_extends, "agent": agent_id}).fetchall()
            return rows[0][0] if rows else None

        return self._holder_write("extend", task_id, agent_id, token, write)

    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        """Append a partial artifact; it is kept forever, whatever happens to the task."""
        data = _to_json("partial", partial)

        def write(conn: psycopg.Connection, row_token: str, now: int, bound: bool) -> bool | None:
            # FOR SHARE: an expiry or completion of the task being committed now is waited
            # for, and the guard is then judged on the task's newest row
            n = conn.execute(
                "INSERT INTO salvage(task_id, agent_id, kind, data, created_at)"
                " SELECT task_id, %(agent)s, 'partial', %(data)s, %(now)s FROM tasks"
                + self._holder_where(bound) + " FOR SHARE",
                {"task_id": task_id, "row_token": row_token, "now": now, "agent": agent_id,
                 "data": data}).rowcount
            return True if n == 1 else None

        self._holder_write("salvage", task_id, agent_id, token, write)

    # ------------------------------------------------------------------ reads
    @staticmethod
    def _view(row: tuple, now: int) -> TaskView:
        (task_id, status, target, title, payload, requester, qttl, ettl, max_att, created,
         queued, deadline, holder, claimed_at, expires, completed, attempt, ext, rel, result,
         reason, deps) = row
        expired = (status == CLAIMED and now >= expires) or (status == SUBMITTED and now >= deadline)
        return TaskView(
            task_id=task_id, status=status, target_agent=target, title=title,
            payload=_from_json(payload), requester=requester,
            depends_on=tuple(deps or ()), queue_ttl_ms=qttl,
            exec_ttl_ms=ettl, max_attempts=max_att, created_at=created, queued_at=queued,
            claimed_by=holder, claimed_at=claimed_at, lease_expires_at=expires,
            completed_at=completed, attempt=attempt, extend_count=ext, release_count=rel,
            result=_from_json(result), error_reason=reason, is_logically_expired=expired,
        )

    def get(self, task_id: str) -> TaskView:
        """Read one task (never writes, never sweeps)."""
        _name("task_id", task_id)
        now = self._now()
        rows = self._rows(f"SELECT {_VIEW_COLUMNS} FROM tasks WHERE task_id=%s", (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        return self._view(rows[0], now)

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        """Every task (or those for/held by ``agent_id``), oldest first. Read only."""
        if agent_id is not None:
            _name("agent_id", agent_id)
        now = self._now()
        if agent_id is None:
            rows = self._rows(f"SELECT {_VIEW_COLUMNS} FROM tasks ORDER BY seq")
        else:
            rows = self._rows(
                f"SELECT {_VIEW_COLUMNS} FROM tasks WHERE target_agent=%(a)s OR claimed_by=%(a)s"
                " ORDER BY seq", {"a": agent_id})
        return [self._view(r, now) for r in rows]

    def salvaged(self, task_id: str) -> list[Salvage]:
        """Partial artifacts and late results of a task, oldest first. Read only (one
        statement: the task's existence and its entries from one snapshot)."""
        _name("task_id", task_id)
        rows = self._rows(
            "SELECT EXISTS(SELECT 1 FROM tasks WHERE task_id=%(t)s), s.task_id, s.agent_id,"
            " s.kind, s.data, s.created_at FROM (SELECT 1) one LEFT JOIN salvage s"
            " ON s.task_id=%(t)s ORDER BY s.id", {"t": task_id})
        if not rows or not rows[0][0]:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        return [Salvage(t, a, k, _from_json(d), c) for _, t, a, k, d, c in rows if t is not None]

    # ------------------------------------------------------------------ daemon locks
    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew) a named lock held on [now, now + ttl_ms); one UPSERT."""
        _name("lock name", name)
        _name("owner", owner)
        _positive_int("ttl_ms", ttl_ms)
        now = self._now()
        rows = self._rows(
            "INSERT INTO daemon_locks AS l (name, owner, expires_at, acquired_at)"
            " VALUES (%(name)s, %(owner)s, %(now)s::bigint + %(ttl)s::bigint, %(now)s)"
            " ON CONFLICT (name) DO UPDATE SET owner=excluded.owner,"
            "  expires_at=excluded.expires_at,"
            "  acquired_at=CASE WHEN l.owner = excluded.owner"
            "   AND l.expires_at > %(now)s THEN l.acquired_at ELSE excluded.acquired_at END"
            " WHERE l.expires_at <= %(now)s OR l.owner = excluded.owner"
            " RETURNING owner",
            {"name": name, "owner": owner, "now": now, "ttl": ttl_ms})
        return len(rows) == 1

    def release_lock(self, name: str, owner: str) -> bool:
        """Drop the lock if ``owner`` holds it now; False (and no write) otherwise."""
        _name("lock name", name)
        _name("owner", owner)
        now = self._now()
        args = (name, owner, now)
        if not self._rows("SELECT 1 FROM daemon_locks WHERE name=%s AND owner=%s"
                          " AND expires_at > %s", args):
            return False
        return len(self._rows("DELETE FROM daemon_locks WHERE name=%s AND owner=%s"
                              " AND expires_at > %s RETURNING 1", args)) == 1

    def lock_holder(self, name: str) -> str | None:
        """The unexpired owner of the lock, or None. Read only."""
        _name("lock name", name)
        rows = self._rows("SELECT owner FROM daemon_locks WHERE name=%s AND expires_at > %s",
                          (name, self._now()))
        return rows[0][0] if rows else None

    # ------------------------------------------------------------------ maintenance
    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """Validates ``mode`` as ``LeaseStore.checkpoint`` does and returns ``(0, 0, 0)``:
        there is no ``-wal`` file to reset; the server checkpoints its own WAL."""
        if not isinstance(mode, str) or mode.upper() not in CHECKPOINT_MODES:
            raise errors.InvalidArgument(f"checkpoint mode must be one of {CHECKPOINT_MODES}")
        return 0, 0, 0

    def __repr__(self) -> str:
        return f"PgLeaseStore({self._where()!r})"
