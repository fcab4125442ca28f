"""procrastinate (PyPI ``procrastinate``, tested with 3.10.0): PostgreSQL jobs, psycopg 3.

The library, as it is:

- the schema (``procrastinate/sql/schema.sql``) is a ``procrastinate_jobs`` table, a
  ``procrastinate_workers`` table of heartbeats and plpgsql functions; the adapter installs
  it with the library's ``SchemaManager.apply_schema_async`` in the example's schema;
- the claim is ``JobManager.fetch_job(queues, worker_id)`` (``procrastinate_fetch_job_v2``):
  one ``UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)`` that sets ``status =
  'doing', worker_id = <worker>``. Sound: of N racing fetches one gets the job;
- completion is ``JobManager.finish_job_by_id_async(job_id, status)``
  (``procrastinate_finish_job_v1``): ``UPDATE … WHERE id = job_id AND status IN ('todo',
  'doing')``, else ``RAISE 'Job was not found or not in "doing" or "todo" status'``. It
  takes the job id only: the row records which worker holds the job, but the completion
  never compares it. Nothing fences a worker whose job was given to another;
- a stalled worker is one whose ``procrastinate_workers.last_heartbeat < now() -
  seconds_since_heartbeat``; ``JobManager.get_stalled_jobs`` lists the ``doing`` jobs of
  stalled workers (or of none), and procrastinate's documented recipe (a periodic task)
  retries them with ``JobManager.retry_job``: ``doing`` -> ``todo``, ``attempts + 1``.

Mapping (:func:`make_store`):

- ``dispatch`` = ``defer_job_async`` of a ``ferry_job`` job on queue ``ferry``;
- ``poll_next`` = the stall recipe (below), then, if a ``todo`` job exists (a read:
  an idle poll writes nothing), ``register_worker()`` and ``fetch_job(["ferry"],
  worker_id)``: one procrastinate worker per claim, so that its heartbeat is that
  claim's lease. The token is ``"<job id>:<worker id>"``: the job id is the library's
  handle, the worker id is who the row says holds it. The adapter refuses a token that
  names another job or is not of that form (``InvalidToken``); the worker part is passed
  to nobody, since the library's completion does not take it;
- ``fulfill`` / ``fail`` = ``finish_job_by_id_async(job id, succeeded / failed)``;
  ``release`` = ``retry_job_by_id_async(job id, retry_at=now)`` (what the worker does when
  a task asks to be retried). The library's ``RAISE`` is ``WrongState``;
- the lease: the worker's heartbeat is set at the claim (``DEFAULT NOW()`` of the
  registration); the job is stalled once ``last_heartbeat < now - STALL_MS``, so the
  claim's ``lease_expires_at`` is ``claimed_at + STALL_MS + 1`` (the library's strict
  ``<``, made half-open), declared ``lease-at-claim``: procrastinate's timeout is one
  number per query, not ``dispatch``'s ``exec_ttl_ms``;
- the stall recipe runs at the start of ``poll_next`` and in ``sweep``, serialised by an
  advisory lock (procrastinate runs it as one periodic task): each stalled job is retried
  while its claims are below the dispatch's ``max_attempts`` (kept in the job's args),
  else finished ``aborted`` (shown ``TIMED_OUT``) — the cap is the recipe's, procrastinate
  retries stalled jobs without one;
- ``get`` / ``inspect`` = ``list_jobs_async``: ``todo`` SUBMITTED, ``doing`` CLAIMED
  (``lease_expires_at`` from its worker's ``last_heartbeat``, ``is_logically_expired``
  by the stall test of ``get_stalled_jobs``), ``succeeded`` COMPLETED,
  ``failed`` FAILED, ``aborted`` TIMED_OUT; ``attempt`` = ``attempts`` (+1 while doing).

Time: every ``now()`` of the library's SQL is the harness clock (:mod:`._pgclock`); the
one Python-side time, ``retry_job``'s default ``retry_at = utcnow()``, is passed
explicitly as the harness instant.

What procrastinate cannot express: no per-agent tasks, no dependencies, no queue window,
no stored results, no limits, no daemon locks; no claim of one named job; no per-job lease
renewal (the heartbeat is per worker and never refuses: it is not mapped as ``extend``);
refusals are one untyped ``RAISE`` (no ``typed-refusals``). There is no configuration that
fences completion (``delete_job=True`` deletes by id just the same).

What ferry finds (``ferry-harness fuzz --target
ferry_harness.adapters.procrastinate:make_store --budget 60 --seed 0``): ``lease-half-open``
— the stalled holder's ``release`` (or ``fulfill``) is accepted after its lease ended,
before anyone took the job over (4 steps, replays 10/10). Once another worker has taken it
(the stall recipe, then a fetch), the same late completion is ``token-unique`` (a retired
claim accepted while the live holder runs) and the live holder's own ``finish_job`` then
hits the ``RAISE``: tests/harness/adapters/test_pg_adapters.py. The control with only the
completion fenced (tests/harness/adapters/fenced_pg.py) passes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from procrastinate import PsycopgConnector, exceptions, jobs
from procrastinate.manager import JobManager
from procrastinate.schema import SchemaManager

from ferry_core.errors import InvalidArgument, InvalidToken, NotFound, StoreError, WrongState
from ferry_core.store import MAX_TTL_MS
from ferry_core.types import CLAIMED, COMPLETED, FAILED, SUBMITTED, TIMED_OUT, Claim

from . import _pgclock
from ._base import check_dispatch, require_token

LIBRARY = "procrastinate"
QUEUE = "ferry"
TASK = "ferry_job"
#: the stall timeout (the library's ``seconds_since_heartbeat``), in harness ms
STALL_MS = 50
STATUS = {"todo": SUBMITTED, "doing": CLAIMED, "succeeded": COMPLETED, "failed": FAILED,
          "aborted": TIMED_OUT, "cancelled": FAILED}
_SET_NOW = "SELECT pg_catalog.set_config('ferry.now_ms', %(now)s, false)"


def _ttl(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TTL_MS:
        raise InvalidArgument(f"{name} must be a positive integer up to {MAX_TTL_MS}, got {value!r}")


def _job_id(task_id: Any) -> int:
    if isinstance(task_id, str) and task_id.isdigit() and len(task_id) < 19:
        return int(task_id)
    raise NotFound(f"task {task_id!r} does not exist ({LIBRARY} job ids are integers)")


class ProcrastinateStore:
    """procrastinate's job manager through the store protocol (see the module docstring)."""

    ferry_backend = "postgres"
    ferry_capabilities = frozenset({
        "dispatch", "poll_next", "fulfill", "fail", "release", "sweep", "get", "inspect",
        "lease",
    })
    ferry_declares = frozenset({"lease-at-claim"})
    ferry_skips = {
        "lock-exclusive": "procrastinate has no owned, leased daemon locks",
    }

    def __init__(self, where: str, *, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.where = _pgclock.parse_where(where)
        self.loop = asyncio.new_event_loop()
        self.connector = PsycopgConnector(
            conninfo=self.where.uri, min_size=1, max_size=1,
            kwargs={"options": self.where.libpq_options, "autocommit": True})
        self.jm = JobManager(self.connector)
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
        except exceptions.ConnectorException as exc:
            raise StoreError(f"{LIBRARY}: {exc.__cause__ or exc}") from None

    async def _q(self, sql: str, **args: Any) -> list[dict[str, Any]]:
        return await self.connector.execute_query_all_async(sql, **args)

    async def _tick(self) -> None:
        """Read the harness clock once for this call and give it to the server's now()."""
        self.now = int(self.clock())
        await self.connector.execute_query_async(_SET_NOW, now=str(self.now))

    async def _open(self) -> None:
        await self.connector.open_async()
        await self._tick()
        await self._q("SELECT pg_catalog.pg_advisory_lock(%(k)s)", k=_pgclock.INSTALL_LOCK_KEY)
        try:
            if not (await self._q(_pgclock.HAS_CLOCK_SQL))[0]["ok"]:
                for stmt in _pgclock.CLOCK_SQL:
                    await self.connector.execute_query_async(stmt)
            await self.connector.execute_query_async(
                f'CREATE SCHEMA IF NOT EXISTS "{self.where.schema}"')
            if not (await self._q("SELECT to_regclass('procrastinate_jobs') IS NOT NULL AS ok"))[0]["ok"]:
                await SchemaManager(self.connector).apply_schema_async()
        finally:
            await self._q("SELECT pg_catalog.pg_advisory_unlock(%(k)s)", k=_pgclock.INSTALL_LOCK_KEY)

    # ---------------------------------------------------------------- the stall recipe
    async def _recover(self) -> int:
        """procrastinate's retry-stalled-jobs recipe, as one periodic task would run it."""
        stalled = await self.jm.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=STALL_MS / 1000)
        if not stalled:
            return 0
        changed = 0
        await self._q("SELECT pg_catalog.pg_advisory_lock(%(k)s)", k=_pgclock.INSTALL_LOCK_KEY + 1)
        try:
            for job in await self.jm.get_stalled_jobs(queue=QUEUE,
                                                      seconds_since_heartbeat=STALL_MS / 1000):
                cap = int(job.task_kwargs.get("max_attempts", 1))
                try:
                    if job.attempts + 1 < cap:
                        await self.jm.retry_job(job, retry_at=_pgclock.to_datetime(self.now))
                    else:
                        await self.jm.finish_job(job, jobs.Status.ABORTED, delete_job=False)
                    changed += 1
                except exceptions.ConnectorException:
                    pass  # its holder finished it meanwhile
        finally:
            await self._q("SELECT pg_catalog.pg_advisory_unlock(%(k)s)", k=_pgclock.INSTALL_LOCK_KEY + 1)
        return changed

    # ---------------------------------------------------------------- queue
    def dispatch(self, target_agent: str | None = None, *, title: str = "", payload: Any = None,
                 requester: str = "", depends_on: Any = (), queue_ttl_ms: int | None = None,
                 exec_ttl_ms: int | None = None, max_attempts: int = 1) -> str:
        """``defer_job_async``; the TTLs have no counterpart (the lease is the stall timeout)."""
        check_dispatch(LIBRARY, target_agent, depends_on, payload)
        _ttl("queue_ttl_ms", queue_ttl_ms)
        _ttl("exec_ttl_ms", exec_ttl_ms)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidArgument(f"max_attempts must be a positive integer, got {max_attempts!r}")
        args = {"title": title, "payload": json.dumps(payload), "requester": requester,
                "max_attempts": max_attempts}

        async def go() -> int:
            await self._tick()
            job = jobs.Job(id=None, queue=QUEUE, lock=None, queueing_lock=None,
                           task_name=TASK, task_kwargs=args)
            return (await self.jm.defer_job_async(job)).id

        return str(self._run(go()))

    def poll_next(self, agent_id: str) -> Claim | None:
        async def go() -> Claim | None:
            await self._tick()
            await self._recover()
            if not await self.jm.list_jobs_async(queue=QUEUE, status="todo"):
                return None  # nothing to take: an idle poll writes nothing
            worker = await self.jm.register_worker()
            job = await self.jm.fetch_job([QUEUE], worker)
            if job is None:
                await self.jm.unregister_worker(worker)
                return None
            return Claim(task_id=str(job.id), agent_id=agent_id, token=f"{job.id}:{worker}",
                         claimed_at=self.now, lease_expires_at=self.now + STALL_MS + 1,
                         attempt=job.attempts + 1)

        return self._run(go())

    def sweep(self) -> int:
        async def go() -> int:
            await self._tick()
            return await self._recover()

        return self._run(go())

    # ---------------------------------------------------------------- holder
    def _token_job(self, task_id: str, token: str | None) -> int:
        job_id = _job_id(task_id)
        token = require_token(LIBRARY, token, "job id:worker id token")
        head, sep, worker = token.partition(":")
        if not sep or head != str(job_id) or not worker.isdigit():
            raise InvalidToken(f"{token!r} is not a claim of job {job_id} (<job id>:<worker id>)")
        return job_id

    def _finish(self, task_id: str, token: str | None, call: Callable[[int], Any]) -> None:
        job_id = self._token_job(task_id, token)

        async def go() -> None:
            await self._tick()
            try:
                await call(job_id)
            except exceptions.ConnectorException as exc:
                if "not found or" in str(exc.__cause__ or exc):
                    if not await self.jm.list_jobs_async(id=job_id):
                        raise NotFound(f"{LIBRARY}: job {job_id} does not exist") from None
                    first = str(exc.__cause__ or exc).splitlines()[0]
                    raise WrongState(f"{LIBRARY}: {first}") from None
                raise

        self._run(go())

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        """``finish_job_by_id_async(job id, succeeded)``: the library keeps no result."""
        self._finish(task_id, token, lambda j: self.jm.finish_job_by_id_async(
            j, jobs.Status.SUCCEEDED, delete_job=False))

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidArgument("fail needs a non-blank reason")
        self._finish(task_id, token, lambda j: self.jm.finish_job_by_id_async(
            j, jobs.Status.FAILED, delete_job=False))

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        """``retry_job_by_id_async(job id, retry_at=now)``: back to ``todo`` at once."""
        self._finish(task_id, token, lambda j: self.jm.retry_job_by_id_async(
            j, retry_at=_pgclock.to_datetime(self.now)))

    # ---------------------------------------------------------------- reads
    def _view(self, job: jobs.Job, beats: dict[int, int]) -> dict[str, Any]:
        """A job row as a view. While ``doing``, its lease ends one ms after its worker's
        heartbeat plus the stall timeout; ``is_logically_expired`` is the library's own
        stall test (``last_heartbeat < now - timeout``, or no worker at all)."""
        status = STATUS.get(str(job.status), str(job.status))
        doing = job.status == "doing"
        view: dict[str, Any] = {"task_id": str(job.id), "status": status,
                                "is_logically_expired": False,
                                "attempt": job.attempts + (1 if doing else 0)}
        if doing:
            beat = beats.get(job.worker_id) if job.worker_id is not None else None
            ends = self.now if beat is None else beat + STALL_MS + 1
            view.update(lease_expires_at=ends, is_logically_expired=self.now >= ends)
        return view

    async def _beats(self) -> dict[int, int]:
        """Each worker's last heartbeat, in harness ms (a read of procrastinate_workers)."""
        rows = await self._q("SELECT id, last_heartbeat FROM procrastinate_workers")
        return {r["id"]: _pgclock.to_ms(r["last_heartbeat"]) for r in rows}

    def get(self, task_id: str) -> dict[str, Any]:
        job_id = _job_id(task_id)

        async def go() -> dict[str, Any]:
            await self._tick()
            found = await self.jm.list_jobs_async(id=job_id, queue=QUEUE)
            if not found:
                raise NotFound(f"{LIBRARY}: job {job_id} does not exist")
            return self._view(next(iter(found)), await self._beats())

        return self._run(go())

    def inspect(self, agent_id: str | None = None) -> list[dict[str, Any]]:
        async def go() -> list[dict[str, Any]]:
            await self._tick()
            beats = await self._beats()
            return [self._view(j, beats) for j in await self.jm.list_jobs_async(queue=QUEUE)]

        return self._run(go())

    def close(self) -> None:
        try:
            if not self.loop.is_closed():
                self.loop.run_until_complete(self.connector.close_async())
        except Exception:  # closing a pool that never opened
            pass
        finally:
            _pgclock.close_loop(self.loop)


def make_store(where: str, *, clock: Callable[[], int]) -> ProcrastinateStore:
    return ProcrastinateStore(where, clock=clock)


make_store.ferry_backend = "postgres"  # type: ignore[attr-defined]
