"""The pytest plugin in a user's first hour (issue 25): a bad option or target is a usage
error (exit 4, one line), fixtures have their documented defaults, settings come from the
ini file with the command line overriding, the seed is random by default and printed, a
running fuzz item shows progress, the session ends with a pass summary, and each session
writes its own report directory with ``latest`` linked to it.

The subprocesses import the ferry of this checkout (``PYTHONPATH``), not whichever one is
installed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.gate_sources import OK_STORE

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[3]

RAISING = "def make(path, *, clock):\n    raise RuntimeError('cannot connect to the queue')\n"

USER_TEST = """
def test_default_workers(ferry_race, ferry_workers, ferry_history):
    from ferry_harness import PlannedCall
    assert ferry_workers.size == 4  # README: --ferry-workers defaults to 4
    [d] = ferry_workers.run([PlannedCall(slot=0, op="dispatch", args={"target_agent": None},
                                         agent="client")], ferry_history)
    ops = ferry_race("claim", {"task_id": d.value}, agents=["a", "b", "c"])
    assert sum(1 for o in ops if o.value) == 1
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    pytester.makepyfile(ok=OK_STORE, raising=RAISING, test_user=USER_TEST)
    return pytester


def _ini(project: pytest.Pytester, **values: str) -> None:
    lines = "".join(f"{k} = {v}\n" for k, v in values.items())
    project.makeini(f"[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n{lines}")


USAGE = [
    (["--ferry-target", "no_such_module:make"], "cannot import 'no_such_module'"),
    (["--ferry-target", "ok"], "module:factory"),
    (["--ferry-target", "raising:make"], "cannot connect to the queue"),
    (["--ferry-budget", "0"], "--ferry-budget"),
    (["--ferry-budget", "-3"], "--ferry-budget"),
    (["--ferry-budget", "nan"], "--ferry-budget"),
    (["--ferry-budget", "inf"], "--ferry-budget"),
    (["--ferry-workers", "1"], "at least 2"),
    (["--ferry-mode", "fast"], "stress or schedule"),
    (["--ferry-seed", "-1"], "--ferry-seed"),
    (["--ferry-example-db", "ftp://host/db"], "unknown example database"),
]


@pytest.mark.parametrize("args,says", USAGE, ids=[" ".join(a) for a, _ in USAGE])
def test_a_bad_option_is_a_usage_error(project, args, says):
    _ini(project)
    result = project.runpytest_inprocess("--ferry-target", "ok:make", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = [line for line in result.stderr.lines if line.strip()]
    assert len(err) == 1 and says in err[0] and "Traceback" not in result.stderr.str(), err
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_a_bad_ini_value_is_a_usage_error_naming_the_ini_key(project):
    _ini(project, ferry_target="ok:make", ferry_budget="nan")
    result = project.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ferry_budget (ini)" in result.stderr.str()


def test_a_gate_with_a_bad_target_is_one_collection_error(project):
    _ini(project)
    project.makepyfile(test_gate="from ferry_harness import ferry_gate\n"
                       "test_gate = ferry_gate('no_such_module:make')\n")
    result = project.runpytest_subprocess("test_gate.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # errors during collection
    out = result.stdout.str()
    assert "cannot import 'no_such_module'" in out and "Traceback" not in out
    assert len(out.splitlines()) < 30, out


def test_ini_settings_random_seed_progress_summary_and_run_directories(project):
    """One session from the ini file alone (no --ferry-workers: the fixtures default to 4),
    then one where the command line overrides it."""
    _ini(project, ferry_target="ok:make", ferry_budget="3", ferry_no_scenarios="true")
    first = project.runpytest_subprocess("--hypothesis-show-statistics")
    out = first.stdout.str()
    assert first.ret == 0, out
    first.assert_outcomes(passed=2)  # the user's test + ferry::fuzz (no scenarios: ini)
    seed = int(re.search(r"ferry: target ok:make, seed (\d+) \(random", out).group(1))
    assert re.search(r"ferry: ferry::fuzz \w+ \d+/3s examples=\d+", out), "no progress line"
    summary = re.search(r"ferry::fuzz: PASS — (\d+) examples, (\d+) race rounds.*"
                        r"invariants (\d+) checked", out)
    assert summary and int(summary.group(1)) > 0, out
    assert f"seed {seed} was drawn at random" in out
    # --hypothesis-show-statistics: ferry's numbers, not an empty section
    stats = out.split("Hypothesis Statistics", 1)[1]
    assert "ferry::fuzz" in stats and "examples" in stats
    latest = project.path / "ferry-reports" / "latest"
    assert latest.is_symlink() and re.fullmatch(rf"run-\d{{8}}T\d{{6}}Z-seed{seed}",
                                                os.readlink(latest))
    report = json.loads((latest / "fuzz" / "report.json").read_text())
    assert report["seed"] == seed and report["budget"]["budget_s"] == 3

    _ini(project, ferry_target="ok:make", ferry_budget="6", ferry_no_scenarios="true",
         ferry_seed="5")
    second = project.runpytest_subprocess("-q", "--ferry-seed", "7", "--ferry-budget", "1",
                                          "-k", "fuzz")
    assert second.ret == 0, second.stdout.str()
    assert "ferry::fuzz" not in second.stdout.str().split("= ferry =")[0], "progress under -q"
    runs = sorted(p.name for p in (project.path / "ferry-reports").glob("run-*"))
    assert len(runs) == 2 and runs[1].endswith("-seed7") and os.readlink(latest) == runs[1]
    report = json.loads((latest / "fuzz" / "report.json").read_text())
    assert report["seed"] == 7 and report["budget"]["budget_s"] == 1
