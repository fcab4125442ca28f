"""simplebroker's ``Queue`` with its move-to-inflight recipe (PyPI ``simplebroker``, tested
with 8.7.2).

The library, as it is:

- one table ``messages(queue, body, ts PRIMARY KEY, claimed)`` plus ``meta`` and
  ``queue_aliases``; Python's ``sqlite3`` in autocommit, one connection per thread,
  ``journal_mode=WAL``; a ``<file>.lock`` file beside the database guards schema setup;
- the message id (``ts``) is a 64-bit hybrid timestamp made at write (``time.time_ns``
  aligned to 4096 ns, plus a logical counter kept in ``meta``); it is the only handle of a
  message, and ``move`` preserves it (documented);
- ``read`` claims by marking ``claimed = 1`` and is final (*exactly once*: committed
  before it returns; a consumer that dies afterwards loses the message). For concurrent
  workers that must not lose work the README prescribes moving each message atomically
  to an inflight queue, then deleting it there after processing (and moving failures to
  a dead-letter queue). That recipe is what this adapter maps;
- ``move(dest, message_id=n)`` / ``move_one(dest)`` are one conditional ``UPDATE`` in
  ``BEGIN IMMEDIATE`` (source queue, unclaimed); they return ``None`` when nothing moved.
  ``delete(message_id=n)`` returns whether a row of *this* queue was removed; a malformed
  id raises ``ValueError``;
- no lease and no visibility timeout: a message stays inflight until someone moves or
  deletes it. The library reads ``time.time_ns`` only to make ids, so nothing is moved
  onto the harness clock.

Mapping: ``dispatch`` = ``write`` to ``ferry``; ``poll_next`` = ``move_one`` from
``ferry`` to ``ferry.inflight``; ``claim`` = ``move(ferry.inflight, message_id=id)``;
``fulfill`` = ``delete(message_id=token)`` on ``ferry.inflight``; ``fail`` = ``move`` from
``ferry.inflight`` to ``ferry.dlq``; ``release`` = ``move`` from ``ferry.inflight`` back to
``ferry``; a call that changes no row is refused with ``InvalidToken``. The token is the
message id (also the task id). ``get`` looks the id up in the three queues (``SUBMITTED``
/ ``CLAIMED`` / ``FAILED``); a well-formed id found in none was deleted, i.e. acked, and
is reported ``COMPLETED`` (the library keeps no record of it). ``checkpoint`` runs
``PRAGMA wal_checkpoint`` on the library's own connection. The database is the
harness's file itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from simplebroker import Queue

from ferry_core.errors import InvalidArgument, InvalidToken, NotFound
from ferry_core.types import CLAIMED, COMPLETED, FAILED, SUBMITTED

from ._base import check_dispatch, checkpoint, make_claim, require_token, view

LIBRARY = "simplebroker"
PENDING, INFLIGHT, DEAD = "ferry", "ferry.inflight", "ferry.dlq"


def _message_id(value: Any, *, what: str = "task") -> int:
    """A simplebroker id: exactly 19 decimal digits (the library's own exact-ID form)."""
    if isinstance(value, str) and len(value) == 19 and value.isascii() and value.isdigit():
        return int(value)
    raise NotFound(f"{what} {value!r} is not a {LIBRARY} message id (19 digits)")


class SimpleBrokerStore:
    """simplebroker's move-to-inflight recipe through the store protocol (see the module
    docstring)."""

    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "claim", "fulfill", "fail", "release", "get", "checkpoint",
    })
    ferry_skips = {
        "lease-half-open": "simplebroker has no lease or visibility timeout: an inflight "
                           "message stays there until it is deleted or moved",
    }

    def __init__(self, path: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.queues = {name: Queue(name, db_path=path, persistent=True)
                       for name in (PENDING, INFLIGHT, DEAD)}
        self.queues[PENDING].peek_one()  # connect now (the library connects lazily): -wal exists

    # ---------------------------------------------------------------- queue
    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """``write``; the TTLs and attempts have no counterpart in the library."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        try:
            body = json.dumps({"title": title, "payload": payload, "requester": requester})
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"payload is not JSON: {exc}") from None
        return f"{self.queues[PENDING].write(body):019d}"

    def poll_next(self, agent_id: str):
        moved = self.queues[PENDING].move_one(INFLIGHT, with_timestamps=True)
        if moved is None:
            return None
        mid = f"{moved[1]:019d}"
        return make_claim(mid, agent_id, mid, self.clock)

    def claim(self, task_id: str, agent_id: str):
        mid = _message_id(task_id)
        if self.queues[PENDING].move(INFLIGHT, message_id=mid) is None:
            return None
        return make_claim(task_id, agent_id, task_id, self.clock)

    # ---------------------------------------------------------------- holder
    def _handle(self, token: str | None) -> int:
        token = require_token(LIBRARY, token, "message id")
        try:
            return _message_id(token, what="token")
        except NotFound as exc:
            raise InvalidToken(str(exc)) from None

    def _move_inflight(self, token: str | None, dest: str, verb: str) -> None:
        if self.queues[INFLIGHT].move(dest, message_id=self._handle(token)) is None:
            raise InvalidToken(f"{LIBRARY} moved nothing: message {token} is not inflight "
                               f"({verb} refused)")

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``delete(message_id)`` on the inflight queue; the library keeps no result."""
        if not self.queues[INFLIGHT].delete(message_id=self._handle(token)):
            raise InvalidToken(f"{LIBRARY} deleted nothing: message {token} is not inflight")

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._move_inflight(token, DEAD, "fail")

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._move_inflight(token, PENDING, "release")

    # ---------------------------------------------------------------- reads, maintenance
    def get(self, task_id: str) -> dict[str, Any]:
        mid = _message_id(task_id)
        for name, status in ((PENDING, SUBMITTED), (INFLIGHT, CLAIMED), (DEAD, FAILED)):
            found = self.queues[name].peek_one(exact_timestamp=mid)
            if found is not None:
                return view(task_id, status, payload=json.loads(found).get("payload"))
        return view(task_id, COMPLETED)  # deleted from inflight: acked (no record is kept)

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint`` on the library's own connection (see ``_base``)."""
        with self.queues[PENDING].get_connection() as db:
            return checkpoint(db._runner.get_connection(), mode)

    def close(self) -> None:
        for q in self.queues.values():
            q.close()


def make_store(path: str, *, clock: Callable[[], int]) -> SimpleBrokerStore:
    return SimpleBrokerStore(path, clock=clock)
