"""A throwaway PostgreSQL cluster, the Postgres counterpart of "a fresh SQLite file".

``PgServer`` runs ``initdb`` and ``pg_ctl start`` in a directory of its own and removes
both the server and the directory afterwards, even when the start or the caller fails.
The server listens on a **unix socket only** (``listen_addresses=''``): no TCP port to
find free or to collide on, nothing reachable from outside the machine. The socket lives
in the cluster's directory (or, when that path is too long for a socket name, in a short
directory of its own under the system temp dir, removed with it).

``initdb`` runs once per PostgreSQL build: its data directory is kept as a template
(under the system temp dir, owned by the server's user, mode 0700) and each cluster
starts from a copy of it.

Durability is switched off (``fsync``, ``synchronous_commit``, ``full_page_writes``): the
cluster lives for one test session or one run and is thrown away, so a crash loses
nothing anyone keeps, and commits are much cheaper. ``autovacuum`` is off too: nothing
runs in the background, so a test can tell whether a call assigned a transaction id.

As root, ``initdb`` refuses to run: the cluster is then created and run as the
``postgres`` user (``runuser -u postgres --``) and its directory is owned by that user.

``FERRY_PG_URI`` (a libpq URI) points at an existing server instead: ``pg_server()``
then yields it and starts nothing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

from ..errors import PgServerError

#: a libpq URI of an existing server: used instead of a throwaway cluster
ENV_URI = "FERRY_PG_URI"
#: the port names the socket file (``.s.PGSQL.<port>``); no TCP port is opened
PORT = 5432
#: a unix socket path must fit in sun_path (108 bytes on Linux, with the file name)
_SOCKET_DIR_MAX = 90
SETTINGS = {
    "listen_addresses": "''",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "200",
    # a throwaway cluster: no background writes (autoanalyze assigns transaction ids,
    # which would blur "this call wrote nothing"), no CPU taken from the racing workers
    "autovacuum": "off",
    # on a tmpfs (the default where one is, as for SQLite files) the WAL is memory: keep
    # it to a few segments between checkpoints instead of the 1 GB default
    "max_wal_size": "256MB",
    "min_wal_size": "32MB",
}
_START_TIMEOUT_S = 30


def find_bindir() -> str | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None when PostgreSQL is missing.

    ``pg_config --bindir`` first (the server packages install it), then ``PATH``, then
    Debian's ``/usr/lib/postgresql/<major>/bin`` (newest major first)."""
    candidates: list[str] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                 timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out:
            candidates.append(out)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(os.path.realpath(initdb)))
    majors = glob.glob("/usr/lib/postgresql/*/bin")
    majors.sort(key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
                reverse=True)
    candidates += majors
    for d in candidates:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def schema_uri(uri: str, schema: str) -> str:
    """``uri`` with ``options=-c search_path=<schema>`` added: the URI a target gets to
    work in its own schema (libpq applies the option at connect)."""
    sep = "&" if "?" in uri else "?"
    return f"{uri}{sep}options={quote(f'-c search_path={schema}', safe='')}"


class PgServer:
    """One throwaway cluster: ``with PgServer() as pg: connect(pg.uri)``.

    ``directory``: where the cluster lives (data directory, log, socket); None makes a
    fresh one under ``parent`` (default: the system temp dir; ``fuzz`` passes its
    ``--db-dir``, /dev/shm where that is a tmpfs: PgLeaseStore's DDL there was measured
    at 14-19 ms against 50-54 ms on ext4). Either way it is removed on ``stop``. As root the
    ``postgres`` user must be able to reach it (the default is). ``startup_s`` is what
    ``initdb`` + ``pg_ctl start`` took, measured.
    """

    def __init__(self, directory: str | None = None, *, bindir: str | None = None,
                 parent: str | None = None) -> None:
        self.bindir = bindir or find_bindir()
        if self.bindir is None:
            raise PgServerError(
                "postgresql not found: no initdb/pg_ctl in pg_config --bindir, PATH or "
                "/usr/lib/postgresql/*/bin (apt-get install postgresql), or set "
                f"{ENV_URI} to an existing server")
        self._own_dir = directory is None
        self.directory = os.path.abspath(
            directory if directory is not None else tempfile.mkdtemp(prefix="ferry-pg-", dir=parent))
        self.datadir = os.path.join(self.directory, "data")
        self.logfile = os.path.join(self.directory, "server.log")
        self._socket_tmp: str | None = None
        self.socket_dir = self.directory
        self.uri = ""
        self.startup_s = 0.0
        self._running = False
        self._as_postgres = os.geteuid() == 0

    # ------------------------------------------------------------------ running binaries
    def _cmd(self, *argv: str) -> list[str]:
        exe = [os.path.join(self.bindir or "", argv[0]), *argv[1:]]
        return ["runuser", "-u", "postgres", "--", *exe] if self._as_postgres else exe

    def _run(self, *argv: str, timeout: float = 60) -> None:
        try:
            proc = subprocess.run(self._cmd(*argv), capture_output=True, text=True,
                                  timeout=timeout, cwd=self.directory, check=False,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            raise PgServerError(f"{argv[0]} could not run: {exc}") from None
        if proc.returncode != 0:
            raise PgServerError(f"{argv[0]} failed (exit {proc.returncode}): "
                                f"{(proc.stderr or proc.stdout).strip()[-600:]}"
                                f"{self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(self.logfile, encoding="utf-8", errors="replace") as fh:
                tail = fh.read()[-600:].strip()
        except OSError:
            return ""
        return f"\nserver log ({self.logfile}):\n{tail}" if tail else ""

    def _prepare_dirs(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        if len(os.path.join(self.directory, f".s.PGSQL.{PORT}.lock")) > _SOCKET_DIR_MAX:
            self._socket_tmp = tempfile.mkdtemp(prefix="ferry-pgs-")
            self.socket_dir = self._socket_tmp
        if self._as_postgres:
            for d in {self.directory, self.socket_dir}:
                shutil.chown(d, user="postgres")
            probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w",
                                    self.directory], capture_output=True, check=False)
            if probe.returncode != 0:
                raise PgServerError(
                    f"the postgres user cannot write {self.directory!r} (a parent directory "
                    "is closed to it); leave the directory to PgServer (None)")

    def _initdb(self, datadir: str) -> None:
        self._run("initdb", "-D", datadir, "-U", "postgres", "--auth=trust",
                  "--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C")

    def _template(self) -> str:
        """The cached, never started data directory this server's one is copied from."""
        exe = os.path.realpath(os.path.join(self.bindir or "", "postgres"))
        stamp = f"{exe}:{os.stat(exe).st_mtime_ns}".encode()
        key = f"{zlib.crc32(stamp):08x}"
        return os.path.join(tempfile.gettempdir(), f"ferry-pg-template-{os.geteuid()}-{key}")

    def _usable_template(self, path: str) -> bool:
        try:
            st = os.stat(path)
        except OSError:
            return False
        owner = pwd.getpwnam("postgres").pw_uid if self._as_postgres else os.geteuid()
        return (st.st_uid == owner and st.st_mode & 0o077 == 0
                and os.path.exists(os.path.join(path, "PG_VERSION")))

    def _init_datadir(self) -> None:
        """``initdb`` once per PostgreSQL build, then a copy of that template (``cp -a``:
        ~0.1 s against ~1-2 s for initdb). The template is built aside and renamed into
        place, so concurrent first starts (pytest-xdist workers) never see half of one;
        it must belong to the server's user and be closed to others, else it is rebuilt."""
        template = self._template()
        if not self._usable_template(template):
            build = tempfile.mkdtemp(prefix="ferry-pg-build-")
            try:
                if self._as_postgres:
                    shutil.chown(build, user="postgres")
                self._initdb(os.path.join(build, "data"))
                try:
                    os.rename(os.path.join(build, "data"), template)
                except OSError:  # another process put its template there first
                    pass
            finally:
                shutil.rmtree(build, ignore_errors=True)
        if not self._usable_template(template):
            self._initdb(self.datadir)
            return
        try:
            subprocess.run(["cp", "-a", template, self.datadir], check=True,
                           capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            shutil.rmtree(self.datadir, ignore_errors=True)
            self._initdb(self.datadir)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> PgServer:
        """initdb, start, wait until it accepts connections; on any failure clean up."""
        t0 = time.perf_counter()
        try:
            self._prepare_dirs()
            self._init_datadir()
            opts = " ".join(f"-c {k}={v}" for k, v in SETTINGS.items())
            opts += f" -c unix_socket_directories='{self.socket_dir}' -c port={PORT}"
            self._running = True  # from here on stop() must run pg_ctl stop
            self._run("pg_ctl", "-D", self.datadir, "-l", self.logfile, "-w", "-s",
                      "-t", str(_START_TIMEOUT_S), "-o", opts, "start",
                      timeout=_START_TIMEOUT_S + 10)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        self.uri = (f"postgresql://postgres@/postgres?host={quote(self.socket_dir, safe='')}"
                    f"&port={PORT}")
        return self

    def _postmaster_pid(self) -> int | None:
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as fh:
                return int(fh.readline().strip())
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """``pg_ctl stop -m immediate``, then remove the directory. Safe to call twice."""
        if self._running:
            self._running = False
            try:
                self._run("pg_ctl", "-D", self.datadir, "-m", "immediate", "-w", "-s", "stop",
                          timeout=30)
            except PgServerError:
                pid = self._postmaster_pid()  # our own postmaster: end it by its id
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGQUIT)
                    except OSError:
                        pass
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            shutil.rmtree(self.datadir, ignore_errors=True)
        if self._socket_tmp is not None:
            shutil.rmtree(self._socket_tmp, ignore_errors=True)
            self._socket_tmp = None

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"PgServer({self.directory!r}, running={self._running})"


@contextmanager
def pg_server(directory: str | None = None) -> Iterator[str]:
    """The URI of a server to use: ``$FERRY_PG_URI`` if set (nothing started), else a
    throwaway ``PgServer`` stopped and removed when the block ends."""
    uri = os.environ.get(ENV_URI)
    if uri:
        yield uri
        return
    with PgServer(directory) as server:
        yield server.uri
