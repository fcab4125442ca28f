"""Poll-only stores: ``ferry_core.LeaseStore`` with ``claim`` hidden, as most PyPI queues are.

A queue with ``get()`` / ``ack()`` has no claim by id: a worker takes whatever the queue
hands it next. These stores expose no ``claim`` attribute and declare ``ferry_capabilities``
without it, so the harness must stage everything with ``poll_next`` (scenarios, the
nemesis's rescuers). One is correct; the other two carry one bug each that only a
rescuer racing at a dead or frozen holder's expiry can see:

- :func:`late_reclaim`: the reaper gives an expired lease ``GRACE_MS`` more before it
  requeues the task, so at ``lease_expires_at`` the holder is refused and no poller can
  take the task either (a window with no holder at all);
- :func:`zombie_write`: ``fulfill``'s final UPDATE forgets the claim token
  (``tests.broken_stores.UnfencedWriteStore``): a holder frozen between its guard and its
  write, woken after a poller took the task over, completes the new holder's claim.

Load them as ``--target tests.poll_only_stores:<factory>``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, NoReturn

from ferry_core import LeaseStore
from ferry_harness.check.ops import FEATURES, PROTOCOL
from tests.broken_stores import UnfencedWriteStore

GRACE_MS = 1_000  # how late the broken reaper requeues an expired lease

# every operation but claim, every SPEC feature, dependencies: a full store without claim(id)
POLL_ONLY_CAPABILITIES = frozenset(set(PROTOCOL) - {"claim"} | set(FEATURES) | {"dag"})


class PollOnly:
    """Mixin: no ``claim`` at all (``getattr(store, "claim")`` raises AttributeError)."""

    ferry_capabilities = POLL_ONLY_CAPABILITIES

    @property
    def claim(self) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is poll-only: it has no claim(task_id)")


class PollOnlyStore(PollOnly, LeaseStore):
    """Correct: the reference store, taken only by polling."""


class LateReclaimStore(PollOnly, LeaseStore):
    """BUG: an expired lease is requeued ``GRACE_MS`` after ``lease_expires_at``.

    A "grace period for slow workers" added to the reaper: due events are applied as of
    ``now - GRACE_MS``. The holder is still refused from ``lease_expires_at`` on (its guard
    compares with ``now``), so for ``GRACE_MS`` the task has no holder and nobody can take
    it. Without faults nothing stays claimed long enough for a poll to notice.
    Invariant: ``lease-half-open`` (a dead holder's lease must end at ``lease_expires_at``).
    """

    def _apply_due(self, conn: sqlite3.Connection, now: int) -> int:
        return super()._apply_due(conn, now - GRACE_MS)


class ZombieWriteStore(PollOnly, UnfencedWriteStore):
    """BUG: fulfill's final UPDATE lacks the token (see the module docstring).
    Invariant: ``lease-half-open`` (a zombie's result must be refused)."""


def poll_only(path: str, *, clock: Any) -> PollOnlyStore:
    return PollOnlyStore(path, clock=clock)


def late_reclaim(path: str, *, clock: Any) -> LateReclaimStore:
    return LateReclaimStore(path, clock=clock)


def zombie_write(path: str, *, clock: Any) -> ZombieWriteStore:
    return ZombieWriteStore(path, clock=clock)


# factory -> (faults that catch it, invariant id)
POLL_ONLY_BROKEN: dict[str, tuple[tuple[str, ...], str]] = {
    "late_reclaim": (("kill", "pause"), "lease-half-open"),
    "zombie_write": (("kill", "pause"), "lease-half-open"),
}


# ---------------------------------------------------------------------- slow variants
SLOW_S = 0.3  # fulfill waits this long before its guard: a fault after half of it lands there


class SlowFulfill:
    """Mixin: ``fulfill`` sleeps ``SLOW_S`` before doing anything (a result being uploaded),
    so a kill or pause timed at half of it lands while the lease is still on the task."""

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        time.sleep(SLOW_S)
        return super().fulfill(task_id, agent_id, token, result)  # type: ignore[misc]


class SlowPollOnlyStore(SlowFulfill, PollOnlyStore):
    """Correct, slow to fulfill."""


class SlowLateReclaimStore(SlowFulfill, LateReclaimStore):
    """The late reclaim, slow to fulfill."""


def slow_poll_only(path: str, *, clock: Any) -> SlowPollOnlyStore:
    return SlowPollOnlyStore(path, clock=clock)


def slow_late_reclaim(path: str, *, clock: Any) -> SlowLateReclaimStore:
    return SlowLateReclaimStore(path, clock=clock)
