"""The same-SQL ceiling replays the statements ferry_core really runs, and follows them.

Each test traces a ferry_core lifecycle itself (independently of the capture code) and
compares it with what the ceiling replays, so a ceiling that drifts from the store's SQL
(a re-typed copy, a statement left out, a trigger that no longer fires) fails here.
"""

from __future__ import annotations

import os

import pytest

from ferry_core import LeaseStore
from ferry_harness.errors import HarnessError
from ferry_harness.tools.bench import ceiling, matrix
from tests.procs import children_of

AGENT = "tracing-agent"
NOW = 1_700_000_000_007


def _store_lifecycle(path: str, cls: type[LeaseStore]) -> tuple[list[str], list[int]]:
    """Templates and trace events of a steady-state cas lifecycle of ``cls``, traced here."""
    with cls(path, clock=lambda: NOW, claim_strategy="cas") as store:
        store.dispatch_many([{"n": 0}, {"n": 1}], queue_ttl_ms=86_400_000,
                            exec_ttl_ms=3_600_000)
        first = store.poll_next(AGENT)
        store.fulfill(first.task_id, AGENT, first.token, ceiling.CAPTURE_RESULT)
        trace: list[str] = []
        store.set_trace_callback(trace.append)
        claim = store.poll_next(AGENT)
        store.fulfill(claim.task_id, AGENT, claim.token, ceiling.CAPTURE_RESULT)
        store.set_trace_callback(None)
    values = {"token": claim.token, "task_id": claim.task_id, "agent": AGENT, "now": NOW}
    stmts, events = ceiling._statements(trace)
    return [ceiling._to_template(s, values) for s in stmts], events


def _replayed_lifecycle(path: str, sql: ceiling.LifecycleSQL) -> tuple[list[str], list[int]]:
    """The same, for one lifecycle of the ceiling's replay on a bare connection."""
    with LeaseStore(path) as store:
        store.dispatch_many([{"n": 0}], queue_ttl_ms=86_400_000, exec_ttl_ms=3_600_000)
    conn = ceiling.open_replay_connection(path, sql, 5.0)
    trace: list[str] = []
    conn.set_trace_callback(trace.append)
    tokens: list[str] = []
    task = ceiling.replay_lifecycle(conn, sql, AGENT, NOW, [0], token_sink=tokens.append)
    conn.set_trace_callback(None)
    conn.close()
    assert task is not None
    values = {"token": tokens[0], "task_id": task, "agent": AGENT, "now": NOW}
    stmts, events = ceiling._statements(trace)
    return [ceiling._to_template(s, values) for s in stmts], events


def _fulfill_text(store_trace: list[str]) -> str:
    return next(s for s in store_trace if "status='COMPLETED'" in s)


class _WiderClaim(LeaseStore):
    """ferry_core with a changed claiming statement (one more column written)."""

    _CLAIM_SET = LeaseStore._CLAIM_SET.replace(
        "extend_count=0", "extend_count=0, error_reason=NULL")


@pytest.mark.parametrize("cls", [LeaseStore, _WiderClaim], ids=["ferry_core", "changed-claim"])
def test_the_replay_runs_what_the_store_runs(tmp_path, cls):
    sql = ceiling.capture_lifecycle_sql(str(tmp_path), cls)
    store_stmts, store_events = _store_lifecycle(str(tmp_path / "store.db"), cls)
    replay_stmts, replay_events = _replayed_lifecycle(str(tmp_path / "replay.db"), sql)
    assert list(sql.poll) + list(sql.fulfill) == store_stmts == replay_stmts
    # every trigger program the store's statements ran, the replay ran too
    assert list(sql.events) == store_events == replay_events
    assert store_events[0] > 1, "the claim's token-history trigger did not show in the trace"
    if cls is _WiderClaim:
        assert "error_reason=NULL" in sql.poll[0]
    assert "RETURNING task_id" in sql.poll[0] and "ferry_token_eq" in _fulfill_text(store_stmts)


def test_the_replay_connection_has_the_store_settings_and_sqlites_busy_handler(tmp_path):
    sql = ceiling.capture_lifecycle_sql(str(tmp_path))
    path = str(tmp_path / "x.db")
    with LeaseStore(path) as store:
        settings = store.connection_settings()
    assert dict(sql.settings) == settings
    conn = ceiling.open_replay_connection(path, sql, 5.0)
    try:
        for name, value in settings.items():
            assert conn.execute(f"PRAGMA {name}").fetchall()[0][0] == value, name
        assert conn.execute("PRAGMA busy_timeout").fetchall()[0][0] == 5000
    finally:
        conn.close()


def test_a_statement_that_cannot_be_templated_is_refused(tmp_path, monkeypatch):
    # values the capture cannot find in the statements (they stay in the text)
    monkeypatch.setattr(ceiling, "_literal", lambda v: "'never-there'")
    with pytest.raises(HarnessError, match="template"):
        ceiling.capture_lifecycle_sql(str(tmp_path))


def test_same_sql_completes_every_task_once_and_leaves_no_process(tmp_path):
    before = set(children_of(os.getpid()))
    sql = ceiling.capture_lifecycle_sql(str(tmp_path))
    got = ceiling.measure_same_sql(str(tmp_path), 3, 150, sql, timeout_s=60)
    assert got["error"] is None and got["verified"], got
    assert got["lifecycles"] == 150 and got["lifecycles_per_s"] > 0
    assert got["latency_ms"]["count"] == 150
    # the claim and the fulfill are timed apart, and together they are the lifecycle
    claim, fulfill, whole = got["claim_latency_ms"], got["fulfill_latency_ms"], got["latency_ms"]
    assert claim["count"] == fulfill["count"] == 150
    assert 0 < claim["mean"] < whole["mean"] and 0 < fulfill["mean"] < whole["mean"]
    assert claim["mean"] + fulfill["mean"] == pytest.approx(whole["mean"], rel=1e-6)
    assert claim["max"] <= whole["max"] and fulfill["max"] <= whole["max"]
    assert got["cpu_s"] > 0 and got["lifecycles_per_cpu_s"] > 0
    assert set(children_of(os.getpid())) <= before


def test_bench_reports_the_same_sql_ceiling_next_to_raw(tmp_path):
    res = matrix.run_bench(workers=[1, 2], strategies=["cas"], policies=["hybrid"], tasks=120,
                           ceiling_updates=500, ceiling_samples=1, timeout_s=60)
    same = res["ceiling"]["same_sql"]
    assert sorted(same["by_workers"]) == ["1", "2"] and all(
        v[0] > 0 for v in same["by_workers"].values())
    # what the bench replayed is what ferry_core runs, traced here independently
    stmts, events = _store_lifecycle(str(tmp_path / "s.db"), LeaseStore)
    assert same["poll"] + same["fulfill"] == stmts and same["trace_events"] == events
    for run in res["runs"]:
        assert run["same_sql_ratio"] == pytest.approx(
            run["lifecycles_per_s"] / same["by_workers"][str(run["workers"])][0])
        assert run["vs_1_worker"] > 0
        bare = next(q for q in same["runs"]
                    if q["workers"] == run["workers"] and q["rep"] == run["rep"])
        assert run["same_sql_p99_ms"] == bare["claim_latency_ms"]["p99"] > 0
        assert run["same_sql_p999_ms"] == bare["claim_latency_ms"]["p999"]
    line = ceiling.same_sql_line(res["ceiling"])
    assert line.startswith("same-SQL ceiling") and line.count("claim p99") == 2, line


def test_the_same_sql_line_shows_each_worker_count_s_rate_and_claim_tail():
    def run(w, rate, p99, p999):
        return {"workers": w, "lifecycles_per_s": rate,
                "claim_latency_ms": {"p99": p99, "p999": p999}}
    c = {"same_sql": {"by_workers": {"2": [6622.4, 6904.9], "1": [7712.0]},
                      "runs": [run(1, 7712.0, 0.21, 0.6), run(2, 6622.4, 1.94, 8.0),
                               run(2, 6904.9, 4.47, 35.1)]}}
    assert ceiling.same_sql_line(c).endswith(
        "lifecycles: 1w 7,712/s (claim p99 0.2, p99.9 0.6 ms), "
        "2w 6,622–6,905/s (claim p99 1.9–4.5, p99.9 8.0–35.1 ms)")
    del c["same_sql"]["runs"]  # a bench.json from before the claim tail: rates only
    assert ceiling.same_sql_line(c).endswith("lifecycles: 1w 7,712/s, 2w 6,622–6,905/s")
    assert ceiling.same_sql_line({}) is None
