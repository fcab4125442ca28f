"""localqueue (PyPI ``localqueue``, tested with 1.4.1): leases and receipts, in Rust.

The library, as it is:

- the engine is a Rust extension (``localqueue.localqueue.NativeQueue``) with its *own*
  SQLite (3.46.0 bundled, while Python's ``sqlite3`` here is 3.40.1); ``SimpleQueue`` is a
  thin Python facade over it that always names the file ``<dir>/localqueue.db``. WAL
  mode, ``synchronous=NORMAL``, a 5 s busy timeout (``diagnostics()``);
- ``get(lease_ms)`` claims the oldest ready message in one ``BEGIN IMMEDIATE``
  transaction and returns a ``Lease`` with a fresh ``receipt`` and ``lease_until`` (wall
  clock, ms); ``ack`` / ``nack`` / ``fail`` / ``extend_lease`` need ``(id, receipt)`` and
  repeat ``receipt = ? AND lease_until > now`` in their ``UPDATE``; every refusal is
  ``localqueue.LeaseExpired("lease has expired")`` (forged, stale and expired receipts
  alike). A nack past ``max_attempts`` deliveries moves the message to dead-letter.
- The lease clock is Rust's ``SystemTime`` inside the extension: nothing in Python can
  move it to the harness clock. So the adapter takes 1-hour leases (they never lapse
  during a run) and declares no ``lease``: the model expects no expiry, and the lease
  boundaries are not checked. No per-message read, no checkpoint, no claim by id.

Mapping: the adapter drives ``NativeQueue`` directly, exactly as ``SimpleQueue`` does
(``put`` -> ``put(payload)``; ``get`` -> ``get(lease_ms)``; ``ack(job)`` -> ``ack(id,
receipt)``; ``nack`` / ``fail`` / ``extend_lease`` likewise), so that the database is the
harness's file itself. ``dispatch`` = ``put``; ``poll_next`` = ``get``; ``fulfill`` /
``fail`` / ``release`` / ``extend`` = ``ack`` / ``fail`` / ``nack`` / ``extend_lease``
with ``(task_id, token)``; the token is the receipt. ``max_attempts`` is set high (2**31-1)
because the protocol's release has no retry budget (PROTOCOL.md#release): the model would
not expect dead-letter.

Never open the database with Python's ``sqlite3`` in a process that runs this adapter:
two SQLite libraries in one process do not share POSIX locks, and closing one
connection drops the other's locks (WAL corruption). The adapter never does; the
harness's long-reader process is a separate process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from localqueue import localqueue as native
from localqueue.deadletter import FailureReason
from localqueue.exceptions import LeaseExpired as LocalLeaseExpired

from ferry_core.errors import LeaseExpired, NotFound

from ._base import check_dispatch, make_claim, require_token

LIBRARY = "localqueue"
LEASE_MS = 3_600_000  # wall-clock lease: longer than any run, so it never lapses
MAX_ATTEMPTS = 2**31 - 1


def _id(task_id: Any) -> int:
    if isinstance(task_id, str) and task_id.isdigit():
        return int(task_id)
    raise NotFound(f"task {task_id!r} does not exist ({LIBRARY} ids are integers)")


class LocalQueueStore:
    """localqueue's engine through the store protocol (see the module docstring)."""

    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "fulfill", "fail", "release", "extend",
    })
    ferry_skips = {
        "lease-half-open": "localqueue's lease clock is Rust SystemTime inside the extension; "
                           "the harness clock cannot drive it (1-hour leases, never lapsing)",
        "no-lost-task": "localqueue has no read of one message (no get by id); lost tasks "
                        "show only as claims and acks the model rejects",
        "wal-bounded": "localqueue has no checkpoint call, and Python's sqlite3 must not open "
                       "the file in a process that runs localqueue's bundled SQLite",
    }

    def __init__(self, path: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.q = native.NativeQueue(path, "ferry", max_attempts=MAX_ATTEMPTS, fsync=False)

    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """``put``; the TTLs and attempts have no counterpart on the harness clock."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        data = json.dumps({"title": title, "payload": payload, "requester": requester})
        return str(self.q.put(data.encode()))

    def poll_next(self, agent_id: str):
        lease = self.q.get(LEASE_MS)
        if lease is None:
            return None
        return make_claim(lease.id, agent_id, lease.receipt, self.clock)

    def _holder(self, task_id: str, token: str | None, call: Callable[[int, str], Any]) -> Any:
        receipt = require_token(LIBRARY, token, "receipt")
        try:
            return call(_id(task_id), receipt)
        except LocalLeaseExpired as exc:
            raise LeaseExpired(f"{LIBRARY}: {exc} (its one refusal, for any receipt that does "
                               "not hold a live lease: forged, stale or expired)") from None

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``ack(id, receipt)``; the library keeps no result."""
        self._holder(task_id, token, self.q.ack)

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._holder(task_id, token, lambda i, r: self.q.fail(
            i, r, reason or None, FailureReason.EXPLICIT_PERMANENT_FAILURE.value, None))

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._holder(task_id, token, lambda i, r: self.q.nack(i, r, 0, reason or None, None))

    def extend(self, task_id: str, agent_id: str, token: str | None) -> None:
        """``extend_lease``: the new expiry is wall-clock, so none is reported."""
        self._holder(task_id, token, lambda i, r: self.q.extend_lease(i, r, LEASE_MS))

    def close(self) -> None:
        self.q.close()


def make_store(path: str, *, clock: Callable[[], int]) -> LocalQueueStore:
    return LocalQueueStore(path, clock=clock)
