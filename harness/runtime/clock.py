"""One millisecond clock shared by the controller and every worker process.

The value lives in shared memory (a 64-bit integer), so the controller can stop time and
set it to an exact millisecond — a lease's ``expires - 1`` — and every store in every
process sees that instant. Stores receive it through the factory: ``factory(path, clock=…)``.
"""

from __future__ import annotations

import multiprocess as mp


class SharedClock:
    """A settable clock readable from any process forked after it was made."""

    def __init__(self, start_ms: int = 1_000_000_000) -> None:
        self._value = mp.get_context("fork").RawValue("q", int(start_ms))

    def __call__(self) -> int:
        return int(self._value.value)

    def set(self, ms: int) -> None:
        """Jump to ``ms``. The controller only moves time while no operation is in flight."""
        self._value.value = int(ms)

    def advance(self, ms: int) -> int:
        self._value.value += int(ms)
        return int(self._value.value)

    def __repr__(self) -> str:
        return f"SharedClock({self()})"
