"""Where an example's database lives, and what can be measured about it from outside.

A target's factory is called ``factory(where, *, clock)`` in every worker. ``where`` is a
string the *backend* makes, one per example:

- ``SqliteBackend`` (the default): the path of a fresh SQLite file (``<dir>/ferry.db``, its
  ``-wal`` / ``-shm`` removed before each example). Its probes read the ``-wal`` and
  ``-shm`` as plain files (never through SQLite, which could itself write).
- ``PostgresBackend``: a libpq URI naming the run's own database and the example's own
  schema (``postgresql://…/ferry_run_…?…&options=-c%20search_path%3Dex_17``). The run's
  database is created at the start and dropped at the end; each example gets a fresh,
  empty schema (or, for a factory with ``ferry_reset``, the previous one emptied by the
  target itself: :meth:`PostgresBackend.fresh`) and the previous one is dropped once every
  worker closed its store — off
  the critical path, on a connection of its own in a background thread, and always
  finished before a transaction-id probe (so a drop never moves the probe's xid). Its
  workers open their stores all at once (one whose factory raised then opens again
  alone), not slot 0 first: a Postgres factory that creates its tables must be safe
  beside others doing the same (ferry_core's and both adapters' take an advisory lock).
  Its probes run on an admin connection of
  the controller: the next transaction id (``txid_snapshot_xmax(txid_current_snapshot())``:
  a call that assigned itself a transaction id moved it — autovacuum must be off, as in the
  throwaway cluster) and the run database's connections left ``idle in transaction``.
  Every worker names its libpq connections after its pid (``PGAPPNAME``, set before the
  target opens any: :func:`name_worker_connections`), so the nemesis can watch one
  worker's server backends from a second connection of the controller (:class:`PgWatch`).

The probes, per backend (what the executor measures around calls):

- SQLite: ``wal_size`` / ``wal_mark`` (the ``-wal`` size and its header / ``-shm``
  frame count: ``idle-no-write``, ``wal-bounded``); ``PRAGMA integrity_check`` runs in
  the worker pool's reader process (:meth:`ferry_harness.runtime.client.WorkerPool.integrity`),
  which never loads the target; the nemesis aims kills with the ``-shm`` locks.
- Postgres: :meth:`PostgresBackend.next_xid` (``idle-no-write``) and
  :meth:`PostgresBackend.look` (``wal-bounded``: asked only when the workers' own
  connection reports, :mod:`ferry_harness.runtime.pgconns`, cannot answer); no integrity check (there
  is no file to read); the nemesis aims kills with ``pg_stat_activity`` and
  ``txid_status`` (:meth:`PostgresBackend.watch`).

A target says which backend it needs with an attribute on its factory (a class or a
function): ``ferry_backend = "postgres"``; without one it is ``"sqlite"``
(PROTOCOL.md#postgres-targets). The backend never loads the target; it only prepares and
measures.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ferry_harness.errors import HarnessError, UsageError
from ferry_harness.runtime.pgserver import ENV_URI, PgServer, schema_uri

SQLITE = "sqlite"
POSTGRES = "postgres"
BACKENDS = (SQLITE, POSTGRES)

#: what the SQLite meaning of a check needs and a Postgres target has not (report: skipped)
PG_SKIPPED = {
    "integrity": "SQLite only: PRAGMA integrity_check reads the database file; a Postgres "
                 "target has none (the server checks its own pages)",
    "wal-bounded (-wal file)": "SQLite only: the -wal file's size and a TRUNCATE checkpoint "
                               "that empties it; the server manages its own WAL",
    "idle-no-write (-wal file)": "SQLite only: the -wal file's size and header; on Postgres "
                                 "the transaction-id probe judges idle-no-write instead",
}
#: what the two WAL invariants mean on Postgres (PROTOCOL.md#postgres-targets)
PG_MEANINGS = {
    "idle-no-write": "an idle poll and every read assign no transaction id "
                     "(txid_current_snapshot's xmax, measured before and after on the "
                     "controller's own connection)",
    "wal-bounded": "no connection of the target is left idle in transaction after a step "
                   "(pg_stat_activity of the run's database)",
}
#: an idle-in-transaction backend is looked at again this often before it is a finding
#: (a killed worker's backend needs a moment to see its socket close)
_OPEN_TX_RECHECKS = (0.05, 0.2)


def backend_of(factory: Any) -> str:
    """The backend a factory declares (``ferry_backend``), ``"sqlite"`` without one."""
    name = getattr(factory, "ferry_backend", SQLITE)
    if name not in BACKENDS:
        raise UsageError(f"ferry_backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return str(name)


#: a worker's libpq connections are named ``ferry-worker-<pid>`` (``application_name``)
APPNAME_PREFIX = "ferry-worker-"


def worker_appname(pid: int) -> str:
    """The ``application_name`` of the libpq connections of the worker process ``pid``."""
    return f"{APPNAME_PREFIX}{pid}"


def name_worker_connections() -> None:
    """Call first thing in a worker process, before the target opens any connection: libpq
    reads ``PGAPPNAME`` at connect, so the server lists this worker's backends under
    :func:`worker_appname` (unless the target sets ``application_name`` itself: then the
    nemesis finds none and its aims fall back, see :class:`PgWatch`). Harmless for SQLite."""
    os.environ["PGAPPNAME"] = worker_appname(os.getpid())


def refuse_postgres(command: str, target: str, factory: Any) -> None:
    """Commands that still make a SQLite file (scenario) refuse a Postgres target
    with one clear line instead of handing its factory a path."""
    if backend_of(factory) == POSTGRES:
        raise UsageError(f"ferry-harness {command} runs SQLite targets only; {target} is a "
                         "Postgres target (ferry_backend = 'postgres'): run ferry-harness fuzz "
                         "on it (PROTOCOL.md#postgres-targets)")


@dataclass(frozen=True, kw_only=True)
class ServerBackend:
    """One server backend of a worker's connections, as ``pg_stat_activity`` shows it."""

    pid: int  #: the server backend's pid
    xid: int | None  #: its top-level transaction id (None: it has written nothing yet)
    state: str  #: ``active``, ``idle``, ``idle in transaction``, ...
    waiting_on_lock: bool  #: an ``active`` statement blocked on a lock (``wait_event_type``)


class PgWatch:
    """A connection of the controller's own (autocommit, read-only) from which the nemesis
    watches one worker's server backends while that worker's call runs. It never assigns
    a transaction id; its pid is left out of :meth:`PostgresBackend.open_transactions`.
    One thread at a time (the nemesis' helper thread of the kill in progress)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])

    def backends(self, worker_pid: int) -> list[ServerBackend]:
        """The server backends of worker ``worker_pid``'s connections (one query)."""
        rows = self.conn.execute(
            "SELECT pid, backend_xid::text::bigint, state, wait_event_type = 'Lock' "
            "FROM pg_stat_activity WHERE application_name = %s",
            (worker_appname(worker_pid),)).fetchall()
        return [ServerBackend(pid=int(p), xid=None if x is None else int(x),
                              state=str(st or ""), waiting_on_lock=bool(w))
                for p, x, st, w in rows]

    def next_xid(self) -> int:
        """The next transaction id the server will assign (64-bit, with its epoch)."""
        return int(self.conn.execute(
            "SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()[0])

    def xids_since(self, first: int, most: int = 64) -> list[tuple[int, str | None, str | None]]:
        """Every transaction id assigned from ``first`` on (at most ``most``): (id, its
        ``txid_status`` — committed, aborted, in progress —, the ``application_name`` of
        the backend holding it now, or None once it ended or when nobody shows it)."""
        rows = self.conn.execute(
            "SELECT g.x, txid_status(g.x), (SELECT a.application_name FROM pg_stat_activity a"
            " WHERE a.backend_xid::text::bigint = g.x %% 4294967296 LIMIT 1) FROM"
            " generate_series(%s::bigint, LEAST(txid_snapshot_xmax(txid_current_snapshot()) - 1,"
            " %s::bigint + %s - 1)) AS g(x)", (first, first, most)).fetchall()
        return [(int(x), None if st is None else str(st), None if a is None else str(a))
                for x, st, a in rows]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


@dataclass(frozen=True, kw_only=True)
class OpenTransaction:
    """A connection of the run's database seen ``idle in transaction`` (pg_stat_activity)."""

    pid: int  #: the server backend's pid
    since_s: float  #: seconds its transaction had been open when seen
    query: str  #: the last statement it ran


class Backend(Protocol):
    """What the executor needs of an example's database.

    ``fresh(example)`` makes a new, empty database for one example and returns the
    ``where`` string handed to the factory; ``opened(where)`` is called once every worker
    opened its store on it (the previous example's stores are closed then);
    ``close()`` throws everything away (idempotent, also after a failure).
    """

    name: str

    def fresh(self, example: int) -> str: ...

    def opened(self, where: str) -> None: ...

    def close(self) -> None: ...


class SqliteBackend:
    """One file path, reused: before each example its files are removed, or replaced by
    a copy of the database the target's first store made (its *template*).

    The template is taken in the first example right after slot 0's factory made the
    database, before any other store opened it or any operation ran (``captured``): the
    file (and its ``-wal``; SQLite rebuilds the ``-shm`` index from it) exactly as the
    target left it. Every later example starts from a copy, so no slot makes the schema
    again and all the workers open at once (``opens_together``): the same as the slots
    that open an existing database today. Only a target whose files are the database
    and its ``-wal`` / ``-shm`` gets one (no ``-journal``, no other file beside it, a
    file that starts as an SQLite database); ``template`` is its path once taken.
    """

    name = SQLITE

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, "ferry.db")
        self.use_template = True  # until the target shows files of its own
        self.template: str | None = None  # the template's main file, once taken
        self.copies = 0  # examples that started from a copy of it

    @property
    def opens_together(self) -> bool:
        return self.template is not None

    def fresh(self, example: int) -> str:
        remove_sqlite_files(self.path)
        if self.template is not None:
            _copy_database(self.template, self.path)
            self.copies += 1
        return self.path

    def captured(self, where: str) -> None:
        """Slot 0's factory made ``where``: keep it as the template (once, if eligible)."""
        if not self.use_template or self.template is not None or where != self.path:
            return
        names = set(os.listdir(self.directory))
        base = os.path.basename(self.path)
        if not names <= {base, base + "-wal", base + "-shm"} or base not in names:
            self.use_template = False  # files of its own beside it: never copied
            return
        try:
            with open(self.path, "rb") as fh:
                if fh.read(16) != b"SQLite format 3\x00":
                    self.use_template = False
                    return
        except OSError:
            self.use_template = False
            return
        target = os.path.join(self.directory, "template")
        os.makedirs(target, exist_ok=True)
        copy = os.path.join(target, base)
        _copy_database(self.path, copy)
        self.template = copy

    def opened(self, where: str) -> None:
        pass

    def close(self) -> None:
        pass


def _copy_database(src: str, dst: str) -> None:
    """Copy an idle SQLite database: its file and ``-wal`` (SQLite rebuilds the ``-shm``)."""
    for suffix in ("", "-wal"):
        if os.path.exists(src + suffix):
            shutil.copyfile(src + suffix, dst + suffix)


def remove_sqlite_files(path: str) -> None:
    """Remove ``path`` and its ``-wal`` / ``-shm`` (a fresh SQLite database)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)


def has_wal_file(path: str) -> bool:
    """Did the factory switch ``path`` to WAL mode (is there a ``-wal`` file)?"""
    return os.path.exists(path + "-wal")


def wal_size(path: str | None) -> int:
    """Size of the ``-wal`` file in bytes (0 if absent): measured, never opened."""
    try:
        return os.path.getsize(f"{path}-wal")
    except (OSError, TypeError):
        return 0


def wal_mark(path: str | None) -> str:
    """What changes whenever frames are appended to the WAL, whatever the file size:
    the -wal header (its checkpoint sequence and salts change each time the log
    restarts from its start) and the -shm index's mxFrame (frames in the log), read as
    plain files — never through SQLite, which could itself write."""
    parts = []
    try:
        with open(f"{path}-wal", "rb") as fh:
            parts.append(fh.read(32).hex())
    except (OSError, TypeError):
        parts.append("-")
    try:
        with open(f"{path}-shm", "rb") as fh:
            head = fh.read(48)
        parts.append(str(int.from_bytes(head[16:20], "little")) if len(head) >= 20 else "-")
    except (OSError, TypeError):
        parts.append("-")
    return f"{wal_size(path)}:" + ":".join(parts)


def with_database(uri: str, dbname: str) -> str:
    """``uri`` naming database ``dbname`` instead (path and any ``dbname=`` parameter)."""
    parts = urlsplit(uri)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "dbname"]
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, urlencode(query), ""))


def schema_of(where: str) -> str | None:
    """The example's schema in a ``where`` URI a Postgres target was given (the first of
    its ``options=-c search_path=…``), for an adapter whose library needs it by name."""
    query = dict(parse_qsl(urlsplit(where).query, keep_blank_values=True))
    m = re.search(r"search_path\s*=\s*([^\s,]+)", query.get("options", ""))
    return m.group(1).strip('"') if m else None


def _redacted(uri: str) -> str:
    return re.sub(r"//[^@/]*:[^@/]*@", "//***@", uri)


class _Dropper:
    """Drops the schemas of finished examples in a background thread, on a connection of
    its own, so an example's setup does not wait for the previous one's ``DROP SCHEMA``.
    A schema a frozen or dying connection still locks is left to the run's DROP DATABASE."""

    def __init__(self, psycopg: Any, uri: str) -> None:
        self._psycopg = psycopg
        self._uri = uri
        self._todo: queue.Queue[str | None] = queue.Queue()
        self.conn: Any = None
        self.pid: int | None = None
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="ferry-pg-dropper", daemon=True)
        self._thread.start()

    def drop(self, schema: str) -> None:
        self._todo.put(schema)

    def wait(self) -> None:
        """Return once every schema handed over so far is dropped (or given up on)."""
        self._todo.join()

    def _run(self) -> None:
        while True:
            schema = self._todo.get()
            try:
                if schema is None:
                    return
                self._drop(schema)
            finally:
                self._todo.task_done()

    def _drop(self, schema: str) -> None:
        try:
            if self.conn is None:
                self.conn = self._psycopg.connect(self._uri, autocommit=True)
                self.conn.execute("SET lock_timeout = '500ms'")
                self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            self.conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            self.dropped += 1
        except Exception:  # never a run's failure: DROP DATABASE takes what is left
            pass

    def close(self) -> None:
        """Stop the thread (its pending drops are left to DROP DATABASE) and disconnect."""
        while True:  # forget what is still queued: DROP DATABASE takes it
            try:
                self._todo.get_nowait()
            except queue.Empty:
                break
            self._todo.task_done()
        self._todo.put(None)
        self._thread.join(5)
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None


class PostgresBackend:
    """A database of the run's own on a PostgreSQL server, a fresh schema per example.

    ``uri`` is a server to use (``--pg-uri``, else ``$FERRY_PG_URI``); None starts a
    throwaway cluster (:class:`ferry_harness.runtime.pgserver.PgServer`) in a directory
    of its own under ``cluster_parent`` (fuzz: its ``--db-dir``, so a tmpfs where SQLite
    files would go there too), stopped and removed by ``close()``. The admin connection
    is autocommit and only ever reads (the probes) or, between examples, runs DDL or the
    target's ``ferry_reset``.
    """

    name = POSTGRES
    #: the workers open their stores at once (WorkerPool.open); see the module docstring
    opens_together = True

    def __init__(self, uri: str | None = None, *, cluster_parent: str | None = None) -> None:
        try:
            import psycopg  # optional: only a Postgres target needs it
        except ImportError:
            raise UsageError("a Postgres target needs psycopg 3: pip install "
                             "'psycopg[binary]'") from None
        self._psycopg = psycopg
        self.server: PgServer | None = None
        self.admin: Any = None
        self._dropper: _Dropper | None = None
        self._watch: PgWatch | None = None
        self._dropped_db = False
        given = uri or os.environ.get(ENV_URI) or None
        if given is not None and not given.startswith(("postgresql://", "postgres://")):
            raise UsageError(f"--pg-uri / {ENV_URI} must be a libpq URI (postgresql://…), "
                             f"got {_redacted(given)!r}")
        self.given_uri = given
        self.server_uri = ""
        self.dbname = f"ferry_run_{os.getpid()}_{secrets.token_hex(3)}"
        self._previous: str | None = None  # the schema of the example running now
        self._pending_drop: str | None = None  # the one before: dropped once it is closed
        self.schemas_made = 0
        self.resets = 0  # examples that reused the previous schema, emptied by ferry_reset
        self.reset_failed: str | None = None  # the last ferry_reset that raised, and why
        try:
            if given is None:
                self.server = PgServer(parent=cluster_parent).start()
                self.server_uri = self.server.uri
            else:
                self.server_uri = given
            with psycopg.connect(self.server_uri, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.dbname}"')
            self.uri = with_database(self.server_uri, self.dbname)
            self.admin = psycopg.connect(self.uri, autocommit=True)
            self.admin_pid = self.admin.execute("SELECT pg_backend_pid()").fetchone()[0]
            self._dropper = _Dropper(psycopg, self.uri)
        except psycopg.Error as exc:
            self.close()
            raise HarnessError(f"cannot prepare a database on {_redacted(self.server_uri)}: "
                               f"{str(exc).strip()}") from None
        except BaseException:
            self.close()
            raise

    @property
    def where_server(self) -> str:
        """The server, for the report: given (redacted) or the throwaway cluster."""
        return (_redacted(self.given_uri) if self.given_uri
                else "a throwaway cluster (ferry_harness.runtime.pgserver)")

    def fresh(self, example: int, reset: Callable[[Any, str], None] | None = None) -> str:
        """The ``where`` of example ``example``: a new, empty schema ``ex_<example>`` — or,
        with ``reset`` (the target's ``ferry_reset``, PROTOCOL.md#postgres-targets, called
        once every store of the previous example is closed), the previous example's
        schema emptied by the target itself. A reset that raises or waits on a lock for
        over a second is undone, and a new schema is made instead."""
        if reset is not None and self._previous is not None and self._reset(reset):
            self.resets += 1
            return schema_uri(self.uri, self._previous)
        schema = f"ex_{example}"
        # one round trip (no parameters: psycopg sends both as one simple query)
        self.admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE; CREATE SCHEMA "{schema}"')
        self.schemas_made += 1
        self._pending_drop = self._previous
        self._previous = schema
        return schema_uri(self.uri, schema)

    def _reset(self, reset: Callable[[Any, str], None]) -> bool:
        schema = self._previous
        try:
            with self.admin.transaction():
                self.admin.execute("SET LOCAL lock_timeout = '1s'")
                reset(self.admin, schema)
        except Exception as exc:  # whatever the target's reset raised: a fresh schema
            self.reset_failed = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
            return False
        self._pending_drop = None  # the schema stays in use
        return True

    def opened(self, where: str) -> None:
        """Every worker closed the previous example's store: its schema is dropped in the
        background (if a frozen or dying connection still holds a lock on it, it is left
        to the run's DROP DATABASE)."""
        old, self._pending_drop = self._pending_drop, None
        if old is not None and self._dropper is not None:
            self._dropper.drop(old)

    def settle(self) -> None:
        """Wait for the background drops handed over so far (they assign transaction ids)."""
        if self._dropper is not None:
            self._dropper.wait()

    def watch(self) -> PgWatch:
        """The nemesis' connection (made on first use, kept for the run). A background
        drop is finished first: the after-commit aim counts the transaction ids assigned
        while its victim's call runs, and a drop's must not be among them."""
        self.settle()
        if self._watch is None:
            self._watch = PgWatch(self._psycopg.connect(self.uri, autocommit=True))
        return self._watch

    # ------------------------------------------------------------------ probes
    def next_xid(self) -> int:
        """The next transaction id to be assigned (xmax of a fresh snapshot): a call that
        moved it assigned itself (or caused) a transaction id — it wrote. A background
        drop is finished first, and none starts before the next example's setup."""
        self.settle()
        return int(self.admin.execute(
            "SELECT txid_snapshot_xmax(txid_current_snapshot())").fetchone()[0])

    def open_transactions(self) -> list[OpenTransaction]:
        """The run database's connections (not this one) idle in a transaction now and
        still after a short recheck (a killed worker's backend ends a moment later)."""
        return self._rechecked(self._idle_in_tx())

    def look(self, known: set[int]) -> tuple[list[OpenTransaction], bool]:
        """One look at the run database's client connections (not the controller's own):
        those idle in a transaction (rechecked as :meth:`open_transactions`), and whether
        one of them is not in ``known`` (the pids the workers' psycopg connections
        reported: ferry_harness.runtime.pgconns)."""
        idle, pids = self._clients()
        return self._rechecked(idle), bool(pids - known)

    def _rechecked(self, seen: list[OpenTransaction]) -> list[OpenTransaction]:
        for pause in _OPEN_TX_RECHECKS:
            if not seen:
                return []
            time.sleep(pause)
            again = {o.pid: o for o in self._idle_in_tx()}
            seen = [again[o.pid] for o in seen if o.pid in again]
        return seen

    def _idle_in_tx(self) -> list[OpenTransaction]:
        return self._clients()[0]

    def _clients(self) -> tuple[list[OpenTransaction], set[int]]:
        """The run database's client connections but the controller's own: those idle in a
        transaction, and every one's server pid (one query)."""
        rows = self.admin.execute(
            "SELECT pid, state LIKE 'idle in transaction%%', "
            "extract(epoch FROM now() - xact_start), query FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> ALL(%s) AND backend_type = 'client backend'",
            (self.dbname, self._own_pids())).fetchall()
        idle = [OpenTransaction(pid=int(p), since_s=round(float(s or 0), 3), query=str(q or ""))
                for p, t, s, q in rows if t]
        return idle, {int(p) for p, *_ in rows}

    def _own_pids(self) -> list[int]:
        pids = [self.admin_pid]
        if self._dropper is not None and self._dropper.pid is not None:
            pids.append(self._dropper.pid)
        if self._watch is not None:
            pids.append(self._watch.pid)
        return pids

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Drop the run's database (its connections forced out) and stop a cluster we
        started. Idempotent; never raises."""
        if self._dropper is not None:
            with contextlib.suppress(Exception):
                self._dropper.close()
            self._dropper = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self.admin is not None:
            with contextlib.suppress(Exception):
                self.admin.close()
            self.admin = None
        if not self._dropped_db and self.server_uri:
            self._dropped_db = True
            with contextlib.suppress(Exception), self._psycopg.connect(
                    self.server_uri, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        if self.server is not None:
            self.server.stop()
            self.server = None


def measured(backend: Backend | None, where: str) -> set[str]:
    """What the harness can measure of an example's database, as capabilities the checks
    need: ``pg-probes`` on a Postgres server, ``wal-file`` for a SQLite file the factory
    put in WAL mode (fuzz's executor and crash hold a target to the same)."""
    if isinstance(backend, PostgresBackend):
        return {"pg-probes"}
    return {"wal-file"} if has_wal_file(where) else set()


def backend_skips(postgres: bool, declared: dict[str, str]) -> dict[str, str]:
    """What the target declares unchecked (``ferry_skips``), and what its backend cannot
    check (on Postgres: ``integrity``)."""
    out = dict(declared)
    if postgres:
        out.setdefault("integrity", PG_SKIPPED["integrity"])
    return out


def open_tx_text(pg: PostgresBackend, found: list[OpenTransaction] | None = None) -> str:
    """The target's connections idle in transaction now (or ``found``), as one line ("" when
    none)."""
    return "; ".join(f"server pid {o.pid}, open {o.since_s}s, last statement "
                     f"{o.query[:160]!r}" for o in (pg.open_transactions() if found is None
                                                    else found))


@contextlib.contextmanager
def opened_backend(name: str, *, directory: str, pg_uri: str | None = None,
                   cluster_parent: str | None = None) -> Iterator[Backend]:
    """The backend ``name`` for one run, closed when the block ends (a throwaway cluster,
    where one is started, under ``cluster_parent``)."""
    b: Backend = (PostgresBackend(pg_uri, cluster_parent=cluster_parent) if name == POSTGRES
                  else SqliteBackend(directory))
    try:
        yield b
    finally:
        b.close()
