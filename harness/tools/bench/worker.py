"""The worker process of a bench run: open the store, wait at the barrier, drain the queue
(``poll_next`` then ``fulfill``) until every task is claimed, send one ``WorkerResult``.

The whole loop runs here; the controller (:mod:`.runner`) only reads the shared counters
while it waits, so it adds nothing to the measured path.
"""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from ferry_harness.errors import HarnessError
from ferry_harness.runtime.process import die_with_parent
from ferry_harness.tools.bench.targets import Target

#: seconds a worker keeps polling while poll_next returns None with tasks left, then gives up
STALL_S = 5.0
_MAX_ERRORS = 50  # non-busy exceptions before a worker gives up
_FULFILL_TRIES = 3  # a fulfill that stays busy this many times is counted as lost


@dataclass(frozen=True, kw_only=True)
class WorkerParams:
    """What one worker is told at fork (plain values)."""

    #: the store under test; every worker opens its own instance
    target: Target
    #: the database file of this run
    db_path: str
    #: ferry_core claim strategy, or ``AS_IS``
    strategy: str
    #: ferry_core busy policy, or ``AS_IS``
    policy: str
    #: the agent id this worker claims and fulfills as
    agent: str
    #: this worker's index (0..W-1) into the shared arrays
    slot: int
    #: tasks dispatched for the run; the worker stops once the shared counts reach it
    tasks: int
    #: the controller's pid: a worker whose parent is already gone exits at once
    parent_pid: int
    #: seconds to wait for the start signal, and then for the controller's release
    timeout_s: float
    #: seconds poll_next may keep returning None while tasks remain before the worker
    #: reports a stall and stops
    stall_s: float = STALL_S


@dataclass(frozen=True, kw_only=True)
class WorkerShared:
    """Process-shared handles every worker of a run gets at fork (never pickled)."""

    #: ``RawArray('q', W)``: claims so far per worker slot (lock-free; the controller reads
    #: it for progress, workers read it to know whether tasks remain)
    counts: Any
    #: ``RawValue('b')``: set to 1 to make every worker stop draining
    stop: Any
    #: ``RawArray('b', W)``: a worker sets its slot to 1 once its store is open
    ready: Any
    #: ``Event``: the barrier; set once every worker is ready
    go: Any
    #: ``Event``: set once the controller has read the WAL size; workers then close
    release: Any


@dataclass(frozen=True, kw_only=True)
class WorkerResult:
    """What one worker sends back: counters, ids and timings (plain data over a pipe).

    Times are ``time.monotonic_ns()`` values (0 = never happened); a worker that failed
    before the start sends only ``slot`` and ``error``.
    """

    #: the worker's slot
    slot: int
    #: why the worker stopped early (poll_next/fulfill raised, stalled, ...), or None
    error: str | None = None
    #: claims this worker obtained
    claims: int = 0
    #: fulfills the store accepted
    fulfilled: int = 0
    #: calls that raised because a lock stayed busy past the store's timeout (retried)
    busy_errors: int = 0
    #: poll_next calls that returned (a claim or None)
    polls: int = 0
    #: poll_next calls that returned None while the shared counts said tasks remained
    poll_misses: int = 0
    #: other exceptions from poll_next or fulfill
    errors: int = 0
    #: claimed tasks whose fulfill was never accepted
    fulfill_lost: int = 0
    #: ferry_core only: the store's claiming statements (``LeaseStore.claim_stats``)
    cas_attempts: int = 0
    #: ferry_core only: CAS UPDATEs that changed no row (a lost race)
    cas_misses: int = 0
    #: ferry_core only: one-statement claims that found nothing ready
    cas_empty: int = 0
    #: ids of the tasks this worker claimed, in order
    claimed_ids: tuple[str, ...] = ()
    #: ids of the tasks whose fulfill this worker got accepted, in order
    done_ids: tuple[str, ...] = ()
    #: when the start signal came
    t_start: int = 0
    #: when the last successful claim returned
    t_last_claim: int = 0
    #: when the last accepted fulfill returned
    t_last_fulfill: int = 0
    #: when the drain ended
    t_end: int = 0
    #: time to obtain each claim in ns, as ``array('q').tobytes()`` (compact over the pipe)
    latency_ns: bytes = b""
    #: duration of each accepted fulfill in ns, as ``array('q').tobytes()``
    fulfill_ns: bytes = b""
    #: CPU seconds (user + system) this worker used while draining
    cpu_s: float = 0.0
    #: involuntary context switches while draining (the scheduler took the CPU away)
    preempted: int = 0
    #: voluntary context switches while draining (waits: locks, sleeps, I/O)
    blocked: int = 0


@dataclass
class _Tally:
    """The drain's running counters (one worker, mutable while it runs)."""

    claims: int = 0
    fulfilled: int = 0
    busy: int = 0
    polls: int = 0
    poll_misses: int = 0
    errors: int = 0
    fulfill_lost: int = 0
    error: str | None = None
    t_start: int = 0
    t_last_claim: int = 0
    t_last_fulfill: int = 0
    lat: array = field(default_factory=lambda: array("q"))
    flat: array = field(default_factory=lambda: array("q"))
    claimed_ids: list[str] = field(default_factory=list)
    done_ids: list[str] = field(default_factory=list)


def _is_busy_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError):
        return "locked" in text or "busy" in text
    return type(exc).__name__ == "StoreError" and ("locked" in text or "busy" in text)


def _fulfill(store: Any, claim: Any, agent: str, t: _Tally) -> None:
    """Fulfill one claim, retrying a busy store up to ``_FULFILL_TRIES`` times."""
    mono = time.monotonic_ns
    for _attempt in range(_FULFILL_TRIES):
        f0 = mono()
        try:
            store.fulfill(claim.task_id, agent, claim.token, {"by": agent})
        except Exception as exc:
            if _is_busy_error(exc):
                t.busy += 1
                continue
            t.errors += 1
            t.error = f"fulfill raised {type(exc).__name__}: {exc}"
            t.fulfill_lost += 1
            return
        t.t_last_fulfill = mono()
        t.flat.append(t.t_last_fulfill - f0)
        t.fulfilled += 1
        t.done_ids.append(str(claim.task_id))
        return
    t.fulfill_lost += 1


def _drain_loop(store: Any, p: WorkerParams, sh: WorkerShared, t: _Tally) -> None:
    """poll_next then fulfill until every task is claimed (or stop, a stall, errors)."""
    counts, stop, tasks = sh.counts, sh.stop, p.tasks
    first_try = None
    stalled_since = None
    mono = time.monotonic_ns
    while not stop.value:
        t0 = mono()
        if first_try is None:
            first_try = t0
        try:
            claim = store.poll_next(p.agent)
        except Exception as exc:
            if _is_busy_error(exc):
                t.busy += 1
                continue
            t.errors += 1
            t.error = f"poll_next raised {type(exc).__name__}: {exc}"
            if t.errors >= _MAX_ERRORS:
                break
            continue
        t1 = mono()
        t.polls += 1
        if claim is None:
            if tasks - sum(counts) <= 0:
                break
            t.poll_misses += 1
            if stalled_since is None:
                stalled_since = t1
            elif t1 - stalled_since > p.stall_s * 1e9:
                t.error = (f"stalled: poll_next kept returning None for {p.stall_s:.0f}s "
                           f"while {tasks - sum(counts)} tasks were unclaimed")
                break
            continue
        stalled_since = None
        t.lat.append(t1 - first_try)
        first_try = None
        t.claims += 1
        counts[p.slot] = t.claims
        t.claimed_ids.append(str(claim.task_id))
        t.t_last_claim = t1
        _fulfill(store, claim, p.agent, t)
        if t.errors >= _MAX_ERRORS:
            break


def drain(p: WorkerParams, sh: WorkerShared, out: Any) -> None:
    """Worker body: open the store, wait for the start signal, drain, report, wait, close."""
    die_with_parent()
    if os.getppid() != p.parent_pid:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    t = _Tally()
    store = None
    ru0 = ru1 = None
    try:
        store = p.target.make(p.db_path, p.strategy, p.policy)
        sh.ready[p.slot] = 1
        if not sh.go.wait(p.timeout_s):
            raise HarnessError("the start signal never came")
        t.t_start = time.monotonic_ns()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        _drain_loop(store, p, sh, t)
    except Exception as exc:
        t.error = f"{type(exc).__name__}: {exc}"
    if ru0 is not None:
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
    stats = store.claim_stats() if (p.target.counts_claims and store is not None) else None
    res = WorkerResult(
        slot=p.slot, error=t.error, claims=t.claims, fulfilled=t.fulfilled,
        busy_errors=t.busy, polls=t.polls, poll_misses=t.poll_misses, errors=t.errors,
        fulfill_lost=t.fulfill_lost,
        cas_attempts=stats.attempts if stats else 0, cas_misses=stats.misses if stats else 0,
        cas_empty=stats.empty if stats else 0,
        claimed_ids=tuple(t.claimed_ids), done_ids=tuple(t.done_ids), t_start=t.t_start,
        t_last_claim=t.t_last_claim, t_last_fulfill=t.t_last_fulfill,
        t_end=time.monotonic_ns(), latency_ns=t.lat.tobytes(), fulfill_ns=t.flat.tobytes(),
        cpu_s=((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) if ru1 else 0.0,
        preempted=(ru1.ru_nivcsw - ru0.ru_nivcsw) if ru1 else 0,
        blocked=(ru1.ru_nvcsw - ru0.ru_nvcsw) if ru1 else 0,
    )
    try:
        out.send(res)
        sh.release.wait(p.timeout_s)  # keep the connection open while the controller reads the WAL
    finally:
        if store is not None:
            try:
                store.close()
            except Exception:
                pass
