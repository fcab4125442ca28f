"""Controls for the Postgres adapters: the same stores with the one fence the libraries lack.

Not a configuration of either library (neither has one that fences completion): each
holder write here is the library's own statement plus the guard ferry's protocol asks for
(``status``, the holder recorded on the row, and a live heartbeat, in the ``WHERE``
clause). Everything else — the schema, the clock, the claim, the stall timeout, the views
— is the adapter's. A control that passes shows that the adapter's mapping raises no
finding of its own, so the findings of the real adapters are the libraries' completions.

    ferry-harness fuzz --target tests.harness.adapters.fenced_pg:make_procrastinate
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ferry_core.errors import WrongState
from ferry_harness.adapters import pgqueuer as _pgq
from ferry_harness.adapters import procrastinate as _pro

_PRO_LIVE = """id = %(id)s AND status = 'doing' AND worker_id = %(w)s
   AND worker_id IN (SELECT id FROM procrastinate_workers
                      WHERE last_heartbeat >= now() - (%(s)s || ' SECOND')::interval)"""
_PRO_FINISH = f"""UPDATE procrastinate_jobs SET status = %(st)s, attempts = attempts + 1
 WHERE {_PRO_LIVE} RETURNING id"""
_PRO_RETRY = f"""UPDATE procrastinate_jobs
   SET status = 'todo', attempts = attempts + 1, scheduled_at = now()
 WHERE {_PRO_LIVE} RETURNING id"""


class FencedProcrastinate(_pro.ProcrastinateStore):
    """procrastinate_finish_job_v1 / retry_job_v2's UPDATE, guarded by the live claim."""

    def _guarded(self, task_id: str, token: str | None, sql: str, **kw: Any) -> None:
        job_id = self._token_job(task_id, token)
        worker = int(str(token).partition(":")[2])

        async def go() -> None:
            await self._tick()
            if not await self._q(sql, id=job_id, w=worker, s=_pro.STALL_MS / 1000, **kw):
                raise WrongState(f"{task_id}: not the live claim {token!r}")

        self._run(go())

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        self._guarded(task_id, token, _PRO_FINISH, st="succeeded")

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._guarded(task_id, token, _PRO_FINISH, st="failed")

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._guarded(task_id, token, _PRO_RETRY)


_PGQ_LIVE = """id = $1 AND status = 'picked' AND queue_manager_id = $2::uuid
   AND heartbeat >= NOW() - $3::interval"""
_PGQ_FINISH = f"""WITH done AS (DELETE FROM pgqueuer WHERE {_PGQ_LIVE}
                               RETURNING id, entrypoint, priority)
 INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
 SELECT id, $4::pgqueuer_status, entrypoint, priority FROM done RETURNING job_id"""
_PGQ_RETRY = f"""WITH again AS (
   UPDATE pgqueuer SET status = 'queued', execute_after = NOW() - interval '1 microsecond',
          attempts = attempts + 1, updated = NOW(), queue_manager_id = NULL
    WHERE {_PGQ_LIVE} RETURNING id, entrypoint, priority)
 INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
 SELECT id, 'queued', entrypoint, priority FROM again RETURNING job_id"""


class FencedPgQueuer(_pgq.PgQueuerStore):
    """pgqueuer's log_jobs / retry_job statements, guarded by the live pick."""

    def _guarded(self, task_id: str, token: str | None, sql: str, *extra: Any) -> None:
        import datetime as dt

        job_id = self._token_job(task_id, token)
        manager = str(token).partition(":")[2]

        async def go() -> None:
            await self._tick()
            stall = dt.timedelta(milliseconds=_pgq.STALL_MS)
            if not await self.conn.fetch(sql, job_id, manager, stall, *extra):
                raise WrongState(f"{task_id}: not the live pick {token!r}")

        self._run(go())

    def fulfill(self, task_id: str, agent_id: str, token: str | None, result: Any = None) -> None:
        self._guarded(task_id, token, _PGQ_FINISH, "successful")

    def fail(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        if not isinstance(reason, str) or not reason.strip():
            return super().fail(task_id, agent_id, token, reason)
        self._guarded(task_id, token, _PGQ_FINISH, "exception")

    def release(self, task_id: str, agent_id: str, token: str | None, reason: str = "") -> None:
        self._guarded(task_id, token, _PGQ_RETRY)


def make_procrastinate(where: str, *, clock: Callable[[], int]) -> FencedProcrastinate:
    return FencedProcrastinate(where, clock=clock)


def make_pgqueuer(where: str, *, clock: Callable[[], int]) -> FencedPgQueuer:
    return FencedPgQueuer(where, clock=clock)


make_procrastinate.ferry_backend = "postgres"  # type: ignore[attr-defined]
make_pgqueuer.ferry_backend = "postgres"  # type: ignore[attr-defined]
