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

from .client import HarnessError, _die_with_parent
from .target import DEFAULT_TARGET, TargetError, add_target_option, load_factory

_CTX = mp.get_context("fork")

DEFAULT_WORKERS = (1, 2, 4, 8, 16)
DEFAULT_TASKS = 20_000
DEFAULT_POLICIES = ("hybrid", "jitter", "stock")
AS_IS = "as-is"
CEILING_UPDATES = 20_000
CEILING_SAMPLES = 3  # before the matrix; as many again after it
MAX_WORKERS = 256
STALL_S = 5.0  # a worker whose poll_next keeps returning None with tasks left gives up
GOAL = {"workers": 8, "tasks": 20_000, "ceiling_ratio": 0.5, "p999_ms": 15.0, "max_ms": 50.0,
        "jain": 0.95}
MIB = 1 << 20
WAL_BOUND_BYTES = 64 * MIB  # the harness's wal-bounded limit (harness/campaign.py)
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
    _die_with_parent()
    if os.getppid() != parent:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    res: dict[str, Any] = {"slot": slot, "error": None}
    store = None
    lat = array("q")
    flat = array("q")
    claims = fulfilled = busy = polls = poll_misses = errors = fulfill_lost = 0
    cas = {"attempts": 0, "misses": 0}
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
        cas_attempts=cas["attempts"], cas_misses=cas["misses"], t_start=t_start,
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
    if target.ferry_core and not record.get("error"):
        record["verified"] = _verify_ferry_core(path, tasks)
    shutil.rmtree(run_dir, ignore_errors=True)
    return record


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
def run_bench(target: str = DEFAULT_TARGET, workers: Sequence[int] = DEFAULT_WORKERS,
              strategies: Sequence[str] = ("cas", "immediate"),
              policies: Sequence[str] = DEFAULT_POLICIES, tasks: int = DEFAULT_TASKS, *,
              repeat: int = 1, timeout_s: float = 600.0, ceiling_updates: int = CEILING_UPDATES,
              ceiling_samples: int = CEILING_SAMPLES,
              progress: Callable[[dict[str, Any]], None] | None = None,
              db_dir: str | None = None) -> dict[str, Any]:
    """Run the whole matrix ``repeat`` times (interleaved); returns
    ``{"runs", "ceiling", "machine", "goal", ...}`` as plain data."""
    tgt = resolve_target(target)
    notes: list[str] = []
    if tgt.ferry_core:
        if tgt.fixed_strategy:
            if list(strategies) != [tgt.fixed_strategy]:
                notes.append(f"{target} fixes claim_strategy={tgt.fixed_strategy!r}; "
                             "--strategy is ignored")
            strategies = [tgt.fixed_strategy]
    else:
        notes.append(f"{target} is not ferry_core: --strategy and --busy-policy do not apply; "
                     "the store is measured as it is (strategy/busy_policy 'as-is')")
        strategies, policies = [AS_IS], [AS_IS]
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
        claim_update = measure_store_claim_update(base, ceiling_updates) if tgt.ferry_core else None
        runs: list[dict[str, Any]] = []
        combos = [(w, s, p) for s in strategies for p in policies for w in workers]
        total = len(combos) * repeat
        for rep in range(repeat):
            rep_runs = []
            for i, (w, s, p) in enumerate(combos):
                index = rep * len(combos) + i
                if progress:
                    progress({"phase": "run", "label": f"{w}w {s}/{p}", "index": index,
                              "total": total, "done": 0, "tasks": tasks})
                record = run_one(tgt, w, s, p, tasks, base, timeout_s=timeout_s,
                                 progress=progress)
                record["rep"] = rep + 1
                rep_runs.append(record)
                if progress:
                    progress({"phase": "result", "record": record, "index": index,
                              "total": total})
            after = ceiling_sample("after" if rep == repeat - 1 else f"after run {rep + 1}")
            rep_ceiling = max(before + after)  # the samples right before and after it
            for r in rep_runs:
                r["ceiling"] = rep_ceiling
                r["ceiling_ratio"] = r["claims_per_s"] / rep_ceiling if rep_ceiling else 0.0
            runs.extend(rep_runs)
            before = after
        best = max(samples)
        machine["loadavg_end"] = list(os.getloadavg())
        ceiling = {
            "updates_per_s": best,
            "samples_per_s": samples,
            "statement": "UPDATE t SET status='CLAIMED', at=? WHERE id=? AND status='SUBMITTED'",
            "method": (f"single process, autocommit (one statement per transaction), WAL + "
                       f"synchronous=NORMAL, {ceiling_updates} distinct rows per sample, "
                       f"{ceiling_samples} samples before the matrix and after each repetition; "
                       "a run is compared with the best sample taken right before or after "
                       "its repetition, this field is the best of all"),
        }
        if claim_update is not None:
            ceiling["ferry_core_claim_update_per_s"] = claim_update
            ceiling["ferry_core_claim_update_note"] = (
                "ferry_core's own claiming UPDATE (token-history trigger, partial indexes) in "
                "the same single-process autocommit loop, without pick or sweep")
        return {
            "target": target, "ferry_core": tgt.ferry_core, "tasks": tasks, "repeat": repeat,
            "workers": list(workers), "strategies": list(strategies),
            "busy_policies": list(policies), "runs": runs, "ceiling": ceiling,
            "machine": machine, "goal": goal_check(runs), "notes": notes,
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)


def goal_check(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 7's goal, evaluated for every run with GOAL['workers'] workers."""
    out = []
    for r in runs:
        if r["workers"] != GOAL["workers"] or r.get("error"):
            continue
        lat = r["latency_ms"]
        checks = {
            "ceiling_ratio": r["ceiling_ratio"] >= GOAL["ceiling_ratio"],
            "p999_ms": lat["p999"] <= GOAL["p999_ms"],
            "max_ms": lat["max"] <= GOAL["max_ms"],
            "jain": r["jain_fairness"] >= GOAL["jain"],
        }
        out.append({"rep": r.get("rep", 1), "strategy": r["strategy"],
                    "busy_policy": r["busy_policy"], "tasks": r["tasks"],
                    "full_size": r["tasks"] == GOAL["tasks"], "claims_per_s": r["claims_per_s"],
                    "ceiling": r["ceiling"], "ceiling_ratio": r["ceiling_ratio"],
                    "p999_ms": lat["p999"], "max_ms": lat["max"], "jain": r["jain_fairness"],
                    "checks": checks, "met": all(checks.values())})
    return out


# --------------------------------------------------------------------------- report
def _fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def summary_table(result: dict[str, Any]) -> list[str]:
    """Markdown table of every run."""
    reps = result.get("repeat", 1) > 1
    lines = [
        ("| run " if reps else "") + "| workers | strategy | busy policy | claims/s | × ceiling | "
        "lifecycles/s | p50 ms | p99 ms | p99.9 ms | max ms | CAS miss | busy err | Jain | "
        "WAL end MiB | WAL max MiB | CPU used |",
        ("|---:" if reps else "") + "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        lat = r["latency_ms"]
        err = f" ⚠ {r['error']}" if r.get("error") else ""
        lines.append(
            (f"| {r.get('rep', 1)} " if reps else "")
            + f"| {r['workers']} | {r['strategy']} | {r['busy_policy']}{err} | "
            f"{_fmt_rate(r['claims_per_s'])} | {r.get('ceiling_ratio', 0):.3f} | "
            f"{_fmt_rate(r['lifecycles_per_s'])} | {lat['p50']:.2f} | {lat['p99']:.2f} | "
            f"{lat['p999']:.2f} | {lat['max']:.2f} | {r['cas_miss_ratio']:.3f} | "
            f"{r['busy_errors']} | {r['jain_fairness']:.3f} | {r['wal_bytes'] / MIB:,.1f} | "
            f"{r['wal_bytes_max'] / MIB:,.1f} | {r.get('cpu_util', 0):.0%} |")
    return lines


def goal_table(result: dict[str, Any]) -> list[str]:
    goal = result.get("goal") or []
    if not goal:
        return []
    mark = {True: "✅", False: "❌"}
    lines = [
        f"{GOAL['workers']} workers, {GOAL['tasks']:,} tasks: claims/s ≥ "
        f"{GOAL['ceiling_ratio']} × the same run's ceiling, p99.9 ≤ {GOAL['p999_ms']:g} ms, "
        f"max ≤ {GOAL['max_ms']:g} ms, Jain ≥ {GOAL['jain']}.",
        "",
        "| run | strategy | busy policy | claims/s | ceiling/s | ratio | p99.9 ms | max ms | "
        "Jain | met |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for g in sorted(goal, key=lambda g: (g["strategy"], g["busy_policy"], g["rep"])):
        ch = g["checks"]
        failed = ", ".join(k for k, ok in ch.items() if not ok)
        size = "" if g["full_size"] else f" (only {g['tasks']:,} tasks)"
        lines.append(
            f"| {g['rep']} | {g['strategy']} | {g['busy_policy']} | "
            f"{_fmt_rate(g['claims_per_s'])} | {_fmt_rate(g['ceiling'])} | "
            f"{mark[ch['ceiling_ratio']]} {g['ceiling_ratio']:.3f} | "
            f"{mark[ch['p999_ms']]} {g['p999_ms']:.1f} | {mark[ch['max_ms']]} {g['max_ms']:.1f} | "
            f"{mark[ch['jain']]} {g['jain']:.3f} | "
            f"{'yes' if g['met'] else 'no: ' + failed}{size} |")
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
        f"Target `{result['target']}`, {result['tasks']:,} tasks per run, workers "
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
    goal = goal_table(result)
    if goal:
        lines += ["## Goal (issue 7)", ""] + goal + [""]
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
    resolve_target(args.target)  # TargetError -> one line, exit 2
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
        return (f"{r['workers']:>3}w {r['strategy']}/{r['busy_policy']}: "
                f"{r['claims_per_s']:,.0f} claims/s  p99 {lat['p99']:.2f} ms  p99.9 "
                f"{lat['p999']:.2f} ms  max {lat['max']:.2f} ms  Jain {r['jain_fairness']:.3f}"
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
    for g in result["goal"]:
        failed = [k for k, ok in g["checks"].items() if not ok]
        print(f"goal ({GOAL['workers']} workers, run {g['rep']}) {g['strategy']}/{g['busy_policy']}:"
              f" {g['claims_per_s']:,.0f} claims/s = {g['ceiling_ratio']:.3f} x ceiling, p99.9 "
              f"{g['p999_ms']:.1f} ms, max {g['max_ms']:.1f} ms, Jain {g['jain']:.3f}: "
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
    return 0


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "bench", help="measure claim throughput, tail latency and fairness under contention",
        description="W worker processes start at one barrier and drain N pre-dispatched tasks "
        "(poll_next then fulfill) from one WAL database, for every combination of worker "
        "count, claim strategy and busy policy. --strategy and --busy-policy apply to "
        "ferry_core targets only; other stores are measured as they are.")
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
