"""litequeue's ``LiteQueue`` (PyPI ``litequeue``, tested with 0.9).

The library, as it is:

- one table (``[ferry]`` here) with ``message_id`` (a UUIDv7 string made at put),
  ``status`` (0 READY, 1 LOCKED, 2 DONE, 3 FAILED) and wall-clock ``in_time`` /
  ``lock_time`` / ``done_time``; ``PRAGMA journal_mode=WAL``, ``synchronous=NORMAL``
  (Python's ``sqlite3``, autocommit);
- ``pop()`` is one ``BEGIN IMMEDIATE`` transaction with ``UPDATE … RETURNING`` on SQLite
  >= 3.35: the claim itself is atomic; there is no way to claim a given message;
- ``done(id)``, ``mark_failed(id)`` and ``retry(id)`` are one ``UPDATE … WHERE
  message_id = ?`` each, with no status condition and no return value that says whether
  a row changed; the message id is the only handle and never changes;
- no lease: ``list_locked(threshold_seconds)`` only lists old LOCKED messages, nothing
  requeues them; no result storage, no per-agent tasks, no dependencies, no locks, no
  queue TTL. Its clock (``time.time_ns``) only stamps rows and orders UUIDv7 ids, so
  there is nothing to move onto the harness clock.

Mapping: ``dispatch`` = ``put``; ``poll_next`` = ``pop``; ``fulfill`` / ``fail`` /
``release`` = ``done`` / ``mark_failed`` / ``retry`` with the token; the token is the
``message_id`` (also the task id: the library's only handle, passed through unchanged);
``get`` = ``get(message_id)``; ``checkpoint`` runs ``PRAGMA wal_checkpoint`` on the
library's own connection. No ``claim``: the harness races ``poll_next`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from litequeue import LiteQueue, MessageStatus

from ferry_core.errors import InvalidArgument, NotFound
from ferry_core.types import CLAIMED, COMPLETED, FAILED, SUBMITTED

from ._base import check_dispatch, checkpoint, make_claim, require_token, view

LIBRARY = "litequeue"
STATUS = {MessageStatus.READY: SUBMITTED, MessageStatus.LOCKED: CLAIMED,
          MessageStatus.DONE: COMPLETED, MessageStatus.FAILED: FAILED}


class LiteQueueStore:
    """``LiteQueue`` through the store protocol (see the module docstring)."""

    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "fulfill", "fail", "release", "get", "checkpoint",
    })
    ferry_skips = {
        "lease-half-open": "LiteQueue has no lease: a LOCKED message stays LOCKED until done, "
                           "mark_failed or retry is called for it",
    }

    def __init__(self, path: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.q = LiteQueue(path, queue_name="ferry")

    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """``put``; the TTLs and attempts have no counterpart in the library."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        try:
            data = json.dumps({"title": title, "payload": payload, "requester": requester})
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"payload is not JSON: {exc}") from None
        return self.q.put(data).message_id

    def poll_next(self, agent_id: str):
        msg = self.q.pop()
        if msg is None:
            return None
        return make_claim(msg.message_id, agent_id, msg.message_id, self.clock)

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``done(token)``; the library keeps no result and never refuses."""
        self.q.done(require_token(LIBRARY, token, "message_id"))

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self.q.mark_failed(require_token(LIBRARY, token, "message_id"))

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self.q.retry(require_token(LIBRARY, token, "message_id"))

    def get(self, task_id: str) -> dict[str, Any]:
        msg = self.q.get(task_id)
        if msg is None:
            raise NotFound(f"task {task_id!r} does not exist")
        return view(msg.message_id, STATUS[MessageStatus(msg.status)],
                    payload=json.loads(msg.data).get("payload"))

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint`` on the library's own connection (see ``_base``)."""
        return checkpoint(self.q.conn, mode)

    def close(self) -> None:
        self.q.close()


def make_store(path: str, *, clock: Callable[[], int]) -> LiteQueueStore:
    return LiteQueueStore(path, clock=clock)
