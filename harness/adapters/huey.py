"""huey's ``SqliteHuey`` / ``SqliteStorage`` (PyPI ``huey``, tested with 3.5.4).

The library, as it is:

- ``SqliteStorage`` keeps four tables (``task``, ``schedule``, ``kv``, ``counter``) in one
  file, Python's ``sqlite3`` in autocommit, ``journal_mode=wal``, busy timeout 5 s, one
  connection per storage object (a ``threading.Lock`` serialises its use in a process);
- ``dequeue()`` is the claim: a quick ``SELECT 1`` outside any transaction (an empty
  queue writes nothing), then ``BEGIN EXCLUSIVE``, ``SELECT`` the first row by priority
  and id, ``DELETE`` it, ``COMMIT``. The task leaves the database at that moment: huey is
  *at most once* — there is no lease, no visibility timeout, nothing re-delivers a task
  whose consumer died, and nothing says who is running it;
- a task's identity is ``Task.id`` (a uuid4 string made at enqueue). The consumer that ran
  it writes the outcome with ``put_result(task.id, value)`` — ``INSERT OR REPLACE INTO
  kv`` — or ``put_result(task.id, Error(...))`` when it raised; ``store_none=True`` (set
  here) makes a ``None`` result visible too. The result write checks nothing: not that
  the task was dequeued, not by whom, not that no result is there yet;
- retries are re-enqueued by the consumer that ran the task, in its own process, with the
  same ``Task`` object (same id); there is no call to give a dequeued task back, so the
  adapter has no ``release``;
- ``TaskLock`` (``put_if_empty`` / delete of a ``kv`` key) has no owner and no TTL
  (``SqliteStorage.put_if_empty`` raises ``NotImplementedError`` for a ttl), so it cannot
  be held to ferry's leased, owned locks and is not mapped;
- the clock: ``huey.utils.utcnow`` (``datetime.utcnow`` on Python < 3.12) resolves a
  task's ``expires`` at enqueue, and ``Huey._get_timestamp`` (``huey.api.utcnow``) is the
  instant a consumer compares it with: ``expires_resolved < now`` discards the task. That
  is a queue window, not a lease; it is driven on the harness clock only by
  :func:`make_expiring_store` (below), where the task's ``expires`` is the dispatch's
  ``queue_ttl_ms``. Both modules' ``utcnow`` and ``datetime`` names are moved onto the
  harness clock with :func:`ferry_harness.adapters.clock.patch_library_clock`, as an integer
  millisecond ``datetime`` (no float rounding: ``EPOCH + timedelta(milliseconds=ms)``);
  ``time.monotonic`` stays real (huey times blocking result waits with it).

Mapping (:func:`make_store`): ``dispatch`` = enqueue a ``ferry_job(title, payload,
requester)`` task (``retries=0``); ``poll_next`` = ``Huey.dequeue``; ``fulfill`` =
``put_result(task.id, result)``; ``fail`` = ``put_result(task.id, Error(...))``; the token
is ``Task.id`` (also the task id: huey's only handle, passed through unchanged; a token
that names another task is refused). ``get``
reads the result (``COMPLETED`` / ``FAILED``), else the pending tasks (``SUBMITTED``),
else reports ``CLAIMED`` (dequeued, no result yet: huey cannot tell that apart from a task
that never existed, or from one whose consumer died). ``checkpoint`` runs ``PRAGMA
wal_checkpoint`` on the storage's own connection. The database is the harness's file.

Two more factories isolate what :func:`make_store` finds: :func:`make_first_result_store`
writes results with ``put_if_empty`` (first result wins), and :func:`make_expiring_store`
adds huey's task expiry on top of it.
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from collections.abc import Callable
from typing import Any

import huey.api
import huey.utils
from huey import SqliteHuey
from huey.constants import EmptyData
from huey.utils import Error

from ferry_core.errors import InvalidArgument, InvalidToken, NotFound
from ferry_core.store import MAX_TTL_MS
from ferry_core.types import CLAIMED, COMPLETED, FAILED, SUBMITTED, TIMED_OUT

from ._base import check_dispatch, checkpoint, make_claim, require_token, view
from .clock import EPOCH as EPOCH  # re-exported: a huey instant is EPOCH + harness ms
from .clock import ClockPatch, LibraryClock, patch_library_clock

LIBRARY = "huey"
JOB = "ferry_job"


def _job(title: str, payload: Any, requester: str) -> Any:  # never run: ferry is the consumer
    return payload


def clock_datetime(clock: Callable[[], int]) -> Callable[[], _dt.datetime]:
    """A naive UTC ``datetime`` for harness milliseconds, exact (integer arithmetic)."""
    return LibraryClock(clock).utcnow


def patch_huey_clock(clock: Callable[[], int]) -> ClockPatch:
    """Route huey's time reads onto the harness clock (in this worker process).

    huey binds ``utcnow`` by name in ``huey.utils`` (``normalize_time``, used to resolve
    ``expires``) and in ``huey.api`` (``Huey._get_timestamp``), and reads
    ``datetime.datetime.now`` through the ``datetime`` module name of both when not in UTC
    mode; those names are replaced (see :mod:`ferry_harness.adapters.clock`).
    """
    return patch_library_clock([huey.utils, huey.api], clock, only=("utcnow", "datetime"))


class HueyStore:
    """``SqliteHuey`` through the store protocol (see the module docstring)."""

    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "fulfill", "fail", "get", "checkpoint", "results",
    })
    ferry_skips = {
        "lease-half-open": "huey has no lease: dequeue deletes the task (at most once), "
                           "nothing re-delivers it",
        "lock-exclusive": "huey's TaskLock has no owner and no TTL on SQLite "
                          "(put_if_empty(ttl=...) raises NotImplementedError)",
    }
    expiring = False

    def __init__(self, path: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.clock_patch = patch_huey_clock(clock) if self.expiring else None
        self.huey = SqliteHuey(name="ferry", filename=path, store_none=True, utc=True)
        self.job = self.huey.task(name=JOB)(_job)
        self.huey.pending_count()  # open the connection now (huey connects lazily): the -wal exists

    # ---------------------------------------------------------------- queue
    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """Enqueue a ``ferry_job`` task; ``queue_ttl_ms`` becomes ``expires`` only in the
        expiring variant (huey has no lease, so ``exec_ttl_ms`` has no counterpart)."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        expires = None
        if self.expiring and queue_ttl_ms is not None:
            if (isinstance(queue_ttl_ms, bool) or not isinstance(queue_ttl_ms, int)
                    or not 0 < queue_ttl_ms <= MAX_TTL_MS):
                raise InvalidArgument(
                    f"queue_ttl_ms must be a positive integer up to {MAX_TTL_MS}")
            expires = LibraryClock(self.clock).timedelta(queue_ttl_ms)
        task = self.job.s(title, payload, requester, retries=0, expires=expires)
        self.huey.enqueue(task)
        return task.id

    def _expired(self, task: Any) -> bool:
        """huey's own rule (``Huey.execute``): discard when ``expires_resolved < now``."""
        return bool(task.expires_resolved and task.expires_resolved < self.huey._get_timestamp())

    def poll_next(self, agent_id: str):
        while True:
            task = self.huey.dequeue()
            if task is None:
                return None
            if not self._expired(task):  # a consumer drops an expired task and dequeues again
                return make_claim(task.id, agent_id, task.id, self.clock)

    # ---------------------------------------------------------------- holder
    def _handle(self, task_id: str, token: str | None) -> str:
        """huey's one handle is the task id: a token naming another task is refused here
        (the library would write a result for that other id)."""
        token = require_token(LIBRARY, token, "task id")
        if token != task_id:
            raise InvalidToken(f"{LIBRARY}'s handle is the task id: {token!r} names another task")
        return token

    def _put(self, key: str, value: Any) -> None:
        """``put_result``: ``INSERT OR REPLACE``, as the consumer does; never refuses."""
        self.huey.put_result(key, value)

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``put_result(task.id, value)``, as the consumer does after running the task."""
        handle = self._handle(task_id, token)
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:  # huey would pickle it; the protocol says JSON
            raise InvalidArgument(f"result must be JSON: {exc}") from None
        self._put(handle, result)

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """``put_result(task.id, Error(...))``, as the consumer does when the task raised."""
        self._put(self._handle(task_id, token),
                  Error({"error": reason, "retries": 0, "task_id": task_id}))

    # ---------------------------------------------------------------- reads, maintenance
    def get(self, task_id: str) -> dict[str, Any]:
        if not isinstance(task_id, str) or not _is_uuid(task_id):
            # huey forgets a task once taken, so only the id's form can say "never issued"
            raise NotFound(f"task {task_id!r} does not exist (huey task ids are UUIDs)")
        raw = self.huey.get_raw(task_id, peek=True)
        if raw is not EmptyData:
            value = self.huey.serializer.deserialize(raw)
            if isinstance(value, Error):
                return view(task_id, FAILED, reason=value.metadata.get("error"))
            return view(task_id, COMPLETED, result=value)
        for task in self.huey.pending():
            if task.id == task_id:
                if self._expired(task):
                    return view(task_id, TIMED_OUT)
                return view(task_id, SUBMITTED, payload=task.args[1])
        return view(task_id, CLAIMED)  # dequeued and no result yet (or never enqueued)

    def checkpoint(self, mode: str = "TRUNCATE") -> tuple[int, int, int]:
        """``PRAGMA wal_checkpoint`` on the storage's own connection (see ``_base``)."""
        with self.huey.storage.lock:
            return checkpoint(self.huey.storage.conn, mode)

    def close(self) -> None:
        self.huey.storage.close()
        if self.clock_patch is not None:
            self.clock_patch.undo()


class FirstResultHueyStore(HueyStore):
    """The same queue, with results written by ``storage.put_if_empty`` (huey's own
    ``INSERT OR ABORT``, the call ``TaskLock`` uses) instead of ``put_result``: the first
    result wins and a second one is refused (``InvalidToken``). Not what huey's consumer
    does; it separates the queue (dequeue) from the result store's overwrite."""

    def _put(self, key: str, value: Any) -> None:
        if not self.huey.storage.put_if_empty(key, self.huey.serializer.serialize(value)):
            raise InvalidToken(f"{LIBRARY}: task {key} already has a result")


class ExpiringHueyStore(FirstResultHueyStore):
    """First-result variant with ``queue_ttl_ms`` passed as the task's ``expires`` on the
    harness clock, so the model holds it to
    PROTOCOL.md#the-queue-window-is-half-open as well."""

    ferry_capabilities = HueyStore.ferry_capabilities | {"queue-ttl"}
    expiring = True


def make_store(path: str, *, clock: Callable[[], int]) -> HueyStore:
    return HueyStore(path, clock=clock)


def make_first_result_store(path: str, *, clock: Callable[[], int]) -> FirstResultHueyStore:
    return FirstResultHueyStore(path, clock=clock)


def make_expiring_store(path: str, *, clock: Callable[[], int]) -> ExpiringHueyStore:
    return ExpiringHueyStore(path, clock=clock)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
