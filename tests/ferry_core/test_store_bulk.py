"""The public API ``ferry-harness bench`` uses: ``dispatch_many``, ``claim_stats`` and
``claim(..., sweep=False)``."""

from __future__ import annotations

import multiprocessing

import pytest

from ferry_core import (
    CLAIMED,
    FAILED,
    SUBMITTED,
    ClaimStats,
    InvalidArgument,
    LeaseStore,
    NotFound,
)
from tests.ferry_core.backend import raw_rows

T0 = 1_000_000


def _rows(store) -> list[tuple]:
    """Every task row without ``seq`` and ``task_id`` (the two columns the store chooses),
    read through a separate connection."""
    return [r[2:] for r in raw_rows(store, "SELECT * FROM tasks ORDER BY seq")]


# --------------------------------------------------------------------------- dispatch_many
def test_dispatch_many_inserts_what_dispatch_inserts(store_factory, tmp_path):
    kw = {"title": "t", "requester": "boss", "queue_ttl_ms": 5_000, "exec_ttl_ms": 700,
          "max_attempts": 3}
    one, many = str(tmp_path / "one.db"), str(tmp_path / "many.db")
    a, b = store_factory(one), store_factory(many)
    for i in range(3):
        a.dispatch("agent-a", payload={"n": i}, **kw)
    bulk = b.dispatch_many([{"n": i} for i in range(3)], target_agent="agent-a", **kw)
    assert len(bulk) == len(set(bulk)) == 3
    assert _rows(a) == _rows(b)  # the same clock: byte-for-byte the same columns
    views = [b.get(t) for t in bulk]
    assert [v.payload for v in views] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert all(v.status == SUBMITTED and v.target_agent == "agent-a" for v in views)
    assert [v.task_id for v in b.inspect()] == bulk  # ids come back in queue order


def test_dispatch_many_tasks_are_claimed_oldest_first_with_their_own_tokens(store):
    ids = store.dispatch_many([None] * 4)
    claims = [store.poll_next("w") for _ in ids]
    assert [c.task_id for c in claims] == ids
    assert len({c.token for c in claims}) == 4
    assert store.poll_next("w") is None
    for c in claims:
        store.fulfill(c.task_id, "w", c.token, None)
        assert store.get(c.task_id).status == "COMPLETED"


def test_dispatch_many_with_dependencies_follows_dispatch(store):
    dep = store.dispatch(None)
    ids = store.dispatch_many([1, 2], depends_on=[dep])
    assert all(store.get(t).depends_on == (dep,) for t in ids)
    assert store.poll_next("w").task_id == dep  # the dependents wait for it
    dead = store.dispatch(None, queue_ttl_ms=1)
    store.clock.advance(2)
    failed = store.dispatch_many([None], depends_on=[dead])
    assert store.get(failed[0]).status == FAILED


@pytest.mark.parametrize("kw, exc", [
    ({"payloads": [object()]}, InvalidArgument),
    ({"payloads": "abc"}, InvalidArgument),
    ({"payloads": [1], "queue_ttl_ms": 0}, InvalidArgument),
    ({"payloads": [1], "target_agent": ""}, InvalidArgument),
    ({"payloads": [1], "depends_on": ["missing"]}, NotFound),
])
def test_dispatch_many_refuses_the_whole_batch(store, assert_refused, kw, exc):
    kw = dict(kw)  # the parameters are shared by both strategies' runs
    payloads = kw.pop("payloads")
    batch = payloads if isinstance(payloads, str) else [0, *payloads]  # a good one first
    assert_refused(store, exc, store.dispatch_many, batch, **kw)
    assert store.inspect() == []


def test_dispatch_many_of_nothing_writes_nothing(store, db_dump):
    before = db_dump()
    assert store.dispatch_many([]) == []
    assert db_dump() == before


# --------------------------------------------------------------------------- claim_stats
def test_claim_stats_count_cas_attempts_and_misses(store_factory):
    s = store_factory(claim_strategy="cas")
    assert s.claim_stats() == ClaimStats(attempts=0, misses=0, empty=0)
    ids = s.dispatch_many([None, None])
    assert s.claim(ids[0], "w") is not None
    assert s.claim(ids[0], "w") is None  # taken already: the CAS changes no row
    stats = s.claim_stats()
    assert (stats.attempts, stats.misses, stats.empty) == (2, 1, 0)
    assert s.poll_next("w").task_id == ids[1]  # the one-statement claim: an attempt
    assert s.poll_next("w") is None  # idle: nothing ready, no claiming statement at all
    assert s.claim_stats().to_dict() == {"attempts": 3, "misses": 1, "empty": 0}


@pytest.mark.sqlite_only  # a SQLite transaction mode
def test_claim_stats_immediate_strategy_counts_the_same(store_factory):
    s = store_factory(claim_strategy="immediate")
    (tid,) = s.dispatch_many([None])
    assert s.poll_next("w").task_id == tid
    assert s.claim(tid, "w") is None  # a CAS inside BEGIN IMMEDIATE: a miss
    assert s.claim_stats() == ClaimStats(attempts=2, misses=1, empty=0)


class _AlwaysLooksReady(LeaseStore):
    """The read phase always says a task is ready: the claim then finds none."""

    def _poll_check(self, agent_id, now):
        return 0, 1


def test_claim_stats_one_statement_claim_counts_empty_not_a_miss(tmp_path):
    with _AlwaysLooksReady(str(tmp_path / "e.db")) as s:
        assert s.poll_next("w") is None
        assert s.claim_stats() == ClaimStats(attempts=1, misses=0, empty=1)


def _race(path: str, out) -> None:
    with LeaseStore(path) as s:
        got = 0
        while s.poll_next("w") is not None:
            got += 1
        out.put((got, s.claim_stats().to_dict()))


def test_claim_stats_are_per_instance_and_add_up_across_processes(tmp_path):
    path = str(tmp_path / "race.db")
    with LeaseStore(path) as s:
        s.dispatch_many([None] * 300)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(path, out)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    assert sum(got for got, _ in results) == 300
    for got, stats in results:
        assert stats["misses"] == 0  # the one-statement claim cannot lose a race
        assert stats["attempts"] == got + stats["empty"]


# --------------------------------------------------------------------------- claim(sweep=False)
def test_claim_without_sweep_is_the_claiming_update_alone(store):
    ids = store.dispatch_many([None, None], exec_ttl_ms=10, max_attempts=2)
    c = store.claim(ids[0], "w", sweep=False)
    assert c is not None and store.get(ids[0]).status == CLAIMED
    store.clock.advance(10)  # the lease is over, but nobody swept
    assert store.claim(ids[0], "v", sweep=False) is None  # still CLAIMED: refused
    assert store.get(ids[0]).is_logically_expired
    assert store.claim(ids[0], "v") is not None  # a sweeping claim applies the expiry first
    with pytest.raises(NotFound):
        store.claim("nope", "w", sweep=False)


def test_claim_without_sweep_refuses_a_task_past_its_queue_window(store):
    (tid,) = store.dispatch_many([None], queue_ttl_ms=5)
    store.clock.advance(5)
    assert store.claim(tid, "w", sweep=False) is None
    assert store.get(tid).status == SUBMITTED  # not applied: only a sweep writes the expiry
