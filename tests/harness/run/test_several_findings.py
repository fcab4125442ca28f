"""Several findings in one run (PROTOCOL.md#several-findings), an interrupted run, and the
best reproduction.

- A robustness finding (an untyped error on a hostile argument) never ends the search: a
  store that also has a check-then-act claim is reported with both, ``single-winner``
  first, each with its own minimal example, within the budget promise.
- Ctrl-C / SIGTERM before a violation is ``interrupted``, never ``pass``; after one, the
  violation stands (``fail``, marked interrupted).
- When schedule mode replays an example more often than stress did, every count shown is
  the best one, naming its mode; a failure replayed from the example database says what
  was replayed and what it showed.

Budgets are a few seconds each.
"""

from __future__ import annotations

import json
import time
from typing import ClassVar

from hypothesis.database import InMemoryExampleDatabase

from ferry_harness.check.checker import Checker, Violation
from ferry_harness.check.history import History
from ferry_harness.errors import ExitCode
from ferry_harness.report.markdown import render_markdown
from ferry_harness.report.schema import ScheduleSearch, report_from_json
from ferry_harness.report.story import build_story, exit_reason, gate_message
from ferry_harness.report.timeline import render_timeline
from ferry_harness.run.campaign import (
    Campaign,
    CampaignConfig,
    Failure,
    Finding,
    public_steps,
    violation_report,
    write_report,
)
from ferry_harness.run.steps import Dispatch, Hostile, RaceClaim
from tests.histories import Recorder

COMPOSED = "tests.composed_stores:untyped_and_racy"


def _saved(db: InMemoryExampleDatabase, target: str, steps: list, invariant: str) -> None:
    """An example an earlier run saved (the format Campaign._save writes)."""
    blob = json.dumps({"steps": public_steps(steps), "invariant": invariant},
                      sort_keys=True).encode()
    db.save(f"ferry:{target}:stress".encode(), blob)


# --------------------------------------------------------------------------- A
def test_a_robustness_finding_does_not_hide_a_race(tmp_path):
    """The typed-errors finding comes first (replayed from the example database, as a
    store's first gate run leaves it), and the search goes on to find the race."""
    db = InMemoryExampleDatabase()
    _saved(db, COMPOSED, [Hostile(case="dispatch-huge-queue-ttl")], "typed-errors")
    budget = 10.0  # the search ends once the race is found (~1 s); the rest is headroom
    cfg = CampaignConfig(target=COMPOSED, budget_s=budget, seed=5, database=db,
                         report_dir=str(tmp_path / "r"), shrink_budget_s=3.0)
    t0 = time.perf_counter()
    outcome = Campaign(cfg).run()
    write_report(outcome)
    wall = time.perf_counter() - t0
    assert wall <= budget * 1.1 + 10, f"{wall:.1f}s for a {budget}s budget"

    report = outcome.report
    assert outcome.verdict == "fail"
    found = [f.invariant for f in report.invariants_found]
    assert found == ["single-winner", "typed-errors"], found
    assert report.violations[0].invariant == "single-winner"
    assert [f.kind for f in report.invariants_found] == ["safety", "robustness"]
    assert report.invariants_found[1].from_example_database
    for f in report.invariants_found:  # each its own minimal example, shrunk and replayed
        v = report.violations[f.violation]
        assert v.invariant == f.invariant and v.steps
        hits, tries = map(int, v.reproduced.split("/"))
        assert hits >= 1 and tries >= 1
    steps = report.violations[report.invariants_found[1].violation].steps
    assert [s["kind"] for s in steps] == ["hostile"], steps
    # the first/primary keys describe the top-ranked safety finding
    assert report.discovery is not None
    assert report.example_database.failure_from_database is False

    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["violations"][0]["invariant"] == "single-winner"
    assert [f["invariant"] for f in data["invariants_found"]] == found
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.splitlines()[0] == \
        "# ferry fuzz run: FAIL: single-winner, then typed-errors (robustness)"
    assert "Also found: `typed-errors`" in md
    html = (tmp_path / "r" / "timeline.html").read_text()
    assert "Also found" in html and "typed-errors" in html
    invariant, message = gate_message(report)
    assert invariant == "single-winner"
    assert "also found, in rank order: [typed-errors]" in message
    code, why = exit_reason(report)
    assert code == ExitCode.VIOLATION
    assert why.index("single-winner") < why.index("typed-errors")


def test_a_robustness_only_store_is_searched_to_the_end_of_its_budget(tmp_path):
    """Before: one untyped error ended the campaign after one step. Now the search goes
    on (for safety violations) until the budget, and still reports typed-errors."""
    budget = 4.0
    # seed 4 draws a hostile step within its first examples (0.2 s alone); seed 0 took 2.5 s
    # once the lock step drew one value more, too close to the budget on a loaded machine
    cfg = CampaignConfig(target="tests.broken_stores:untyped_arguments", budget_s=budget,
                         seed=4, report_dir=str(tmp_path / "r"), shrink_budget_s=2.0)
    outcome = Campaign(cfg).run()
    report = outcome.report
    assert outcome.verdict == "fail"
    assert [f.invariant for f in report.invariants_found] == ["typed-errors"]
    assert report.stats.examples > report.discovery.examples_until_found + 1, report.stats
    assert report.stats.seconds >= budget
    code, why = exit_reason(report)
    assert code == ExitCode.VIOLATION and "found none" in why


class _Fake:
    """A check that reports one fixed violation on the first op it is handed."""

    ids: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[tuple[str, ...]] = ()
    sees_invalid_args = True

    def __init__(self, invariant: str) -> None:
        self.name = f"fake-{invariant}"
        self.invariant = invariant

    def check(self, run, fresh):
        return [Violation(self.invariant, "x", ops=[fresh[0].index])] if fresh else []


def test_the_checker_ranks_safety_first():
    """What ``ferry-harness check`` and every report read: safety, then liveness, then
    robustness, whatever order the checks ran in."""
    rec = Recorder()
    rec.dispatch()
    history = rec.history
    order = ["typed-errors", "refusal-class", "liveness", "linearizable", "single-winner"]
    checker = Checker(invariants=[_Fake(i) for i in order])
    got = [v.invariant for v in checker.check(history)]
    assert got == ["single-winner", "linearizable", "liveness", "typed-errors",
                   "refusal-class"], got


# --------------------------------------------------------------------------- B
def test_an_interrupted_run_without_a_violation_is_not_a_pass(tmp_path):
    cfg = CampaignConfig(target="ferry_core:LeaseStore", budget_s=20, seed=1,
                         report_dir=str(tmp_path / "r"))
    camp = Campaign(cfg, progress=lambda s: camp.request_stop() if s["examples"] >= 1 else None)
    t0 = time.perf_counter()
    outcome = camp.run()
    write_report(outcome)
    assert time.perf_counter() - t0 < 15, "the stop was not taken"
    assert outcome.verdict == "interrupted"
    data = json.loads((tmp_path / "r" / "report.json").read_text())
    assert data["verdict"] == "interrupted" and data["interrupted"] is True
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.splitlines()[0] == "# ferry fuzz run: INTERRUPTED" and "PASS" not in md
    html = (tmp_path / "r" / "timeline.html").read_text()
    assert "INTERRUPTED" in html and ">PASS<" not in html
    assert exit_reason(outcome.report)[0] == ExitCode.INTERRUPTED


def test_an_interrupted_run_keeps_the_violation_it_found(tmp_path):
    cfg = CampaignConfig(target="tests.broken_stores:check_then_act", budget_s=20, seed=0,
                         report_dir=str(tmp_path / "r"))
    camp = Campaign(cfg, progress=lambda s: camp.request_stop()
                    if s["phase"].startswith("shrinking") else None)
    outcome = camp.run()
    write_report(outcome)
    assert outcome.verdict == "fail" and outcome.report.interrupted is True
    assert outcome.report.violations[0].invariant == "single-winner"
    md = (tmp_path / "r" / "report.md").read_text()
    assert md.splitlines()[0] == "# ferry fuzz run: FAIL (interrupted): single-winner"
    code, why = exit_reason(outcome.report)
    assert code == ExitCode.INTERRUPTED and "single-winner" in why


# --------------------------------------------------------------------------- C
def _schedule_report() -> dict:
    """What a stress run whose example replayed 2/10 and 10/10 in schedule mode wrote
    before the best reproduction had a field of its own."""
    return {"kind": "fuzz", "verdict": "fail", "target": "t:f", "mode": "stress",
            "violations": [{"invariant": "single-winner", "message": "two winners",
                            "steps": [{"kind": "dispatch"}], "reproduced": "2/10",
                            "schedule_mode": {"found": True, "reproduced": "10/10",
                                              "schedule": "1.1", "tried": 1}}]}


def test_the_best_reproduction_is_shown_everywhere():
    said = "10/10 in schedule mode (2/10 in stress)"
    report = report_from_json(_schedule_report())
    assert f"reproduced {said}" in render_markdown(report)
    assert "reproduced 2/10\n" not in render_markdown(report)
    assert build_story(report).reproduced == said
    assert f"reproduced <b>{said}</b>" in render_timeline([], report=report)
    assert f"reproduced {said}" in gate_message(report)[1]


def test_the_campaign_records_the_best_reproduction_and_its_mode():
    failure = Failure([Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50,
                                max_attempts=1), RaceClaim(task=0, agents=("a", "b"))],
                      History(), [Violation("single-winner", "two winners")])
    found = ScheduleSearch(found=True, reproduced="10/10", schedule="1.1", tried=3)
    v = violation_report(failure.violations[0], failure, (2, 10), mode="stress",
                         schedule=found)
    assert (v.reproduced, v.best_reproduced, v.best_mode) == ("2/10", "10/10", "schedule")
    assert v.reproduction == "10/10 in schedule mode (2/10 in stress)"
    # the campaign hands each finding's schedule-mode re-run to its first entry
    camp = Campaign(CampaignConfig(target="t:f"))
    entries, found_list = camp._entries(
        [Finding("single-winner", failure, failure, (2, 10), schedule=found)], "stress")
    assert entries[0].schedule_mode == found and entries[0].best_mode == "schedule"
    assert found_list[0].reproduced == "10/10 in schedule mode (2/10 in stress)"
    worse = ScheduleSearch(found=True, reproduced="3/10", schedule="1.1", tried=3)
    v = violation_report(failure.violations[0], failure, (9, 10), mode="stress", schedule=worse)
    assert (v.best_reproduced, v.best_mode) == ("9/10", "stress")
    assert v.reproduction == "9/10 in stress (3/10 in schedule mode)"


def test_a_replay_from_the_example_database_says_what_it_replayed(tmp_path):
    db = InMemoryExampleDatabase()
    target = "tests.broken_stores:check_then_act"
    _saved(db, target, [Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50,
                                 max_attempts=1), RaceClaim(task=0, agents=("a", "b", "c"))],
           "single-winner")
    cfg = CampaignConfig(target=target, budget_s=3, seed=0, database=db,
                         report_dir=str(tmp_path / "r"), shrink_budget_s=2.0)
    outcome = Campaign(cfg).run()
    use = outcome.report.example_database
    assert use.failure_from_database and use.saved_steps == 2
    assert use.saved_invariant == "single-winner" and use.shown == "single-winner"
    assert use.tries == 3 and 1 <= use.failed_on_try <= 3
    message = gate_message(outcome.report)[1]
    assert ("replayed first from the example database: a saved example (2 steps, saved as "
            f"single-winner) failed again [single-winner] on try {use.failed_on_try} of 3; "
            "the counts are of its minimal example, replayed afresh") in message
    assert "reproduced " in message


def test_the_pytest_gate_names_every_finding_safety_first(tmp_path):
    """Through the gate: the failing item is the race, and its message also names the
    untyped error (first replayed from the item's example database)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from hypothesis.database import DirectoryBasedExampleDatabase

    root = Path(__file__).resolve().parents[3]
    reports = tmp_path / "reports"
    _saved(DirectoryBasedExampleDatabase(str(reports / "fuzz" / "examples")), COMPOSED,
           [Hostile(case="dispatch-huge-queue-ttl")], "typed-errors")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
         "--rootdir", str(tmp_path), "--ferry-target", COMPOSED, "--ferry-no-scenarios",
         "--ferry-budget", "12", "--ferry-report-dir", str(reports),
         "--hypothesis-seed", "5"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)})
    assert run.returncode == 1, run.stdout[-2000:]
    out = run.stdout
    assert "[single-winner]" in out and "also found, in rank order: [typed-errors]" in out, \
        out[-2000:]
    assert out.index("[single-winner]") < out.index("[typed-errors]")
