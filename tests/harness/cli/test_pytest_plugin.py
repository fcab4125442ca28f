"""The pytest plugin, in a throwaway project: the gate passes on a correct store, fails on
a broken one naming the invariant (with and without xdist), JUnit carries the invariant and
report path, and a failure found once is replayed first by the next run."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.gate_sources import LOCK_BROKEN, OK_STORE

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]  # the subprocesses import this checkout's ferry



USER_TEST = """
def test_one_winner(ferry_race, ferry_workers, ferry_history, ferry_check):
    from ferry_harness import PlannedCall
    [d] = ferry_workers.run([PlannedCall(slot=0, op="dispatch", args={"target_agent": None},
                                         agent="client")], ferry_history)
    ops = ferry_race("claim", {"task_id": d.value}, agents=["a", "b", "c"])
    assert sum(1 for o in ops if o.value) == 1
    ferry_check(ferry_history)
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    pytester.makepyfile(ok=OK_STORE, broken=LOCK_BROKEN, test_user=USER_TEST)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester


def run(project: pytest.Pytester, *args: str):
    return project.runpytest_subprocess("-q", "--ferry-budget", "3", "--ferry-workers", "3",
                                        "--ferry-seed", "0", "-p", "no:randomly", *args)


@pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.thorough)],
                         ids=["serial", "xdist"])  # (xdist: test_gate_collection.py)
def test_gate_passes_on_a_correct_store(project, xdist):
    result = run(project, "--ferry-target", "ok:make", *xdist)
    result.assert_outcomes(passed=13)  # 11 scenarios + the fuzz campaign + the user's test
    assert result.ret == 0


@pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.thorough)],
                         ids=["serial", "xdist"])  # (xdist: test_gate_collection.py)
def test_gate_fails_on_a_broken_store_naming_the_invariant(project, xdist):
    junit = project.path / "junit.xml"
    result = run(project, "--ferry-target", "broken:make", f"--junitxml={junit}", *xdist)
    assert result.ret == 1
    out = result.stdout.str()
    assert "[lock-exclusive]" in out and "report:" in out
    failures = [tc for tc in ET.parse(junit).iter("testcase") if tc.find("failure") is not None]
    names = {tc.get("name") for tc in failures}
    assert "scenario/daemon-lock-takeover" in names and "fuzz" in names
    for tc in failures:
        text = tc.find("failure").get("message", "") + (tc.find("failure").text or "")
        assert "[lock-exclusive]" in text and "ferry-reports" in text
    latest = (project.path / "ferry-reports" / "latest").resolve()  # this run's directory
    report_dirs = list(latest.rglob("report.json"))
    assert report_dirs, "each failing item writes its report directory"
    if xdist:  # every xdist worker writes under its own root
        assert all(p.relative_to(latest).parts[0].startswith("gw") for p in report_dirs)


def test_failure_is_replayed_first_by_the_next_run(project):
    args = ("--ferry-target", "broken:make", "--ferry-no-scenarios", "-k", "fuzz")
    first = run(project, *args)
    assert first.ret == 1
    latest = project.path / "ferry-reports" / "latest"
    report = json.loads((latest / "fuzz" / "report.json").read_text())
    assert report["example_database"]["failure_from_database"] is False
    # kept beside the per-run directories, so the next run (a new directory) finds it
    assert list((project.path / "ferry-reports" / "examples").rglob("*"))
    second = run(project, *args)
    assert second.ret == 1
    assert "replayed first from the example database" in second.stdout.str()
    report = json.loads((latest / "fuzz" / "report.json").read_text())
    assert report["example_database"]["failure_from_database"] is True


def test_no_items_without_the_option(project):
    result = run(project)
    result.assert_outcomes(passed=1)  # only the user's own test, using the fixtures
