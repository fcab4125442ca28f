"""The report schema's JSON codec: every kind of report reads back to the same JSON."""

from __future__ import annotations

import copy
import json

import pytest

from ferry_harness.check.history import Op
from ferry_harness.report.schema import (
    FuzzStats,
    Report,
    ScheduleSearch,
    report_from_json,
    report_to_json,
)

FERRY = {"version": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567", "dirty": "no"}
OP = {"index": 1, "process": 0, "agent": "alice", "op": "claim", "args": {"task_id": "t1"},
      "invoke_ns": 100, "now": 1000, "complete_ns": 200, "type": "ok",
      "value": {"task_id": "t1", "token": "k1"}, "round": 1, "example": 3}
VIOLATION = {"invariant": "single-winner", "message": "two winners", "ops": [1, 2],
             "detail": {"object": "task:t1", "partition_ops": [0, 1, 2]},
             "protocol": "PROTOCOL.md#single-winner"}

FUZZ = {
    "kind": "fuzz", "verdict": "fail", "ferry": FERRY, "target": "tests.broken_stores:x",
    "target_path": None, "mode": "stress", "seed": 0, "workers": 4, "faults": ["kill"],
    "capabilities": ["claim", "dispatch"], "invariants": {"single-winner": "checked (3 evaluations)"},
    "violations": [{**VIOLATION,
                    "steps": [{"kind": "race_claim", "task": 0, "agents": ["alice", "bob"]}],
                    "history": [OP],
                    "schedule": "0.1", "schedule_steps": 2,
                    "schedule_trace": [{"worker": 0, "sql": "BEGIN", "op": 1, "switch": False}],
                    "reproduced": "3/10", "replays_stopped_at_budget": False,
                    "schedule_mode": {"found": True, "steps": [{"kind": "race_claim"}],
                                      "schedule": "0.1", "reproduced": "10/10", "tried": 2,
                                      "replay": "ferry-harness replay DIR --mode schedule"}}],
    "stats": {"examples": 3, "shrink_runs": 4, "replay_runs": 10, "steps": 40, "ops": 120,
              "race_rounds": 9, "seconds": 1.5, "race_rounds_per_s": 6.0, "pool_start_s": 0.01,
              "first_example_s": 0.2, "steady_example_s": None, "workers_replaced": 1,
              "refusals": {"AlreadyClaimed": 2}, "coverage": {"ops": {"claim": 5},
                                                             "steps": {"race_claim": 2}},
              "faults": {"kill": 1}, "stalls": [{"op": "checkpoint", "seconds": 1.2}],
              "examples_per_s": 2.0, "ops_per_s": 80.0, "jobs": 2, "setup_s": 0.1,
              "rounds_s": 0.9,
              "checking_s": 0.2, "other_s": 0.3,
              "database_dir": "/dev/shm", "database_filesystem": "tmpfs",
              "database_template_copies": 2,
              "open_tx_local": 0, "open_tx_server": 0,
              "race_overlap": [{"racers": 2, "rounds": 9, "overlapped": 7, "gated": 9}]},
    "budget": {"budget_s": 8.0, "time_limit_s": 18.8, "stopped_at_limit": False},
    "unknown": [], "findings": ["checkpoint ran 1.2s"],
    "example_database": {"replayed": 0, "failure_from_database": False},
    "discovery": {"steps": 5, "seconds_to_detect": 0.4, "examples_until_found": 3},
    "replay": "ferry-harness replay DIR",
}
SCENARIO = {
    "kind": "scenario", "verdict": "fail", "ferry": FERRY, "target": "x:y", "mode": "scenario herd",
    "workers": 4, "scenario": {"name": "herd", "invariant": "single-winner", "description": "d",
                               "source": "PROTOCOL.md#single-winner", "status": "fail",
                               "explanation": "two won"},
    "invariants": {"single-winner": "checked"}, "violations": [{**VIOLATION, "steps": [],
                                                               "history": [OP]}],
    "stats": {"rounds": 1, "ops": 5, "seconds": 0.1, "refusals": {}}, "unknown": [],
    "findings": [], "script": ["t=1000 dispatch"], "replay": "ferry-harness scenarios herd",
}
CHECK = {
    "kind": "check", "verdict": "pass", "ferry": FERRY, "target": "recorded history h.jsonl",
    "mode": "check", "capabilities": ["claim"], "capabilities_from": "--target-caps",
    "invariants": {"single-winner": "checked"}, "violations": [],
    "stats": {"ops": 10, "seconds": 0.0, "ops_per_s": None, "refusals": {}}, "unknown": [],
    "findings": [], "replay": "ferry-harness check h.jsonl",
}
CRASH = {
    "kind": "crash", "verdict": "fail", "ferry": FERRY, "target": "ferry_core:LeaseStore",
    "config": {"target": "ferry_core:LeaseStore", "rounds": 10, "workers": 4, "seed": 0,
               "kill_rate": 0.35},
    "summary": {"rounds": 10, "kills": 3, "kills_by_phase": {"claim": 2}, "integrity": "ok"},
    "violations": [VIOLATION], "replay": "ferry-harness replay DIR",
    "command": "ferry-harness crash --target ferry_core:LeaseStore --rounds 10",
}


@pytest.mark.parametrize("data", [FUZZ, SCENARIO, CHECK, CRASH], ids=lambda d: d["kind"])
def test_every_kind_reads_back_to_the_same_json(data: dict) -> None:
    report = report_from_json(copy.deepcopy(data))
    assert report.kind == data["kind"]
    assert json.loads(json.dumps(report_to_json(report))) == data
    # the key order users see stays the order the report was written in
    assert list(report_to_json(report)) == list(data)


@pytest.mark.parametrize("data", [FUZZ, SCENARIO, CHECK, CRASH], ids=lambda d: d["kind"])
def test_reports_without_a_kind_are_recognised(data: dict) -> None:
    old = {k: v for k, v in data.items() if k != "kind"}
    assert report_from_json(old).kind == data["kind"]


def test_the_typed_report_holds_typed_parts() -> None:
    report = report_from_json(FUZZ)
    assert isinstance(report.stats, FuzzStats) and report.stats.coverage.ops == {"claim": 5}
    v = report.violations[0]
    assert v.history == (Op.from_dict(OP),) and v.protocol == "PROTOCOL.md#single-winner"
    assert isinstance(v.schedule_mode, ScheduleSearch) and v.schedule_mode.tried == 2
    assert v.schedule_trace[0].sql == "BEGIN"


def test_malformed_reports_still_read() -> None:
    assert report_from_json(None) == Report(kind="fuzz", verdict="unknown")
    report = report_from_json({"verdict": 3, "violations": [1, {"ops": ["x", 2],
                                                                "history": [{"bogus": 1}]}],
                               "stats": {"examples": {"no": 1}}, "findings": "one line"})
    assert report.verdict == "unknown" and report.findings == ("one line",)
    assert report.violations[0].ops == (2,) and report.violations[0].history == ()
    assert report.stats == FuzzStats()
