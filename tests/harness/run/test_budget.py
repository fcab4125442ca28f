"""A budget is a promise, a hang is a finding, every run leaves a report.

Real ``ferry-harness fuzz`` processes against slow, blocking and hanging stores: the whole
run (search, shrink, replays, report) ends within ``budget × 1.1 + 10 s``, says why, and
leaves no process behind. Each test stays under ~40 s of CI time.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry_harness.check.checker import Violation
from ferry_harness.check.history import History
from ferry_harness.run.campaign import Campaign, CampaignConfig, Failure
from ferry_harness.run.steps import Dispatch, RaceClaim
from tests.procs import group_members

ROOT = Path(__file__).resolve().parents[3]


# ``ferry-harness`` as a user starts it, but the child stamps its own monotonic clock (one
# clock for every process on Linux) as its CLI starts: the budget is measured from there,
# not from the parent's clock, which also counts the interpreter and import start-up.
STAMP = "ferry-cli-start "
_CHILD = ("import sys, time; from ferry_harness.cli.main import main; "
          f"print({STAMP!r} + repr(time.monotonic()), file=sys.stderr, flush=True); "
          "sys.exit(main(sys.argv[1:]))")


def _start(target: str, budget: float, out: Path, *extra: str, quiet: bool = True) -> subprocess.Popen:
    cmd = [sys.executable, "-c", _CHILD, "fuzz", "--target", target, "--budget", str(budget),
           "--seed", "0", "--example-db", "none", *(["--quiet"] if quiet else []),
           "--report-dir", str(out), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _child_start(text: str) -> float:
    """The child's own start (time.monotonic() of the child, printed as its CLI began)."""
    line = next((ln for ln in text.splitlines() if ln.startswith(STAMP)), None)
    assert line, f"the child printed no start stamp: {text[-2000:]}"
    return float(line[len(STAMP):])


def _wait_for(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    """Read the child's stderr until a whole line with ``needle`` has come (what was read
    is returned)."""
    seen, deadline = "", time.monotonic() + timeout
    line = re.compile(re.escape(needle) + ".*\n")
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while not line.search(seen):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, f"no {needle!r} within {timeout}s: {seen[-2000:]}"
            if sel.select(left):
                chunk = os.read(proc.stderr.fileno(), 1 << 16).decode()
                seen += chunk
    return seen


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"ferry-harness still running after {timeout}s") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out + err, time.perf_counter() - t0


def _no_survivors(proc: subprocess.Popen) -> None:
    """Nothing of the run (workers, reader) outlives it."""
    deadline = time.time() + 3
    while group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not group_members(proc.pid), f"processes of the run outlived it: {group_members(proc.pid)}"


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def test_a_hanging_store_fails_on_time_with_a_liveness_finding(tmp_path):
    budget = 6.0
    proc = _start("tests.slow_stores:hang_claim", budget, tmp_path / "r")
    code, text, _ = _finish(proc, 60)
    wall = time.monotonic() - _child_start(text)  # from the child's own start to its exit
    assert wall <= budget * 1.1 + 10, f"{wall:.1f}s for a {budget}s budget"
    report = _report(tmp_path / "r")
    assert code == 1 and report["verdict"] == "fail", text
    v = report["violations"][0]
    assert v["invariant"] == "liveness" and "did not return within" in v["message"]
    assert (tmp_path / "r" / "timeline.html").exists() and (tmp_path / "r" / "report.md").exists()
    _no_survivors(proc)


@pytest.mark.parametrize("mode", ["stress", pytest.param("schedule", marks=pytest.mark.thorough)])
def test_a_ten_second_busy_timeout_store_keeps_the_budget(mode, tmp_path):
    budget = 5.0
    proc = _start("tests.variants.bearer_immediate:make_store", budget, tmp_path / "r",
                  "--mode", mode)
    code, text, _ = _finish(proc, 60)
    wall = time.monotonic() - _child_start(text)
    report = _report(tmp_path / "r")
    assert code == 0 and report["verdict"] == "pass", text
    assert wall <= budget * 1.1 + 10, f"{wall:.1f}s for a {budget}s budget"
    assert report["stats"]["examples"] >= 2 and report["stats"]["race_rounds"] > 0
    assert report["budget"]["time_limit_s"] == pytest.approx(budget * 1.1 + 10)


@pytest.mark.parametrize(("sig", "when"), [
    pytest.param(signal.SIGTERM, 3.0, id="SIGTERM-search", marks=pytest.mark.thorough),
    pytest.param(signal.SIGTERM, 8.0, id="SIGTERM-shrink"),
    pytest.param(signal.SIGTERM, 11.0, id="SIGTERM-replay", marks=pytest.mark.thorough),
    pytest.param(signal.SIGINT, 3.0, id="SIGINT-search", marks=pytest.mark.thorough),
    # SIGINT takes the same path as SIGTERM from there on: the default run takes the shrink
    # phase by SIGTERM (a search-phase Ctrl-C is test_cli.py's test_ctrl_c_stops_every_worker);
    # the other phases and the other signal in each run with --ferry-thorough
    pytest.param(signal.SIGINT, 8.0, id="SIGINT-shrink", marks=pytest.mark.thorough),
    pytest.param(signal.SIGINT, 11.0, id="SIGINT-replay", marks=pytest.mark.thorough),
])
def test_a_signal_in_any_phase_leaves_a_readable_report(sig, when, tmp_path):
    """hang_claim with a 4 s budget: found at ~3 s (search), shrunk until ~9 s, replayed
    until the limit; a signal in any phase ends the run with a report and exit 130."""
    budget = 4.0
    proc = _start("tests.slow_stores:hang_claim", budget, tmp_path / "r")
    try:  # the phases are timed from the child's own start, not from a loaded parent's
        seen = _wait_for(proc, STAMP, 30)
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    time.sleep(max(0.0, _child_start(seen) + when - time.monotonic()))
    if proc.poll() is None:
        proc.send_signal(sig)
    code, text, _ = _finish(proc, 40)
    text = seen + text
    report = _report(tmp_path / "r")
    assert report["verdict"] in ("fail", "interrupted"), report["verdict"]
    assert code in (130, 1), text
    if code == 130:
        assert "interrupted" in text
        assert report["interrupted"] is True  # never a pass: "interrupted", or the violation
    assert (tmp_path / "r" / "history.jsonl").exists()
    _no_survivors(proc)


def test_sigterm_stops_a_passing_run_at_once_with_exit_130(tmp_path):
    """What CI runners send before they kill: SIGTERM in the middle of a 60 s search ends
    the run within seconds, exit 130 (whatever the verdict so far), with the report of what
    ran and no worker left. Ignoring SIGTERM runs the search on (the 20 s wait fails); a
    run that forgets it was interrupted exits 0."""
    budget = 60.0
    proc = _start("ferry_core:LeaseStore", budget, tmp_path / "r", quiet=False)
    try:
        seen = _wait_for(proc, "ferry: fuzzing", 30)  # the first example has completed
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, text, _ = _finish(proc, 20)
    text = seen + text
    assert code == 130, f"exit {code} after SIGTERM: {text[-2000:]}"
    assert "interrupted; the report covers what ran" in text, text[-2000:]
    report = _report(tmp_path / "r")
    assert report["stats"]["examples"] >= 1
    assert report["stats"]["seconds"] < sent - _child_start(text) + 10, report["stats"]
    assert (tmp_path / "r" / "history.jsonl").exists() and (tmp_path / "r" / "report.md").exists()
    _no_survivors(proc)


def test_an_unreliable_stress_example_gets_a_deterministic_schedule(tmp_path):
    """A check-then-act claim with no widened window races rarely in stress mode; schedule
    mode finds the interleaving that shows it, and that replays every time."""
    cfg = CampaignConfig(target="tests.slow_stores:narrow_check_then_act", budget_s=20,
                         report_dir=str(tmp_path / "r"))
    camp = Campaign(cfg)
    camp.hard_end = time.monotonic() + 30
    steps = [Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50, max_attempts=1),
             RaceClaim(task=0, agents=("alice", "bob"))]
    failure = Failure(steps, History(), [Violation("single-winner", "two winners")])
    found = camp._find_schedule(failure)
    assert found and found.found, found
    hits, tries = map(int, found.reproduced.split("/"))
    assert hits >= 8 and tries == 10
    assert found.schedule


def test_the_pytest_gate_on_a_hanging_store_ends_quickly_naming_liveness(tmp_path):
    """The first item that hangs is a liveness failure; the rest fail at once saying so,
    instead of each waiting out the same hang."""
    budget = 10.0
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir",
         str(tmp_path), "--ferry-target", "tests.slow_stores:hang_claim", "--ferry-budget",
         str(budget)], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    assert run.returncode == 1, run.stdout[-2000:]
    assert wall <= budget * 1.1 + 10, f"{wall:.1f}s"
    assert "[liveness]" in run.stdout and "not run: the target hung in" in run.stdout
