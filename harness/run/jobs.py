"""Parallel search: ``fuzz --jobs N`` splits the search phase over N controller processes.

Why: one controller is the critical path of a search (Hypothesis, the executor and the
checker are Python in one process) and keeps about one core busy, while its workers wait on
it. A second controller with its own worker pool, database directory and share of the
Hypothesis batches searches beside it on the idle cores. Only the search is split: the
main process (job 0) shrinks, replays and reports, as with one job.

A job is a forked child; what jobs share is a :class:`JobLink`: one stop flag (a safety
finding, Ctrl-C or the budget ends every job's search) and a few counters for the progress
line and the order of discovery. What a job found comes back to job 0 as plain data over a
pipe (``Jobs.collect``), the only way facts travel from a job to the report.

Example::

    jobs = Jobs(2, search_one)   # search_one(link) -> the job's result, in job 1
    ...                          # job 0 searches here, with jobs.link(0)
    for done in jobs.collect(until=deadline):
        merge(done.result)
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import multiprocess as mp

from ferry_harness.runtime.process import die_with_parent

_CTX = mp.get_context("fork")  # a job inherits the loaded target and Hypothesis: milliseconds
_COUNTS = 4  # per job: examples, race rounds, ops, violations
ENV_VAR = "FERRY_JOBS"  # the default of ``fuzz --jobs``
MAX_AUTO_JOBS = 8  # ``--jobs auto`` uses at most this many
POSTGRES_ONE_JOB = ("a Postgres target searches in one job: its jobs would share one server, "
                    "which ferry does not isolate yet")


def auto_jobs(mode: str, postgres: bool) -> int:
    """What ``--jobs auto`` means: one job per usable core (at most MAX_AUTO_JOBS) for a
    stress search on SQLite; one for schedule mode (whose search, seed for seed, is the same
    every run only in one job) and for a Postgres target (one server for all).

    >>> auto_jobs("schedule", postgres=False)
    1
    """
    if mode != "stress" or postgres:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_AUTO_JOBS))


@dataclass(frozen=True)
class Published:
    """What the other jobs have done so far (the progress line adds it to its own)."""

    examples: int = 0
    race_rounds: int = 0
    ops: int = 0
    violations: int = 0


class JobLink:
    """One job's view of what the jobs of a search share.

    ``index``: this job (0: the main process); ``jobs``: how many search. The stop flag is
    set once by whoever ends the search first; ``judged`` counts examples judged over every
    job (a finding's "examples until found")."""

    def __init__(self, jobs: int) -> None:
        self.index = 0
        self.jobs = jobs
        self._stop = _CTX.Event()
        self._counts = _CTX.Array("q", _COUNTS * jobs, lock=False)
        self._judged = _CTX.Value("q", 0)

    def for_job(self, index: int) -> JobLink:
        """The same shared state, seen by job ``index``."""
        other = copy.copy(self)
        other.index = index
        return other

    def stop_all(self) -> None:
        """End every job's search (each finishes the example it is in)."""
        self._stop.set()

    def stopped(self) -> bool:
        return self._stop.is_set()

    def judged_one(self) -> int:
        """Count one judged example over all jobs; the count including it."""
        with self._judged.get_lock():
            self._judged.value += 1
            return int(self._judged.value)

    def publish(self, examples: int, race_rounds: int, ops: int, violations: int) -> None:
        """This job's counters, for the others' progress lines."""
        base = _COUNTS * self.index
        self._counts[base:base + _COUNTS] = [examples, race_rounds, ops, violations]

    def others(self) -> Published:
        """The sum of what the other jobs published."""
        sums = [0] * _COUNTS
        for j in range(self.jobs):
            if j != self.index:
                for k in range(_COUNTS):
                    sums[k] += self._counts[_COUNTS * j + k]
        return Published(*sums)


@dataclass(frozen=True)
class JobDone:
    """How one child job ended: its result, or why there is none."""

    index: int
    result: Any = None  # what the job's function returned (None: see ``error``)
    error: str | None = None  # why there is no result: what it raised, or how it ended
    raised: bool = False  # the job raised (``error`` holds the traceback): a harness bug


class Jobs:
    """Jobs 1..N-1 of a search, each a forked process running ``search(link)``.

    Fork them before job 0 starts its own worker pool, so no job holds another's pipes.
    A job ignores Ctrl-C (job 0 sets the stop flag instead) and is killed if job 0 dies.
    """

    def __init__(self, jobs: int, search: Callable[[JobLink], Any]) -> None:
        if jobs < 2:
            raise ValueError(f"Jobs runs the jobs besides job 0: jobs must be ≥ 2, got {jobs}")
        self.shared = JobLink(jobs)
        self._procs: list[tuple[int, Any, Any]] = []
        parent = os.getpid()
        for stream in (sys.stdout, sys.stderr):  # or a job flushes its copy again at exit
            stream.flush()
        try:
            for index in range(1, jobs):
                ours, theirs = _CTX.Pipe(duplex=False)
                proc = _CTX.Process(target=_job_main, name=f"ferry-job-{index}", daemon=False,
                                    args=(search, self.shared.for_job(index), theirs, parent))
                proc.start()
                theirs.close()
                self._procs.append((index, proc, ours))
        except BaseException:
            self.close()
            raise

    def link(self) -> JobLink:
        """Job 0's link."""
        return self.shared

    def collect(self, until: float | None) -> list[JobDone]:
        """Every child job's result, waiting until ``until`` (time.monotonic(); None: for
        as long as they take). A job not done by then is killed and has none."""
        out = []
        for index, proc, conn in self._procs:
            left = None if until is None else max(0.0, until - time.monotonic())
            done: JobDone | None = None
            ended = False  # its end of the pipe closed: it exited (or is exiting)
            try:
                if conn.poll(left):
                    kind, payload = conn.recv()
                    done = (JobDone(index, result=payload) if kind == "ok"
                            else JobDone(index, error=payload, raised=True))
            except (EOFError, OSError):
                ended = True
            if done is None:
                if ended:
                    proc.join(5)  # an exiting process is alive a moment after its pipe closes
                overran = proc.is_alive()
                if overran:
                    proc.kill()
                proc.join(5)
                why = ("was still searching at the campaign's time limit and was killed"
                       if overran else
                       f"ended without its results (exit code {proc.exitcode})")
                done = JobDone(index, error=why)
            out.append(done)
        self.close()
        return out

    def close(self) -> None:
        """Stop every job still running (the search is over or job 0 is failing)."""
        self.shared.stop_all()
        for _index, proc, conn in self._procs:
            proc.join(2)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()
        self._procs = []


def _job_main(search: Callable[[JobLink], Any], link: JobLink, conn: Any, parent: int) -> None:
    die_with_parent()
    if os.getppid() != parent:  # job 0 died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # job 0 handles Ctrl-C and tells the jobs
    signal.signal(signal.SIGTERM, lambda *_: link.stop_all())
    try:
        message: tuple[str, Any] = ("ok", search(link))
    except BaseException as exc:  # noqa: BLE001 - every end is reported to job 0
        message = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    try:
        conn.send(message)
    finally:
        conn.close()
