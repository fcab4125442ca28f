"""The ceiling every run is compared with: single-process, autocommit write rates on the
same machine, in the same invocation.

- ``measure_ceiling``: raw SQLite, one ``UPDATE`` of one integer-keyed row per statement,
  the same pragmas as ferry_core (WAL, synchronous=NORMAL);
- ``measure_store_claim_update``: ferry_core's own claiming UPDATE through its public API
  (``LeaseStore.claim(..., sweep=False)``), for scale;
- ``measure_same_sql``: the same-SQL ceiling. ``capture_lifecycle_sql`` traces what a
  ferry_core lifecycle really runs (the busy poll's claiming UPDATE, whose trigger writes
  the token history, and the fulfill) and turns those statements into templates; W bare
  processes then replay them on a ferry_core database, with nothing around them but
  ``sqlite3``: SQLite's own busy handler (``busy_timeout`` = the store's default), the
  store's connection settings and its SQL function, SQLite's automatic checkpoint. What
  ferry_core reaches at W workers over what its own SQL reaches at W is the share the
  store's Python (busy policy, checkpoints, argument checks) costs under contention. The
  replay also times its claims and fulfills apart, so a tail the file system puts on every
  write (checkpoint fsyncs on a disk) shows in the bare SQL too, next to the store's.
"""

from __future__ import annotations

import os
import re
import resource
import sqlite3
import time
import uuid
from array import array
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

import multiprocess as mp

from ferry_core import LeaseStore, SystemClock
from ferry_core.store import SQL_FUNCTIONS
from ferry_harness.errors import HarnessError
from ferry_harness.runtime.process import die_with_parent
from ferry_harness.tools.bench.records import Ceiling, SameSqlRun
from ferry_harness.tools.bench.runner import dispatch_tasks
from ferry_harness.tools.bench.stats import jain, latency_summary, spread

# the named parameters a replayed statement binds (agent, token, now, task_id)
SqlParams = dict[str, str | int | None]

CEILING_UPDATES = 20_000  #: distinct rows updated per sample
CEILING_SAMPLES = 3  #: samples before the matrix; as many again after each repetition
#: The statement the raw ceiling times (reported as ``ceiling.statement``).
CEILING_STATEMENT = "UPDATE t SET status='CLAIMED', at=? WHERE id=? AND status='SUBMITTED'"


def _unlink_db(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(path + suffix)
        except OSError:
            pass


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
        t0 = time.perf_counter()
        for i in range(updates):
            conn.execute(CEILING_STATEMENT, (i, i))
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
        _unlink_db(path)
    return updates / elapsed


def same_sql_line(ceiling: Ceiling) -> str | None:
    """The same-SQL ceiling in one line (min-max lifecycles/s and claim p99 / p99.9 per
    worker count), or None."""
    same = ceiling.get("same_sql")
    if not same:
        return None
    cells = []
    for w, v in sorted(same["by_workers"].items(), key=lambda kv: int(kv[0])):
        cell = f"{w}w {spread(v, ',.0f')}/s"
        tails = [q["claim_latency_ms"] for q in same.get("runs", ())
                 if str(q["workers"]) == w and "claim_latency_ms" in q]
        if tails:
            cell += (f" (claim p99 {spread([t['p99'] for t in tails], '.1f')}, "
                     f"p99.9 {spread([t['p999'] for t in tails], '.1f')} ms)")
        cells.append(cell)
    return ("same-SQL ceiling (ferry_core's claim + fulfill statements, W bare processes, "
            "SQLite's busy handler), lifecycles: " + ", ".join(cells))


def measure_store_claim_update(workdir: str, updates: int) -> float:
    """Single process, autocommit: ferry_core's own claiming UPDATE (trigger, indexes,
    token) on distinct ready tasks per second, with no pick or sweep around it."""
    path = os.path.join(workdir, f"claimupdate-{uuid.uuid4().hex[:8]}.db")
    try:
        with LeaseStore(path) as store:
            ids = store.dispatch_many([{"n": i} for i in range(updates)], requester="bench",
                                      queue_ttl_ms=86_400_000, exec_ttl_ms=3_600_000)
            t0 = time.perf_counter()
            for task_id in ids:
                store.claim(task_id, "ceiling", sweep=False)
            elapsed = time.perf_counter() - t0
    finally:
        _unlink_db(path)
    return updates / elapsed


# ---------------------------------------------------------------- the same-SQL ceiling
#: The agent and the clock value the capture runs its lifecycle with: values that occur
#: nowhere else in the statements, so they can be turned back into parameters.
_AGENT = "ferry-same-sql-agent"
_NOW = 1_234_567_890_123
#: the result every captured (and so every replayed) fulfill writes: the size of the bench's
CAPTURE_RESULT = {"by": "bench-0"}
_CTX = mp.get_context("fork")
_QUEUE_TTL_MS = 86_400_000  # as the bench's runs: nothing times out while it waits
_EXEC_TTL_MS = 3_600_000


@dataclass(frozen=True, kw_only=True)
class LifecycleSQL:
    """One ferry_core cas lifecycle as SQLite ran it, as templates with the parameters
    ``:agent``, ``:token``, ``:now`` and ``:task_id`` (the claim's)."""

    #: the statements of a busy ``poll_next`` (one claiming UPDATE today), in order
    poll: tuple[str, ...]
    #: the statements of the ``fulfill`` that follows it
    fulfill: tuple[str, ...]
    #: SQLite trace events per statement (poll's, then fulfill's): the statement itself and
    #: one per trigger program it ran
    events: tuple[int, ...]
    #: the store connection's settings (``LeaseStore.connection_settings``)
    settings: tuple[tuple[str, int | str], ...]


def _literal(value: int | str) -> str:
    """How ``sqlite3_expanded_sql`` writes a bound value."""
    return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"


def _statements(trace: list[str]) -> tuple[list[str], list[int]]:
    """Consecutive repeats of one statement are its trigger programs: one statement each."""
    stmts: list[str] = []
    counts: list[int] = []
    for sql in trace:
        sql = sql.strip()
        if stmts and stmts[-1] == sql:
            counts[-1] += 1
        else:
            stmts.append(sql)
            counts.append(1)
    return stmts, counts


def _to_template(sql: str, values: dict[str, int | str]) -> str:
    out = sql
    for name, value in values.items():
        lit = re.escape(_literal(value))
        pattern = rf"(?<![\w.]){lit}(?![\w.])" if isinstance(value, int) else lit
        out = re.sub(pattern, f":{name}", out)
    return out


def expand_template(template: str, values: dict[str, int | str]) -> str:
    """The statement as SQLite's trace reports it with ``values`` bound (the inverse of the
    capture; used to check it)."""
    return re.sub(r":(\w+)", lambda m: _literal(values[m.group(1)]), template)


def capture_lifecycle_sql(workdir: str, store_cls: type[LeaseStore] = LeaseStore) -> LifecycleSQL:
    """Trace one steady-state cas lifecycle of ``store_cls`` (a busy poll, its fulfill) and
    return its statements as templates. Raises HarnessError when a statement cannot be
    turned back into the same text, so the ceiling never replays something else."""
    path = os.path.join(workdir, f"capture-{uuid.uuid4().hex[:8]}.db")
    trace: list[str] = []
    try:
        with store_cls(path, clock=lambda: _NOW, claim_strategy="cas") as store:
            store.dispatch_many([{"n": 0}, {"n": 1}], requester="bench",
                                queue_ttl_ms=_QUEUE_TTL_MS, exec_ttl_ms=_EXEC_TTL_MS)
            first = store.poll_next(_AGENT)  # the first poll reads first; later ones do not
            if first is None:
                raise HarnessError("capture: the store handed out no task")
            store.fulfill(first.task_id, _AGENT, first.token, CAPTURE_RESULT)
            store.set_trace_callback(trace.append)
            claim = store.poll_next(_AGENT)
            n_poll = len(trace)
            if claim is None:
                raise HarnessError("capture: the store handed out no second task")
            store.fulfill(claim.task_id, _AGENT, claim.token, CAPTURE_RESULT)
            store.set_trace_callback(None)
            settings = tuple(store.connection_settings().items())
    finally:
        _unlink_db(path)
    values: dict[str, int | str] = {"token": claim.token, "task_id": claim.task_id,
                                    "agent": _AGENT, "now": _NOW}
    poll, poll_events = _statements(trace[:n_poll])
    fulfill, fulfill_events = _statements(trace[n_poll:])
    out = []
    for sql in poll + fulfill:
        tpl = _to_template(sql, values)
        if expand_template(tpl, values) != sql or any(str(v) in tpl for v in values.values()):
            raise HarnessError(f"capture: cannot turn this statement into a template: {sql[:200]}")
        out.append(tpl)
    return LifecycleSQL(poll=tuple(out[:len(poll)]), fulfill=tuple(out[len(poll):]),
                        events=tuple(poll_events + fulfill_events), settings=settings)


def open_replay_connection(path: str, sql: LifecycleSQL, busy_timeout_s: float) -> sqlite3.Connection:
    """A bare connection as the store opens one: its settings and SQL functions, and
    SQLite's own busy handler (``timeout``)."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_s)
    for name, value in sql.settings:
        conn.execute(f"PRAGMA {name}={value}").fetchall()
    for fname, (nargs, fn) in SQL_FUNCTIONS.items():
        conn.create_function(fname, nargs, fn, deterministic=True)
    return conn


def _run_statement(conn: sqlite3.Connection, stmt: str, args: SqlParams,
                   busy: list[int]) -> tuple[list[tuple], list[str]]:
    """Run to completion (rows, column names); a busy error (SQLite's handler gave up) is
    counted and the statement run again."""
    while True:
        try:
            cur = conn.execute(stmt, args)
            return cur.fetchall(), [d[0] for d in cur.description or ()]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            busy[0] += 1


def replay_lifecycle(conn: sqlite3.Connection, sql: LifecycleSQL, agent: str, now: int,
                     busy: list[int], token_sink: Any = None,
                     polled: array | None = None) -> str | None:
    """One lifecycle of the captured statements on ``conn``: the claimed task's id, or
    None when the poll claimed nothing (the queue is drained). The token is a fresh
    ``uuid4`` as the store's (``token_sink(token)`` sees it); ``polled`` gets the
    ``time.monotonic_ns()`` at which a claiming poll returned (where the fulfill starts)."""
    args: SqlParams = {"agent": agent, "token": str(uuid.uuid4()), "now": now,
                            "task_id": None}
    if token_sink is not None:
        token_sink(args["token"])
    for stmt in sql.poll:
        rows, names = _run_statement(conn, stmt, args, busy)
        if rows and "task_id" in names:
            args["task_id"] = rows[0][names.index("task_id")]
    if args["task_id"] is None:
        return None
    if polled is not None:
        polled.append(time.monotonic_ns())
    for stmt in sql.fulfill:
        _run_statement(conn, stmt, args, busy)
    return args["task_id"]


def _replay_worker(path: str, sql: LifecycleSQL, slot: int, go: Any, out: Any,
                   parent_pid: int, timeout_s: float) -> None:
    die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(1)
    clock = SystemClock()
    mono = time.monotonic_ns
    busy = [0]
    lat = array("q")
    claim_lat = array("q")
    polled = array("q")
    done, t_start, t_last, cpu_s, error = 0, 0, 0, 0.0, None
    try:
        conn = open_replay_connection(path, sql, 5.0)
        out.send(("ready", slot))
        if not go.wait(timeout_s):
            raise HarnessError("the start signal never came")
        t_start = mono()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        agent = f"same-sql-{slot}"
        while True:
            t0 = mono()
            if replay_lifecycle(conn, sql, agent, clock(), busy, polled=polled) is None:
                break
            t_last = mono()
            lat.append(t_last - t0)
            claim_lat.append(polled.pop() - t0)  # polled holds one value at most
            done += 1
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        conn.close()
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    out.send(("done", slot, done, busy[0], t_start, t_last, lat.tobytes(), cpu_s,
              claim_lat.tobytes(), error))


def measure_same_sql(workdir: str, workers: int, tasks: int, sql: LifecycleSQL, *,
                     timeout_s: float = 600.0) -> SameSqlRun:
    """``tasks`` lifecycles of ferry_core's own SQL replayed by ``workers`` bare processes
    from one barrier: lifecycles/s (barrier -> last fulfill), the latency of a lifecycle, of
    its claiming poll and of its fulfill, busy errors (SQLite's handler gave up after 5 s),
    Jain and whether every task completed once."""
    path = os.path.join(workdir, f"samesql-{uuid.uuid4().hex[:8]}.db")
    procs: list[Any] = []
    pipes: list[Any] = []
    results: dict[int, tuple] = {}
    error = None
    try:
        with LeaseStore(path) as store:
            dispatch_tasks(store, tasks, lambda _done: None)
            store.checkpoint("TRUNCATE")
        go = _CTX.Event()
        for slot in range(workers):
            recv_end, send_end = _CTX.Pipe(duplex=False)
            proc = _CTX.Process(target=_replay_worker, daemon=True, name=f"ferry-samesql-{slot}",
                                args=(path, sql, slot, go, send_end, os.getpid(), timeout_s))
            proc.start()
            send_end.close()
            procs.append(proc)
            pipes.append(recv_end)
        for conn in pipes:  # every worker has opened its connection
            if not conn.poll(60):
                raise HarnessError("a same-SQL worker did not start")
            msg = conn.recv()
            if msg[0] != "ready":
                raise HarnessError(f"a same-SQL worker failed: {msg[-1]}")
        go.set()
        deadline = time.monotonic() + timeout_s
        pending = list(pipes)
        while pending and time.monotonic() < deadline:
            for conn in wait(pending, timeout=0.25):
                pending.remove(conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    error = error or "a same-SQL worker died"
                    continue
                results[msg[1]] = msg[2:]
                if msg[-1]:
                    error = error or msg[-1]
        if pending:
            error = error or f"the same-SQL run did not finish within {timeout_s:.0f}s"
        check = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        try:
            completed = check.execute(
                "SELECT count(*) FROM tasks WHERE status='COMPLETED'").fetchall()[0][0]
        finally:
            check.close()
    finally:
        for proc in procs:
            proc.join(5 if not error else 0)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in pipes:
            conn.close()
        _unlink_db(path)
    rows = [results[s] for s in sorted(results)]
    done = sum(r[0] for r in rows)
    starts = [r[2] for r in rows if r[2]]
    last = max((r[3] for r in rows), default=0)
    secs = (last - min(starts)) / 1e9 if starts and last else 0.0
    lat, claim_lat = array("q"), array("q")
    for r in rows:
        lat.frombytes(r[4])
        claim_lat.frombytes(r[6])
    return {"workers": workers, "tasks": tasks, "lifecycles": done,
            "lifecycles_per_s": done / secs if secs > 0 else 0.0, "seconds": secs,
            "latency_ms": latency_summary(lat),
            "claim_latency_ms": latency_summary(claim_lat),
            "fulfill_latency_ms": latency_summary(a - b for a, b in zip(lat, claim_lat,
                                                                         strict=True)),
            "busy_errors": sum(r[1] for r in rows),
            "jain_fairness": jain([r[0] for r in rows]) if rows else 0.0,
            "cpu_s": sum(r[5] for r in rows),
            "lifecycles_per_cpu_s": done / cpu if (cpu := sum(r[5] for r in rows)) else 0.0,
            "verified": completed == done == tasks, "error": error}
