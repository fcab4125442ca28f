"""The report.md and timeline.html renderers on a small synthetic history."""

from __future__ import annotations

import re

from ferry_harness.check.history import FAIL, INFO, OK, Op
from ferry_harness.report.markdown import render_markdown
from ferry_harness.report.schema import report_from_json
from ferry_harness.report.story import format_step
from ferry_harness.report.timeline import render_timeline

NOW = 1_000_000_100
TOKEN = "0f0e0d0c-0000-4000-8000-000000000001"


def _history() -> list[Op]:
    """Dispatch, then a 3-way claim race on t1 (two ok claims: the bug), a refusal, an info op."""
    base = 5_000_000
    return [
        Op(0, 0, "client", "dispatch", {"target_agent": None}, base, NOW,
           base + 50_000, OK, "t1", round=0, example=0),
        Op(1, 0, "alice", "claim", {"task_id": "t1"}, base + 100_000, NOW,
           base + 400_000, OK, {"task_id": "t1", "token": TOKEN, "attempt": 1},
           round=1, example=0),
        Op(2, 1, "bob", "claim", {"task_id": "t1"}, base + 120_000, NOW,
           base + 380_000, OK, {"task_id": "t1", "token": TOKEN[:-1] + "2", "attempt": 1},
           round=1, example=0),
        Op(3, 2, "<script>alert(1)</script>", "claim", {"task_id": "t1"}, base + 110_000, NOW,
           base + 300_000, FAIL, error="AlreadyClaimed", round=1, example=0),
        Op(4, 1, "bob", "fulfill", {"task_id": "t1", "token": TOKEN}, base + 900_000,
           NOW + 5000, None, INFO, error="WorkerCrashed", round=2, example=0),
    ]


def _report() -> dict:
    hist = _history()
    return {
        "verdict": "fail",
        "target": "ferry_core.store:Store",
        "mode": "fuzz",
        "seed": 1234,
        "workers": 3,
        "invariants": {
            "single-holder": "checked",
            "linearizable": "checked",
            "dag-order": "skipped (target lacks dag)",
        },
        "violations": [{
            "invariant": "single-holder",
            "message": "two ok claims of t1 in one round",
            "ops": [1, 2],
            "steps": [{"kind": "dispatch", "queue_ttl_ms": 1000, "exec_ttl_ms": 500},
                      {"kind": "race_claim", "task": 0, "agents": ["alice", "bob", "carol"]}],
            "history": [o.to_dict() for o in hist[1:4]],
            "reproduced": "7/10",
            "detail": {"task": "t1"},
            "schedule_trace": [
                {"worker": 0, "sql": "BEGIN IMMEDIATE", "op": 1, "switch": False},
                {"worker": 1, "sql": "SELECT status FROM tasks WHERE id = ?", "op": 2,
                 "switch": True},
                {"worker": 0, "sql": "UPDATE tasks SET status = 'claimed'", "op": 1,
                 "switch": True},
            ],
        }],
        "stats": {"examples": 12, "steps": 340, "ops": 1800, "race_rounds": 90,
                  "seconds": 4.5, "race_rounds_per_s": 20.0},
        "replay": "ferry-harness replay --seed 1234 --target ferry_core.store:Store",
        "unknown": [],
        "findings": ["fulfill after crash is indeterminate"],
    }


# --------------------------------------------------------------------------- markdown
def test_markdown_has_verdict_invariants_and_replay() -> None:
    md = render_markdown(report_from_json(_report()))
    assert md.splitlines()[0].startswith("# ") and "FAIL" in md.splitlines()[0]
    for inv in ("single-holder", "linearizable", "dag-order"):
        assert re.search(rf"^\| {re.escape(inv)} \| ", md, re.M), inv
    assert "| dag-order | skipped (target lacks dag) |" in md
    assert "reproduced 7/10" in md
    assert "```sh\nferry-harness replay --seed 1234 --target ferry_core.store:Store\n```" in md
    assert "| race_rounds_per_s | 20.00 |" in md
    assert "fulfill after crash is indeterminate" in md


def test_markdown_steps_and_per_worker_table() -> None:
    md = render_markdown(report_from_json(_report()))
    assert "2. race_claim task#0 by alice, bob, carol" in md
    assert re.search(r"^1\. dispatch ", md, re.M)
    assert "| now | worker 0 | worker 1 | worker 2 |" in md
    lines = md.splitlines()
    start = lines.index("| now | worker 0 | worker 1 | worker 2 |")
    rows = lines[start + 2:start + 5]
    # Ordered by invoke time: alice (w0) at +100µs, the refusal (w2) at +110µs, bob (w1) at +120µs.
    assert "alice claim(task_id=t1) → ok" in rows[0].split("|")[2]
    assert "AlreadyClaimed" in rows[1].split("|")[4]
    assert "bob claim(task_id=t1) → ok" in rows[2].split("|")[3]
    assert "**✗** #1" in rows[0] and "**✗** #2" in rows[2] and "✗" not in rows[1]
    # Raw HTML never reaches the markdown.
    assert "<script>" not in md and "&lt;script&gt;" in md


def test_markdown_schedule_trace_table() -> None:
    md = render_markdown(report_from_json(_report()))
    assert "SQL statements in the order they ran" in md
    lines = md.splitlines()
    head = lines.index("| # | worker 0 | worker 1 |")
    rows = lines[head + 2:head + 5]
    assert rows[0].startswith("| 1 | `BEGIN IMMEDIATE` (op #1) |")
    assert "⇢ `SELECT status FROM tasks WHERE id = ?`" in rows[1].split("|")[3]
    assert "⇢" in rows[2].split("|")[2]


def test_markdown_is_robust_to_missing_keys() -> None:
    md = render_markdown(report_from_json({}))
    assert "UNKNOWN" in md.splitlines()[0]
    md = render_markdown(report_from_json({"verdict": "pass",
                                           "violations": [{"history": [{"bogus": 1}]}],
                                           "invariants": {"a|b": "checked"}}))
    assert "PASS" in md and "a\\|b" in md


def test_format_step_kinds() -> None:
    assert format_step({"kind": "race_claim", "task": 0, "agents": ["alice", "bob"]}) \
        == "race_claim task#0 by alice, bob"
    assert format_step({"kind": "holder", "op": "fulfill", "claim": 2, "who": "forged"}) \
        == "fulfill claim#2 by forged"
    assert format_step({"kind": "clock", "claim": 1, "offset": -1}) == "clock → claim#1 expiry-1ms"
    assert format_step({"kind": "clock", "tick": 5}) == "clock +5ms"


# --------------------------------------------------------------------------- timeline
# The explaining timeline is tested in a real browser: tests/harness/report/test_timeline_browser.py.
def test_timeline_empty() -> None:
    page = render_timeline([])
    assert "<html" in page and "No operations" in page
