"""Busy policies: what a connection does when another process holds the write lock.

SQLite's stock handler sleeps 1, 2, 5, 10 … 100 ms between tries; under contention a
process that just missed the lock can sleep 100 ms while others take it again and again,
so the tail latency and fairness suffer. ``jitter`` keeps the ``busy_timeout_ms`` contract
(give up with SQLITE_BUSY after that long) but retries after short randomised sleeps.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


def is_busy(exc: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED as Python's sqlite3 reports them."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc)
    return "locked" in text or "busy" in text


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


POLICIES = {"stock": StockPolicy, "jitter": JitterPolicy}


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
