"""``ferry-harness bench``: claim throughput, tail latency and fairness under contention.

W worker processes (forked, one store each, as in production) wait at one barrier, then
each drains the same queue of N pre-dispatched tasks: ``poll_next`` then ``fulfill``,
until the queue is empty. The whole loop runs inside the worker; the controller only
dispatches the tasks beforehand, reads lock-free per-worker counters for the progress
display, and receives one result dict per worker at the end (plain data over a pipe).

Per run it reports:

- ``claims_per_s``: claims / (barrier release -> last successful claim), all workers.
- ``lifecycles_per_s``: fulfilled tasks / (barrier release -> last fulfill returned).
- ``latency_ms`` {p50, p99, p999, max}: time to obtain a claim, from the first
  ``poll_next`` attempt until one returns a claim (so it includes the store's own busy
  waits and internal retries, and any lost attempts that returned None or a lock error).
- ``cas_miss_ratio``: lost claim attempts / all claim attempts. For ferry_core the bench
  counts the store's own CAS UPDATEs (``cas_miss_source="store-cas-update"``): an UPDATE
  that changed no row because another worker took the task first is a miss. For any
  other target it counts ``poll_next`` calls (``"poll-none"``): a call that returned None
  while the shared claim counter said tasks remained is a miss.
  ferry_core's one-statement claim (``_claim_next``) picks under the write lock and cannot
  miss; it counts as an attempt, and a None from it (nothing ready) as ``claim_empty``.
- ``verified``: every task claimed and completed exactly once, from the workers' own
  records (and, for ferry_core, the database); a run that fails it makes the exit code 1.
- ``lifecycle_ratio``: lifecycles/s over ``raw_half``, half the ceiling (a lifecycle is at
  least two writes). ``--target A,B`` compares stores in one interleaved run.
- ``busy_errors``: StoreError (or sqlite3.OperationalError) raised because a lock
  stayed busy past the store's timeout; the call is retried.
- ``jain_fairness``: Jain's index (sum x)^2 / (n * sum x^2) over per-worker claim counts.
- ``wal_bytes``: size of the ``-wal`` file when the drain ended (connections still open);
  ``wal_bytes_max``: the largest size the controller saw while the run was going.

``ceiling`` is a raw single-process rate on the same machine in the same invocation:
autocommit ``UPDATE … WHERE id=? AND status=…`` of one integer-keyed row per statement, the
same pragmas as ferry_core (WAL, synchronous=NORMAL), best of a few samples taken before
and after the matrix.
"""

from __future__ import annotations

import argparse
import bisect
import importlib
import json
import math
import os
import platform
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import multiprocess as mp

from harness.errors import HarnessError, TargetError
from harness.runtime.process import die_with_parent
from harness.runtime.target import DEFAULT_TARGET, add_target_option, load_factory

_CTX = mp.get_context("fork")

DEFAULT_WORKERS = (1, 2, 4, 8, 16)
DEFAULT_TASKS = 20_000
DEFAULT_POLICIES = ("hybrid", "jitter", "stock")
AS_IS = "as-is"
CEILING_UPDATES = 20_000
CEILING_SAMPLES = 3  # before the matrix; as many again after it
MAX_WORKERS = 256
STALL_S = 5.0  # a worker whose poll_next keeps returning None with tasks left gives up
MIB = 1 << 20
WAL_BOUND_BYTES = 64 * MIB  # the harness's wal-bounded limit (harness/run/campaign.py)
# log-spaced latency histogram bins (ms): 1 us .. 100 s, 10 per decade
HIST_EDGES_MS = [round(10 ** (i / 10 - 3), 6) for i in range(0, 81)]


class BenchUsageError(TargetError):
    """Bad bench input: reported as one line with exit code 2."""


# --------------------------------------------------------------------------- statistics
def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1.0 when all equal, 1/n when one takes everything."""
    n = len(values)
    total = float(sum(values))
    squares = float(sum(v * v for v in values))
    if n == 0 or squares == 0:
        return 1.0
    return total * total / (n * squares)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in [0, 1])."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def latency_summary(ns: Iterable[int]) -> dict[str, float]:
    ms = sorted(v / 1e6 for v in ns)
    return {"p50": percentile(ms, 0.50), "p99": percentile(ms, 0.99),
            "p999": percentile(ms, 0.999), "max": ms[-1] if ms else 0.0,
            "mean": (sum(ms) / len(ms)) if ms else 0.0, "count": len(ms)}


def latency_histogram(ns: Iterable[int]) -> list[int]:
    """Counts per HIST_EDGES_MS bin (below the first edge counts in bin 0, above the last
    in the last bin)."""
    counts = [0] * (len(HIST_EDGES_MS) - 1)
    last = len(counts) - 1
    for v in ns:
        i = bisect.bisect_right(HIST_EDGES_MS, v / 1e6) - 1
        counts[min(max(i, 0), last)] += 1
    return counts


# --------------------------------------------------------------------------- machine
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _fs_type(path: str) -> str:
    best, fstype = "", "?"
    real = os.path.realpath(path)
    for line in _read("/proc/mounts").splitlines():
        parts = line.split()
        if len(parts) >= 3 and real.startswith(parts[1]) and len(parts[1]) >= len(best):
            best, fstype = parts[1], parts[2]
    return fstype


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_info(workdir: str) -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                  if line.startswith("model name")), platform.processor() or "?")
    usable = _usable_cpus()
    commit = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5, cwd=os.path.dirname(__file__)).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "cpu_count": os.cpu_count(), "cpus_usable": usable, "cpu_model": model,
        "platform": platform.platform(), "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "db_dir_fs": _fs_type(workdir),
        "loadavg_start": list(os.getloadavg()), "ferry_commit": commit,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# --------------------------------------------------------------------------- ceiling
def measure_ceiling(workdir: str, updates: int = CEILING_UPDATES) -> float:
    """Single process, autocommit: UPDATEs of distinct integer-keyed rows per second."""
    path = os.path.join(workdir, f"ceiling-{uuid.uuid4().hex[:8]}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, status TEXT NOT NULL, at INTEGER)")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t(id, status) VALUES (?, 'SUBMITTED')",
                         ((i,) for i in range(updates)))
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sql = "UPDATE t SET status='CLAIMED', at=? WHERE id=? AND status='SUBMITTED'"
        t0 = time.perf_counter()
        for i in range(updates):
            conn.execute(sql, (i, i))
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except OSError:
                pass
    return updates / elapsed


def measure_store_claim_update(workdir: str, updates: int) -> float:
    """Single process, autocommit: ferry_core's own claiming UPDATE (trigger, indexes,
    token) on distinct ready tasks per second, with no pick or sweep around it."""
    from ferry_core import LeaseStore

    path = os.path.join(workdir, f"claimupdate-{uuid.uuid4().hex[:8]}.db")
    try:
        store = LeaseStore(path)
        try:
            ids = _bulk_dispatch_lease_store(store, updates)
            now = store.clock()
            conn = store._conn
            t0 = time.perf_counter()
            for task_id in ids:
                store._cas_claim(conn, task_id, "ceiling", now)
            elapsed = time.perf_counter() - t0
        finally:
            store.close()
    finally:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except OSError:
                pass
    return updates / elapsed


# --------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    spec: str
    factory: Callable[..., Any]
    ferry_core: bool
    fixed_strategy: str | None = None  # ferry_core:cas_store / immediate_store

    def make(self, path: str, strategy: str, policy: str) -> Any:
        from ferry_core import LeaseStore, SystemClock

        clock = SystemClock()
        if not self.ferry_core:
            return self.factory(path, clock=clock)
        return LeaseStore(path, clock=clock, claim_strategy=self.fixed_strategy or strategy,
                          busy_policy=policy)


def resolve_target(spec: str) -> Target:
    factory = load_factory(spec)
    import ferry_core

    if factory is ferry_core.LeaseStore:
        return Target(spec, factory, True)
    fixed = {ferry_core.cas_store: "cas", ferry_core.immediate_store: "immediate"}.get(factory)
    if fixed is not None:
        return Target(spec, factory, True, fixed)
    return Target(spec, factory, False)


def _bulk_dispatch_lease_store(store: Any, n: int) -> list[str]:
    """N ready tasks in one transaction, with exactly the columns ``dispatch`` writes."""
    now = store.clock()
    qttl, ettl = 86_400_000, 3_600_000
    ids = [uuid.uuid4().hex for _ in range(n)]
    rows = [(t, "SUBMITTED", None, "", json.dumps({"n": i}), "bench", qttl, ettl, 1, now, now,
             now + qttl, 0) for i, t in enumerate(ids)]
    conn = store._conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            "INSERT INTO tasks(task_id, status, target_agent, title, payload, requester,"
            " queue_ttl_ms, exec_ttl_ms, max_attempts, created_at, queued_at, queue_deadline,"
            " pending_deps) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return ids


def _dispatch(target: Target, store: Any, n: int, tick: Callable[[int], None]) -> None:
    from ferry_core import LeaseStore

    if isinstance(store, LeaseStore):
        _bulk_dispatch_lease_store(store, n)
        tick(n)
        return
    for i in range(n):  # a user's store: through its own API
        store.dispatch(None, payload={"n": i}, requester="bench",
                       queue_ttl_ms=86_400_000, exec_ttl_ms=3_600_000)
        if i % 500 == 499:
            tick(i + 1)
    tick(n)


# --------------------------------------------------------------------------- worker
def _is_busy_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError):
        return "locked" in text or "busy" in text
    return type(exc).__name__ == "StoreError" and ("locked" in text or "busy" in text)


def _drain(out: Any, make_store: Callable[[], Any], agent: str, slot: int, tasks: int,
           counts: Any, stop: Any, ready: Any, go: Any, release: Any, parent: int,
           ferry_core: bool, timeout_s: float) -> None:
    """Worker body: open the store, wait for the start signal, drain, report, wait, close."""
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    res: dict[str, Any] = {"slot": slot, "error": None}
    store = None
    lat = array("q")
    flat = array("q")
    claims = fulfilled = busy = polls = poll_misses = errors = fulfill_lost = 0
    cas = {"attempts": 0, "misses": 0, "empty": 0}
    claimed_ids: list[str] = []
    done_ids: list[str] = []
    t_start = t_last_claim = t_last_fulfill = 0
    ru0 = None
    try:
        store = make_store()
        if ferry_core:  # count the store's own CAS UPDATEs (instance attribute: no patching)
            orig = store._cas_claim

            def counted(conn: Any, task_id: str, agent_id: str, now: int) -> Any:
                claim = orig(conn, task_id, agent_id, now)
                cas["attempts"] += 1
                if claim is None:
                    cas["misses"] += 1
                return claim

            store._cas_claim = counted
            orig_next = store._claim_next

            def counted_next(conn: Any, agent_id: str, now: int) -> Any:
                claim = orig_next(conn, agent_id, now)  # picks under the write lock:
                cas["attempts"] += 1  # it cannot lose a race; None = nothing was ready
                if claim is None:
                    cas["empty"] += 1
                return claim

            store._claim_next = counted_next
        ready[slot] = 1
        if not go.wait(timeout_s):
            raise HarnessError("the start signal never came")
        t_start = time.monotonic_ns()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        first_try = None
        stalled_since = None
        mono = time.monotonic_ns
        while not stop.value:
            t0 = mono()
            if first_try is None:
                first_try = t0
            try:
                claim = store.poll_next(agent)
            except Exception as exc:
                if _is_busy_error(exc):
                    busy += 1
                    continue
                errors += 1
                res["error"] = f"poll_next raised {type(exc).__name__}: {exc}"
                if errors >= 50:
                    break
                continue
            t1 = mono()
            polls += 1
            if claim is None:
                if tasks - sum(counts) <= 0:
                    break
                poll_misses += 1
                if stalled_since is None:
                    stalled_since = t1
                elif t1 - stalled_since > STALL_S * 1e9:
                    res["error"] = (f"stalled: poll_next kept returning None for {STALL_S:.0f}s "
                                    f"while {tasks - sum(counts)} tasks were unclaimed")
                    break
                continue
            stalled_since = None
            lat.append(t1 - first_try)
            first_try = None
            claims += 1
            counts[slot] = claims
            claimed_ids.append(str(claim.task_id))
            t_last_claim = t1
            for _attempt in range(3):
                f0 = mono()
                try:
                    store.fulfill(claim.task_id, agent, claim.token, {"by": agent})
                except Exception as exc:
                    if _is_busy_error(exc):
                        busy += 1
                        continue
                    errors += 1
                    res["error"] = f"fulfill raised {type(exc).__name__}: {exc}"
                    fulfill_lost += 1
                    break
                t_last_fulfill = mono()
                flat.append(t_last_fulfill - f0)
                fulfilled += 1
                done_ids.append(str(claim.task_id))
                break
            else:
                fulfill_lost += 1
            if errors >= 50:
                break
    except Exception as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
    if ru0 is not None:
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        res["cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        res["preempted"] = ru1.ru_nivcsw - ru0.ru_nivcsw
        res["blocked"] = ru1.ru_nvcsw - ru0.ru_nvcsw
    res.update(
        claims=claims, fulfilled=fulfilled, busy_errors=busy, polls=polls,
        poll_misses=poll_misses, errors=errors, fulfill_lost=fulfill_lost,
        cas_attempts=cas["attempts"], cas_misses=cas["misses"], cas_empty=cas["empty"],
        claimed_ids=claimed_ids, done_ids=done_ids, t_start=t_start,
        t_last_claim=t_last_claim, t_last_fulfill=t_last_fulfill, t_end=time.monotonic_ns(),
        latency_ns=lat.tobytes(), fulfill_ns=flat.tobytes(),
    )
    try:
        out.send(res)
        release.wait(timeout_s)  # keep the connection open while the controller reads the WAL
    finally:
        if store is not None:
            try:
                store.close()
            except Exception:
                pass


# --------------------------------------------------------------------------- one run
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
                msg = early[0].recv()
            except (EOFError, OSError):
                return "a worker died before the start"
            conns.pop(early[0], None)
            early[0].close()
            return f"a worker could not open the store: {msg.get('error')}"
        if time.monotonic() > deadline:
            return f"workers did not open the store within {timeout_s:.0f}s"
    return None


def _ns_array(data: bytes) -> array:
    a = array("q")
    a.frombytes(data)
    return a


def run_one(target: Target, workers: int, strategy: str, policy: str, tasks: int,
            workdir: str, *, timeout_s: float = 600.0,
            progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Dispatch ``tasks``, drain them with ``workers`` processes, return the run's record."""
    run_dir = tempfile.mkdtemp(prefix=f"w{workers}-", dir=workdir)
    path = os.path.join(run_dir, "bench.db")
    label = f"{workers}w {strategy}/{policy}"

    def tick(done: int) -> None:
        if progress:
            progress({"phase": "dispatch", "label": label, "done": done, "tasks": tasks})

    store = target.make(path, strategy, policy)
    try:
        _dispatch(target, store, tasks, tick)
        if hasattr(store, "checkpoint"):
            store.checkpoint("TRUNCATE")
    finally:
        store.close()

    counts = _CTX.RawArray("q", workers)
    stop = _CTX.RawValue("b", 0)
    ready = _CTX.RawArray("b", workers)
    go = _CTX.Event()  # the barrier: every worker has opened its store and waits on it
    release = _CTX.Event()
    procs: list[Any] = []
    conns: dict[Any, int] = {}
    results: dict[int, dict[str, Any]] = {}
    wal_max = 0
    error: str | None = None
    try:
        for slot in range(workers):
            recv_end, send_end = _CTX.Pipe(duplex=False)

            def make_store(p: str = path) -> Any:
                return target.make(p, strategy, policy)

            proc = _CTX.Process(
                target=_drain, daemon=True, name=f"ferry-bench-{slot}",
                args=(send_end, make_store, f"bench-{slot}", slot, tasks, counts, stop,
                      ready, go, release, os.getpid(), target.ferry_core, timeout_s))
            proc.start()
            send_end.close()
            procs.append(proc)
            conns[recv_end] = slot
        error = _await_ready(procs, conns, ready, min(60.0, timeout_s))
        if error:
            stop.value = 1
        go.set()
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
            wal_max = max(wal_max, _wal_size(path))
            if progress:
                progress({"phase": "drain", "label": label, "done": sum(counts), "tasks": tasks,
                          "elapsed": time.monotonic() - t_go})
        wal_end = _wal_size(path)
        wal_max = max(wal_max, wal_end)
    finally:
        stop.value = 1
        release.set()
        grace = time.monotonic() + (0.0 if error else 5.0)  # a failed run: kill at once
        for proc in procs:
            proc.join(max(0.0, grace - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in conns:
            conn.close()

    record = _summarise(results, workers, strategy, policy, tasks, wal_end, wal_max, error)
    record["target"] = target.spec
    record["verified"] = verify_delivery(results, tasks)
    if target.ferry_core and not record.get("error"):
        db = _verify_ferry_core(path, tasks)
        record["verified"] = {**record["verified"], **{f"db_{k}": v for k, v in db.items()},
                              "ok": record["verified"]["ok"] and db["ok"]}
    shutil.rmtree(run_dir, ignore_errors=True)
    return record


def verify_delivery(results: dict[int, dict[str, Any]], tasks: int) -> dict[str, Any]:
    """Every task completed exactly once, as the workers saw it: each of the ``tasks`` ids
    was claimed once and its fulfill accepted once, by one worker (a queue that hands a
    message to two workers, or loses one, fails here)."""
    claimed: dict[str, int] = {}
    done: dict[str, int] = {}
    for r in results.values():
        for t in r.get("claimed_ids", ()):
            claimed[t] = claimed.get(t, 0) + 1
        for t in r.get("done_ids", ()):
            done[t] = done.get(t, 0) + 1
    dup_claims = sum(1 for n in claimed.values() if n > 1)
    dup_done = sum(1 for n in done.values() if n > 1)
    ok = (len(results) > 0 and len(done) == tasks == len(claimed) and not dup_claims
          and not dup_done)
    return {"ok": ok, "tasks": tasks, "completed_distinct": len(done),
            "claimed_distinct": len(claimed), "claimed_twice": dup_claims,
            "completed_twice": dup_done, "never_completed": max(0, tasks - len(done))}


def _verify_ferry_core(path: str, tasks: int) -> dict[str, Any]:
    """Every task COMPLETED exactly once: one token issued per task, none left open."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        completed = conn.execute("SELECT count(*) FROM tasks WHERE status='COMPLETED'").fetchall()[0][0]
        total = conn.execute("SELECT count(*) FROM tasks").fetchall()[0][0]
        tokens = conn.execute("SELECT count(*), count(DISTINCT task_id) FROM claim_tokens").fetchall()[0]
    finally:
        conn.close()
    ok = completed == total == tasks and tokens[0] == tokens[1] == tasks
    return {"ok": ok, "completed": completed, "tasks_in_db": total, "tokens_issued": tokens[0]}


def _summarise(results: dict[int, dict[str, Any]], workers: int, strategy: str, policy: str,
               tasks: int, wal_end: int, wal_max: int, error: str | None) -> dict[str, Any]:
    rows = [results[s] for s in sorted(results)]
    worker_errors = sorted({r["error"] for r in rows if r.get("error")})
    if not error and worker_errors:
        error = worker_errors[0]
    if not error and len(rows) != workers:
        error = f"{workers - len(rows)} worker(s) sent no result"
    per_worker = [r["claims"] for r in rows]
    claims = sum(per_worker)
    fulfilled = sum(r["fulfilled"] for r in rows)
    starts = [r["t_start"] for r in rows if r["t_start"]]
    t0 = min(starts) if starts else 0
    last_claim = max((r["t_last_claim"] for r in rows), default=0)
    last_fulfill = max((r["t_last_fulfill"] for r in rows), default=0)
    claim_s = (last_claim - t0) / 1e9 if claims and t0 else 0.0
    life_s = (last_fulfill - t0) / 1e9 if fulfilled and t0 else 0.0
    lat = [v for r in rows for v in _ns_array(r["latency_ns"])]
    flat = [v for r in rows for v in _ns_array(r["fulfill_ns"])]
    cas_attempts = sum(r["cas_attempts"] for r in rows)
    cas_empty = sum(r.get("cas_empty", 0) for r in rows)
    if cas_attempts:
        attempts, misses, source = cas_attempts, sum(r["cas_misses"] for r in rows), "store-cas-update"
    else:
        attempts, misses, source = sum(r["polls"] for r in rows), sum(r["poll_misses"] for r in rows), "poll-none"
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
        "poll_none_while_tasks_left": sum(r["poll_misses"] for r in rows),
        "busy_errors": sum(r["busy_errors"] for r in rows),
        "other_errors": sum(r["errors"] for r in rows),
        "jain_fairness": jain(per_worker) if per_worker else 0.0,
        "per_worker_claims": per_worker,
        "wal_bytes": wal_end, "wal_bytes_max": wal_max,
        "cpu_s": sum(r.get("cpu_s", 0.0) for r in rows),
        "cpu_util": (sum(r.get("cpu_s", 0.0) for r in rows) / (life_s * _usable_cpus())
                     if life_s > 0 else 0.0),
        "preemptions": sum(r.get("preempted", 0) for r in rows),
        "voluntary_switches": sum(r.get("blocked", 0) for r in rows),
        "error": error,
    }


# --------------------------------------------------------------------------- the matrix
def split_targets(target: str | Sequence[str]) -> list[str]:
    """``"A,B"`` (or a list) -> target specs in order, without repeats."""
    parts = target.split(",") if isinstance(target, str) else list(target)
    out = list(dict.fromkeys(p.strip() for p in parts if p.strip()))
    if not out:
        raise BenchUsageError("--target needs at least one module:factory")
    return out


def short_name(spec: str) -> str:
    """A table label: ``ferry_core`` for the reference store, else the module's last part."""
    module, _, attr = spec.partition(":")
    if module == "ferry_core":
        return "ferry_core" if attr == "LeaseStore" else f"ferry_core:{attr}"
    return module.rsplit(".", 1)[-1] if attr == "make_store" else f"{module.rsplit('.', 1)[-1]}:{attr}"


def run_bench(target: str | Sequence[str] = DEFAULT_TARGET,
              workers: Sequence[int] = DEFAULT_WORKERS,
              strategies: Sequence[str] = ("cas", "immediate"),
              policies: Sequence[str] = DEFAULT_POLICIES, tasks: int = DEFAULT_TASKS, *,
              repeat: int = 1, timeout_s: float = 600.0, ceiling_updates: int = CEILING_UPDATES,
              ceiling_samples: int = CEILING_SAMPLES,
              progress: Callable[[dict[str, Any]], None] | None = None,
              db_dir: str | None = None) -> dict[str, Any]:
    """Run the whole matrix ``repeat`` times (interleaved); returns
    ``{"runs", "ceiling", "machine", "goal", ...}`` as plain data.

    Several targets (``"A,B"``) are compared in one interleaved run: every repetition runs,
    for each worker count, every target (and, for ferry_core, every strategy x policy) in
    the same order, on the same tasks, between the same ceiling samples.
    """
    specs = split_targets(target)
    multi = len(specs) > 1
    notes: list[str] = []
    variants: list[tuple[Target, str, str]] = []
    for spec in specs:
        tgt = resolve_target(spec)
        t_strategies, t_policies = list(strategies), list(policies)
        if tgt.ferry_core and tgt.fixed_strategy:
            if t_strategies != [tgt.fixed_strategy]:
                notes.append(f"{spec} fixes claim_strategy={tgt.fixed_strategy!r}; "
                             "--strategy is ignored")
            t_strategies = [tgt.fixed_strategy]
        elif not tgt.ferry_core:
            notes.append(f"{spec} is not ferry_core: --strategy and --busy-policy do not apply; "
                         "the store is measured as it is (strategy/busy_policy 'as-is')")
            t_strategies, t_policies = [AS_IS], [AS_IS]
        variants += [(tgt, s, p) for s in t_strategies for p in t_policies]
    all_strategies = list(dict.fromkeys(s for _, s, _ in variants))
    all_policies = list(dict.fromkeys(p for _, _, p in variants))
    base = tempfile.mkdtemp(prefix="ferry-bench-", dir=db_dir)
    try:
        machine = machine_info(base)
        samples: list[float] = []

        def ceiling_sample(phase: str) -> list[float]:
            got = []
            for _ in range(ceiling_samples):
                if progress:
                    progress({"phase": "ceiling", "label": phase, "done": 0, "tasks": 0})
                got.append(measure_ceiling(base, ceiling_updates))
            samples.extend(got)
            return got

        before = ceiling_sample("before")
        any_core = any(t.ferry_core for t, _, _ in variants)
        claim_update = measure_store_claim_update(base, ceiling_updates) if any_core else None
        runs: list[dict[str, Any]] = []
        combos = [(w, v) for w in workers for v in variants]
        total = len(combos) * repeat
        for rep in range(repeat):
            rep_runs = []
            for i, (w, (tgt, s, p)) in enumerate(combos):
                index = rep * len(combos) + i
                label = variant_label(tgt.spec, s, p, multi)
                if progress:
                    progress({"phase": "run", "label": f"{w}w {label}", "index": index,
                              "total": total, "done": 0, "tasks": tasks})
                record = run_one(tgt, w, s, p, tasks, base, timeout_s=timeout_s,
                                 progress=progress)
                record["rep"] = rep + 1
                record["label"] = label
                rep_runs.append(record)
                if progress:
                    progress({"phase": "result", "record": record, "index": index,
                              "total": total})
            after = ceiling_sample("after" if rep == repeat - 1 else f"after run {rep + 1}")
            rep_ceiling = max(before + after)  # the samples right before and after it
            for r in rep_runs:
                r["ceiling"] = rep_ceiling
                r["ceiling_ratio"] = r["claims_per_s"] / rep_ceiling if rep_ceiling else 0.0
                r["raw_half"] = rep_ceiling / 2  # a lifecycle is at least two such writes
                r["lifecycle_ratio"] = (r["lifecycles_per_s"] / r["raw_half"]
                                        if rep_ceiling else 0.0)
            runs.extend(rep_runs)
            before = after
        best = max(samples)
        machine["loadavg_end"] = list(os.getloadavg())
        ceiling = {
            "updates_per_s": best,
            "raw_half_per_s": best / 2,
            "samples_per_s": samples,
            "statement": "UPDATE t SET status='CLAIMED', at=? WHERE id=? AND status='SUBMITTED'",
            "method": (f"single process, autocommit (one statement per transaction), WAL + "
                       f"synchronous=NORMAL, {ceiling_updates} distinct rows per sample, "
                       f"{ceiling_samples} samples before the matrix and after each repetition; "
                       "a run is compared with the best sample taken right before or after "
                       "its repetition, this field is the best of all; raw/2 is the lifecycle "
                       "ceiling (a claim and a fulfill are at least two such writes)"),
        }
        if claim_update is not None:
            ceiling["ferry_core_claim_update_per_s"] = claim_update
            ceiling["ferry_core_claim_update_note"] = (
                "ferry_core's own claiming UPDATE (token-history trigger, partial indexes) in "
                "the same single-process autocommit loop, without pick or sweep")
        return {
            "target": ",".join(specs), "targets": specs, "ferry_core": any_core,
            "tasks": tasks, "repeat": repeat,
            "workers": list(workers), "strategies": all_strategies,
            "busy_policies": all_policies, "runs": runs, "ceiling": ceiling,
            "machine": machine, "goal": goal_check(runs), "notes": notes,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def variant_label(spec: str, strategy: str, policy: str, multi: bool) -> str:
    """How a run is named in tables and plots."""
    core = f"{strategy}/{policy}"
    if not multi:
        return "as measured" if strategy == AS_IS else core
    name = short_name(spec)
    return name if strategy == AS_IS else f"{name} {core}"


# Issue 19's acceptance, per worker count: lifecycles/s as a fraction of the same run's
# raw/2, and the claim-latency tail, fairness and lost-race ratio.
GOAL_BY_WORKERS: dict[int, dict[str, float]] = {
    1: {"lifecycle_ratio": 0.6},
    8: {"lifecycle_ratio": 0.5, "p99_ms": 2.0, "p999_ms": 10.0, "max_ms": 50.0, "jain": 0.99,
        "cas_miss": 0.01},
    16: {"p99_ms": 2.0, "p999_ms": 20.0, "max_ms": 50.0, "jain": 0.99, "cas_miss": 0.01},
}


def goal_check(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 19's acceptance, evaluated for every run at 1, 8 or 16 workers."""
    out = []
    for r in runs:
        goal = GOAL_BY_WORKERS.get(r["workers"])
        if goal is None or r.get("error"):
            continue
        lat = r["latency_ms"]
        value = {"lifecycle_ratio": r.get("lifecycle_ratio", 0.0), "p99_ms": lat["p99"],
                 "p999_ms": lat["p999"], "max_ms": lat["max"], "jain": r["jain_fairness"],
                 "cas_miss": r["cas_miss_ratio"]}
        checks = {k: (value[k] >= want if k in ("lifecycle_ratio", "jain") else value[k] <= want)
                  for k, want in goal.items()}
        checks["verified"] = bool(r.get("verified", {}).get("ok"))
        out.append({"rep": r.get("rep", 1), "workers": r["workers"],
                    "label": r.get("label", f"{r['strategy']}/{r['busy_policy']}"),
                    "target": r.get("target", ""), "strategy": r["strategy"],
                    "busy_policy": r["busy_policy"], "tasks": r["tasks"],
                    "lifecycles_per_s": r["lifecycles_per_s"], "raw_half": r.get("raw_half", 0),
                    **value, "checks": checks, "met": all(checks.values())})
    return out


# --------------------------------------------------------------------------- report
def _fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def summary_table(result: dict[str, Any]) -> list[str]:
    """Markdown table of every run."""
    reps = result.get("repeat", 1) > 1
    multi = len(result.get("targets", [result.get("target")])) > 1
    lines = [
        ("| run " if reps else "") + ("| target " if multi else "")
        + "| workers | strategy | busy policy | claims/s | × ceiling | "
        "lifecycles/s | × raw/2 | p50 ms | p99 ms | p99.9 ms | max ms | CAS miss | busy err | "
        "Jain | exactly once | WAL end MiB | WAL max MiB | CPU used |",
        ("|---:" if reps else "") + ("|---" if multi else "")
        + "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---|---:|---:|---:|",
    ]
    for r in result["runs"]:
        lat = r["latency_ms"]
        err = f" ⚠ {r['error']}" if r.get("error") else ""
        ver = r.get("verified") or {}
        once = "yes" if ver.get("ok") else (
            f"NO ({ver.get('claimed_twice', '?')} claimed twice, "
            f"{ver.get('never_completed', '?')} never completed)" if ver else "?")
        lines.append(
            (f"| {r.get('rep', 1)} " if reps else "")
            + (f"| {short_name(r.get('target', ''))} " if multi else "")
            + f"| {r['workers']} | {r['strategy']} | {r['busy_policy']}{err} | "
            f"{_fmt_rate(r['claims_per_s'])} | {r.get('ceiling_ratio', 0):.3f} | "
            f"{_fmt_rate(r['lifecycles_per_s'])} | {r.get('lifecycle_ratio', 0):.2f} | "
            f"{lat['p50']:.2f} | {lat['p99']:.2f} | "
            f"{lat['p999']:.2f} | {lat['max']:.2f} | {r['cas_miss_ratio']:.3f} | "
            f"{r['busy_errors']} | {r['jain_fairness']:.3f} | {once} | "
            f"{r['wal_bytes'] / MIB:,.1f} | "
            f"{r['wal_bytes_max'] / MIB:,.1f} | {r.get('cpu_util', 0):.0%} |")
    return lines


def _spread(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else (
        f"{format(lo, fmt)}–{format(hi, fmt)}")


def compare_table(result: dict[str, Any]) -> list[str]:
    """One row per target variant: every worker count's lifecycles/s, and the tail at the
    largest worker count (the spread over repetitions, min–max)."""
    runs = [r for r in result["runs"] if not r.get("error")]
    if not runs:
        return []
    ws = sorted({r["workers"] for r in runs})
    tail_w = 8 if 8 in ws else ws[-1]
    labels = list(dict.fromkeys(r.get("label", "") for r in runs))
    head = ("| store | " + " | ".join(f"{w}w lifecycles/s (× raw/2)" for w in ws)
            + f" | {tail_w}w p99 ms | {tail_w}w p99.9 ms | {tail_w}w max ms | {tail_w}w Jain |"
            f" {tail_w}w CAS miss | exactly once |")
    lines = [head, "|---" + "|---:" * (len(ws) + 5) + "|---|"]
    for label in labels:
        mine = [r for r in runs if r.get("label", "") == label]
        cells = []
        for w in ws:
            at = [r for r in mine if r["workers"] == w]
            cells.append(f"{_spread([r['lifecycles_per_s'] for r in at], ',.0f')} "
                         f"({_spread([r.get('lifecycle_ratio', 0) for r in at], '.2f')})"
                         if at else "—")
        tail = [r for r in mine if r["workers"] == tail_w]
        if tail:
            cells += [_spread([r["latency_ms"][k] for r in tail], ".1f")
                      for k in ("p99", "p999", "max")]
            cells += [_spread([r["jain_fairness"] for r in tail], ".2f"),
                      _spread([r["cas_miss_ratio"] for r in tail], ".3f")]
        else:
            cells += ["—"] * 5
        bad = sum(1 for r in mine if not (r.get("verified") or {}).get("ok"))
        cells.append("yes" if not bad else f"NO in {bad} of {len(mine)} runs")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    raw = result["ceiling"]
    lines += ["", f"raw/2 = {_fmt_rate(raw.get('raw_half_per_s', raw['updates_per_s'] / 2))}"
              " lifecycles/s (best ceiling sample / 2; every run is compared with the samples "
              "taken right before and after its own repetition)."]
    return lines


def goal_table(result: dict[str, Any]) -> list[str]:
    goal = result.get("goal") or []
    if not goal:
        return []
    mark = {True: "✅", False: "❌"}

    def cell(g: dict[str, Any], key: str, fmt: str) -> str:
        if key not in g["checks"]:
            return f"{format(g[key], fmt)}"
        return f"{mark[g['checks'][key]]} {format(g[key], fmt)}"

    lines = [
        "1 worker: lifecycles/s ≥ 0.6 × raw/2; 8 workers: ≥ 0.5 × raw/2, p99 ≤ 2 ms, "
        "p99.9 ≤ 10 ms, max ≤ 50 ms, Jain ≥ 0.99, CAS misses ≤ 1 %; 16 workers: the same "
        "tail with p99.9 ≤ 20 ms. Every task completed exactly once.",
        "",
        "| run | workers | store | lifecycles/s | × raw/2 | p99 ms | p99.9 ms | max ms | Jain |"
        " CAS miss | met |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for g in sorted(goal, key=lambda g: (g["workers"], g["label"], g["rep"])):
        failed = ", ".join(k for k, ok in g["checks"].items() if not ok)
        lines.append(
            f"| {g['rep']} | {g['workers']} | {g['label']} | {_fmt_rate(g['lifecycles_per_s'])} |"
            f" {cell(g, 'lifecycle_ratio', '.2f')} | {cell(g, 'p99_ms', '.2f')} |"
            f" {cell(g, 'p999_ms', '.1f')} | {cell(g, 'max_ms', '.1f')} | {cell(g, 'jain', '.3f')} |"
            f" {cell(g, 'cas_miss', '.3f')} | {'yes' if g['met'] else 'no: ' + failed} |")
    return lines


def findings(result: dict[str, Any]) -> list[str]:
    """Plain facts the numbers show, so nobody has to dig them out of the table."""
    runs = [r for r in result["runs"] if not r.get("error")]
    out = []
    if not runs:
        return out
    solo = [r for r in runs if r["workers"] == 1]
    if solo:
        worst = max(solo, key=lambda r: r["latency_ms"]["max"])
        out.append(
            f"With one worker (no contention at all) the claim latency still reaches p99.9 "
            f"{worst['latency_ms']['p999']:.1f} ms / max {worst['latency_ms']['max']:.1f} ms "
            f"({worst['strategy']}/{worst['busy_policy']}): that much comes from the machine "
            "(scheduling, other jobs, the file system), not from contention.")
        best = max(r["ceiling_ratio"] for r in solo)
        out.append(
            f"The best single-worker run reaches {best:.3f} × the raw ceiling: one lifecycle is "
            "two write transactions (claim, fulfill) of several statements each, against one "
            "one-row UPDATE per transaction for the ceiling.")
    util = sorted(r.get("cpu_util", 0) for r in runs if r["workers"] >= result["machine"]["cpus_usable"])
    if util:
        med = util[len(util) // 2]
        if med < 0.85:
            out.append(
                f"With at least as many workers as CPUs, the workers used a median {med:.0%} of "
                "the machine's CPU time: the rest went to other jobs or waiting, so absolute "
                "numbers are depressed and noisy; compare runs within this report.")
    big = [r for r in runs if r["wal_bytes_max"] > WAL_BOUND_BYTES]
    if big:
        worst = max(big, key=lambda r: r["wal_bytes_max"])
        out.append(
            f"{len(big)} of {len(runs)} runs grew the `-wal` past the harness's wal-bounded "
            f"limit of {WAL_BOUND_BYTES // MIB} MiB (worst: {worst['wal_bytes_max'] / MIB:,.0f} "
            f"MiB, {worst['workers']} workers {worst['strategy']}/{worst['busy_policy']}): under "
            "sustained writes from several processes the passive auto-checkpoint never catches "
            "up, so the WAL is never restarted from the beginning.")
    return out


def render_report(result: dict[str, Any], plots: list[str], plot_note: str | None) -> str:
    m, c = result["machine"], result["ceiling"]
    lines = [
        "# ferry bench: claim contention",
        "",
        f"Target `{result['target']}`, {result['tasks']:,} tasks per run"
        f"{', ' + str(result['repeat']) + ' repetitions, interleaved' if result.get('repeat', 1) > 1 else ''}, workers "
        f"{', '.join(map(str, result['workers']))}; strategies "
        f"{', '.join(result['strategies'])}; busy policies {', '.join(result['busy_policies'])}.",
        "",
        f"Machine: {m['cpu_model']}, {m['cpus_usable']} usable CPUs, {m['platform']}, Python "
        f"{m['python']}, SQLite {m['sqlite']}, database on {m['db_dir_fs']}; load average "
        f"{m['loadavg_start'][0]:.2f} at the start, {m.get('loadavg_end', [0])[0]:.2f} at the "
        f"end (other jobs share this machine: compare ratios within one run). ferry "
        f"{m['ferry_commit']}, {m['started_utc']}.",
        "",
    ]
    for note in result.get("notes", []):
        lines += [f"> **Note.** {note}", ""]
    lines += [
        "## Ceiling",
        "",
        f"Raw single-process autocommit UPDATE rate: **{_fmt_rate(c['updates_per_s'])}/s** "
        f"({c['method']}; samples " + ", ".join(_fmt_rate(s) for s in c["samples_per_s"])
        + f"). Statement: `{c['statement']}`.",
        "",
    ]
    if "ferry_core_claim_update_per_s" in c:
        lines += [
            f"For scale: {c['ferry_core_claim_update_note']}: "
            f"**{_fmt_rate(c['ferry_core_claim_update_per_s'])}/s** "
            f"({c['ferry_core_claim_update_per_s'] / c['updates_per_s']:.2f} × the ceiling).",
            "",
        ]
    facts = findings(result)
    if facts:
        lines += ["## Findings", ""] + [f"- {f}" for f in facts] + [""]
    lines += ["## Stores compared (one interleaved run)", ""] + compare_table(result) + [""]
    goal = goal_table(result)
    if goal:
        lines += ["## Goal (issue 19)", ""] + goal + [""]
    lines += ["## Runs", ""] + summary_table(result) + [""]
    lines += ["## Plots", ""]
    if plots:
        lines += [f"![{p}]({p})" for p in plots] + [""]
    if plot_note:
        lines += [f"> {plot_note}", ""]
    lines += [
        "## What the columns mean",
        "",
        "- **claims/s**: claims by all workers / time from the barrier release to the last "
        "successful claim. Every worker loops `poll_next` then `fulfill`, so this is also about "
        "the lifecycle rate (**lifecycles/s**: fulfilled tasks / time to the last fulfill).",
        "- **× ceiling**: claims/s divided by the raw ceiling measured right before or after "
        "the run (same invocation).",
        "- **p50 … max**: time to obtain a claim, from the first `poll_next` attempt to the one "
        "that returned a claim (store-internal busy waits and retries included), nearest rank "
        "over every claim of the run.",
        "- **CAS miss**: lost claim attempts / all claim attempts. For ferry_core: the store's "
        "own claiming UPDATEs (`cas_miss_source=store-cas-update`); an UPDATE that changed no "
        "row because another worker took the task first is a miss (the `immediate` strategy "
        "picks under the write lock, so it never misses). For other targets: `poll_next` calls "
        "(`poll-none`); a None while tasks remained is a miss.",
        "- **busy err**: StoreError / OperationalError from a lock that stayed busy past the "
        "store's timeout (the call is retried, so no task is lost).",
        "- **Jain**: (Σx)² / (n·Σx²) over per-worker claim counts: 1 = equal shares.",
        "- **WAL end / max**: size of the `-wal` file when the drain ended (connections still "
        "open) and the largest size seen while it ran.",
        "- **CPU used**: CPU time of all workers / (wall time × usable CPUs).",
        "",
        "The raw data (per-worker claims, a latency histogram, fulfill latency) is in "
        "`bench.json`.",
        "",
    ]
    return "\n".join(lines)


def write_report(result: dict[str, Any], report_dir: str) -> list[str]:
    """bench.json, report.md and the PNGs (if matplotlib is installed) into ``report_dir``."""
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    note = None
    try:
        bench_plots = importlib.import_module(f"{__package__}.bench_plots")
    except ImportError as exc:  # matplotlib missing
        note = (f"Plots skipped: {exc}. Install them with `pip install 'ferry[plots]'` and "
                "re-run.")
    else:
        plots = bench_plots.write_plots(result, d)
    (d / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
    (d / "report.md").write_text(render_report(result, plots, note))
    result.setdefault("notes", [])
    if note:
        result["notes"].append(note)
    return ["report.md", "bench.json", *plots]


# --------------------------------------------------------------------------- CLI
def _int_list(flag: str, text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise BenchUsageError(f"{flag} takes comma-separated whole numbers, got {part!r}") from None
        if not 1 <= value <= MAX_WORKERS:
            raise BenchUsageError(f"{flag}: each worker count must be 1..{MAX_WORKERS}, got {value}")
        out.append(value)
    return list(dict.fromkeys(out))


def _choices(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    if not out:
        raise BenchUsageError(f"{flag} needs at least one of {','.join(allowed)}")
    for p in out:
        if p not in allowed:
            raise BenchUsageError(f"{flag}: unknown value {p!r}; choose from {','.join(allowed)}")
    return list(dict.fromkeys(out))


def parse_options(args: argparse.Namespace) -> dict[str, Any]:
    """Validate the CLI strings (usage errors: one line, exit 2)."""
    from ferry_core.busy import POLICIES
    from ferry_core.store import STRATEGIES

    try:
        tasks = int(args.tasks)
    except ValueError:
        raise BenchUsageError(f"--tasks must be a whole number, got {args.tasks!r}") from None
    if tasks < 1:
        raise BenchUsageError(f"--tasks must be at least 1, got {tasks}")
    try:
        timeout = float(args.timeout)
    except ValueError:
        raise BenchUsageError(f"--timeout must be seconds, got {args.timeout!r}") from None
    if timeout <= 0:
        raise BenchUsageError(f"--timeout must be > 0 seconds, got {timeout:g}")
    try:
        repeat = int(args.repeat)
    except ValueError:
        raise BenchUsageError(f"--repeat must be a whole number, got {args.repeat!r}") from None
    if repeat < 1:
        raise BenchUsageError(f"--repeat must be at least 1, got {repeat}")
    opts = {
        "target": args.target, "repeat": repeat,
        "workers": _int_list("--workers", args.workers),
        "strategies": _choices("--strategy", args.strategy, STRATEGIES),
        "policies": _choices("--busy-policy", args.busy_policy, sorted(POLICIES)),
        "tasks": tasks, "timeout_s": timeout, "db_dir": args.db_dir,
    }
    if args.db_dir and not (os.path.isdir(args.db_dir) and os.access(args.db_dir, os.W_OK)):
        raise BenchUsageError(f"--db-dir: {args.db_dir!r} is not a writable directory")
    for flag, where in (("--json", args.json and os.path.dirname(os.path.abspath(args.json))),
                        ("--report-dir", args.report_dir)):
        if where:
            try:
                Path(where).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BenchUsageError(f"{flag}: cannot create {where!r}: {exc.strerror or exc}") from None
            if not os.access(where, os.W_OK):
                raise BenchUsageError(f"{flag}: {where!r} is not writable")
    for spec in split_targets(args.target):
        resolve_target(spec)  # TargetError -> one line, exit 2
    return opts


class _Progress:
    """rich bars on a terminal; otherwise a line every few seconds and one per run."""

    def __init__(self, quiet: bool, every_s: float = 5.0) -> None:
        self.quiet = quiet
        self.every_s = every_s
        self.last = 0.0
        self.live = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.live = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self.overall = self.live.add_task("matrix", total=None)
            self.current = self.live.add_task("ceiling", total=None)
            self.live.start()

    def __call__(self, s: dict[str, Any]) -> None:
        if self.quiet:
            return
        phase = s["phase"]
        if self.live is not None:
            if phase == "run":
                self.live.update(self.overall, total=s["total"], completed=s["index"],
                                 description="matrix")
            elif phase == "result":
                self.live.update(self.overall, completed=s["index"] + 1)
                self.live.console.print(self._result_line(s["record"]))
            elif phase in ("dispatch", "drain"):
                self.live.update(self.current, total=s["tasks"], completed=s["done"],
                                 description=f"{s['label']} {phase}")
            elif phase == "ceiling":  # no count: a fresh indeterminate bar
                self.live.remove_task(self.current)
                self.current = self.live.add_task(f"ceiling ({s['label']})", total=None)
            return
        now = time.monotonic()
        if phase == "result":
            print(f"ferry bench: [{s['index'] + 1}/{s['total']}] {self._result_line(s['record'])}",
                  file=sys.stderr, flush=True)
            self.last = now
        elif phase in ("run", "ceiling") or now - self.last >= self.every_s:
            self.last = now
            done = f" {s['done']}/{s['tasks']}" if s.get("tasks") else ""
            print(f"ferry bench: {phase} {s['label']}{done}", file=sys.stderr, flush=True)

    @staticmethod
    def _result_line(r: dict[str, Any]) -> str:
        lat = r["latency_ms"]
        err = f"  ERROR {r['error']}" if r.get("error") else ""
        return (f"{r['workers']:>3}w {r.get('label') or r['strategy'] + '/' + r['busy_policy']}: "
                f"{r['claims_per_s']:,.0f} claims/s  p99 {lat['p99']:.2f} ms  p99.9 "
                f"{lat['p999']:.2f} ms  max {lat['max']:.2f} ms  Jain {r['jain_fairness']:.3f}"
                f"  once {'yes' if (r.get('verified') or {}).get('ok') else 'NO'}"
                f"  busy {r['busy_errors']}{err}")

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def cmd_bench(args: argparse.Namespace) -> int:
    opts = parse_options(args)
    show = _Progress(args.quiet)
    try:
        result = run_bench(opts["target"], opts["workers"], opts["strategies"], opts["policies"],
                           opts["tasks"], repeat=opts["repeat"], timeout_s=opts["timeout_s"],
                           progress=show,
                           db_dir=opts["db_dir"])
    finally:
        show.stop()
    files: list[str] = []
    if args.report_dir:
        files = write_report(result, args.report_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    c = result["ceiling"]
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"ceiling (raw single-process autocommit UPDATE): {c['updates_per_s']:,.0f}/s")
    for line in summary_table(result):
        print(line)
    print()
    for line in compare_table(result):
        print(line)
    for g in result["goal"]:
        failed = [k for k, ok in g["checks"].items() if not ok]
        print(f"goal ({g['workers']} workers, run {g['rep']}) {g['label']}: "
              f"{g['lifecycles_per_s']:,.0f} lifecycles/s = {g['lifecycle_ratio']:.2f} x raw/2, "
              f"p99 {g['p99_ms']:.2f} ms, p99.9 {g['p999_ms']:.1f} ms, max {g['max_ms']:.1f} ms,"
              f" Jain {g['jain']:.3f}, CAS miss {g['cas_miss']:.3f}: "
              f"{'MET' if g['met'] else 'not met (' + ', '.join(failed) + ')'}")
    if files:
        print(f"report: {os.path.join(args.report_dir, 'report.md')} ({len(files)} files)")
    if args.json:
        print(f"json: {args.json}")
    failed_runs = [r for r in result["runs"] if r.get("error")]
    if failed_runs:
        print(f"ferry-harness: error: {len(failed_runs)} run(s) failed: {failed_runs[0]['error']}",
              file=sys.stderr)
        return 2
    wrong = [r for r in result["runs"] if not (r.get("verified") or {}).get("ok")]
    if wrong:
        v = wrong[0].get("verified") or {}
        print(f"ferry-harness: {len(wrong)} run(s) did not complete every task exactly once "
              f"(first: {wrong[0].get('target')} {wrong[0]['workers']}w: "
              f"{v.get('claimed_twice', '?')} claimed twice, {v.get('completed_twice', '?')} "
              f"completed twice, {v.get('never_completed', '?')} never completed)",
              file=sys.stderr)
        return 1
    return 0


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "bench", help="measure claim throughput, tail latency and fairness under contention",
        description="W worker processes start at one barrier and drain N pre-dispatched tasks "
        "(poll_next then fulfill) from one WAL database, for every combination of worker "
        "count, claim strategy and busy policy. --strategy and --busy-policy apply to "
        "ferry_core targets only; other stores are measured as they are. --target A,B,... "
        "compares stores in one interleaved run (same tasks, same order in every "
        "repetition). Exit code 1 if a run did not complete every task exactly once.")
    add_target_option(p)
    p.add_argument("--workers", default=",".join(map(str, DEFAULT_WORKERS)), metavar="LIST",
                   help="comma-separated worker counts (default 1,2,4,8,16)")
    p.add_argument("--strategy", default="cas,immediate", metavar="LIST",
                   help="ferry_core claim strategies (default cas,immediate)")
    p.add_argument("--busy-policy", default=",".join(DEFAULT_POLICIES), metavar="LIST",
                   help=f"ferry_core busy policies (default {','.join(DEFAULT_POLICIES)})")
    p.add_argument("--repeat", default="1", metavar="N",
                   help="run the whole matrix N times, interleaved (default 1): on a shared "
                   "machine, look at the spread")
    p.add_argument("--tasks", default=str(DEFAULT_TASKS), metavar="N",
                   help=f"tasks per run (default {DEFAULT_TASKS})")
    p.add_argument("--timeout", default="600", metavar="SECONDS",
                   help="give up on a run (killing its workers) after this long (default 600)")
    p.add_argument("--db-dir", default=None, metavar="DIR",
                   help="where the benchmark databases go (default: the system temp dir); "
                   "its file system matters: checkpoints fsync on a disk, not on tmpfs")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the results here")
    p.add_argument("--report-dir", default=None, metavar="DIR",
                   help="write report.md, bench.json and PNG plots here")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return {"bench": cmd_bench}
