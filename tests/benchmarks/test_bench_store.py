"""Store micro-benchmarks (pytest-benchmark).

With ``--benchmark-disable`` (the default test run) every benchmark body runs once, so
these double as smoke tests; ``--benchmark-only`` measures for real.
"""

from __future__ import annotations

import pytest

from ferry_core import CLAIMED, COMPLETED, LeaseStore, ManualClock

T0 = 1_000_000
QUEUE_SIZES = (1_000, 100_000)


def test_bench_claim_fulfill(benchmark, store, clock):
    """One process: poll_next + fulfill of a freshly dispatched task, per claim strategy."""
    benchmark.group = "claim+fulfill"
    done = []

    def setup():
        store.dispatch(None, payload={"n": len(done)})
        clock.advance(1)

    def claim_fulfill():
        c = store.poll_next("bench")
        store.fulfill(c.task_id, "bench", c.token, {"ok": True})
        done.append(c.task_id)

    benchmark.pedantic(claim_fulfill, setup=setup, rounds=1_000, warmup_rounds=20)
    assert done and all(store.get(t).status == COMPLETED for t in done[-5:])


def test_bench_claim_path(benchmark, store, clock):
    """poll_next alone (the claim path: one UPDATE once a poll has claimed, one read
    before it otherwise); fulfils are untimed."""
    benchmark.group = "claim path"
    held = []

    def setup():
        while held:
            c = held.pop()
            store.fulfill(c.task_id, "bench", c.token, None)
        store.dispatch(None)
        clock.advance(1)

    benchmark.pedantic(lambda: held.append(store.poll_next("bench")), setup=setup,
                       rounds=1_000, warmup_rounds=20)
    assert held and held[-1] is not None


def test_bench_fulfill_path(benchmark, store, clock):
    """fulfill alone (one guarded UPDATE); dispatch and claim are untimed."""
    benchmark.group = "fulfill path"
    ready = []

    def setup():
        store.dispatch(None)
        clock.advance(1)
        ready.append(store.poll_next("bench"))

    def fulfill():
        c = ready.pop()
        store.fulfill(c.task_id, "bench", c.token, {"ok": True})

    benchmark.pedantic(fulfill, setup=setup, rounds=1_000, warmup_rounds=20)
    assert not ready


def _build_queue(path: str, size: int) -> None:
    """``size`` ready SUBMITTED tasks in one transaction (``dispatch_many``)."""
    with LeaseStore(path, clock=ManualClock(T0)) as s:
        s.dispatch_many([None] * size, queue_ttl_ms=10**9, exec_ttl_ms=600_000)
        s.checkpoint("TRUNCATE")


@pytest.fixture(scope="module", params=QUEUE_SIZES, ids=lambda n: f"queued{n}")
def queue_db(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("queue") / f"queue{request.param}.db")
    _build_queue(path, request.param)
    return request.param, path


def test_bench_claim_from_deep_queue(benchmark, queue_db, claim_strategy):
    """poll_next cost with 1k vs 100k queued tasks; each claim is released (untimed)."""
    size, path = queue_db
    benchmark.group = "claim-queue-depth"
    benchmark.extra_info["queued"] = size
    clock = ManualClock(T0 + 10)
    held = []
    with LeaseStore(path, clock=clock, claim_strategy=claim_strategy,
                    max_releases=10**9) as s:

        def give_back():
            while held:
                c = held.pop()
                s.release(c.task_id, c.agent_id, c.token)
            clock.advance(1)  # the released task goes to the tail

        def claim():
            c = s.poll_next("bench")
            held.append(c)

        benchmark.pedantic(claim, setup=give_back, rounds=300, warmup_rounds=10)
        assert held and s.get(held[-1].task_id).status == CLAIMED
        give_back()
        counts = s._conn.execute(
            "SELECT count(*), sum(status='SUBMITTED') FROM tasks").fetchall()[0]
        assert counts == (size, size)
