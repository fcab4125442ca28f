"""Each broken store's bug, shown directly through the public API; absent from LeaseStore.

Every demonstration runs twice: on the broken store (the bug must be observed) and on the
correct ``ferry_core.LeaseStore`` (the same steps must not observe it). The two races
(``check_then_act``, ``double_finish``) use two threads, each with its own store instance
(so its own SQLite connection), released together by a barrier and repeated until the
double win is seen; a few tests use separate processes, as the harness does.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import threading
from pathlib import Path

import pytest

from ferry_core import (
    COMPLETED,
    FerryError,
    InvalidToken,
    LeaseExpired,
    LeaseStore,
    ManualClock,
    TokenRequired,
)
from tests import broken_stores

CLOCK_START = 1_000_000
RACE_TRIES = 50
SPEC = Path(__file__).resolve().parents[1].parent / "shared" / "SPEC.md"
SPEC_IDS = {
    "single-winner", "token-unique", "holder-guard", "lease-half-open", "lock-exclusive",
    "dag-order", "no-lost-task", "wal-bounded", "idle-no-write", "linearizable",
}


def reference(path: str, *, clock) -> LeaseStore:
    return LeaseStore(path, clock=clock)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(CLOCK_START)


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "ferry.db")


@pytest.fixture
def opened():
    stores = []
    yield stores
    for s in stores:
        try:
            s.close()
        except Exception:
            pass


def _factory(name: str, kind: str):
    """``kind == "broken"``: the named broken factory; ``"correct"``: LeaseStore."""
    return getattr(broken_stores, name) if kind == "broken" else reference


def _open(name: str, kind: str, opened: list):
    """Like ``_factory``, but every store it makes is closed at teardown."""
    factory = _factory(name, kind)

    def make(path: str, clock):
        store = factory(path, clock=clock)
        opened.append(store)
        return store

    return make


KINDS = pytest.mark.parametrize("kind", ["broken", "correct"])


def _wal(path: str) -> int:
    return os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0


# ---------------------------------------------------------------------- the registry
def test_registry_names_factories_and_spec_ids():
    assert len(broken_stores.BROKEN) == 20
    if SPEC.exists():
        spec_ids = set(re.findall(r"^\| `([a-z-]+)` \|", SPEC.read_text(), re.M))
        assert spec_ids == SPEC_IDS
    from ferry_harness.check.checker import INVARIANTS

    for name, (inv, desc) in broken_stores.BROKEN.items():
        assert inv in SPEC_IDS or inv in INVARIANTS, name
        assert desc and "\n" not in desc
        module, _, attr = f"tests.broken_stores:{name}".partition(":")
        factory = getattr(importlib.import_module(module), attr)
        assert callable(factory)


@pytest.mark.parametrize("name", sorted(broken_stores.BROKEN))
def test_every_broken_store_still_runs_the_ordinary_lifecycle(name, db, clock, opened):
    """Apart from its bug, each store behaves like LeaseStore on a plain happy path."""
    s = _open(name, "broken", opened)(db, clock)
    assert isinstance(s, LeaseStore)
    a = s.dispatch(None, title="a", payload={"n": 1})
    b = s.dispatch(None, title="b")
    c = s.dispatch("w", depends_on=[a])
    ca = s.poll_next("w")
    assert ca.task_id == a
    assert s.extend(a, "w", ca.token) == clock() + 300_000
    s.salvage(a, "w", ca.token, {"part": 1})
    s.fulfill(a, "w", ca.token, {"ok": True})
    assert s.get(a).status == COMPLETED and s.get(a).result == {"ok": True}
    cb = s.claim(b, "w")
    clock.advance(1)
    s.release(b, "w", cb.token, "later")  # to the tail of the queue, behind c
    cc = s.poll_next("w")
    assert cc.task_id == c
    s.fail(c, "w", cc.token, "nope")
    assert [v.status for v in s.inspect()] == ["COMPLETED", "SUBMITTED", "FAILED"]
    assert [x.data for x in s.salvaged(a)] == [{"part": 1}]
    assert s.acquire_lock("janitor", "d1", 1000) and s.lock_holder("janitor") == "d1"
    assert s.release_lock("janitor", "d1")
    if name != "refused_truncate":  # its bug
        assert s.checkpoint("TRUNCATE")[0] == 0 and _wal(db) == 0
    # Another worker (same factory, or the reference store) can open the same file.
    again = _open(name, "broken", opened)(db, clock)
    assert again.get(a).result == {"ok": True}
    ref = reference(db, clock=clock)
    opened.append(ref)
    assert ref.inspect()[0].task_id == a


# ---------------------------------------------------------------------- 1. check_then_act
def _race(factory, db, clock, prepare, act) -> bool:
    """Two racer threads, each with its own store; True as soon as both 'win' one round.

    ``prepare(setup_store)`` makes the round's argument (in the main thread), then both
    racers call ``act(store, arg, i)`` released together by a barrier. A store's SQLite
    connection belongs to the thread that opened it, so each racer opens and closes its own.
    """
    setup = factory(db, clock=clock)
    start, done = threading.Barrier(3, timeout=30), threading.Barrier(3, timeout=30)
    state: dict = {"arg": None, "stop": False, "wins": [None, None]}

    def racer(i: int) -> None:
        store = factory(db, clock=clock)
        try:
            while True:
                start.wait()
                if state["stop"]:
                    return
                try:
                    state["wins"][i] = act(store, state["arg"], i)
                except FerryError:
                    state["wins"][i] = None
                done.wait()
        finally:
            store.close()

    threads = [threading.Thread(target=racer, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(RACE_TRIES):
            state["arg"] = prepare(setup)
            start.wait()
            done.wait()
            if all(w is not None for w in state["wins"]):
                return True
        return False
    finally:
        state["stop"] = True
        start.wait()
        for t in threads:
            t.join(30)
        setup.close()


@KINDS
@pytest.mark.parametrize("how", ["claim", "poll_next"])
def test_check_then_act_two_claimers_both_win(kind, how, db, clock):
    factory = _factory("check_then_act", kind)
    if how == "claim":
        act = lambda s, tid, i: s.claim(tid, f"w{i}")  # noqa: E731
    else:
        act = lambda s, tid, i: s.poll_next(f"w{i}")  # noqa: E731
    both = _race(factory, db, clock, lambda s: s.dispatch(None), act)
    assert both is (kind == "broken")


# ---------------------------------------------------------------------- 10. double_finish
@KINDS
def test_double_finish_two_fulfills_with_one_token_both_succeed(kind, db, clock):
    factory = _factory("double_finish", kind)

    def prepare(s):
        tid = s.dispatch(None)
        return tid, s.claim(tid, "w").token

    def act(s, arg, i):
        tid, token = arg
        s.fulfill(tid, "w", token, {"by": i})
        return True

    both = _race(factory, db, clock, prepare, act)
    assert both is (kind == "broken")


@KINDS
def test_double_finish_fulfill_racing_a_release_completes_a_released_task(kind, db, clock):
    factory = _factory("double_finish", kind)

    def prepare(s):
        tid = s.dispatch(None)
        return tid, s.claim(tid, "w").token

    def act(s, arg, i):
        tid, token = arg
        if i == 0:
            s.fulfill(tid, "w", token, "done")
        else:
            s.release(tid, "w", token, "give up")
        return True

    both = _race(factory, db, clock, prepare, act)
    assert both is (kind == "broken")


# ---------------------------------------------------------------------- 2. token_not_retired
@KINDS
@pytest.mark.parametrize("how", ["release", "expiry"])
def test_token_not_retired_old_token_replays_after_reclaim(kind, how, db, clock, opened):
    s = _open("token_not_retired", kind, opened)(db, clock)
    tid = s.dispatch(None, exec_ttl_ms=1000, max_attempts=2)
    old = s.claim(tid, "w")
    if how == "release":
        s.release(tid, "w", old.token)
    else:
        clock.set(old.lease_expires_at)
    new = s.claim(tid, "w")
    assert new is not None and new.token != old.token
    if kind == "broken":
        s.fulfill(tid, "w", old.token, "replayed")
        assert s.get(tid).status == COMPLETED and s.get(tid).result == "replayed"
    else:
        with pytest.raises(InvalidToken):
            s.fulfill(tid, "w", old.token, "replayed")
        s.fulfill(tid, "w", new.token, "fresh")


# ---------------------------------------------------------------------- 3. agent_only_guard
@KINDS
@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_agent_only_guard_same_name_instance_fulfills_without_the_token(kind, token, db, clock,
                                                                        opened):
    make = _open("agent_only_guard", kind, opened)
    instance_a, instance_b = make(db, clock), make(db, clock)
    tid = instance_a.dispatch("worker")
    assert instance_a.poll_next("worker").task_id == tid
    if kind == "broken":
        instance_b.fulfill(tid, "worker", token, "impersonated")
        assert instance_a.get(tid).result == "impersonated"
    else:
        with pytest.raises(TokenRequired if token is None else InvalidToken):
            instance_b.fulfill(tid, "worker", token, "impersonated")
        assert instance_a.get(tid).status == "CLAIMED"


# ---------------------------------------------------------------------- 4. closed_lease
@KINDS
def test_closed_lease_holder_is_accepted_at_lease_expires_at(kind, db, clock, opened):
    s = _open("closed_lease", kind, opened)(db, clock)
    tid = s.dispatch(None, exec_ttl_ms=1000)
    c = s.claim(tid, "w")
    clock.set(c.lease_expires_at - 1)
    assert s.get(tid).is_logically_expired is False
    clock.set(c.lease_expires_at)
    assert s.get(tid).is_logically_expired is (kind == "correct")
    if kind == "broken":
        s.fulfill(tid, "w", c.token, "at the boundary")
        assert s.get(tid).status == COMPLETED
    else:
        with pytest.raises(LeaseExpired):
            s.fulfill(tid, "w", c.token, "at the boundary")
        assert s.get(tid).status == "TIMED_OUT"


@KINDS
def test_closed_lease_reclaim_only_from_expiry_plus_one(kind, db, clock, opened):
    make = _open("closed_lease", kind, opened)
    s, other = make(db, clock), make(db, clock)
    tid = s.dispatch(None, exec_ttl_ms=1000, max_attempts=2)
    c = s.claim(tid, "w")
    clock.set(c.lease_expires_at)
    at_expiry = other.poll_next("thief")
    if kind == "broken":
        assert at_expiry is None and other.sweep() == 0
        clock.set(c.lease_expires_at + 1)
        again = other.poll_next("thief")
        assert again is not None and again.task_id == tid
    else:
        assert at_expiry is not None and at_expiry.task_id == tid


# ---------------------------------------------------------------------- 17. closed_queue_window
@KINDS
def test_closed_queue_window_claims_at_queued_at_plus_ttl(kind, db, clock, opened):
    make = _open("closed_queue_window", kind, opened)
    s, other = make(db, clock), make(db, clock)
    tid = s.dispatch(None, queue_ttl_ms=1000)
    clock.set(CLOCK_START + 999)
    assert s.get(tid).is_logically_expired is False
    clock.set(CLOCK_START + 1000)
    assert s.get(tid).is_logically_expired is (kind == "correct")
    at_end = other.claim(tid, "w")
    if kind == "broken":
        assert at_end is not None and s.get(tid).status == "CLAIMED"
    else:
        assert at_end is None and s.get(tid).status == "TIMED_OUT"


# ---------------------------------------------------------------------- 5. long_reader
@KINDS
def test_long_reader_pins_the_wal_after_a_get(kind, db, clock, opened):
    s = _open("long_reader", kind, opened)(db, clock)
    janitor = reference(db, clock=clock)
    opened.append(janitor)
    tid = s.dispatch(None)
    s.get(tid)
    busy, _, _ = janitor.checkpoint("TRUNCATE")
    assert (busy == 1 and _wal(db) > 0) is (kind == "broken")
    # The store's own writes and checkpoints still work (they end the stale read first) ...
    c = s.poll_next("w")
    s.fulfill(tid, "w", c.token, "ok")
    assert janitor.checkpoint("TRUNCATE")[0] == 0 and _wal(db) == 0
    s.inspect()
    s.dispatch(None)
    assert s.checkpoint("TRUNCATE")[0] == 0 and _wal(db) == 0
    # ... and inspect() pins it the same way.
    s.dispatch(None)
    s.inspect()
    assert (janitor.checkpoint("TRUNCATE")[0] == 1) is (kind == "broken")


# ---------------------------------------------------------------------- 6. dependency_ignored
@KINDS
def test_dependency_ignored_dependent_is_claimed_before_its_dependency_completes(kind, db, clock,
                                                                                  opened):
    s = _open("dependency_ignored", kind, opened)(db, clock)
    a = s.dispatch(None)
    b = s.dispatch(None, depends_on=[a])
    assert s.poll_next("w1").task_id == a
    early = s.poll_next("w2")
    direct = s.claim(b, "w3") if early is None else None
    if kind == "broken":
        assert early is not None and early.task_id == b
        assert s.get(a).status == "CLAIMED"
    else:
        assert early is None and direct is None


# ---------------------------------------------------------------------- 7. unconditional_lock
@KINDS
def test_unconditional_lock_second_owner_steals_an_unexpired_lock(kind, db, clock, opened):
    make = _open("unconditional_lock", kind, opened)
    d1, d2 = make(db, clock), make(db, clock)
    assert d1.acquire_lock("janitor", "d1", 1000)
    clock.advance(999)
    stolen = d2.acquire_lock("janitor", "d2", 1000)
    assert stolen is (kind == "broken")
    assert d1.lock_holder("janitor") == ("d2" if kind == "broken" else "d1")


# ---------------------------------------------------------------------- 8. busy_idle_poll
@KINDS
def test_busy_idle_poll_an_idle_poll_grows_the_wal(kind, db, clock, opened):
    s = _open("busy_idle_poll", kind, opened)(db, clock)
    tid = s.dispatch("someone-else")  # there is work, but none for "w"
    s.poll_next("w")
    assert s.checkpoint("TRUNCATE")[0] == 0 and _wal(db) == 0
    assert s.poll_next("w") is None
    assert (_wal(db) > 0) is (kind == "broken")
    assert s.get(tid).status == "SUBMITTED"


# ---------------------------------------------------------------------- 9. dropped_late_result
@KINDS
def test_dropped_late_result_is_not_kept_as_salvage(kind, db, clock, opened):
    s = _open("dropped_late_result", kind, opened)(db, clock)
    tid = s.dispatch(None, exec_ttl_ms=1000)
    c = s.claim(tid, "w")
    clock.set(c.lease_expires_at + 5)
    with pytest.raises(LeaseExpired):
        s.fulfill(tid, "w", c.token, {"answer": 42})
    kept = [x.data for x in s.salvaged(tid) if x.kind == "late_result"]
    assert kept == ([] if kind == "broken" else [{"answer": 42}])


# ---------------------------------------------------------------------- across processes
def _claim_in_child(path: str, now: int, task_id: str, agent: str, barrier, out) -> None:
    module = importlib.import_module("tests.broken_stores")
    store = module.check_then_act(path, clock=lambda: now)
    barrier.wait()
    claim = store.claim(task_id, agent)
    out.put(None if claim is None else claim.token)
    store.close()


def test_check_then_act_double_win_across_processes(db, clock, opened):
    """The harness's setting: separate processes, each calling the factory itself."""
    ctx = multiprocessing.get_context("fork")
    setup = broken_stores.check_then_act(db, clock=clock)
    opened.append(setup)
    for _ in range(RACE_TRIES):
        tid = setup.dispatch(None)
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_in_child, args=(db, clock(), tid, f"w{i}", barrier, out))
                 for i in range(2)]
        for p in procs:
            p.start()
        tokens = [out.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        if all(tokens):
            assert tokens[0] != tokens[1]
            return
    pytest.fail("no double win across processes")


def _read_and_hold(path: str, now: int, task_id: str, ready, done) -> None:
    store = broken_stores.long_reader(path, clock=lambda: now)
    store.get(task_id)
    ready.set()
    done.wait(30)
    store.close()


def test_long_reader_in_another_process_pins_the_wal(db, clock, opened):
    ctx = multiprocessing.get_context("fork")
    janitor = reference(db, clock=clock)
    opened.append(janitor)
    tid = janitor.dispatch(None)
    ready, done = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_read_and_hold, args=(db, clock(), tid, ready, done))
    p.start()
    try:
        assert ready.wait(30)
        assert janitor.checkpoint("TRUNCATE")[0] == 1 and _wal(db) > 0
    finally:
        done.set()
        p.join(30)
    assert janitor.checkpoint("TRUNCATE")[0] == 0 and _wal(db) == 0
