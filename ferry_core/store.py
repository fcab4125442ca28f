"""LeaseStore: the reference SQLite-WAL leasing store of PROTOCOL.md.

Design rules that every method follows (PROTOCOL.md#sqlite-rules):
- one connection in autocommit mode; every read fetches all rows, so no cursor (and no WAL
  read snapshot) outlives the call;
- writes are either one conditional statement (the CAS) or one short ``BEGIN IMMEDIATE``;
- a guard checked in Python is always repeated in the WHERE clause of the final write;
- idle calls only read: the sweep writes only after a read found something due.
"""

from __future__ import annotations

import hmac
import json
import os
import sqlite3
import struct
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from . import errors
from .busy import POLICIES, BusyPolicy, make_busy_policy
from .clock import Clock, SystemClock
from .schema import DDL, OWN_TABLES, PAGE_SIZE, SCHEMA_VERSION, V2_DDL, V3_DDL, V4_DDL
from .types import CLAIMED, COMPLETED, SUBMITTED, Claim, ClaimStats, Salvage, TaskView

DEFAULT_QUEUE_TTL_MS = 3_600_000
DEFAULT_EXEC_TTL_MS = 300_000
CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")
STRATEGIES = ("cas", "immediate")
WAL_LIMIT_BYTES = 8 << 20  # reset the WAL past this; the stated bound is 8x (64 MiB)
#: SQLite's automatic checkpoint runs once the WAL holds this many bytes of pages: its
#: default (1,000 pages) at 4 KiB pages, and as many bytes (4,000 pages) at the 1 KiB pages
#: of a version-4 file, whose checkpoints every 1,000 pages measured a 2-worker Jain of
#: 0.83-0.85 and 8 workers no faster (reports/bench/notes.md, 2026-12-04)
AUTOCHECKPOINT_BYTES = 1000 * 4096
WAL_CHECK_EVERY = 32  # committed writes between two looks at the -wal size
WAL_RETRY_EVERY = 4  # ... and between two tries of a reset that found the lock busy
#: how long the resetting RESTART may wait, through SQLite's busy handler, for the write
#: lock and then (holding it) for readers; every other writer waits that long at most
WAL_RESET_WAIT_MS = 3
#: where the -shm file's first WAL-index header copy keeps szPage (u16) and mxFrame (u32),
#: in the machine's byte order (https://sqlite.org/walformat.html, "The WAL-Index Header")
_SHM_HEADER = struct.Struct("=14xHI")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_PAGE_SIZES = frozenset(1 << n for n in range(9, 17))  # what SQLite accepts


def _view_columns(payload: str) -> str:
    """What a read selects for a TaskView (``_view``), with ``payload`` the SQL of its
    payload."""
    return f"""
    task_id, status, target_agent, title, {payload}, requester, queue_ttl_ms, exec_ttl_ms,
    max_attempts, created_at, queued_at, queue_deadline, claimed_by, claimed_at,
    lease_expires_at, completed_at, attempt, extend_count, release_count, result,
    error_reason,
    (SELECT json_group_array(depends_on) FROM
        (SELECT depends_on FROM task_deps d WHERE d.task_id = tasks.task_id ORDER BY d.rowid))
"""


#: the payload in the task row (a file made before version 4)
_VIEW_COLUMNS = _view_columns("payload")
#: the payload apart (a file made by version 4); the row's is still read for a store
#: subclass that writes it there itself
_VIEW_COLUMNS_APART = _view_columns(
    "COALESCE((SELECT p.payload FROM task_payloads p WHERE p.seq = tasks.seq), payload)")
_GUARD_COLUMNS = "status, target_agent, claimed_by, lease_expires_at, claim_token"


# Times are int64 milliseconds in SQLite: a TTL so large that now + ttl could overflow (or
# turn into a float) is refused, not stored. Every TTL below 2**62 is accepted
# (PROTOCOL.md#limits).
TTL_LIMIT_MS = 2**62 - 1
# ten years: the bound of adapters over libraries that keep datetimes (ferry_harness.adapters.huey)
MAX_TTL_MS = 10 * 365 * 24 * 3600 * 1000


def _positive_int(name: str, value: Any, limit: int = 2**62) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise errors.InvalidArgument(f"{name} must be a positive integer (ms or count), got {value!r}")
    if value > limit:
        raise errors.InvalidArgument(f"{name} must be at most {limit}, got {value!r}")
    return value


def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise errors.InvalidArgument(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _name(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise errors.InvalidArgument(f"{kind} must be a non-empty string, got {value!r}")
    return value


# One encoder for every write: json.dumps with arguments builds a new encoder per call.
_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def _to_json(kind: str, value: Any) -> str:
    try:
        return _JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidArgument(f"{kind} must be JSON-serialisable: {exc}") from None


def _from_json(text: str | None) -> Any:
    """A stored JSON value; a row another program damaged is a StoreError, not a crash."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise errors.StoreError(f"a stored payload/result is not valid JSON ({exc}): the "
                                "database was written by something other than this store") from None


def _token_eq(stored: str | None, given: str | None) -> int:
    """SQL ``ferry_token_eq``: the holder guard's token comparison in constant time (PROTOCOL.md#the-holder-guard),
    so the one-statement holder write compares the caller's token like the guard does."""
    if not isinstance(stored, str) or not isinstance(given, str):
        return 0
    return int(hmac.compare_digest(stored.encode(), given.encode()))


#: The SQL functions every store connection registers (name -> (arguments, callable)): the
#: statements call them, so anything that replays those statements registers them too.
SQL_FUNCTIONS: dict[str, tuple[int, Any]] = {"ferry_token_eq": (2, _token_eq)}


def _check_openable(path: str) -> None:
    """Refuse, before SQLite touches anything, paths that cannot be (or are not) our store."""
    if path == ":memory:" or path.startswith("file:"):
        return
    if os.path.isdir(path):
        raise errors.StoreError(f"{path!r} is a directory; pass the path of a database file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise errors.StoreError(f"directory {parent!r} does not exist; create it first")
    if os.path.exists(path):
        if not os.access(path, os.R_OK | os.W_OK):
            raise errors.StoreError(f"{path!r} is not readable and writable by this user")
        with open(path, "rb") as fh:
            head = fh.read(16)
        if head and head != _SQLITE_MAGIC:
            raise errors.StoreError(f"{path!r} is not an SQLite database; refusing to touch it")
    if not os.access(parent, os.W_OK):
        raise errors.StoreError(
            f"directory {parent!r} is not writable: WAL mode needs to create -wal and -shm files there"
        )


class _StoreFront:
    """What the SQLite and the PostgreSQL store share word for word: the clock's check and
    ``dispatch`` of one task, which is the subclass's ``dispatch_many`` of one payload."""

    clock: Clock

    def _now(self) -> int:
        now = self.clock()
        if isinstance(now, bool) or not isinstance(now, int):
            raise errors.InvalidArgument(f"clock must return int milliseconds, got {now!r}")
        return now

    def dispatch(
        self,
        target_agent: str | None,
        *,
        title: str = "",
        payload: Any = None,
        requester: str = "",
        depends_on: Iterable[str] = (),
        queue_ttl_ms: int = DEFAULT_QUEUE_TTL_MS,
        exec_ttl_ms: int = DEFAULT_EXEC_TTL_MS,
        max_attempts: int = 1,
    ) -> str:
        """Insert a SUBMITTED task and return its id. Dependencies must already exist."""
        return self.dispatch_many(
            [payload], target_agent=target_agent, title=title, requester=requester,
            depends_on=depends_on, queue_ttl_ms=queue_ttl_ms, exec_ttl_ms=exec_ttl_ms,
            max_attempts=max_attempts)[0]


class LeaseStore(_StoreFront):
    """A leasing job store on one SQLite WAL file, safe across processes.

    Construct one per process (or thread); every instance opens its own connection.

    ``page_size`` (bytes, a power of two from 512 to 65536) is the page size of a file this
    store creates; a file that exists keeps its own. The default, 1 KiB, writes a third of
    the bytes 4 KiB pages write per lifecycle, which is what a checkpoint's fsync costs on
    a disk (1 worker ~1.3x, 8 workers ~1.1x on ext4); where nothing is synced (tmpfs) the
    smaller pages cost CPU instead (8 workers ~0.9x), so pass 4096 there
    (reports/bench/notes.md, 2026-12-04). Example::

        store = LeaseStore("/dev/shm/jobs.db", page_size=4096)
    """

    #: Stricter than PROTOCOL.md#freedoms-a-correct-store-may-take requires, so ferry holds this store to both (ferry_harness.check.ops).
    ferry_declares = frozenset({"holder-binding", "refusal-order"})

    def __init__(
        self,
        path: str,
        *,
        clock: Clock | None = None,
        strict_tokens: bool = True,
        claim_strategy: str = "cas",
        busy_timeout_ms: int = 5000,
        max_extends: int = 5,
        max_releases: int = 3,
        busy_policy: str | BusyPolicy = "spin",
        wal_limit_bytes: int = WAL_LIMIT_BYTES,
        page_size: int = PAGE_SIZE,
    ) -> None:
        if claim_strategy not in STRATEGIES:
            raise errors.InvalidArgument(
                f"claim_strategy must be one of {STRATEGIES}, got {claim_strategy!r}"
            )
        self.path = os.fspath(path)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.strict_tokens = bool(strict_tokens)
        self.claim_strategy = claim_strategy
        self.busy_timeout_ms = _non_negative_int("busy_timeout_ms", busy_timeout_ms)
        self.max_extends = _non_negative_int("max_extends", max_extends)
        self.max_releases = _non_negative_int("max_releases", max_releases)
        self.wal_limit_bytes = _positive_int("wal_limit_bytes", wal_limit_bytes)
        if (isinstance(page_size, bool) or not isinstance(page_size, int)
                or page_size not in _PAGE_SIZES):
            raise errors.InvalidArgument(
                f"page_size must be a power of two from 512 to 65536, got {page_size!r}")
        self.page_size = page_size
        self._writes = 0
        self._claim_attempts = self._claim_misses = self._claim_empty = 0  # see claim_stats
        self._claimed_last = False  # this instance's last poll claimed: see poll_next
        self._own_checkpoints = False  # automatic checkpoint off, see _bound_wal
        self._reset_pending = False  # the last reset found the lock busy: retry soon
        self._shm_fd: int | None = None  # the -shm file, read for the WAL's frame count
        if isinstance(busy_policy, str) and busy_policy not in POLICIES:
            raise errors.InvalidArgument(  # before the file is created or touched
                f"busy_policy must be one of {sorted(POLICIES)}, got {busy_policy!r}")
        _check_openable(self.path)
        self._conn = self._open(busy_policy)

    # ------------------------------------------------------------------ connection
    def _open(self, busy_policy: str | BusyPolicy) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None,
                uri=self.path.startswith("file:"),
            )
        except sqlite3.Error as exc:
            raise errors.StoreError(f"cannot open {self.path!r}: {exc}") from None
        try:
            version = conn.execute("PRAGMA user_version").fetchall()[0][0]
            if version > SCHEMA_VERSION:
                raise errors.StoreError(
                    f"{self.path!r} has schema version {version}, newer than this ferry_core "
                    f"({SCHEMA_VERSION}); upgrade ferry_core to open it"
                )
            # Any user_version (other applications set it too), minus SQLite's own tables.
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'"
                " AND name NOT LIKE 'sqlite!_%' ESCAPE '!'").fetchall()}
            foreign = tables - OWN_TABLES
            if foreign:
                raise errors.StoreError(
                    f"{self.path!r} is an SQLite database of another application "
                    f"(tables {sorted(foreign)[:3]}); give ferry a file of its own"
                )
            if not tables:
                # a new file: its page size is set by its first write, which comes next
                conn.execute(f"PRAGMA page_size={self.page_size}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchall()[0][0]
            if mode.lower() != "wal" and self.path != ":memory:":
                raise errors.StoreError(
                    f"cannot switch {self.path!r} to WAL (journal_mode={mode}); is it on a "
                    "network or read-only file system?"
                )
            conn.execute("PRAGMA synchronous=NORMAL")
            # when the WAL is reset, SQLite cuts the file back to this size (see _bound_wal)
            conn.execute(f"PRAGMA journal_size_limit={self.wal_limit_bytes}")
            # SQLite's automatic checkpoint after as many bytes, whatever the page size
            page = conn.execute("PRAGMA page_size").fetchall()[0][0]
            conn.execute(f"PRAGMA wal_autocheckpoint={max(1, AUTOCHECKPOINT_BYTES // page)}")
            conn.execute("PRAGMA foreign_keys=ON")
            if version < SCHEMA_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if version == 0:
                        self._create(conn, DDL)
                    if version < 2:
                        self._create(conn, V2_DDL)  # 1 -> 2: the bookkeeping triggers
                    if version < 3:
                        self._create(conn, V3_DDL)  # 2 -> 3: a fulfill leaves the history be
                    if version == 0:  # only a new file keeps payloads apart (schema.V4_DDL)
                        self._create(conn, V4_DDL)
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except errors.StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise errors.StoreError(f"cannot use {self.path!r} as a ferry store: {exc}") from None
        # where this file keeps payloads: task_payloads (made with the file, version 4) or
        # the task row (a file of an older version: a process of that version may still
        # have it open, and reads payloads there)
        self._payloads_apart = bool(conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='task_payloads'").fetchall())
        self._view_columns = _VIEW_COLUMNS_APART if self._payloads_apart else _VIEW_COLUMNS
        self._busy = make_busy_policy(busy_policy, conn, self.busy_timeout_ms)
        self._writing = getattr(self._busy, "writing", nullcontext)
        for fname, (nargs, fn) in SQL_FUNCTIONS.items():
            conn.create_function(fname, nargs, fn, deterministic=True)
        return conn

    @staticmethod
    def _create(conn: sqlite3.Connection, ddl: str) -> None:
        # executescript would COMMIT our BEGIN IMMEDIATE; run the DDL statement by statement.
        buf = ""
        for line in ddl.splitlines(keepends=True):
            if line.lstrip().startswith("--"):
                continue
            buf += line
            if sqlite3.complete_statement(buf):
                conn.execute(buf)
                buf = ""

    #: PRAGMAs of this store's connection that shape how its statements run (the busy
    #: handler aside); see ``connection_settings``
    SETTINGS = ("journal_mode", "synchronous", "foreign_keys", "journal_size_limit",
                "cache_size", "mmap_size", "temp_store")

    def connection_settings(self) -> dict[str, int | str]:
        """The values of ``SETTINGS`` on this store's connection, read back from SQLite:
        what a tool that replays the store's statements opens its own connections with."""
        return {name: self._rows(f"PRAGMA {name}")[0][0] for name in self.SETTINGS}

    def set_trace_callback(self, callback: Any) -> None:
        """Report every SQL statement this store's connection runs to ``callback(sql)``
        (``sqlite3.Connection.set_trace_callback``; None stops it): for tools that count
        or replay the store's statements. SQLite reports a statement again for every
        trigger program it runs."""
        self._conn.set_trace_callback(callback)

    def close(self) -> None:
        """Close the connection; the store is unusable afterwards."""
        self._conn.close()
        if self._shm_fd is not None:
            os.close(self._shm_fd)
            self._shm_fd = None
        close = getattr(self._busy, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> LeaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, args: Any = ()) -> list[tuple]:
        """Run one statement to completion (all rows fetched: no cursor stays open)."""
        try:
            return self._busy.run(lambda: self._conn.execute(sql, args).fetchall())
        except sqlite3.Error as exc:
            raise self._store_error(exc) from None

    def _store_error(self, exc: sqlite3.Error) -> errors.StoreError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return errors.StoreError(
                f"database {self.path!r} stayed locked longer than busy_timeout_ms="
                f"{self.busy_timeout_ms}: look for a long transaction in another process, "
                "or raise busy_timeout_ms"
            )
        return errors.StoreError(f"SQLite error on {self.path!r}: {text}")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction; rolled back on any exception."""
        with self._writing():
            yield from self._tx_body()
        self._wrote()

    def _tx_body(self) -> Iterator[sqlite3.Connection]:
        try:
            self._busy.run(lambda: self._conn.execute("BEGIN IMMEDIATE"))
        except sqlite3.Error as exc:
            raise self._store_error(exc) from None
        try:
            yield self._conn
        except sqlite3.Error as exc:
            self._conn.execute("ROLLBACK")
            raise self._store_error(exc) from None
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise self._store_error(exc) from None

    def _wrote(self) -> None:
        """Count a committed write; every so often keep the WAL bounded (see _bound_wal)."""
        self._writes += 1
        if self._writes % WAL_CHECK_EVERY == 0:
            self._bound_wal(retry=False)
        elif self._reset_pending and self._writes % WAL_RETRY_EVERY == 0:
            self._bound_wal(retry=True)

    def _bound_wal(self, retry: bool) -> None:
        """Reset the WAL once it passes ``wal_limit_bytes``.

        SQLite's automatic checkpoint is PASSIVE: with several processes writing all the
        time some reader always pins the WAL, it is never reset, the file grows with every
        commit (measured: 550 MiB for 20,000 lifecycles on 8 workers), and every commit
        past 1,000 frames runs another passive checkpoint (copy, two fsyncs), which also
        keeps the checkpoint lock taken, so a reset rarely gets it: even the RESTART
        checkpoint this method used to run let the WAL reach 68 MiB with 16 workers.

        So the first time the WAL passes ``wal_limit_bytes`` (the automatic checkpoint is
        evidently not keeping up), this connection turns its automatic checkpoint off and
        from then on checkpoints itself once the file passes half the limit, in two steps:

        1. PASSIVE: copies the WAL into the database and syncs both, without the write
           lock: the other processes go on writing; only this call pays for it.
        2. RESTART: takes the write lock, copies the few frames committed meanwhile and
           makes the next writer start the WAL from its beginning; that writer also cuts
           the file back to ``journal_size_limit`` (= the limit). It holds the write lock
           while it waits for readers, so it waits at most ``WAL_RESET_WAIT_MS`` (for the
           lock, then for readers); when that is not enough it gives up and is tried again
           ``WAL_RETRY_EVERY`` writes later (``retry``: step 2 alone), not after another
           ``WAL_CHECK_EVERY``.

        Once a reset no longer empties the file, its size is no measure of what the WAL
        holds, so from then on this method reads the frame count (``mxFrame``) from the
        WAL-index header in the ``-shm`` file, and the file size only as a safety net (it
        passes the limit only when the frames do); where the header cannot be read it
        measures the file and resets with TRUNCATE, as before. RESTART rather than
        TRUNCATE: cutting the file to zero under the write lock, and growing it again
        frame by frame, measured 0.73-0.96x the 8-worker throughput of RESTART on ext4
        (``ferry-harness bench``, one interleaved run of 3 repetitions).

        One process alone never gets there (the automatic checkpoint resets its WAL at
        ~4 MiB) and keeps SQLite's cheaper passive checkpoints.
        """
        try:
            size = os.path.getsize(self.path + "-wal")
            frames = self._wal_frames_bytes() if self._own_checkpoints else None
            if frames is not None and size <= self.wal_limit_bytes:
                size = frames
            if size <= (self.wal_limit_bytes // 2 if self._own_checkpoints
                        else self.wal_limit_bytes):
                self._reset_pending = False
                return
            if not self._own_checkpoints:
                self._conn.execute("PRAGMA wal_autocheckpoint=0")
                self._own_checkpoints = True
            if not retry:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            before = self._conn.execute("PRAGMA busy_timeout").fetchall()[0][0]
            self._conn.execute(f"PRAGMA busy_timeout={WAL_RESET_WAIT_MS}")
            try:
                mode = "RESTART" if frames is not None or self._shm_readable() else "TRUNCATE"
                busy = self._conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()[0][0]
            finally:
                self._conn.execute(f"PRAGMA busy_timeout={before}")
            self._reset_pending = bool(busy)
        except (OSError, sqlite3.Error):
            self._reset_pending = True  # busy: another process is checkpointing; soon again

    def _shm_readable(self) -> bool:
        if self._shm_fd is None:
            try:
                self._shm_fd = os.open(self.path + "-shm", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
        return True

    def _wal_frames_bytes(self) -> int | None:
        """Bytes of frames the WAL holds now (mxFrame x (page + 24-byte frame header)),
        or None where there is no ``-shm`` header to read (then the file size is the
        measure, and TRUNCATE keeps it true)."""
        if not self._shm_readable():
            return None
        try:
            head = os.pread(self._shm_fd, _SHM_HEADER.size, 0)
        except OSError:
            return None
        if len(head) < _SHM_HEADER.size:
            return None
        page, frames = _SHM_HEADER.unpack(head)
        return frames * ((65536 if page == 1 else page) + 24)  # szPage 1 stands for 65536

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
        """Insert one task per payload in ONE write transaction; their ids, in order.

        Each task is exactly the one ``dispatch(target_agent, payload=p, ...)`` inserts (the
        same validation, columns, dependency rules and triggers), so filling a queue of N
        tasks costs one commit instead of N. All or nothing: an invalid argument or payload
        refuses the whole batch before anything is written. No payloads: no write, ``[]``.
        """
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
        with self._tx() as conn:
            self._apply_due(conn, now)
            statuses: dict[str, str] = {}
            for dep in deps:
                row = conn.execute("SELECT status FROM tasks WHERE task_id=?", (dep,)).fetchall()
                if not row:
                    raise errors.NotFound(f"dependency {dep!r} does not exist; dispatch it first")
                statuses[dep] = row[0][0]
            dead = [d for d in deps if statuses[d] in ("FAILED", "TIMED_OUT")]
            pending = sum(1 for d in deps if statuses[d] != COMPLETED)
            status, reason, done_at = SUBMITTED, None, None
            if dead:
                status, done_at = "FAILED", now
                reason = f"dependency {dead[0]} ended {statuses[dead[0]]}"
            apart = self._payloads_apart
            conn.executemany(
                "INSERT INTO tasks(task_id, status, target_agent, title, payload, requester,"
                " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at,"
                " queue_deadline, pending_deps, error_reason, completed_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(task_id, status, target_agent, title, None if apart else payload_json,
                  requester, queue_ttl_ms, exec_ttl_ms, max_attempts, now, now,
                  now + queue_ttl_ms, pending, reason, done_at)
                 for task_id, payload_json in zip(task_ids, payload_jsons, strict=True)],
            )
            if apart:  # in a table of its own (schema.V4_DDL): the claim never copies it
                conn.executemany(
                    "INSERT INTO task_payloads(seq, payload)"
                    " SELECT seq, ? FROM tasks WHERE task_id=?",
                    [(payload_json, task_id) for task_id, payload_json
                     in zip(task_ids, payload_jsons, strict=True) if payload_json is not None],
                )
            conn.executemany(
                "INSERT INTO task_deps(task_id, depends_on) VALUES (?,?)",
                [(task_id, d) for task_id in task_ids for d in deps],
            )
        return task_ids

    # ------------------------------------------------------------------ sweep
    _DUE_SQL = (
        "SELECT EXISTS(SELECT 1 FROM tasks WHERE status='CLAIMED' AND lease_expires_at <= ?)"
        " OR EXISTS(SELECT 1 FROM tasks WHERE status='SUBMITTED' AND queue_deadline <= ?)"
    )

    def sweep(self) -> int:
        """Apply every due expiry (PROTOCOL.md#leases-are-half-open); a read first, so an idle sweep writes nothing."""
        return self.sweep_at(self._now())

    # the sweep's statements (class attributes, like _CLAIM_SET: a test store changes one)
    #: the earliest due instant at or before ?1: a lease end or a queue window's end
    _NEXT_DUE_SQL = (
        "SELECT min(t) FROM ("
        " SELECT min(lease_expires_at) AS t FROM tasks"
        "  WHERE status='CLAIMED' AND lease_expires_at <= ?1"
        " UNION ALL SELECT min(queue_deadline) FROM tasks"
        "  WHERE status='SUBMITTED' AND queue_deadline <= ?1)"
    )
    #: the leases that ended at :t go back to the queue (window from :t) or time out
    _REQUEUE_SQL = (
        "UPDATE tasks SET"
        " status = CASE WHEN attempt < max_attempts THEN 'SUBMITTED' ELSE 'TIMED_OUT' END,"
        " queued_at = :t, queue_deadline = :t + queue_ttl_ms,"
        " completed_at = CASE WHEN attempt < max_attempts THEN NULL ELSE :t END,"
        " error_reason = CASE WHEN attempt < max_attempts THEN NULL"
        "   ELSE 'lease expired on attempt ' || attempt || ' of ' || max_attempts END,"
        " claim_token = NULL, claimed_by = NULL, claimed_at = NULL,"
        " lease_expires_at = NULL, extend_count = 0"
        " WHERE status='CLAIMED' AND lease_expires_at = :t"
    )

    def _apply_due(self, conn: sqlite3.Connection, now: int) -> int:
        """Inside a write transaction: apply due events in time order, cascading failures.

        Events are applied at the logical instant they happened (not at ``now``), so the
        outcome never depends on which call happened to notice them first.
        """
        changed = 0
        while True:
            t = conn.execute(self._NEXT_DUE_SQL, (now,)).fetchall()[0][0]
            if t is None:
                return changed
            conn.execute(
                "UPDATE claim_tokens SET retired_at=?1, retired_why='expiry' WHERE token IN"
                " (SELECT claim_token FROM tasks WHERE status='CLAIMED' AND lease_expires_at=?1)",
                (t,),
            )
            changed += conn.execute(self._REQUEUE_SQL, {"t": t, "now": now}).rowcount
            changed += conn.execute(
                "UPDATE tasks SET status='TIMED_OUT', completed_at=?1,"
                " error_reason='queue window ended before any claim'"
                " WHERE status='SUBMITTED' AND queue_deadline = ?1",
                (t,),
            ).rowcount
            changed += self._cascade(conn, t)

    @staticmethod
    def _cascade(conn: sqlite3.Connection, at: int) -> int:
        """Fail every SUBMITTED task with a FAILED/TIMED_OUT dependency, transitively."""
        total = 0
        while True:
            n = conn.execute(
                "UPDATE tasks SET status='FAILED', completed_at=?1, error_reason=("
                "  SELECT 'dependency ' || p.task_id || ' ended ' || p.status"
                "  FROM task_deps d JOIN tasks p ON p.task_id = d.depends_on"
                "  WHERE d.task_id = tasks.task_id AND p.status IN ('FAILED','TIMED_OUT')"
                "  ORDER BY d.rowid LIMIT 1)"
                " WHERE status='SUBMITTED' AND pending_deps > 0 AND EXISTS ("
                "  SELECT 1 FROM task_deps d JOIN tasks p ON p.task_id = d.depends_on"
                "  WHERE d.task_id = tasks.task_id AND p.status IN ('FAILED','TIMED_OUT'))",
                (at,),
            ).rowcount
            if n == 0:
                return total
            total += n

    # ------------------------------------------------------------------ claiming
    _CLAIM_SET = (
        "UPDATE tasks SET status='CLAIMED', claimed_by=:agent, claim_token=:token,"
        " claimed_at=:now, lease_expires_at=:now + exec_ttl_ms, attempt=attempt + 1,"
        " extend_count=0"
        " WHERE task_id=:task_id AND status='SUBMITTED' AND pending_deps=0"
        " AND queue_deadline > :now AND (target_agent IS NULL OR target_agent = :agent)"
        " RETURNING claimed_at, lease_expires_at, attempt"
    )
    _PICK_SQL = (
        "SELECT queued_at, seq, task_id FROM tasks INDEXED BY tasks_ready"
        " WHERE status='SUBMITTED' AND pending_deps=0 AND target_agent {} AND queue_deadline > ?"
        " ORDER BY queued_at, seq LIMIT 1"
    )
    _PICK_ANY = _PICK_SQL.format("IS NULL")
    _PICK_MINE = _PICK_SQL.format("= ?")

    # Built from the fragments above by _compose_sql (so a subclass that changes a fragment
    # changes every statement that uses it): the claim-next UPDATE and the poll's read.
    _CLAIM_NEXT: str | None = None
    _CLAIM_NEXT_UNLESS_DUE: str | None = None
    _POLL_CHECK: str = ""
    _FAST_HOLDER: bool = True

    @classmethod
    def _compose_sql(cls) -> None:
        """Derive ``_CLAIM_NEXT``, ``_CLAIM_NEXT_UNLESS_DUE`` and ``_POLL_CHECK`` from
        ``_CLAIM_SET``, ``_PICK_*`` and ``_DUE_SQL``.

        ``_CLAIM_NEXT_UNLESS_DUE`` is ``_CLAIM_NEXT`` that also changes nothing while an
        expiry is due (``_DUE_SQL`` in its WHERE clause): the busy poll's one statement
        (see ``poll_next``); None for a subclass with its own ``_poll_check``.

        ``_CLAIM_NEXT`` is ``_CLAIM_SET`` with ``task_id=:task_id`` replaced by the rowid of
        the oldest ready task (both pick queries as one scalar subquery). A subclass that
        replaces ``_cas_claim`` keeps the pick-then-CAS path (``_CLAIM_NEXT`` None), and one
        that replaces ``_guard`` keeps the guard-then-write path for holder operations.
        """
        any_ = cls._PICK_ANY.replace("?", ":now")
        mine = cls._PICK_MINE.replace("= ?", "= :agent", 1).replace("?", ":now")
        pick = (f"SELECT seq FROM (SELECT * FROM ({any_}) UNION ALL SELECT * FROM ({mine}))"
                " ORDER BY queued_at, seq LIMIT 1")
        where, ret = "WHERE task_id=:task_id", " RETURNING "
        sql: str | None = None
        if (cls._CLAIM_SET.count(where) == 1 and cls._CLAIM_SET.count(ret) == 1
                and cls._cas_claim is LeaseStore._cas_claim):
            sql = (cls._CLAIM_SET.replace(where, f"WHERE seq=({pick})")
                   .replace(ret, " RETURNING task_id, "))
        cls._CLAIM_NEXT = sql
        due = cls._DUE_SQL.removeprefix("SELECT ")
        cls._POLL_CHECK = (f"SELECT ({due}), (EXISTS({cls._PICK_ANY})"
                           f" OR EXISTS({cls._PICK_MINE}))")
        cls._CLAIM_NEXT_UNLESS_DUE = None
        if sql is not None and cls._poll_check is LeaseStore._poll_check:
            unless_due = f" AND NOT ({due.replace('?', ':now')}) RETURNING "
            cls._CLAIM_NEXT_UNLESS_DUE = sql.replace(ret, unless_due, 1)
        cls._FAST_HOLDER = cls._guard is LeaseStore._guard

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._compose_sql()

    def _pick(self, conn: sqlite3.Connection, agent_id: str, now: int) -> str | None:
        rows = conn.execute(self._PICK_ANY, (now,)).fetchall()
        rows += conn.execute(self._PICK_MINE, (agent_id, now)).fetchall()
        return min(rows)[2] if rows else None

    def _cas_claim(self, conn: sqlite3.Connection, task_id: str, agent_id: str, now: int) -> Claim | None:
        token = str(uuid.uuid4())
        rows = conn.execute(
            self._CLAIM_SET, {"agent": agent_id, "token": token, "now": now, "task_id": task_id}
        ).fetchall()
        self._claim_attempts += 1
        if len(rows) != 1:
            self._claim_misses += 1
            return None
        if not conn.in_transaction:
            self._wrote()  # an autocommit CAS: one committed write
        claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)

    def _claim_next(self, conn: sqlite3.Connection, agent_id: str, now: int,
                    sql: str) -> Claim | None:
        """Pick and take the oldest ready task in ONE statement (``sql``: ``_CLAIM_NEXT``,
        or ``_CLAIM_NEXT_UNLESS_DUE``, whose empty result is not counted in ``claim_stats``:
        the poll then goes on to the two phases, which count as before).

        An autocommit UPDATE takes the write lock before it reads anything, so the pick in
        its subquery sees the latest commit and nobody can take that task in between: this
        claim cannot lose a race. None means no task was ready under the write lock. The
        token still enters ``claim_tokens`` first (the BEFORE UPDATE trigger).
        """
        token = str(uuid.uuid4())
        rows = conn.execute(sql, {"agent": agent_id, "token": token, "now": now}).fetchall()
        if not rows:
            if sql is not self._CLAIM_NEXT_UNLESS_DUE:
                self._claim_attempts += 1
                self._claim_empty += 1
            return None
        self._claim_attempts += 1
        if not conn.in_transaction:
            self._wrote()
        task_id, claimed_at, expires, attempt = rows[0]
        return Claim(task_id, agent_id, token, claimed_at, expires, attempt)

    def claim_stats(self) -> ClaimStats:
        """Counts of this instance's claiming statements since it was opened (see
        ``ClaimStats``): how often a CAS lost its race, without wrapping the store."""
        return ClaimStats(attempts=self._claim_attempts, misses=self._claim_misses,
                          empty=self._claim_empty)

    def _poll_check(self, agent_id: str, now: int) -> tuple[int, int]:
        """The read phase of a poll: (an expiry is due, a task is ready). No lock, no write."""
        due, ready = self._rows(self._POLL_CHECK, (now, now, now, agent_id, now))[0]
        return due, ready

    def poll_next(self, agent_id: str) -> Claim | None:
        """Sweep, then claim the oldest ready task for this agent; None when there is none.

        Two phases: one read says whether anything is due or ready (an idle poll ends there:
        no write lock, nothing appended); then the sweep, if due, and the claim.

        A busy worker skips the read: when this instance's previous poll claimed a task, the
        poll starts with ``_CLAIM_NEXT_UNLESS_DUE``, the claim that changes nothing while an
        expiry is due. If it claims, the poll was that one statement (the read would have
        said "nothing due, something ready"); if not, the two phases follow as above. Such a
        poll may take the write lock once without claiming, but never appends to the WAL:
        an UPDATE that changes no row writes no page.
        """
        if not isinstance(agent_id, str) or not agent_id:
            _name("agent_id", agent_id)
        now = self._now()
        try:
            if self._claimed_last and self._CLAIM_NEXT_UNLESS_DUE is not None:
                claim = self._claim_write(agent_id, now, self._CLAIM_NEXT_UNLESS_DUE)
                if claim is not None:
                    return claim
            claim = self._poll_two_phase(agent_id, now)
            self._claimed_last = claim is not None
            return claim
        except sqlite3.Error as exc:
            self._claimed_last = False
            raise self._store_error(exc) from None
        except BaseException:
            self._claimed_last = False
            raise

    def _claim_write(self, agent_id: str, now: int, sql: str) -> Claim | None:
        """One claiming statement (``_claim_next``), its own transaction, or in the
        caller's (immediate strategy): under the busy policy and the ``writing`` hook."""
        if self.claim_strategy == "immediate":
            with self._tx() as conn:
                self._apply_due(conn, now)
                return self._claim_next(conn, agent_id, now, sql)
        with self._writing():
            return self._busy.run(lambda: self._claim_next(self._conn, agent_id, now, sql))

    def _poll_two_phase(self, agent_id: str, now: int) -> Claim | None:
        if self.claim_strategy == "immediate":
            return self._poll_immediate(agent_id, now)
        due, ready = self._poll_check(agent_id, now)
        if due:
            with self._tx() as conn:
                self._apply_due(conn, now)
        elif not ready:
            return None  # idle
        if self._CLAIM_NEXT is not None:
            return self._claim_write(agent_id, now, self._CLAIM_NEXT)
        for _ in range(10_000):  # a subclass with its own _cas_claim: pick, then CAS
            task_id = self._pick(self._conn, agent_id, now)
            if task_id is None:
                return None
            with self._writing():
                claim = self._busy.run(
                    lambda t=task_id: self._cas_claim(self._conn, t, agent_id, now))
            if claim is not None:
                return claim
        raise errors.StoreError("poll_next lost 10000 CAS races in a row; is the clock stuck?")

    def _poll_immediate(self, agent_id: str, now: int) -> Claim | None:
        due, ready = self._poll_check(agent_id, now)
        if not due and not ready:
            return None  # idle: no write transaction at all
        with self._tx() as conn:
            self._apply_due(conn, now)
            if self._CLAIM_NEXT is not None:
                return self._claim_next(conn, agent_id, now, self._CLAIM_NEXT)
            task_id = self._pick(conn, agent_id, now)
            return None if task_id is None else self._cas_claim(conn, task_id, agent_id, now)

    def sweep_at(self, now: int) -> int:
        """The two-phase sweep at a given instant (read first, write only when due)."""
        if not self._rows(self._DUE_SQL, (now, now))[0][0]:
            return 0
        with self._tx() as conn:
            return self._apply_due(conn, now)

    def claim(self, task_id: str, agent_id: str, *, sweep: bool = True) -> Claim | None:
        """Claim this one task if it is ready for this agent; None if it is not.

        ``sweep=False`` skips the sweep before the claim: the call is then the claiming
        UPDATE alone (what ``ferry-harness bench`` measures as the store's own write cost).
        The UPDATE's WHERE clause still refuses a task whose queue window ended, so the
        claim is never wrong; a task whose lease expired stays CLAIMED (and refused) until
        some call sweeps.
        """
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        now = self._now()
        if self.claim_strategy == "immediate":
            with self._tx() as conn:
                if sweep:
                    self._apply_due(conn, now)
                claim = self._cas_claim(conn, task_id, agent_id, now)
        else:
            if sweep:
                self.sweep_at(now)
            try:
                with self._writing():
                    claim = self._busy.run(
                        lambda: self._cas_claim(self._conn, task_id, agent_id, now))
            except sqlite3.Error as exc:
                raise self._store_error(exc) from None
        if claim is None and not self._rows("SELECT 1 FROM tasks WHERE task_id=?", (task_id,)):
            raise errors.NotFound(f"task {task_id!r} does not exist")
        return claim

    # ------------------------------------------------------------------ holder operations
    def _guard(self, task_id: str, agent_id: str, token: str | None, now: int) -> tuple:
        """PROTOCOL.md#the-holder-guard checks in order; returns the guard row. Raises LeaseExpired unapplied."""
        _name("task_id", task_id)
        _name("agent_id", agent_id)
        if token is not None and not isinstance(token, str):
            raise errors.InvalidArgument(f"token must be a string or None, got {type(token).__name__}")
        rows = self._rows(f"SELECT {_GUARD_COLUMNS} FROM tasks WHERE task_id=?", (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        status, target, holder, expires, row_token = rows[0]
        if target is not None and target != agent_id:
            raise errors.PermissionDenied(
                f"task {task_id} is for agent {target!r}, not {agent_id!r}"
            )
        if status != CLAIMED:
            raise errors.WrongState(f"task {task_id} is {status}, not CLAIMED; claim it first")
        if now >= expires:
            raise errors.LeaseExpired(
                f"lease on task {task_id} ended at {expires} (now {now}); poll for new work"
            )
        if holder != agent_id:
            raise errors.PermissionDenied(
                f"task {task_id} is held by {holder!r}, not {agent_id!r}"
            )
        if token is None:
            if self.strict_tokens:
                raise errors.TokenRequired(
                    f"task {task_id}: pass the claim token you got from claim/poll_next"
                )
        elif not hmac.compare_digest(token.encode(), row_token.encode()):  # str form: ASCII only
            raise errors.InvalidToken(
                f"task {task_id}: token is not the current claim token (retired or forged)"
            )
        return rows[0]

    def _holder_write(self, op: str, task_id: str, agent_id: str, token: str | None,
                      write, late_result: Any = None, has_late: bool = False,
                      autocommit: bool = False, fast: bool = False) -> Any:
        """Run the guard, then ``write(conn, row_token, now)``: in one short transaction, or
        (``autocommit``) as a single conditional statement, its own transaction.

        ``write`` must repeat the guard in its WHERE clause and return None when it changed
        no row (someone else moved first); the guard is then re-read to name the refusal.

        ``fast``: first ``write(conn, token, now, True)``, the caller's own token and name
        in the WHERE clause (``_holder_where(True)``), so a call that succeeds is that one
        statement and reads nothing. Only when it changed no row does the guard run: it
        names the refusal, or (the world changed in between) the guarded write follows.
        """
        now = self._now()
        if (fast and self._FAST_HOLDER and isinstance(token, str) and token
                and isinstance(task_id, str) and task_id and isinstance(agent_id, str)
                and agent_id):
            out = self._run_write(write, (token, now, True), autocommit)
            if out is not None:
                return out
        for _ in range(3):
            try:
                row = self._guard(task_id, agent_id, token, now)
            except errors.LeaseExpired:
                with self._tx() as conn:
                    self._apply_due(conn, now)
                    if has_late:
                        self._keep_late(conn, task_id, agent_id, token, late_result, now)
                raise
            except errors.FerryError:
                if has_late:
                    self._keep_late_retired(task_id, agent_id, token, late_result, now)
                raise
            out = self._run_write(write, (row[4], now), autocommit)
            if out is not None:
                return out
        raise errors.StoreError(f"{op} on task {task_id} kept racing; try again")

    def _run_write(self, write, args: tuple, autocommit: bool) -> Any:
        if not autocommit:
            with self._tx() as conn:
                return write(conn, *args)
        try:
            with self._writing():
                out = self._busy.run(lambda: write(self._conn, *args))
        except sqlite3.Error as exc:
            raise self._store_error(exc) from None
        if out is not None:
            self._wrote()
        return out

    def _keep_late(self, conn: sqlite3.Connection, task_id: str, agent_id: str,
                   token: str | None, result: Any, now: int) -> None:
        """A late result from the token's own holder is salvage, never silently dropped."""
        if token is None:
            return
        hit = conn.execute(
            "SELECT 1 FROM claim_tokens WHERE token=? AND task_id=? AND agent_id=?"
            " AND retired_why='expiry'", (token, task_id, agent_id)).fetchall()
        if hit:
            conn.execute(
                "INSERT INTO salvage(task_id, agent_id, kind, data, created_at)"
                " VALUES (?,?,'late_result',?,?)",
                (task_id, agent_id, _to_json("result", result), now),
            )

    def _keep_late_retired(self, task_id: str, agent_id: str, token: str | None,
                           result: Any, now: int) -> None:
        if not isinstance(token, str) or not self._rows(
            "SELECT 1 FROM claim_tokens WHERE token=? AND task_id=? AND agent_id=?"
            " AND retired_why='expiry'", (token, task_id, agent_id)):
            return
        with self._tx() as conn:
            self._keep_late(conn, task_id, agent_id, token, result, now)

    _HOLDER_WHERE = (
        " WHERE task_id=:task_id AND status='CLAIMED'"
        " AND ferry_token_eq(claim_token, :row_token) AND lease_expires_at > :now"
    )

    def _holder_where(self, bound: bool) -> str:
        """The guard as SQL; ``bound`` adds the holder's name (the caller's token is then
        ``:row_token``, compared in constant time by ``ferry_token_eq``)."""
        return self._HOLDER_WHERE + (" AND claimed_by=:agent" if bound else "")

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """CLAIMED -> COMPLETED with ``result``. A late result is refused but kept as salvage."""
        result_json = _to_json("result", result)

        def write(conn: sqlite3.Connection, row_token: str, now: int,
                  bound: bool = False) -> bool | None:
            n = conn.execute(
                "UPDATE tasks SET status='COMPLETED', result=:result, completed_at=:now,"
                " claim_token=NULL" + self._holder_where(bound),
                {"task_id": task_id, "row_token": row_token, "now": now, "result": result_json,
                 "agent": agent_id},
            ).rowcount
            # one statement: triggers retire the token and unblock dependents
            return True if n == 1 else None

        self._holder_write("fulfill", task_id, agent_id, token, write,
                           late_result=result, has_late=True, autocommit=True, fast=True)

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str) -> None:
        """CLAIMED -> FAILED; dependents fail with a reason naming this task."""
        if not isinstance(reason, str) or not reason.strip():
            raise errors.InvalidArgument("fail needs a non-empty reason saying what went wrong")

        def write(conn: sqlite3.Connection, row_token: str, now: int,
                  bound: bool = False) -> bool | None:
            n = conn.execute(
                "UPDATE tasks SET status='FAILED', error_reason=:reason, completed_at=:now,"
                " claim_token=NULL" + self._holder_where(bound),
                {"task_id": task_id, "row_token": row_token, "now": now, "reason": reason,
                 "agent": agent_id},
            ).rowcount
            if n != 1:
                return None
            self._cascade(conn, now)
            return True

        self._holder_write("fail", task_id, agent_id, token, write, fast=True)

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """CLAIMED -> SUBMITTED at the tail of the queue; the token is retired for good."""
        if not isinstance(reason, str):
            raise errors.InvalidArgument("reason must be a string")

        def write(conn: sqlite3.Connection, row_token: str, now: int,
                  bound: bool = False) -> bool | None:
            if not bound:  # the guard passed: name the limit before trying
                count = conn.execute(
                    "SELECT release_count FROM tasks WHERE task_id=?", (task_id,)
                ).fetchall()[0][0]
                if count >= self.max_releases:
                    raise errors.LimitExceeded(
                        f"task {task_id} was released {count} times (max_releases="
                        f"{self.max_releases}); fail it instead"
                    )
            n = conn.execute(  # one statement; a trigger retires the token
                "UPDATE tasks SET status='SUBMITTED', claim_token=NULL, claimed_by=NULL,"
                " claimed_at=NULL, lease_expires_at=NULL, extend_count=0,"
                " release_count=release_count + 1, queued_at=:now,"
                " queue_deadline=:now + queue_ttl_ms" + self._holder_where(bound)
                + " AND release_count < :max",
                {"task_id": task_id, "row_token": row_token, "now": now,
                 "max": self.max_releases, "agent": agent_id},
            ).rowcount
            return True if n == 1 else None

        self._holder_write("release", task_id, agent_id, token, write, autocommit=True,
                           fast=True)

    def extend(self, task_id: str, agent_id: str, token: str | None) -> int:
        """Renew the lease to ``now + exec_ttl_ms``; returns the new expiry."""

        def write(conn: sqlite3.Connection, row_token: str, now: int,
                  bound: bool = False) -> int | None:
            if not bound:  # the guard passed: name the limit before trying
                count, ttl, created, qttl = conn.execute(
                    "SELECT extend_count, exec_ttl_ms, created_at, queue_ttl_ms FROM tasks"
                    " WHERE task_id=?", (task_id,)).fetchall()[0]
                if count >= self.max_extends:
                    raise errors.LimitExceeded(
                        f"task {task_id}: lease already extended {count} times (max_extends="
                        f"{self.max_extends}); finish or release it"
                    )
                if now + ttl > created + 4 * qttl:
                    raise errors.LimitExceeded(
                        f"task {task_id}: extending to {now + ttl} would pass the hard limit "
                        f"created_at + 4 * queue_ttl_ms = {created + 4 * qttl}"
                    )
            rows = conn.execute(  # the limits are repeated here: the read above may be stale
                "UPDATE tasks SET lease_expires_at=:now + exec_ttl_ms,"
                " extend_count=extend_count + 1" + self._holder_where(bound)
                + " AND extend_count < :max AND :now + exec_ttl_ms <= created_at + 4 * queue_ttl_ms"
                " RETURNING lease_expires_at",
                {"task_id": task_id, "row_token": row_token, "now": now,
                 "max": self.max_extends, "agent": agent_id},
            ).fetchall()
            return rows[0][0] if rows else None

        return self._holder_write("extend", task_id, agent_id, token, write, autocommit=True,
                                  fast=True)

    def salvage(self, task_id: str, agent_id: str, token: str | None, partial: Any) -> None:
        """Append a partial artifact; it is kept forever, whatever happens to the task."""
        data = _to_json("partial", partial)

        def write(conn: sqlite3.Connection, row_token: str, now: int,
                  bound: bool = False) -> bool | None:
            n = conn.execute(
                "INSERT INTO salvage(task_id, agent_id, kind, data, created_at)"
                " SELECT task_id, :agent, 'partial', :data, :now FROM tasks"
                + self._holder_where(bound),
                {"task_id": task_id, "row_token": row_token, "now": now, "agent": agent_id,
                 "data": data},
            ).rowcount
            return True if n == 1 else None

        self._holder_write("salvage", task_id, agent_id, token, write, autocommit=True,
                           fast=True)

    # ------------------------------------------------------------------ reads
    def _view(self, row: tuple, now: int) -> TaskView:
        (task_id, status, target, title, payload, requester, qttl, ettl, max_att, created,
         queued, deadline, holder, claimed_at, expires, completed, attempt, ext, rel, result,
         reason, deps) = row
        expired = (status == CLAIMED and now >= expires) or (status == SUBMITTED and now >= deadline)
        return TaskView(
            task_id=task_id, status=status, target_agent=target, title=title,
            payload=_from_json(payload), requester=requester,
            depends_on=tuple(json.loads(deps)) if deps else (), queue_ttl_ms=qttl,
            exec_ttl_ms=ettl, max_attempts=max_att, created_at=created, queued_at=queued,
            claimed_by=holder, claimed_at=claimed_at, lease_expires_at=expires,
            completed_at=completed, attempt=attempt, extend_count=ext, release_count=rel,
            result=_from_json(result), error_reason=reason, is_logically_expired=expired,
        )

    def get(self, task_id: str) -> TaskView:
        """Read one task (never writes, never sweeps)."""
        _name("task_id", task_id)
        now = self._now()
        rows = self._rows(f"SELECT {self._view_columns} FROM tasks WHERE task_id=?", (task_id,))
        if not rows:
            raise errors.NotFound(f"task {task_id!r} does not exist")
        return self._view(rows[0], now)

    def inspect(self, agent_id: str | None = None) -> list[TaskView]:
        """Every task (or those for/held by ``agent_id``), oldest first. Read only."""
        if agent_id is not None:
            _name("agent_id", agent_id)
        now = self._now()
        if agent_id is None:
            rows = self._rows(f"SELECT {self._view_columns} FROM tasks ORDER BY seq")
        else:
            rows = self._rows(
                f"SELECT {self._view_columns} FROM tasks WHERE target_agent=?1 OR claimed_by=?1"
                " ORDER BY seq", (agent_id,))
        return [self._view(r, now) for r in rows]

    def salvaged(self, task_id: str) -> list[Salvage]:
        """Partial artifacts and late results of a task, oldest first. Read only."""
        _name("task_id", task_id)
        if not self._rows("SELECT 1 FROM tasks WHERE task_id=?", (task_id,)):
            raise errors.NotFound(f"task {task_id!r} does not exist")
        rows = self._rows(
            "SELECT task_id, agent_id, kind, data, created_at FROM salvage WHERE task_id=?"
            " ORDER BY id", (task_id,))
        return [Salvage(t, a, k, _from_json(d), c) for t, a, k, d, c in rows]

    # ------------------------------------------------------------------ daemon locks
    # the lock's one UPSERT: it updates only an expired lock or our own (the WHERE)
    _ACQUIRE_LOCK_SQL = (
        "INSERT INTO daemon_locks(name, owner, expires_at, acquired_at)"
        " VALUES (:name, :owner, :now + :ttl, :now)"
        " ON CONFLICT(name) DO UPDATE SET owner=excluded.owner,"
        "  expires_at=excluded.expires_at,"
        "  acquired_at=CASE WHEN daemon_locks.owner = excluded.owner"
        "   AND daemon_locks.expires_at > :now THEN daemon_locks.acquired_at"
        "   ELSE excluded.acquired_at END"
        " WHERE daemon_locks.expires_at <= :now OR daemon_locks.owner = excluded.owner"
        " RETURNING owner"
    )

    def acquire_lock(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew) a named lock held on [now, now + ttl_ms); one UPSERT (PROTOCOL.md#sqlite-rules)."""
        _name("lock name", name)
        _name("owner", owner)
        _positive_int("ttl_ms", ttl_ms)
        now = self._now()
        rows = self._busy.run(lambda: self._rows(
            self._ACQUIRE_LOCK_SQL, {"name": name, "owner": owner, "now": now, "ttl": ttl_ms}))
        return len(rows) == 1

    def release_lock(self, name: str, owner: str) -> bool:
        """Drop the lock if ``owner`` holds it now; False (and no write) otherwise."""
        _name("lock name", name)
        _name("owner", owner)
        now = self._now()
        if not self._rows(
            "SELECT 1 FROM daemon_locks WHERE name=? AND owner=? AND expires_at > ?",
            (name, owner, now)):
            return False
        rows = self._rows(
            "DELETE FROM daemon_locks WHERE name=? AND owner=? AND expires_at > ? RETURNING 1",
            (name, owner, now))
        return len(rows) == 1

    def lock_holder(self, name: str) -> str | None:
        """The unexpired owner of the lock, or None. Read only."""
        _name("lock name", name)
        rows = self._rows(
            "SELECT owner FROM daemon_locks WHERE name=? AND expires_at > ?", (name, self._now()))
        return rows[0][0] if rows else None

    # ------------------------------------------------------------------ maintenance
    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint(mode)`` -> (busy, log_frames, checkpointed_frames)."""
        if not isinstance(mode, str) or mode.upper() not in CHECKPOINT_MODES:
            raise errors.InvalidArgument(f"checkpoint mode must be one of {CHECKPOINT_MODES}")
        row = self._rows(f"PRAGMA wal_checkpoint({mode.upper()})")[0]
        return int(row[0]), int(row[1]), int(row[2])

    def __repr__(self) -> str:
        return f"LeaseStore({self.path!r}, claim_strategy={self.claim_strategy!r})"


LeaseStore._compose_sql()


def cas_store(path: str, *, clock: Clock | None = None) -> LeaseStore:
    """Factory for ``--target ferry_core:cas_store`` (the default strategy)."""
    return LeaseStore(path, clock=clock, claim_strategy="cas")


def immediate_store(path: str, *, clock: Clock | None = None) -> LeaseStore:
    """Factory for ``--target ferry_core:immediate_store`` (one BEGIN IMMEDIATE per claim)."""
    return LeaseStore(path, clock=clock, claim_strategy="immediate")
