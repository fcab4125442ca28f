"""pgqueuer (PyPI ``pgqueuer``, tested with 1.6.0): PostgreSQL jobs over asyncpg.

The library, as it is:

- the schema (``Queries.install``) is a ``pgqueuer`` table of jobs (``status`` queued /
  picked / failed, ``heartbeat``, ``queue_manager_id``), a ``pgqueuer_log`` table that
  records every pick and every end, statistics and schedules; the adapter installs it in
  the example's schema (``db_schema`` unset: the connection's ``search_path``);
- the claim is ``Queries.dequeue`` — one statement: ``queued`` jobs with ``execute_after <
  NOW()`` and ``picked`` jobs whose ``heartbeat < NOW() - heartbeat_timeout`` (stale: their
  worker stopped beating), ``FOR UPDATE SKIP LOCKED``, set ``picked``, ``heartbeat =
  NOW()``, ``queue_manager_id = <the dequeuing manager>``. Sound: of N racing dequeues one
  gets the job. A stale job is re-picked that way, without limit;
- completion is ``Queries.log_jobs([(job, status, traceback)])``: ``DELETE FROM pgqueuer
  WHERE id = ANY(ids)`` (``failed`` with ``on_failure="hold"``: an ``UPDATE`` by id) and a
  log row for each deleted one. It takes the job id only: the row records the manager that
  picked it, but the completion never compares it, and a completion that finds no row
  deletes nothing and says nothing. ``Queries.retry_job`` (re-queue) is ``UPDATE … WHERE
  id = $1`` likewise.

Mapping (:func:`make_store`):

- ``dispatch`` = ``Queries.enqueue("ferry_job", payload)`` with ``execute_after = -1 µs``:
  pgqueuer's readiness is the strict ``execute_after < NOW()``, so a job queued at the
  current instant would not be eligible until the next one; on the wall clock that is a
  microsecond, on the harness's millisecond clock (frozen between calls) a whole tick, and
  the protocol makes a task ready at its dispatch instant. ``release`` = ``retry_job(job,
  delay = -1 µs)`` for the same reason;
- ``poll_next`` = ``Queries.dequeue(batch_size=1, heartbeat_timeout=STALL_MS)`` under a
  fresh ``queue_manager_id`` (one pgqueuer manager per claim), after a read
  (``eligible_queued_work`` / ``stale_jobs``) so an idle poll writes nothing. The token is
  ``"<job id>:<queue_manager_id>"``: the job id is the library's handle, the manager id
  is who the row says holds it. The adapter refuses a token that names another job or is
  not of that form (``InvalidToken``); the manager part reaches nobody, since the
  library's completion does not take it;
- ``fulfill`` / ``fail`` = ``log_jobs`` with ``successful`` / ``exception`` (the
  QueueManager's own statuses for a job that returned / raised; the adapter calls the
  query directly instead of through the manager's batching buffer). The library never
  refuses them;
- the lease: the pick sets ``heartbeat = NOW()``; the job is stale once ``heartbeat <
  NOW() - STALL_MS``, so the claim's ``lease_expires_at`` is ``claimed_at + STALL_MS + 1``
  (the library's strict ``<``, made half-open), declared ``lease-at-claim``:
  ``heartbeat_timeout`` is one number per dequeue, not ``dispatch``'s ``exec_ttl_ms``;
- ``get`` = ``queue_job_by_id`` (queued SUBMITTED, picked CLAIMED — ``lease_expires_at``
  from its ``heartbeat``, logically expired once stale —, failed FAILED), else the last ``pgqueuer_log`` status (``job_status``):
  successful COMPLETED, exception / failed / canceled / deleted FAILED.

Time: every ``NOW()`` of the library's SQL and its column defaults are the harness clock
(:mod:`._pgclock`).

What pgqueuer cannot express: ``max_attempts`` (a stale job is re-picked forever: after
the last lease the protocol wants ``TIMED_OUT``, pgqueuer hands the job out again, which
ferry reports); no per-agent tasks, dependencies, queue window, results, limits, daemon
locks; no claim of one named job, no ``attempt`` count of picks; no refusals at all (no
``typed-refusals``). The heartbeat (``update_heartbeat``, also unfenced) is not mapped as
``extend``, so the findings stay on completion. There is no configuration that fences
completion.

What ferry finds (``ferry-harness fuzz --target ferry_harness.adapters.pgqueuer:make_store
--budget 60 --seed 0``): ``token-unique`` — a second ``log_jobs`` of a job already completed
is accepted in silence (3 steps, replays 10/10); after a stale re-pick the stalled holder's
completion deletes the live holder's job and the live holder's own completion is dropped
without a word (tests/harness/adapters/test_pg_adapters.py). Also ``no-lost-task``, a race:
one dequeue locks a queued job *and* a stale one (its two ``FOR UPDATE SKIP LOCKED``
CTEs) but claims only one, so a concurrent dequeue comes back empty while a job is ready
(replays 0–4/10). The control with only the completion fenced
(tests/harness/adapters/fenced_pg.py) still fails ``no-lost-task``: the stale re-pick of a
job past its ``max_attempts``.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.adapters.persistence.queries import Queries
from pgqueuer.domain import models
from pgqueuer.ports.repository import EntrypointExecutionParameter

from ferry_core.errors import InvalidArgument, InvalidToken, NotFound, StoreError
from ferry_core.store import MAX_TTL_MS
from ferry_core.types import CLAIMED, COMPLETED, FAILED, SUBMITTED, Claim

from . import _pgclock
from ._base import check_dispatch, require_token

LIBRARY = "pgqueuer"
ENTRY = "ferry_job"
#: the heartbeat timeout (``heartbeat_timeout`` of the dequeue), in harness ms
STALL_MS = 50
NOW_ELIGIBLE = _dt.timedelta(microseconds=-1)
QUEUED = {"queued": SUBMITTED, "picked": CLAIMED, "failed": FAILED}
LOGGED = {"successful": COMPLETED, "exception": FAILED, "failed": FAILED, "canceled": FAILED,
          "deleted": FAILED, "queued": SUBMITTED, "picked": CLAIMED}
_SET_NOW = "SELECT pg_catalog.set_config('ferry.now_ms', $1, false)"


def _ttl(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TTL_MS:
        raise InvalidArgument(f"{name} must be a positive integer up to {MAX_TTL_MS}, got {value!r}")


def _job_id(task_id: Any) -> int:
    if isinstance(task_id, str) and task_id.isdigit() and len(task_id) < 19:
        return int(task_id)
    raise NotFound(f"task {task_id!r} does not exist ({LIBRARY} job ids are integers)")


class PgQueuerStore:
    """pgqueuer's queries through the store protocol (see the module docstring)."""

    ferry_backend = "postgres"
    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "fulfill", "fail", "release", "get", "lease",
    })
    ferry_declares = frozenset({"lease-at-claim"})
    ferry_skips = {
        "lock-exclusive": "pgqueuer has no owned, leased daemon locks",
    }

    def __init__(self, where: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.where = _pgclock.parse_where(where)
        self.loop = asyncio.new_event_loop()
        self.conn: Any = None
        self.now = 0
        try:
            self._run(self._open())
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- plumbing
    def _run(self, coro: Any) -> Any:
        try:
            return self.loop.run_until_complete(coro)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise StoreError(f"{LIBRARY}: {type(exc).__name__}: {exc}") from None

    async def _tick(self) -> None:
        """Read the harness clock once for this call and give it to the server's now()."""
        self.now = int(self.clock())
        await self.conn.execute(_SET_NOW, str(self.now))

    async def _open(self) -> None:
        self.conn = await asyncpg.connect(
            self.where.uri, server_settings={"search_path": self.where.search_path})
        self.q = Queries(AsyncpgDriver(self.conn))
        await self._tick()
        await self.conn.execute("SELECT pg_catalog.pg_advisory_lock($1)", _pgclock.INSTALL_LOCK_KEY)
        try:
            if not await self.conn.fetchval(_pgclock.HAS_CLOCK_SQL):
                for stmt in _pgclock.CLOCK_SQL:
                    await self.conn.execute(stmt)
            await self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.where.schema}"')
            if not await self.q.schema_is_installed():
                await self.q.install()
        finally:
            await self.conn.execute("SELECT pg_catalog.pg_advisory_unlock($1)",
                                    _pgclock.INSTALL_LOCK_KEY)

    @staticmethod
    def _handle(job_id: int) -> models.Job:
        """The ``Job`` the completion queries read: they use its ``id`` only."""
        return models.Job.model_construct(id=job_id)

    # ---------------------------------------------------------------- queue
    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """``enqueue``; the TTLs and ``max_attempts`` have no counterpart (module docstring)."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        _ttl("queue_ttl_ms", queue_ttl_ms)
        _ttl("exec_ttl_ms", exec_ttl_ms)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidArgument(f"max_attempts must be a positive integer, got {max_attempts!r}")
        data = json.dumps({"title": title, "payload": payload, "requester": requester}).encode()

        async def go() -> int:
            await self._tick()
            return (await self.q.enqueue(ENTRY, data, 0, NOW_ELIGIBLE))[0]

        return str(self._run(go()))

    def poll_next(self, agent_id: str) -> Claim | None:
        async def go() -> Claim | None:
            await self._tick()
            stall = _dt.timedelta(milliseconds=STALL_MS)
            if (not await self.q.eligible_queued_work([ENTRY])
                    and not await self.q.stale_jobs(stall, 1)):
                return None  # nothing to take: an idle poll writes nothing
            manager = uuid.uuid4()
            picked = await self.q.dequeue(
                batch_size=1, entrypoints={ENTRY: EntrypointExecutionParameter(concurrency_limit=0)},
                queue_manager_id=manager, global_concurrency_limit=None, heartbeat_timeout=stall)
            if not picked:
                return None
            job = picked[0]
            return Claim(task_id=str(job.id), agent_id=agent_id, token=f"{job.id}:{manager}",
                         claimed_at=self.now, lease_expires_at=self.now + STALL_MS + 1,
                         attempt=None)  # type: ignore[arg-type]

        return self._run(go())

    # ---------------------------------------------------------------- holder
    def _token_job(self, task_id: str, token: str | None) -> int:
        job_id = _job_id(task_id)
        token = require_token(LIBRARY, token, "job id:queue manager id token")
        head, sep, manager = token.partition(":")
        try:
            uuid.UUID(manager)
        except ValueError:
            sep = ""
        if not sep or head != str(job_id):
            raise InvalidToken(f"{token!r} is not a claim of job {job_id} (<job id>:<manager id>)")
        return job_id

    def _holder(self, task_id: str, token: str | None, call: Callable[[models.Job], Any]) -> None:
        job = self._handle(self._token_job(task_id, token))

        async def go() -> None:
            await self._tick()
            await call(job)

        self._run(go())

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``log_jobs([(job, "successful", None)])``: the library keeps no result."""
        self._holder(task_id, token, lambda j: self.q.log_jobs([(j, "successful", None)]))

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidArgument("fail needs a non-blank reason")
        self._holder(task_id, token, lambda j: self.q.log_jobs([(j, "exception", None)]))

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """``retry_job(job, delay=-1 µs)``: queued again, eligible at once."""
        self._holder(task_id, token, lambda j: self.q.retry_job(j, NOW_ELIGIBLE, None))

    # ---------------------------------------------------------------- reads
    def get(self, task_id: str) -> dict[str, Any]:
        job_id = _job_id(task_id)

        async def go() -> dict[str, Any]:
            await self._tick()
            job = await self.q.queue_job_by_id(job_id)
            if job is not None:
                view = {"task_id": task_id, "status": QUEUED.get(job.status, job.status),
                        "is_logically_expired": False}
                if job.status == "picked":  # stale (the dequeue's test) from heartbeat + timeout
                    ends = _pgclock.to_ms(job.heartbeat) + STALL_MS + 1
                    view.update(lease_expires_at=ends, is_logically_expired=self.now >= ends)
                return view
            logged = await self.q.job_status([job_id])
            if not logged:
                raise NotFound(f"{LIBRARY}: job {job_id} does not exist")
            return {"task_id": task_id, "status": LOGGED.get(logged[0][1], logged[0][1]),
                    "is_logically_expired": False}

        return self._run(go())

    def close(self) -> None:
        try:
            if self.conn is not None and not self.loop.is_closed():
                self.loop.run_until_complete(self.conn.close())
        except Exception:  # a connection the server already dropped
            pass
        finally:
            _pgclock.close_loop(self.loop)


def make_store(where: str, *, clock: Callable[[], int]) -> PgQueuerStore:
    return PgQueuerStore(where, clock=clock)


make_store.ferry_backend = "postgres"  # type: ignore[attr-defined]
