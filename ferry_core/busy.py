"""Busy policies: what a connection does when another process holds the write lock.

SQLite's stock handler sleeps 1, 2, 5, 10 … 100 ms between tries; under contention a
process that just missed the lock can sleep 100 ms while others take it again and again,
so the tail latency and fairness suffer. Every policy keeps the ``busy_timeout_ms``
contract: a call that stays busy that long raises SQLITE_BUSY (the store turns it into
``StoreError``).

- ``spin`` (the default): ``busy_timeout=0``; a try that finds the lock taken is retried
  for 200 us, yielding the CPU (``sched_yield``) before each retry, then after a jittered
  0.5-1 ms sleep for another 200 us, and so on until the deadline; a yield that took over
  20 us (another process ran on this CPU, even another waiter's one try) ends the window
  at once, so waiters spin only on a CPU nobody else wants. A writer holds the
  lock for one statement (~50-150 us) and leaves a gap between two of its statements, so
  a waiter that keeps trying through one such cycle gets in at the next gap instead of
  sleeping a whole millisecond first; the yield hands the CPU to a runnable process (the
  lock holder, when there are more writers than cores) and costs nothing when nobody
  else wants it.
- ``hybrid``: SQLite's own handler for 2 ms per try (two 1 ms sleeps inside SQLite: no
  Python exception per failed try, and the waiter stays off the CPU), then a short
  jittered Python sleep (0.1-1 ms) and again, until the deadline.
- ``jitter``: ``busy_timeout=0`` and a Python retry after short randomised sleeps. Fair and
  a short tail, but every waiter keeps waking up to retry: with more processes than cores
  the retries eat the CPU the lock holder needs, and throughput drops well below stock.
- ``stock``: SQLite's own handler (``PRAGMA busy_timeout``).

Why ``spin`` replaced ``hybrid`` as the default (2026-12-03, reports/bench/notes.md and
reports/bench/contention): a waiter under hybrid first sleeps 1 ms, and at 2 workers the
other one holds the lock at that moment often enough that ~2 % of claims miss twice
(2-worker claim p99 2.6-3.9 ms, the issue's goal 2 ms). In four interleaved runs on
ext4 spin gave a 2-worker p99 of 0.6-1.3 ms, 8-worker throughput +3 to +38 %, an 8-worker
p99 / p99.9 of 8-9 / 13-16 ms against 11-13 / 19-22 ms, at Jain 0.995-0.997; on tmpfs
(no fsync) 2-worker p99 0.5-1.3 against 3.7-3.9 ms. The price is CPU: waiters spin
instead of sleeping (the workers' CPU use at 8 workers 0.79-0.82 of the machine against
0.62-0.65), so on a machine busy with other work choose ``hybrid``. A window ended only
by a yield over 100 us (not 20 us) left 8-worker Jain at 0.978-0.996, depending on how
the scheduler placed the spinners.

Measured earlier with 8 workers on 2 cores (reports/bench): stock has the best throughput
but a p99.9 near 100 ms, a max of 0.3-1 s and Jain 0.87-0.97; jitter and hybrid cut p99.9
and max by 3-10x at Jain >= 0.99, hybrid at ~0.8-0.85x stock's throughput, jitter ~0.75x. A
waiting room (one waiter polls, the others sleep on a futex in a side file) measured no
better than hybrid; a room whose waiters block in ``flock`` matched stock's throughput but
cannot keep the timeout when a waiter is frozen (SIGSTOP) while it holds the room. A
queue that keeps the timeout (an ``flock`` on a side file around each write, waiters
spinning 50-500 us and then sleeping on a futex with a bounded patience, the leaver waking
one) measured worse than hybrid at 1, 2 and 8 workers (2 workers: 3.6-3.9k against
5.7-6.0k lifecycles/s), and spinning longer let writers barge (8 workers: Jain 0.62-0.67):
every hand-over wakes a sleeping process, which costs more than the lock's idle gaps.
Shorter sleeps (``busy_timeout`` 1 ms with 0.5 ms retries, or 20-300 us Python retries)
lost 5-20 % at 8 workers: more wake-ups, less CPU for the holder; two or four short
retries before hybrid's measured within the noise at 2 and 8 workers. Slices (a side file
names the process that won the lock; the others sleep until its 1-3 ms are over) cut the
2-worker p99 to 1.6-1.8 ms but cost 19-23 % of the 2-worker throughput, and
``SCHED_BATCH`` while a write waits (no wake-up preemption of the holder) lost 8-worker
throughput (reports/bench/notes.md, 2026-12-03). Spins without the yield, or one spin and
then hybrid's sleeps inside SQLite, met the 2-worker goal too but doubled the 8-worker
p99.9 (35-45 against 20-25 ms): the spinners took the CPU from the lock holder.

``bench`` (``ferry-harness bench``) measures them side by side; see reports/bench/.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")

_SQLITE_BUSY = 5  # primary result codes; SQLITE_LOCKED (6) is deliberately not busy


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
    """``run(fn)`` retries ``fn`` while SQLite says busy. A ready-made policy object may also
    have ``writing()``, a context manager the store enters around every write (one
    statement, or one BEGIN IMMEDIATE ... COMMIT), e.g. to queue writers in front of
    SQLite's lock, and ``close()``."""

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
    """SQLite's own handler for the first ``sqlite_ms`` of every try, then ``jitter``'s
    Python retry, until ``timeout_ms`` has passed.

    Inside SQLite a failed try costs no Python exception and the 1 ms sleeps keep waiters
    off the CPU the lock holder needs; the short jittered Python sleeps between tries keep
    the waiters in a random, fair order and cap every wait (no 100 ms stock sleeps).
    """

    name = "hybrid"

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int, *, sqlite_ms: int = 2,
                 min_sleep_s: float = 0.0001, max_sleep_s: float = 0.001) -> None:
        super().__init__(conn, timeout_ms, min_sleep_s=min_sleep_s, max_sleep_s=max_sleep_s)
        self.sqlite_ms = int(sqlite_ms)
        conn.execute(f"PRAGMA busy_timeout={self.sqlite_ms}")


class SpinPolicy:
    """``busy_timeout=0``; retry through ``spin_s`` windows (``sched_yield`` before each
    retry) separated by jittered sleeps of ``min_sleep_s``-``max_sleep_s``, until
    ``timeout_ms`` has passed; then the last SQLITE_BUSY is raised. A window ends early
    when a yield took longer than ``crowded_yield_s``: the kernel ran another process
    there, so the CPU is wanted and the waiter sleeps instead of spinning.

    >>> conn = sqlite3.connect(":memory:")
    >>> SpinPolicy(conn, 5000).run(lambda: 42)
    42
    """

    name = "spin"

    def __init__(self, conn: sqlite3.Connection, timeout_ms: int, *, spin_s: float = 0.0002,
                 min_sleep_s: float = 0.0005, max_sleep_s: float = 0.001,
                 crowded_yield_s: float = 0.00002) -> None:
        conn.execute("PRAGMA busy_timeout=0")
        self.timeout_s = timeout_ms / 1000
        self.spin_s = spin_s
        self.min_sleep_s = min_sleep_s
        self.max_sleep_s = max_sleep_s
        self.crowded_yield_s = crowded_yield_s
        self._rng = random.Random()
        # the clock, the sleep and the yield, as attributes so a test can watch them
        self._clock = time.monotonic
        self._sleep = time.sleep
        self._yield = getattr(os, "sched_yield", lambda: time.sleep(0))

    def run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        now = self._clock()
        deadline = now + self.timeout_s
        while True:
            end = min(now + self.spin_s, deadline)
            while True:
                self._yield()
                # a yield that took this long ran another process on this CPU (a bare yield
                # takes ~1 us): the CPU is wanted, so this window ends after the try
                crowded = self._clock() - now > self.crowded_yield_s
                try:
                    return fn()
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
                    now = self._clock()
                    if now >= deadline:
                        raise
                    if now >= end or crowded:
                        break
            self._sleep(min(self._rng.uniform(self.min_sleep_s, self.max_sleep_s),
                            deadline - now))
            now = self._clock()


POLICIES = {"stock": StockPolicy, "jitter": JitterPolicy, "hybrid": HybridPolicy,
            "spin": SpinPolicy}


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
