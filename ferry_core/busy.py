"""Busy policies: what a connection does when another process holds the write lock.

SQLite's stock handler sleeps 1, 2, 5, 10 … 100 ms between tries; under contention a
process that just missed the lock can sleep 100 ms while others take it again and again,
so the tail latency and fairness suffer. Every policy here keeps the ``busy_timeout_ms``
contract: a call that stays busy that long raises SQLITE_BUSY (the store turns it into
``StoreError``).

- ``stock``: SQLite's own handler (``PRAGMA busy_timeout``).
- ``jitter``: ``busy_timeout=0`` and a Python retry after short randomised sleeps. Fair and
  a short tail, but every waiter keeps waking up to retry: with more processes than cores
  the retries eat the CPU the lock holder needs, and throughput drops well below stock.
- ``hybrid``: SQLite's handler for 1 ms (it sleeps inside SQLite, no Python exception per
  failed try), then ``jitter``'s retry. Measured as an alternative.
- ``queue`` (the default): the first try goes straight to SQLite, so an uncontended call
  costs nothing extra. A call that finds the database busy joins a waiting room kept in a
  small side file next to the database (``<db>-ferrywait``): one waiter at a time, the one
  holding the room's ``flock``, retries SQLite after short jittered sleeps; the others
  sleep in the kernel (a futex in the side file's shared mapping) until that waiter gets
  through and wakes them, so they cost no CPU and no failed SQLite attempt. Waits are
  always bounded: a sleeper wakes up at least every few milliseconds and then tries SQLite
  itself, so a waiter that is frozen (SIGSTOP) or killed while it holds the room stalls
  nobody, and the room is only ever advice: SQLite's own lock decides who writes. Where
  the room cannot be used (not Linux, an in-memory database, a side file that cannot be
  created), the policy behaves like ``jitter``.

``bench`` (``ferry-harness bench``) measures them side by side; see reports/bench/.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import platform
import random
import sqlite3
import sys
import time
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")

_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


def is_busy(exc: BaseException) -> bool:
    """True for SQLITE_BUSY (another connection holds a lock: waiting can help).

    SQLITE_LOCKED ("database table is locked", e.g. a checkpoint from a connection that
    still has a read open) is a conflict inside this connection: it never clears by
    waiting, so it is not busy and is raised at once.
    """
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        return code & 0xFF == _SQLITE_BUSY
    return str(exc).startswith("database is locked")  # 3.10: the message is all there is


class BusyPolicy(Protocol):
    name: str

    def run(self, fn: Callable[[], T]) -> T: ...


class StockPolicy:
    """SQLite's own busy handler with ``busy_timeout_ms``; no retries of our own."""

    name = "stock"

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int) -> None:
        conn.execute(f"PRAGMA busy_timeout={int(timeout_ms)}")

    def run(self, fn: Callable[[], T]) -> T:
        return fn()


class JitterPolicy:
    """Retry after short jittered sleeps until ``timeout_ms`` has passed, then raise."""

    name = "jitter"

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int, *,
                 min_sleep_s: float = 0.0001, max_sleep_s: float = 0.002) -> None:
        conn.execute("PRAGMA busy_timeout=0")
        self.timeout_s = timeout_ms / 1000
        self.min_sleep_s = min_sleep_s
        self.max_sleep_s = max_sleep_s
        self._rng = random.Random()

    def run(self, fn: Callable[[], T]) -> T:
        deadline = None
        sleep = self.min_sleep_s
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.timeout_s
                if now >= deadline:
                    raise
                time.sleep(min(self._rng.uniform(self.min_sleep_s, sleep), deadline - now))
                sleep = min(sleep * 2, self.max_sleep_s)


class HybridPolicy(JitterPolicy):
    """SQLite's own handler for ``sqlite_ms`` (one 1 ms sleep inside SQLite, no Python
    exception per failed try), then ``jitter``'s Python retry up to the deadline."""

    name = "hybrid"

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int, *, sqlite_ms: int = 1,
                 min_sleep_s: float = 0.0002, max_sleep_s: float = 0.002) -> None:
        super().__init__(conn, timeout_ms, min_sleep_s=min_sleep_s, max_sleep_s=max_sleep_s)
        conn.execute(f"PRAGMA busy_timeout={int(sqlite_ms)}")


# ---------------------------------------------------------------------- the waiting room
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
ROOM_SUFFIX = "-ferrywait"
_ROOM_BYTES = 4096


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _futex_syscall() -> tuple[Callable[..., int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    number = _SYS_FUTEX.get(platform.machine().lower())
    if number is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall, number
    except (OSError, AttributeError):
        return None


class _Room:
    """The side file: ``flock`` elects the one waiter that polls SQLite; the first word of
    its shared mapping is a generation counter the others sleep on (a futex)."""

    def __init__(self, path: str, mode: int, syscall: Callable[..., int], number: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            if os.fstat(fd).st_size < _ROOM_BYTES:  # never shrinks: every opener agrees
                os.ftruncate(fd, _ROOM_BYTES)
            self._map = mmap.mmap(fd, _ROOM_BYTES, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self._word = ctypes.c_uint32.from_buffer(self._map, 0)
        self._addr = ctypes.c_void_p(ctypes.addressof(self._word))
        self._syscall = syscall
        self._number = number
        self.pid = os.getpid()
        weakref.finalize(self, os.close, fd)

    def generation(self) -> int:
        return self._word.value

    def try_lead(self) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def leave(self) -> None:
        """Hand the room on: bump the generation (still exclusive), unlock, wake all."""
        self._word.value = (self._word.value + 1) & 0xFFFFFFFF
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self._syscall(self._number, self._addr, _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)

    def sleep(self, generation: int, seconds: float) -> None:
        """Until the generation moves on (a waiter got through) or ``seconds`` pass."""
        whole = int(seconds)
        ts = _Timespec(whole, int((seconds - whole) * 1e9))
        self._syscall(self._number, self._addr, _FUTEX_WAIT, ctypes.c_uint32(generation),
                      ctypes.byref(ts), None, 0)


class QueuePolicy:
    """First try direct; when busy, wait in the database's waiting room (module docstring).

    ``min_sleep_s``/``max_sleep_s`` bound the jittered sleeps of the one waiter that polls
    SQLite; ``nap_s`` is the longest a sleeper waits before it looks again by itself.
    """

    name = "queue"

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int, *,
                 min_sleep_s: float = 0.00005, max_sleep_s: float = 0.0005,
                 nap_s: float = 0.002) -> None:
        conn.execute("PRAGMA busy_timeout=0")
        self.timeout_s = timeout_ms / 1000
        self.min_sleep_s = min_sleep_s
        self.max_sleep_s = max_sleep_s
        self.nap_s = nap_s
        self._rng = random.Random()
        self._room: _Room | None = None
        self._room_path: str | None = None
        self._room_mode = 0o644
        self._futex = _futex_syscall()
        if self._futex is not None:
            rows = conn.execute("PRAGMA database_list").fetchall()
            path = next((r[2] for r in rows if r[1] == "main"), "")
            if path:  # "" for in-memory and temporary databases: no room, plain polling
                self._room_path = path + ROOM_SUFFIX
                try:
                    self._room_mode = os.stat(path).st_mode & 0o666
                except OSError:
                    pass

    def _get_room(self) -> _Room | None:
        """The room, opened on the first busy call (an uncontended store never creates it)."""
        room = self._room
        if room is not None and room.pid == os.getpid():
            return room
        if self._room_path is None or self._futex is None:
            return None
        try:
            self._room = _Room(self._room_path, self._room_mode, *self._futex)
        except (OSError, ValueError, BufferError):
            self._room_path = None  # cannot have one here: poll like jitter from now on
            return None
        return self._room

    def run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        deadline = time.monotonic() + self.timeout_s
        room = self._get_room()
        if room is None:
            return self._poll(fn, deadline)
        while True:
            generation = room.generation()
            if room.try_lead():
                try:
                    return self._poll(fn, deadline)
                finally:
                    room.leave()
            now = time.monotonic()
            if now >= deadline:
                return fn()  # the last try: raises SQLITE_BUSY if it still is
            room.sleep(generation, min(self.nap_s, deadline - now))
            if room.generation() == generation:
                # Nobody got through for a whole nap: the polling waiter may be frozen or
                # dead; look for ourselves instead of trusting the room.
                try:
                    return fn()
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise

    def _poll(self, fn: Callable[[], T], deadline: float) -> T:
        sleep = self.min_sleep_s
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                now = time.monotonic()
                if now >= deadline:
                    raise
                time.sleep(min(self._rng.uniform(self.min_sleep_s, sleep), deadline - now))
                sleep = min(sleep * 2, self.max_sleep_s)


POLICIES = {"stock": StockPolicy, "jitter": JitterPolicy, "hybrid": HybridPolicy,
            "queue": QueuePolicy}


def make_busy_policy(policy: str | BusyPolicy, conn: sqlite3.Connection,
                     timeout_ms: int) -> BusyPolicy:
    """Build a named policy for ``conn`` (or accept a ready-made one)."""
    if not isinstance(policy, str):
        return policy
    try:
        return POLICIES[policy](conn, timeout_ms)
    except KeyError:
        from .errors import InvalidArgument

        raise InvalidArgument(
            f"busy_policy must be one of {sorted(POLICIES)}, got {policy!r}") from None
