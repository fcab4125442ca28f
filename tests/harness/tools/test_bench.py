"""``ferry-harness bench``: a small in-process run, its report, usage errors, and cleanup."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from ferry_core import LeaseStore
from ferry_harness.cli.main import main
from ferry_harness.errors import TargetError, UsageError
from ferry_harness.tools.bench import matrix, records, report, runner, stats
from ferry_harness.tools.bench.targets import AS_IS, BenchUsageError, resolve_target
from ferry_harness.tools.bench.worker import WorkerResult
from tests.procs import assert_no_children_left, children_of

RUN_KEYS = ("workers", "strategy", "busy_policy", "claims_per_s", "lifecycles_per_s",
            "latency_ms", "cas_miss_ratio", "busy_errors", "jain_fairness", "wal_bytes",
            "per_worker_claims", "ceiling_ratio")
TASKS = 200




# Targets that are not ferry_core (the bench measures them as they are).
def stock_store(path: str, *, clock) -> LeaseStore:
    return LeaseStore(path, clock=clock, busy_policy="stock")


class _Hanging(LeaseStore):
    def poll_next(self, agent_id):
        time.sleep(60)


def hanging_store(path: str, *, clock) -> LeaseStore:
    return _Hanging(path, clock=clock)


class _Empty(LeaseStore):
    def poll_next(self, agent_id):
        return None


def empty_store(path: str, *, clock) -> LeaseStore:
    return _Empty(path, clock=clock)


class _Twice(LeaseStore):
    """Delivers every 10th task a second time and accepts its second fulfill (a bug)."""

    _n = 0
    _last = None

    def poll_next(self, agent_id):
        self._n += 1
        if self._last is not None and self._n % 10 == 0:
            return self._last
        self._last = super().poll_next(agent_id)
        return self._last

    def fulfill(self, task_id, agent_id, token, result=None):
        if self.get(task_id).status != "COMPLETED":
            super().fulfill(task_id, agent_id, token, result)


def twice_store(path: str, *, clock) -> LeaseStore:
    return _Twice(path, clock=clock)


@pytest.fixture(scope="module")
def small_result():
    before = set(children_of(os.getpid()))
    result = matrix.run_bench(workers=[1, 3], strategies=["cas", "immediate"],
                             policies=["hybrid", "jitter", "stock"], tasks=TASKS,
                             ceiling_updates=2_000, ceiling_samples=1, timeout_s=60)
    assert_no_children_left(before)
    return result


def test_every_key_is_there_and_every_task_was_claimed_once(small_result):
    res = small_result
    assert set(res) >= {"runs", "ceiling", "machine", "goal", "notes"}
    assert res["ceiling"]["updates_per_s"] > 0
    assert res["machine"]["cpu_count"] >= 1 and res["machine"]["sqlite"]
    ferry = res["machine"]["ferry"]  # which ferry made it, as every report.json records
    assert ferry["version"] and ferry["commit"] and ferry["dirty"] in ("yes", "no")
    assert len(res["runs"]) == 2 * 2 * 3
    for run in res["runs"]:
        assert all(k in run for k in RUN_KEYS), sorted(set(RUN_KEYS) - set(run))
        assert run["error"] is None
        assert len(run["per_worker_claims"]) == run["workers"]
        assert sum(run["per_worker_claims"]) == run["claims"] == run["fulfilled"] == TASKS
        assert run["verified"]["ok"], run["verified"]  # the database agrees: once each
        assert 0 < run["jain_fairness"] <= 1
        lat = run["latency_ms"]
        assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
        assert lat["count"] == TASKS and sum(run["latency_hist"]) == TASKS
        assert run["claims_per_s"] > 0 and run["lifecycles_per_s"] > 0
        assert 0 <= run["cas_miss_ratio"] < 1
        assert run["cas_miss_source"] == "store-cas-update"
        assert run["wal_bytes"] >= 0 and run["wal_bytes_max"] >= run["wal_bytes"]
        if run["strategy"] == "immediate":
            assert run["cas_misses"] == 0  # picked under the write lock: never loses
    assert {(r["strategy"], r["busy_policy"]) for r in res["runs"]} == {
        (s, p) for s in ("cas", "immediate") for p in ("hybrid", "jitter", "stock")}


def _keys(record: type) -> set[str]:
    return set(record.__required_keys__) | set(record.__optional_keys__)


def test_the_typed_records_name_every_key_bench_json_has(small_result):
    """bench's records (tools/bench/records.py) are what the matrix really writes: every key
    of the result, a run, its verification, a goal row and the machine is declared, and a
    record declares nothing the matrix never writes."""
    res = small_result
    assert set(res) == _keys(records.BenchResult)
    assert set().union(*(set(r) for r in res["runs"])) == _keys(records.RunRecord)
    assert set().union(*(set(r["verified"]) for r in res["runs"])) == _keys(records.Verified)
    assert set(res["runs"][0]["latency_ms"]) == _keys(records.Latency)
    assert set(res["machine"]) == _keys(records.Machine)
    assert res["goal"] and all(set(g) == _keys(records.GoalRow) for g in res["goal"])
    assert set(res["ceiling"]) == _keys(records.Ceiling)
    same = res["ceiling"]["same_sql"]
    assert set(same) == _keys(records.SameSqlCeiling)
    assert all(set(r) == _keys(records.SameSqlRun) for r in same["runs"])


def test_statistics():
    assert stats.jain([5, 5, 5]) == pytest.approx(1.0)
    assert stats.jain([10, 0, 0, 0]) == pytest.approx(0.25)
    xs = sorted(range(1, 1001))
    assert stats.percentile(xs, 0.5) == 500 and stats.percentile(xs, 0.999) == 999
    assert stats.percentile(xs, 1.0) == 1000 and stats.percentile([], 0.5) == 0.0


def test_report_with_plots(small_result, tmp_path):
    pytest.importorskip("matplotlib")
    files = report.write_report(dict(small_result), str(tmp_path))
    assert {"report.md", "bench.json", "throughput.png", "latency.png", "share.png"} <= set(files)
    for name in files:
        assert (tmp_path / name).stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "![throughput.png](throughput.png)" in md and "cas_miss_source" in md
    data = json.loads((tmp_path / "bench.json").read_text())
    assert len(data["runs"]) == len(small_result["runs"])


def test_report_without_matplotlib_skips_plots_with_a_note(small_result, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ferry_harness.tools.bench.plots", None)  # import -> ImportError
    files = report.write_report(dict(small_result), str(tmp_path))
    assert files == ["report.md", "bench.json"]
    assert "Plots skipped" in (tmp_path / "report.md").read_text()
    assert not list(tmp_path.glob("*.png"))


def test_other_targets_are_measured_as_they_are():
    before = set(children_of(os.getpid()))
    res = matrix.run_bench(f"{__name__}:stock_store", workers=[2], strategies=["immediate"],
                          policies=["jitter"], tasks=100, ceiling_updates=1_000,
                          ceiling_samples=1, timeout_s=60)
    assert_no_children_left(before)
    (run,) = res["runs"]
    assert (run["strategy"], run["busy_policy"]) == (AS_IS, AS_IS)
    assert sum(run["per_worker_claims"]) == 100 and run["cas_miss_source"] == "poll-none"
    assert any("not ferry_core" in n for n in res["notes"])


def test_several_targets_are_compared_in_one_interleaved_run():
    before = set(children_of(os.getpid()))
    res = matrix.run_bench(f"ferry_core:LeaseStore,{__name__}:stock_store", workers=[1, 2],
                          strategies=["cas"], policies=["hybrid"], tasks=60, repeat=2,
                          ceiling_updates=1_000, ceiling_samples=1, timeout_s=60)
    assert_no_children_left(before)
    order = [(r["rep"], r["workers"], r["label"]) for r in res["runs"]]
    labels = ["ferry_core cas/hybrid", "test_bench:stock_store"]
    assert order == [(rep, w, lab) for rep in (1, 2) for w in (1, 2) for lab in labels]
    for r in res["runs"]:
        assert r["verified"]["ok"] and r["verified"]["completed_distinct"] == 60, r["verified"]
        assert r["raw_half"] == pytest.approx(r["ceiling"] / 2)
        assert r["lifecycle_ratio"] == pytest.approx(r["lifecycles_per_s"] / r["raw_half"])
    table = report.compare_table(res)
    assert sum(1 for line in table if line.startswith("| ferry_core cas/hybrid |")) == 1
    assert sum(1 for line in table if line.startswith("| test_bench:stock_store |")) == 1
    core = [r for r in res["runs"] if r["label"].startswith("ferry_core")]
    assert all(r["cas_misses"] == 0 for r in core)  # the one-statement claim never loses


def test_verify_delivery_counts_duplicates_and_losses():
    def worker(slot, claimed, done):
        return WorkerResult(slot=slot, claimed_ids=tuple(claimed), done_ids=tuple(done))

    ok = {0: worker(0, ["a", "b"], ["a", "b"])}
    assert runner.verify_delivery(ok, 2)["ok"]
    dup = {0: worker(0, ["a", "b"], ["a", "b"]), 1: worker(1, ["a"], ["a"])}
    v = runner.verify_delivery(dup, 2)
    assert not v["ok"] and v["claimed_twice"] == 1 and v["completed_twice"] == 1
    lost = runner.verify_delivery({0: worker(0, ["a"], ["a"])}, 2)
    assert not lost["ok"] and lost["never_completed"] == 1


def test_a_store_that_delivers_twice_fails_the_bench_with_exit_1(capsys):
    before = set(children_of(os.getpid()))
    rc = main(["bench", "--target", f"{__name__}:twice_store", "--workers", "1",
               "--tasks", "40", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "exactly once" in err and "claimed twice" in err, err
    assert_no_children_left(before)


def test_a_hanging_store_is_killed_at_the_timeout(tmp_path):
    before = set(children_of(os.getpid()))
    tgt = resolve_target(f"{__name__}:hanging_store")
    t0 = time.monotonic()
    rec = runner.run_one(tgt, 2, AS_IS, AS_IS, 20, str(tmp_path), timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert "did not finish" in rec["error"]
    assert_no_children_left(before)


def test_a_store_that_never_hands_out_tasks_stalls_and_says_so(tmp_path):
    before = set(children_of(os.getpid()))
    tgt = resolve_target(f"{__name__}:empty_store")
    rec = runner.run_one(tgt, 2, AS_IS, AS_IS, 20, str(tmp_path), timeout_s=20, stall_s=0.3)
    assert "stalled" in rec["error"] and rec["claims"] == 0
    assert rec["cas_miss_ratio"] == 1.0
    assert_no_children_left(before)


@pytest.mark.parametrize("argv, needle", [
    (["--workers", "0"], "--workers"),
    (["--workers", "2,x"], "--workers"),
    (["--target", "nope:x"], "nope"),
    (["--target", "ferry_core:nothing_here"], "nothing_here"),
    (["--strategy", "optimistic"], "--strategy"),
    (["--busy-policy", "spiral"], "--busy-policy"),
    (["--tasks", "0"], "--tasks"),
    (["--tasks", "many"], "--tasks"),
])
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    before = set(children_of(os.getpid()))
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert_no_children_left(before)


def test_bench_usage_errors_are_usage_errors_not_target_errors():
    assert issubclass(BenchUsageError, UsageError)
    assert not issubclass(BenchUsageError, TargetError)


def test_cli_end_to_end_writes_json(tmp_path, capsys, monkeypatch):
    from ferry_harness.tools.bench import matrix

    real = matrix.measure_ceiling  # (its samples a tenth as long: 6 of the test's 9 s)
    monkeypatch.setattr(matrix, "measure_ceiling", lambda base, updates: real(base, updates // 10))
    before = set(children_of(os.getpid()))
    out = tmp_path / "b.json"
    rc = main(["bench", "--workers", "2", "--strategy", "cas", "--busy-policy", "jitter",
               "--tasks", "100", "--json", str(out), "--quiet"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["runs"][0]["claims"] == 100 and data["ceiling"]["updates_per_s"] > 0
    assert "claims/s" in capsys.readouterr().out
    assert_no_children_left(before)


# ---------------------------------------------------------------------------------------
# ferry_core/busy.py: the policies this bench measures (the default is "spin").
from ferry_core import StoreError  # noqa: E402
from ferry_core import busy as busy_mod  # noqa: E402


def _wal_db(path: str):
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t(x)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    return conn


def test_is_busy_only_for_sqlite_busy_not_sqlite_locked(tmp_path):
    import sqlite3

    path = str(tmp_path / "x.db")
    conn = _wal_db(path)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as busy_exc:
            conn.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        assert busy_mod.is_busy(busy_exc.value)  # SQLITE_BUSY: "database is locked"
        cur = conn.execute("SELECT x FROM t")
        cur.fetchone()  # a read still open on this connection
        with pytest.raises(sqlite3.OperationalError) as locked_exc:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        assert "table is locked" in str(locked_exc.value)
        assert not busy_mod.is_busy(locked_exc.value)  # SQLITE_LOCKED never clears by waiting
        assert not busy_mod.is_busy(ValueError("database is locked"))
    finally:
        other.close()
        conn.close()


@pytest.mark.parametrize("policy", sorted(busy_mod.POLICIES))
def test_sqlite_locked_is_raised_at_once_not_retried_for_the_timeout(tmp_path, policy):
    import sqlite3

    conn = _wal_db(str(tmp_path / "x.db"))
    try:
        pol = busy_mod.make_busy_policy(policy, conn, 3_000)
        cur = conn.execute("SELECT x FROM t")
        cur.fetchone()
        t0 = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="table is locked"):
            pol.run(lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall())
        assert time.monotonic() - t0 < 0.5, "SQLITE_LOCKED was retried as if it were busy"
    finally:
        conn.close()


@pytest.mark.parametrize("policy", sorted(busy_mod.POLICIES))
def test_every_policy_keeps_the_busy_timeout_contract(tmp_path, policy):
    import sqlite3

    path = str(tmp_path / "x.db")
    with LeaseStore(path, busy_policy=policy, busy_timeout_ms=200) as s:
        blocker = sqlite3.connect(path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            t0 = time.monotonic()
            with pytest.raises(StoreError, match="busy_timeout_ms"):
                s.dispatch(None)
            assert 0.15 < time.monotonic() - t0 < 3
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        s.dispatch(None)  # and it works again once the lock is free


def test_spin_is_the_default_and_hybrid_waits_inside_sqlite_first(tmp_path):
    import sqlite3
    import threading

    path = str(tmp_path / "x.db")
    with LeaseStore(path) as s:  # the default: no SQLite sleeps, the policy's own retries
        assert s._busy.name == "spin"
        assert s._conn.execute("PRAGMA busy_timeout").fetchall()[0][0] == 0
    with LeaseStore(path, busy_policy="hybrid") as s:
        assert s._conn.execute("PRAGMA busy_timeout").fetchall()[0][0] == s._busy.sqlite_ms
    for policy in ("spin", "hybrid"):
        with LeaseStore(path, busy_policy=policy) as s:
            blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            blocker.execute("BEGIN IMMEDIATE")
            threading.Timer(0.05, lambda b=blocker: b.execute("ROLLBACK")).start()
            t0 = time.monotonic()
            s.dispatch(None)  # waits ~50 ms, then gets through
            assert time.monotonic() - t0 < 1.0
            blocker.close()


class _SpinWatch:
    """A fake clock for SpinPolicy: every yield and sleep is recorded and moves time on
    (a yield by ``yield_s``, a try of :meth:`busy_then` by ``try_s``), so the policy's
    schedule is checked without timing it."""

    def __init__(self, pol, yield_s: float = 0.0, try_s: float = 0.00001) -> None:
        self.t, self.yield_s, self.try_s, self.events = 1000.0, yield_s, try_s, []
        pol._clock, pol._sleep, pol._yield = (lambda: self.t), self.sleep, self.yield_

    def sleep(self, s: float) -> None:
        self.events.append(("sleep", s))
        self.t += s

    def yield_(self) -> None:
        self.events.append(("yield", 0.0))
        self.t += self.yield_s

    def busy_then(self, n: int, value: object = "ok"):
        """A call that finds the lock taken ``n`` times, then returns ``value``."""
        import sqlite3

        calls = [0]

        def fn():
            calls[0] += 1
            self.t += self.try_s
            if calls[0] <= n:
                raise sqlite3.OperationalError("database is locked")
            return value
        return fn, calls


def test_spin_retries_through_a_window_yielding_before_each_try_then_sleeps():
    import sqlite3

    pol = busy_mod.SpinPolicy(sqlite3.connect(":memory:"), 5000)
    watch = _SpinWatch(pol)
    fn, calls = watch.busy_then(3)  # the lock frees within the first 200 us window
    assert pol.run(fn) == "ok" and calls[0] == 4
    assert watch.events == [("yield", 0.0)] * 3, "no sleep inside a window, a yield per retry"
    watch.events.clear()
    fn, calls = watch.busy_then(50)  # 20 retries of 10 us fill a window: a sleep, a new one
    assert pol.run(fn) == "ok"
    sleeps = [s for kind, s in watch.events if kind == "sleep"]
    assert len(sleeps) == 2 and all(0.0005 <= s <= 0.001 for s in sleeps), watch.events
    kinds = [kind for kind, _ in watch.events]
    assert kinds.index("sleep") in (20, 21), "the window is 200 us of tries, then a sleep"


def test_spin_stops_spinning_when_a_yield_ran_someone_else():
    import sqlite3

    # a 10 ms window, but every yield gave the CPU away for 300 us
    pol = busy_mod.SpinPolicy(sqlite3.connect(":memory:"), 5000, spin_s=0.01)
    watch = _SpinWatch(pol, yield_s=0.0003)
    fn, calls = watch.busy_then(3)
    assert pol.run(fn) == "ok" and calls[0] == 4
    kinds = [kind for kind, _ in watch.events]
    assert kinds == ["yield", "sleep"] * 2 + ["yield"], "one try per window on a wanted CPU"


def test_spin_raises_the_busy_error_once_the_timeout_has_passed_and_not_before():
    import sqlite3

    pol = busy_mod.SpinPolicy(sqlite3.connect(":memory:"), 200)
    watch = _SpinWatch(pol)
    start = watch.t
    fn, calls = watch.busy_then(10**9)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        pol.run(fn)
    assert 0.2 <= watch.t - start < 0.2 + 0.002, "it gave up too early or too late"
    assert calls[0] > 1000  # it kept trying all along
    watch.events.clear()
    fn, calls = watch.busy_then(0)  # a free lock: one try, no yield, no sleep
    assert pol.run(fn) == "ok" and calls[0] == 1 and watch.events == []
