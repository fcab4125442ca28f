"""Single-process costs behind ``ferry-harness bench`` (pytest-benchmark).

- the raw ceiling the bench compares against: one autocommit UPDATE of one row;
- ferry_core's own claiming UPDATE alone (what one claim writes, without pick or sweep);
- an uncontended claim + fulfill under each busy policy (what a policy costs when nobody
  else is there: it must be close to nothing).

With ``--benchmark-disable`` (the default test run) each body runs once as a smoke test.
"""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from ferry_core import LeaseStore, ManualClock
from ferry_core.busy import POLICIES

ROWS = 200_000


def _fill(store: LeaseStore, n: int) -> list[str]:
    """``n`` ready tasks in one transaction (as the bench fills its queue)."""
    return store.dispatch_many([{"n": i} for i in range(n)], requester="bench",
                               queue_ttl_ms=86_400_000, exec_ttl_ms=3_600_000)


def test_bench_raw_ceiling_update(benchmark, tmp_path):
    """The statement behind the bench's ``ceiling``: autocommit, WAL, synchronous=NORMAL."""
    benchmark.group = "single-statement writes"
    conn = sqlite3.connect(str(tmp_path / "c.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, status TEXT NOT NULL, at INTEGER)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t(id, status) VALUES (?, 'SUBMITTED')",
                     ((i,) for i in range(ROWS)))
    conn.execute("COMMIT")
    ids = itertools.count()
    sql = "UPDATE t SET status='CLAIMED', at=? WHERE id=? AND status='SUBMITTED'"

    def update():
        i = next(ids)
        assert conn.execute(sql, (i, i)).rowcount == 1

    benchmark.pedantic(update, rounds=2_000, warmup_rounds=20)
    conn.close()


def test_bench_claim_update_alone(benchmark, tmp_path):
    """ferry_core's claiming UPDATE (token trigger, partial indexes), no pick, no sweep."""
    benchmark.group = "single-statement writes"
    with LeaseStore(str(tmp_path / "s.db"), clock=ManualClock(1_000_000)) as s:
        ids = iter(_fill(s, 3_000))

        def claim():
            assert s.claim(next(ids), "bench", sweep=False) is not None

        benchmark.pedantic(claim, rounds=2_000, warmup_rounds=20)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_bench_uncontended_claim_fulfill_per_policy(benchmark, tmp_path, policy):
    benchmark.group = "uncontended claim+fulfill by busy policy"
    with LeaseStore(str(tmp_path / "p.db"), clock=ManualClock(1_000_000),
                    busy_policy=policy) as s:
        _fill(s, 3_000)

        def lifecycle():
            c = s.poll_next("bench")
            s.fulfill(c.task_id, "bench", c.token, None)

        benchmark.pedantic(lifecycle, rounds=2_000, warmup_rounds=20)
