"""persist-queue's ``SQLiteAckQueue`` (PyPI ``persist-queue``, tested with 1.1.0).

The library, as it is:

- one table ``ack_queue_<name>`` with an integer ``_id``, a ``status`` (0 inited, 1 ready,
  2 unack, 5 acked, 9 ack_failed) and the pickled or JSON ``data``; ``PRAGMA
  journal_mode=WAL`` on every connection (Python's ``sqlite3``);
- ``get()`` selects the first ready row, then marks it ``unack`` in a second statement,
  with no status condition (only a ``threading.Lock``, which does nothing across
  processes); ``get(id=n)`` selects row ``n`` whatever its status;
- ``ack(id=n)``, ``ack_failed(id=n)``, ``nack(id=n)`` update row ``n`` whatever its status;
  the id is the only handle, it never changes, and anyone can pass any id;
- no lease: an ``unack`` row stays unacked until acked or nacked, or until *any* process
  opens the queue with ``auto_resume=True`` (the default), which puts every unacked row
  back to ready;
- no result storage, no per-agent tasks, no dependencies, no locks, no queue TTL; the
  ``timestamp`` column is ``time.time()`` at put and drives nothing.

Mapping: ``dispatch`` = ``put``; ``poll_next`` = ``get(block=False, raw=True)``; ``claim``
= ``get(block=False, id=n, raw=True)``; ``fulfill`` / ``fail`` / ``release`` = ``ack`` /
``ack_failed`` / ``nack`` with ``id=token``; the token is the message id (the library's
only ack handle, passed through unchanged); ``get`` reads ``queue()``; ``checkpoint`` runs
``PRAGMA wal_checkpoint`` on the library's own connection. The database is the harness's
file itself (``path=dirname, db_file_name=basename``). Nothing to patch for time: there is
no lease to drive.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from persistqueue.exceptions import Empty
from persistqueue.serializers import json as json_serializer
from persistqueue.sqlackqueue import SQLiteAckQueue

from ferry_core.errors import InvalidToken, NotFound
from ferry_core.types import CLAIMED, COMPLETED, FAILED, SUBMITTED

from ._base import check_dispatch, checkpoint, make_claim, require_token, view

LIBRARY = "persist-queue"
STATUS = {0: SUBMITTED, 1: SUBMITTED, 2: CLAIMED, 5: COMPLETED, 9: FAILED}

# the library logs a warning for every ack whose id is not a number; the refusal says it
logging.getLogger("persistqueue").setLevel(logging.ERROR)


def _rowid(task_id: Any) -> int:
    if isinstance(task_id, str) and task_id.isdigit():
        return int(task_id)
    raise NotFound(f"task {task_id!r} does not exist ({LIBRARY} ids are integers)")


class PersistQueueStore:
    """``SQLiteAckQueue`` through the store protocol (see the module docstring)."""

    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "claim", "fulfill", "fail", "release", "get", "checkpoint",
    })
    ferry_skips = {
        "lease-half-open": "SQLiteAckQueue has no lease: a claimed (unack) message stays "
                           "claimed until acked or nacked, or until any process opens the "
                           "queue with auto_resume=True",
    }

    def __init__(self, path: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.q = SQLiteAckQueue(os.path.dirname(os.path.abspath(path)), name="ferry",
                                db_file_name=os.path.basename(path),
                                serializer=json_serializer)

    # ---------------------------------------------------------------- queue
    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """``put``; the TTLs and attempts have no counterpart in the library."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        return str(self.q.put({"title": title, "payload": payload, "requester": requester}))

    def poll_next(self, agent_id: str):
        try:
            item = self.q.get(block=False, raw=True)
        except Empty:
            return None
        return make_claim(item["pqid"], agent_id, item["pqid"], self.clock)

    def claim(self, task_id: str, agent_id: str):
        rowid = _rowid(task_id)
        try:
            item = self.q.get(block=False, id=rowid, raw=True)
        except Empty:
            return None
        return make_claim(item["pqid"], agent_id, item["pqid"], self.clock)

    # ---------------------------------------------------------------- holder
    def _ack(self, method: Callable[..., int | None], token: str | None) -> None:
        token = require_token(LIBRARY, token, "message id (pqid)")
        if method(id=token) is None:  # the library's only refusal: "not an id", nothing done
            raise InvalidToken(f"{LIBRARY} ignored the call: {token!r} is not a message id")

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``ack(id=token)``; the library keeps no result."""
        self._ack(self.q.ack, token)

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._ack(self.q.ack_failed, token)

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._ack(self.q.nack, token)

    # ---------------------------------------------------------------- reads, maintenance
    def get(self, task_id: str) -> dict[str, Any]:
        rowid = _rowid(task_id)
        for row in self.q.queue():
            if row["id"] == rowid:
                return view(str(rowid), STATUS[int(row["status"])],
                            payload=(row["data"] or {}).get("payload"))
        raise NotFound(f"task {task_id!r} does not exist")

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint`` on the library's own connection (see ``_base``)."""
        return checkpoint(self.q._putter, mode)

    def close(self) -> None:
        self.q.close()


def make_store(path: str, *, clock: Callable[[], int]) -> PersistQueueStore:
    return PersistQueueStore(path, clock=clock)
