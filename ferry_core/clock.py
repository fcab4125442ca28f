"""Injected millisecond clocks (PROTOCOL.md#time): stores never read wall time except via SystemClock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Clock = Callable[[], int]


class SystemClock:
    """Wall-clock milliseconds since the epoch."""

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that only moves when told to: tests set exact lease boundaries with it."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self._now

    def set(self, ms: int) -> None:
        """Jump to an exact millisecond (backwards too: the harness tests clock skew)."""
        with self._lock:
            self._now = int(ms)

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` and return the new time."""
        with self._lock:
            self._now += int(ms)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"
