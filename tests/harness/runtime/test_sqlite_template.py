"""Each example's SQLite database starts as a copy of the one the target's first store
made (SqliteBackend's template): taken before any operation ran, so every example still
starts empty; a target with files of its own beside the database gets no template."""

from __future__ import annotations

import os

import pytest

from ferry_core import LeaseStore
from ferry_harness.run.executor import Executor
from ferry_harness.runtime.backend import SqliteBackend
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock


class _SideFileStore(LeaseStore):
    """Keeps a file of its own next to the database (a lock file, say)."""

    def __init__(self, path: str, **kw) -> None:
        super().__init__(path, **kw)
        with open(path + ".owner", "a"):
            pass


def side_file(path: str, *, clock) -> _SideFileStore:
    return _SideFileStore(path, clock=clock)


@pytest.fixture
def rig(tmp_path):
    """rig(target) -> (backend, make_executor) on a fresh 3-worker pool."""
    pools = []

    def make(target: str):
        clock = SharedClock()
        pool = WorkerPool(target, clock, 3)
        pool.start()
        pools.append(pool)
        backend = SqliteBackend(str(tmp_path))
        n = [0]

        def executor() -> Executor:
            n[0] += 1
            return Executor(pool, clock, backend.fresh(n[0]), backend=backend)
        return backend, executor

    yield make
    for pool in pools:
        pool.close()


def _dispatch_and_count(ex: Executor, earlier: list[str]) -> int:
    """Dispatch one task; how many of the ``earlier`` examples' tasks this one still has."""
    earlier.append(ex._one(0, "dispatch", "client", queue_ttl_ms=10_000, exec_ttl_ms=100).value)
    return sum(ex._one(1, "get", "auditor", task_id=t).type == "ok" for t in earlier[:-1])


def test_later_examples_start_from_the_template_and_start_empty(rig):
    backend, executor = rig("ferry_core:LeaseStore")
    first, tasks = executor(), []
    assert backend.template is not None and backend.copies == 0
    assert _dispatch_and_count(first, tasks) == 0
    for n in (2, 3):
        ex = executor()
        assert backend.copies == n - 1 and backend.opens_together
        assert _dispatch_and_count(ex, tasks) == 0  # the earlier examples' tasks are not in it
        assert "wal-file" in ex.capabilities  # still a WAL database the checks can measure


def test_a_target_with_files_of_its_own_gets_no_template(rig):
    backend, executor = rig("tests.harness.runtime.test_sqlite_template:side_file")
    executor()
    assert os.path.exists(backend.path + ".owner")
    assert backend.template is None and not backend.opens_together
    executor()
    assert backend.copies == 0
