"""The gate's items are ordinary collected pytest items: counted in the header, listed by
``--co``, selected by ``-k``, stopped by ``-x``, rerun by ``--lf``, distributed by ``-n``;
both from ``--ferry-target`` and from a ``ferry_gate`` in a test module."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ferry_scenarios import SCENARIOS
from tests.gate_sources import LOCK_BROKEN, OK_STORE

pytest_plugins = ["pytester"]

N_SCENARIOS = len(SCENARIOS)



USER_TEST = "def test_mine():\n    assert 1 + 1 == 2\n"
GATE_FILE = 'from ferry_harness.cli.pytest_plugin import ferry_gate\n\ngate = ferry_gate("ok:make")\n'


ROOT = Path(__file__).resolve().parents[3]  # the subprocesses import this checkout's ferry


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    pytester.makepyfile(ok=OK_STORE, broken=LOCK_BROKEN, test_user=USER_TEST)
    pytester.makeini("[pytest]\n")  # cacheprovider on: --lf needs it
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("--ferry-budget", "3", "--ferry-workers", "3",
                                        "--ferry-seed", "0", "-p", "no:randomly", *args)


def collected(result: pytest.RunResult) -> str:
    return next(line for line in result.outlines if line.startswith("collected "))


def test_collect_only_counts_every_item(project):
    result = run(project, "--ferry-target", "ok:make", "--co", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert ids == ["test_user.py::test_mine",
                   *[f"ferry::scenario/{name}" for name in SCENARIOS], "ferry::fuzz"]
    assert f"{N_SCENARIOS + 2} tests collected" in result.stdout.str()
    header = run(project, "--ferry-target", "ok:make", "--co")
    assert collected(header) == f"collected {N_SCENARIOS + 2} items"


def test_k_selects_ferry_items_by_name(project):
    result = run(project, "--ferry-target", "ok:make", "--co", "-k", "thundering or fuzz")
    total = N_SCENARIOS + 2
    assert collected(result) == f"collected {total} items / {total - 2} deselected / 2 selected"
    assert f"2/{total} tests collected ({total - 2} deselected)" in result.stdout.str()


def test_gate_declared_in_a_test_module(project):
    project.makepyfile(test_gate=GATE_FILE)
    result = run(project, "--co", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert "test_gate.py::gate::fuzz" in ids
    assert "test_gate.py::gate::scenario/thundering-herd" in ids
    assert f"{N_SCENARIOS + 2} tests collected" in result.stdout.str()


def test_x_stops_at_the_first_failing_ferry_item(project):
    result = run(project, "--ferry-target", "broken:make", "-x",
                 "-k", "daemon-lock-takeover or double-finish")
    result.assert_outcomes(failed=1)
    assert "stopping after 1 failures" in result.stdout.str()
    assert "[lock-exclusive]" in result.stdout.str()


def test_lf_reruns_only_the_failed_ferry_item(project):
    args = ("--ferry-target", "broken:make", "-k", "daemon-lock-takeover or double-finish")
    run(project, *args).assert_outcomes(failed=1, passed=1)
    again = run(project, *args, "--lf")
    again.assert_outcomes(failed=1, passed=0)
    assert collected(again) == f"collected {N_SCENARIOS + 2} items / {N_SCENARIOS + 1} " \
        "deselected / 1 selected"
    assert "run-last-failure: rerun previous 1 failure" in again.stdout.str()


def test_xdist_distributes_the_selected_items(project):
    result = run(project, "--ferry-target", "ok:make", "-n", "2",
                 "-k", "thundering or double-finish or mine")
    assert re.search(r"2 workers \[3 items\]", result.stdout.str()), result.stdout.str()
    result.assert_outcomes(passed=3)
