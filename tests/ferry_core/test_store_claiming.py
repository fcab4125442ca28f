"""claim / poll_next, ordering, routing, both claim strategies, real contention (SPEC §4, §6)."""

from __future__ import annotations

import multiprocessing
import sqlite3
import traceback

import pytest

from ferry_core import (
    CLAIMED,
    COMPLETED,
    SUBMITTED,
    Claim,
    LeaseStore,
    ManualClock,
    NotFound,
)

T0 = 1_000_000


def test_poll_next_returns_a_claim_with_every_field(store, clock):
    tid = store.dispatch(None, exec_ttl_ms=500)
    clock.advance(3)
    c = store.poll_next("A")
    assert isinstance(c, Claim)
    assert (c.task_id, c.agent_id) == (tid, "A")
    assert (c.claimed_at, c.lease_expires_at, c.attempt) == (T0 + 3, T0 + 503, 1)
    assert isinstance(c.token, str) and c.token
    v = store.get(tid)
    assert v.status == CLAIMED
    assert (v.claimed_by, v.claimed_at, v.lease_expires_at, v.attempt) == ("A", T0 + 3, T0 + 503, 1)


def test_poll_next_on_empty_store_is_none(store):
    assert store.poll_next("A") is None


def test_poll_next_orders_by_queued_at_then_insertion(store, clock):
    a = store.dispatch(None)
    b = store.dispatch(None)  # same queued_at as a: insertion order decides
    clock.advance(1)
    c = store.dispatch(None)
    d = store.dispatch(None)
    got = [store.poll_next(f"w{i}").task_id for i in range(4)]
    assert got == [a, b, c, d]
    assert store.poll_next("w9") is None


def test_poll_next_order_mixes_targeted_and_untargeted_by_queued_at(store, clock):
    mine1 = store.dispatch("A")
    clock.advance(1)
    anyone1 = store.dispatch(None)
    clock.advance(1)
    mine2 = store.dispatch("A")
    anyone2 = store.dispatch(None)
    got = [store.poll_next("A").task_id for _ in range(4)]
    assert got == [mine1, anyone1, mine2, anyone2]


def test_poll_next_ordering_uses_insertion_order_not_id_order(store):
    ids = [store.dispatch(None) for _ in range(20)]
    got = [store.poll_next("A").task_id for _ in range(20)]
    assert got == ids


def test_target_agent_routing(store):
    for_b = store.dispatch("B")
    for_a = store.dispatch("A")
    anyone = store.dispatch(None)
    assert store.poll_next("A").task_id == for_a
    assert store.poll_next("C").task_id == anyone
    assert store.poll_next("C") is None  # B's task is not for C
    assert store.claim(for_b, "C") is None
    assert store.get(for_b).status == SUBMITTED
    assert store.poll_next("B").task_id == for_b


def test_claim_one_task(store):
    first = store.dispatch(None)
    second = store.dispatch(None)
    c = store.claim(second, "A")
    assert c is not None and c.task_id == second and c.attempt == 1
    assert store.get(first).status == SUBMITTED
    assert store.claim(second, "B") is None  # already claimed
    assert store.claim(second, "A") is None  # even by its holder
    assert store.get(second).claimed_by == "A"


def test_claim_unknown_task_is_not_found_and_changes_nothing(store, assert_refused):
    store.dispatch(None)
    assert_refused(store, NotFound, store.claim, "ghost", "A")


def test_claim_of_terminal_or_waiting_task_is_none(store, clock):
    done = store.dispatch(None)
    c = store.claim(done, "A")
    store.fulfill(done, "A", c.token, "ok")
    assert store.claim(done, "A") is None
    assert store.get(done).status == COMPLETED
    parent = store.dispatch(None)
    child = store.dispatch(None, depends_on=[parent])
    assert store.claim(child, "A") is None
    assert store.get(child).status == SUBMITTED


def test_a_claim_by_one_instance_is_seen_by_another(store, store_factory):
    other = store_factory()
    tid = store.dispatch(None)
    c = other.poll_next("B")
    assert c.task_id == tid
    assert store.poll_next("A") is None
    assert store.claim(tid, "A") is None
    other.fulfill(tid, "B", c.token, {"ok": 1})
    assert store.get(tid).result == {"ok": 1}


def _observable_run(strategy: str, path: str) -> list:
    """A scripted history; everything a user can observe, with ids replaced by indexes."""
    clock = ManualClock(T0)
    out: list = []
    with LeaseStore(path, clock=clock, claim_strategy=strategy, max_releases=1) as s:
        ids = [s.dispatch(None, exec_ttl_ms=100, queue_ttl_ms=1_000, max_attempts=2)]
        ids.append(s.dispatch("A", exec_ttl_ms=100))
        ids.append(s.dispatch(None, depends_on=[ids[0]]))
        ids.append(s.dispatch(None, queue_ttl_ms=50))
        idx = {t: i for i, t in enumerate(ids)}

        def claim_view(c):
            return None if c is None else (idx[c.task_id], c.agent_id, c.claimed_at,
                                           c.lease_expires_at, c.attempt)

        c0 = s.poll_next("B")
        out.append(claim_view(c0))
        out.append(claim_view(s.poll_next("A")))
        clock.advance(60)
        out.append(claim_view(s.poll_next("B")))  # task 3 timed out at +50
        out.append(s.extend(ids[0], "B", c0.token))
        clock.advance(200)
        out.append(s.sweep())
        out.append(claim_view(s.poll_next("C")))
        out.append(claim_view(s.claim(ids[2], "C")))
        for v in s.inspect():
            d = v.to_dict()
            d["task_id"] = idx[d["task_id"]]
            d["depends_on"] = [idx[x] for x in d["depends_on"]]
            d["error_reason"] = None if d["error_reason"] is None else len(d["error_reason"])
            out.append(d)
    return out


def test_both_strategies_give_identical_observable_behaviour(tmp_path):
    cas = _observable_run("cas", str(tmp_path / "cas.db"))
    imm = _observable_run("immediate", str(tmp_path / "imm.db"))
    assert cas == imm
    assert cas[0] is not None and cas[2] is None  # the script really claimed and timed out


# ---------------------------------------------------------------- real contention
N_TASKS = 200
N_PROCS = 4


def _contention_worker(path: str, strategy: str, policy: str, worker: str, q, start,
                       shared) -> None:
    try:
        claims = 0
        with LeaseStore(path, clock=ManualClock(T0), claim_strategy=strategy,
                        busy_policy=policy, busy_timeout_ms=20_000) as s:
            start.wait(timeout=30)  # everybody polls at once: real contention
            first = True
            while True:
                c = s.poll_next(worker)
                if first:
                    # nobody drains the queue before every worker has won a claim: on a
                    # loaded machine one process could otherwise take all 200 alone
                    shared.wait(timeout=30)
                    first = False
                if c is None:
                    break
                s.fulfill(c.task_id, worker, c.token, {"by": worker})
                claims += 1
        q.put((worker, claims, None))
    except BaseException:  # report, never hang the parent
        q.put((worker, -1, traceback.format_exc()))


@pytest.mark.parametrize("policy", ["stock", "jitter"])
@pytest.mark.parametrize("strategy", ["cas", "immediate"])
def test_contention_every_task_completed_exactly_once(tmp_path, strategy, policy):
    path = str(tmp_path / "contention.db")
    with LeaseStore(path, clock=ManualClock(T0)) as s:
        ids = [s.dispatch(None, payload=i) for i in range(N_TASKS)]
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    start = ctx.Barrier(N_PROCS)
    shared = ctx.Barrier(N_PROCS)
    procs = [ctx.Process(target=_contention_worker,
                         args=(path, strategy, policy, f"w{i}", q, start, shared))
             for i in range(N_PROCS)]
    reports = {}
    try:
        for p in procs:
            p.start()
        for _ in procs:
            worker, count, err = q.get(timeout=60)
            assert err is None, f"{worker} crashed:\n{err}"
            reports[worker] = count
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=5)
        q.close()
    assert sum(reports.values()) == N_TASKS
    assert all(n >= 1 for n in reports.values()), reports  # the first claims really raced
    with LeaseStore(path, clock=ManualClock(T0)) as s:
        views = s.inspect()
        assert [v.task_id for v in views] == ids
        assert all(v.status == COMPLETED for v in views)
        by_worker: dict[str, int] = {}
        for v in views:
            assert v.result == {"by": v.claimed_by} and v.attempt == 1
            by_worker[v.claimed_by] = by_worker.get(v.claimed_by, 0) + 1
        assert by_worker == {w: n for w, n in reports.items() if n}
    conn = sqlite3.connect(path)
    try:
        # exactly one claim (one token) per task: no task was completed twice
        rows = conn.execute("SELECT task_id, count(*) FROM claim_tokens GROUP BY task_id").fetchall()
    finally:
        conn.close()
    assert len(rows) == N_TASKS and all(n == 1 for _, n in rows)


def test_claim_statement_repeats_the_readiness_conditions(store, clock, monkeypatch):
    """Even with no sweep before it, the claiming write itself refuses a task whose queue
    window has ended (the readiness conditions live in the WHERE clause, not in Python)."""
    tid = store.dispatch(None, queue_ttl_ms=100)
    monkeypatch.setattr(store, "sweep_at", lambda now: 0)
    monkeypatch.setattr(store, "_apply_due", lambda conn, now: 0)
    clock.set(T0 + 100)
    assert store.claim(tid, "A") is None
    assert store.poll_next("A") is None
    assert store.get(tid).status == SUBMITTED  # really unswept: only the WHERE refused
    monkeypatch.undo()
    assert store.sweep() == 1
    assert store.get(tid).status == "TIMED_OUT"
