"""One bench run: dispatch N tasks, start W workers at one barrier, collect their
``WorkerResult``s, and summarise them into the run's record (plain JSON data), with the
exactly-once check."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from array import array
from collections.abc import Callable, Mapping
from multiprocessing.connection import wait
from typing import Any

import multiprocess as mp

from ferry_core import LeaseStore, PgLeaseStore
from ferry_harness.errors import BenchUsageError
from ferry_harness.runtime.backend import POSTGRES, PostgresBackend, schema_of
from ferry_harness.tools.bench.machine import usable_cpus
from ferry_harness.tools.bench.records import DbVerified, ProgressEvent, RunRecord, Verified
from ferry_harness.tools.bench.stats import jain, latency_histogram, latency_summary
from ferry_harness.tools.bench.targets import Target
from ferry_harness.tools.bench.worker import (
    STALL_S,
    WorkerParams,
    WorkerResult,
    WorkerShared,
    drain,
)

_CTX = mp.get_context("fork")
_QUEUE_TTL_MS = 86_400_000  # a day: no task may time out while it waits in a run
_EXEC_TTL_MS = 3_600_000  # an hour: no lease may expire while its fulfill is on the way

Progress = Callable[[ProgressEvent], None]


def dispatch_tasks(store: Any, n: int, tick: Callable[[int], None]) -> None:
    """Fill the queue with ``n`` ready tasks through the store's own public API
    (ferry_core: one ``dispatch_many`` transaction); ``tick(done)`` reports progress."""
    payloads = [{"n": i} for i in range(n)]
    if isinstance(store, (LeaseStore, PgLeaseStore)):
        store.dispatch_many(payloads, requester="bench", queue_ttl_ms=_QUEUE_TTL_MS,
                            exec_ttl_ms=_EXEC_TTL_MS)
        tick(n)
        return
    for i, payload in enumerate(payloads):  # a user's store: one dispatch at a time
        store.dispatch(None, payload=payload, requester="bench", queue_ttl_ms=_QUEUE_TTL_MS,
                       exec_ttl_ms=_EXEC_TTL_MS)
        if i % 500 == 499:
            tick(i + 1)
    tick(n)


def _wal_size(path: str) -> int:
    try:
        return os.path.getsize(path + "-wal")
    except OSError:
        return 0


def _await_ready(procs: list[Any], conns: dict[Any, int], ready: Any,
                 timeout_s: float) -> str | None:
    """Wait until every worker has opened its store; an error string if one cannot."""
    deadline = time.monotonic() + timeout_s
    while not all(ready):
        for proc in procs:
            if not proc.is_alive():
                return f"worker {proc.name} exited before the start (exit code {proc.exitcode})"
        early = wait(list(conns), timeout=0.005)
        if early:  # a worker reported before the start: it failed to open the store
            try:
                msg: WorkerResult = early[0].recv()
            except (EOFError, OSError):
                return "a worker died before the start"
            conns.pop(early[0], None)
            early[0].close()
            return f"a worker could not open the store: {msg.error}"
        if time.monotonic() > deadline:
            return f"workers did not open the store within {timeout_s:.0f}s"
    return None


def _ns_array(data: bytes) -> array:
    a = array("q")
    a.frombytes(data)
    return a


def run_one(target: Target, workers: int, strategy: str, policy: str, tasks: int,
            workdir: str, *, timeout_s: float = 600.0, stall_s: float = STALL_S,
            progress: Progress | None = None, pg: PostgresBackend | None = None) -> RunRecord:
    """Dispatch ``tasks``, drain them with ``workers`` processes, return the run's record.

    A Postgres target (``target.backend``) gets a fresh schema from ``pg`` (the harness's
    Postgres backend: its database is dropped when the bench ends) instead of a database
    file; it has no ``-wal`` to measure."""
    run_dir = tempfile.mkdtemp(prefix=f"w{workers}-", dir=workdir)
    if target.backend == POSTGRES:
        if pg is None:
            raise BenchUsageError(f"{target.spec} is a Postgres target: it needs a server")
        path = pg.fresh(pg.schemas_made)
        schema = schema_of(path) or ""
    else:
        pg = None
        path = os.path.join(run_dir, "bench.db")
    label = f"{workers}w {strategy}/{policy}"

    def tick(done: int) -> None:
        if progress:
            progress({"phase": "dispatch", "label": label, "done": done, "tasks": tasks})

    store = target.make(path, strategy, policy)
    try:
        dispatch_tasks(store, tasks, tick)
        if pg is not None:
            _analyze(pg, schema)
        elif hasattr(store, "checkpoint"):
            store.checkpoint("TRUNCATE")
    finally:
        store.close()

    shared = WorkerShared(
        counts=_CTX.RawArray("q", workers), stop=_CTX.RawValue("b", 0),
        ready=_CTX.RawArray("b", workers),
        go=_CTX.Event(),  # the barrier: every worker has opened its store and waits on it
        release=_CTX.Event())
    counts = shared.counts
    procs: list[Any] = []
    conns: dict[Any, int] = {}
    results: dict[int, WorkerResult] = {}
    wal_max = 0
    error: str | None = None
    try:
        for slot in range(workers):
            recv_end, send_end = _CTX.Pipe(duplex=False)
            params = WorkerParams(target=target, db_path=path, strategy=strategy,
                                  policy=policy, agent=f"bench-{slot}", slot=slot, tasks=tasks,
                                  parent_pid=os.getpid(), timeout_s=timeout_s, stall_s=stall_s)
            proc = _CTX.Process(target=drain, daemon=True, name=f"ferry-bench-{slot}",
                                args=(params, shared, send_end))
            proc.start()
            send_end.close()
            procs.append(proc)
            conns[recv_end] = slot
        error = _await_ready(procs, conns, shared.ready, min(60.0, timeout_s))
        if error:
            shared.stop.value = 1
        shared.go.set()
        t_go = time.monotonic()
        deadline = t_go + timeout_s
        pending = dict(conns)
        while pending:
            now = time.monotonic()
            if now >= deadline:
                error = error or (f"run did not finish within {timeout_s:.0f}s "
                                  f"({sum(counts)}/{tasks} claimed); workers killed")
                break
            for conn in wait(list(pending), timeout=min(0.25, deadline - now)):
                slot = pending.pop(conn)
                try:
                    results[slot] = conn.recv()
                except (EOFError, OSError):
                    error = error or f"worker {slot} died during the run"
            wal_max = 0 if pg is not None else max(wal_max, _wal_size(path))
            if progress:
                progress({"phase": "drain", "label": label, "done": sum(counts), "tasks": tasks,
                          "elapsed": time.monotonic() - t_go})
        wal_end = 0 if pg is not None else _wal_size(path)
        wal_max = max(wal_max, wal_end)
    finally:
        shared.stop.value = 1
        shared.release.set()
        grace = time.monotonic() + (0.0 if error else 5.0)  # a failed run: kill at once
        for proc in procs:
            proc.join(max(0.0, grace - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in conns:
            conn.close()

    record = _summarise(results, workers=workers, strategy=strategy, policy=policy,
                        tasks=tasks, wal_end=wal_end, wal_max=wal_max, error=error)
    record["target"] = target.spec
    record["backend"] = target.backend
    record["verified"] = verify_delivery(results, tasks)
    try:
        db = None
        if target.ferry_core and not record.get("error"):
            db = _verify_ferry_core(path, tasks)
        elif target.counts_claims and pg is not None and not record.get("error"):
            db = verify_pg_lease_store(pg.uri, schema, tasks)
        if db is not None:
            record["verified"] = {**record["verified"], **{f"db_{k}": v for k, v in db.items()},
                                  "ok": record["verified"]["ok"] and db["ok"]}
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return record


def verify_delivery(results: Mapping[int, WorkerResult], tasks: int) -> Verified:
    """Every task completed exactly once, as the workers saw it: each of the ``tasks`` ids
    was claimed once and its fulfill accepted once, by one worker (a queue that hands a
    message to two workers, or loses one, fails here)."""
    claimed: dict[str, int] = {}
    done: dict[str, int] = {}
    for r in results.values():
        for t in r.claimed_ids:
            claimed[t] = claimed.get(t, 0) + 1
        for t in r.done_ids:
            done[t] = done.get(t, 0) + 1
    dup_claims = sum(1 for n in claimed.values() if n > 1)
    dup_done = sum(1 for n in done.values() if n > 1)
    ok = (len(results) > 0 and len(done) == tasks == len(claimed) and not dup_claims
          and not dup_done)
    return {"ok": ok, "tasks": tasks, "completed_distinct": len(done),
            "claimed_distinct": len(claimed), "claimed_twice": dup_claims,
            "completed_twice": dup_done, "never_completed": max(0, tasks - len(done))}


def _verify_ferry_core(path: str, tasks: int) -> DbVerified:
    """Every task COMPLETED exactly once: one token issued per task, none left open.

    Reads the database file through its own read-only connection, against the documented
    schema (``tasks``, ``claim_tokens``): the store itself is closed by now.
    """
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        return _delivered_once(conn, "", tasks)
    finally:
        conn.close()


def verify_pg_lease_store(uri: str, schema: str, tasks: int) -> DbVerified:
    """``_verify_ferry_core`` for ``PgLeaseStore``: the same two tables, in ``schema``."""
    import psycopg  # a Postgres target was opened, so psycopg is there

    with psycopg.connect(uri, autocommit=True) as conn:
        return _delivered_once(conn, f'"{schema}".', tasks)


def _delivered_once(conn: Any, prefix: str, tasks: int) -> DbVerified:
    """The exactly-once count over ferry_core's ``tasks`` and ``claim_tokens`` (sqlite3 and
    psycopg connections both have ``execute``); ``prefix`` qualifies the tables."""
    completed = conn.execute(
        f"SELECT count(*) FROM {prefix}tasks WHERE status='COMPLETED'").fetchall()[0][0]
    total = conn.execute(f"SELECT count(*) FROM {prefix}tasks").fetchall()[0][0]
    tokens = conn.execute(
        f"SELECT count(*), count(DISTINCT task_id) FROM {prefix}claim_tokens").fetchall()[0]
    ok = completed == total == tasks and tokens[0] == tokens[1] == tasks
    return {"ok": ok, "completed": completed, "tasks_in_db": total, "tokens_issued": tokens[0]}


def _analyze(pg: PostgresBackend, schema: str) -> None:
    """``ANALYZE`` the run's tables once the queue is filled: the throwaway cluster runs no
    autovacuum (so the fuzz's transaction-id probe sees only the target), and without
    statistics the planner takes a queue of thousands for one row — a plan no server with
    autovacuum would run (what a real server's autoanalyze does, done once, on purpose)."""
    tables = [r[0] for r in pg.admin.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()]
    for table in tables:
        pg.admin.execute(f'ANALYZE "{schema}"."{table}"')


def _summarise(results: Mapping[int, WorkerResult], *, workers: int, strategy: str,
               policy: str, tasks: int, wal_end: int, wal_max: int,
               error: str | None) -> RunRecord:
    """The run's record (the keys ``bench.json`` documents) from the workers' results."""
    rows = [results[s] for s in sorted(results)]
    worker_errors = sorted({r.error for r in rows if r.error})
    if not error and worker_errors:
        error = worker_errors[0]
    if not error and len(rows) != workers:
        error = f"{workers - len(rows)} worker(s) sent no result"
    per_worker = [r.claims for r in rows]
    claims = sum(per_worker)
    fulfilled = sum(r.fulfilled for r in rows)
    starts = [r.t_start for r in rows if r.t_start]
    t0 = min(starts) if starts else 0
    last_claim = max((r.t_last_claim for r in rows), default=0)
    last_fulfill = max((r.t_last_fulfill for r in rows), default=0)
    claim_s = (last_claim - t0) / 1e9 if claims and t0 else 0.0
    life_s = (last_fulfill - t0) / 1e9 if fulfilled and t0 else 0.0
    lat = [v for r in rows for v in _ns_array(r.latency_ns)]
    flat = [v for r in rows for v in _ns_array(r.fulfill_ns)]
    cas_attempts = sum(r.cas_attempts for r in rows)
    cas_empty = sum(r.cas_empty for r in rows)
    if cas_attempts:
        attempts, misses, source = cas_attempts, sum(r.cas_misses for r in rows), "store-cas-update"
    else:
        attempts, misses, source = sum(r.polls for r in rows), sum(r.poll_misses for r in rows), "poll-none"
    cpu_s = sum(r.cpu_s for r in rows)
    return {
        "workers": workers, "strategy": strategy, "busy_policy": policy, "tasks": tasks,
        "claims": claims, "fulfilled": fulfilled,
        "claims_per_s": claims / claim_s if claim_s > 0 else 0.0,
        "lifecycles_per_s": fulfilled / life_s if life_s > 0 else 0.0,
        "seconds": life_s or claim_s,
        "latency_ms": latency_summary(lat),
        "fulfill_latency_ms": latency_summary(flat),
        "latency_hist": latency_histogram(lat),
        "cas_miss_ratio": misses / attempts if attempts else 0.0,
        "cas_attempts": attempts, "cas_misses": misses, "cas_miss_source": source,
        "claim_empty": cas_empty,
        "poll_none_while_tasks_left": sum(r.poll_misses for r in rows),
        "busy_errors": sum(r.busy_errors for r in rows),
        "other_errors": sum(r.errors for r in rows),
        "jain_fairness": jain(per_worker) if per_worker else 0.0,
        "per_worker_claims": per_worker,
        "wal_bytes": wal_end, "wal_bytes_max": wal_max,
        "cpu_s": cpu_s,
        # lifecycles per CPU-second of the workers: on a shared machine the wall-clock rate
        # follows the CPU share the workers got; this follows the work per lifecycle
        "lifecycles_per_cpu_s": fulfilled / cpu_s if cpu_s > 0 else 0.0,
        "cpu_util": (cpu_s / (life_s * usable_cpus()) if life_s > 0 else 0.0),
        "preemptions": sum(r.preempted for r in rows),
        "voluntary_switches": sum(r.blocked for r in rows),
        "error": error,
    }
