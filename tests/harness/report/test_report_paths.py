"""Every path the output promises exists and replays; titles say what ran; exit codes are
distinct for "could not run" and listed in every ``--help``."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from ferry_harness.cli import scenario as scenario_cli
from ferry_harness.cli.main import main
from ferry_harness.report.schema import Report, report_from_json
from ferry_harness.tools.crash import summary_lines
from tests.procs import children_of


def test_scenario_report_is_titled_for_the_scenario_and_replays(tmp_path, capsys):
    rc = main(["scenarios", "--target", "tests.broken_stores:check_then_act", "--workers", "3",
               "--report-dir", str(tmp_path), "thundering-herd"])
    assert rc == 1
    out = capsys.readouterr().out
    d = tmp_path / "thundering-herd"
    assert f"report: {d}/report.md" in out
    md = (d / "report.md").read_text()
    assert md.splitlines()[0] == "# ferry scenario thundering-herd: FAIL"
    assert "ferry fuzz run" not in md
    assert main(["replay", str(d), "--tries", "2"]) == 1
    assert "replayed scenario thundering-herd" in capsys.readouterr().out


def test_scenarios_exit_code_separates_violation_from_could_not_run():
    r = lambda status: SimpleNamespace(status=status)  # noqa: E731
    assert scenario_cli.exit_code([r("pass"), r("skip")]) == 0
    assert scenario_cli.exit_code([r("pass"), r("error")]) == 3
    assert scenario_cli.exit_code([r("error"), r("fail")]) == 1


def _crash_report(n: int) -> Report:
    return report_from_json({"kind": "crash", "verdict": "fail", "target": "t:f",
            "config": {"workers": 2, "rounds": 1, "seed": 0, "kill_rate": 0.5, "target": "t:f"},
            "summary": {k: 0 for k in (
                "rounds", "lifecycles", "seconds", "kills", "kills_mid_op", "kills_in_write_tx",
                "kills_after_op", "kills_missed", "fulfill_kills_committed",
                "fulfill_kills_rolled_back", "tasks_lost", "duplicate_completions",
                "changed_results", "completed", "orphans", "reclaimed", "reclaimed_at_expires",
                "reclaimed_late", "never_reclaimed", "claimed_before_expiry", "integrity",
                "wal_after_checkpoint", "duplicate_tokens", "workers_replaced")}
            | {"kills_by_phase": {}},
            "violations": [{"invariant": "no-lost-task", "message": f"lost {i}"}
                           for i in range(n)]})


def test_crash_summary_names_crash_json_only_when_it_is_written(tmp_path):
    rep = _crash_report(12)
    without = "\n".join(summary_lines(rep))
    assert "see crash.json" not in without and "--report-dir DIR" in without
    assert f"(see {tmp_path / 'crash.json'})" in "\n".join(summary_lines(rep, tmp_path))


def test_crash_report_directory_replays(tmp_path, capsys):
    rc = main(["crash", "--target", "tests.broken_stores:pinned_lease", "--rounds", "40",
               "--workers", "3", "--seed", "1", "--kill-rate", "0.6", "--report-dir",
               str(tmp_path), "--quiet"])
    assert rc == 1
    out = capsys.readouterr().out
    assert f"replay: ferry-harness replay {tmp_path}" in out
    rep = json.loads((tmp_path / "crash.json").read_text())
    assert rep["replay"] == f"ferry-harness replay {tmp_path}"
    assert main(["replay", str(tmp_path), "--tries", "3"]) == 1
    assert "reproduced on run" in capsys.readouterr().out
    # against the reference store the same campaign loses nothing
    assert main(["replay", str(tmp_path), "--tries", "1", "--target",
                 "ferry_core:LeaseStore"]) == 0
    assert children_of(os.getpid()) == []


def test_replay_of_a_directory_without_a_report_says_why(tmp_path, capsys):
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "report.json" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["fuzz", "replay", "scenarios", "crash", "new-target"])
def test_every_help_lists_the_exit_codes(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit codes:" in out and "2 usage or harness error" in out, out
    if command in ("fuzz", "scenarios", "crash", "replay"):
        assert "130 interrupted" in out



def test_replay_finds_the_target_from_another_directory(tmp_path):
    """The report records where the target was imported from; replay restores it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "herestore.py").write_text(
        f"import sys\nsys.path.insert(0, {str(root)!r})\n"
        "from tests.broken_stores import check_then_act as make\n")
    run = subprocess.run([sys.executable, "-m", "ferry_harness", "fuzz", "--target", "herestore:make",
                          "--budget", "5", "--seed", "0", "--quiet", "--example-db", "none",
                          "--report-dir",
                          str(proj / "r")], cwd=proj, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    again = subprocess.run([sys.executable, "-m", "ferry_harness", "replay", str(proj / "r"),
                            "--tries", "2"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "reproduced" in again.stdout
