"""ferry-harness as users run it: exit codes, report files, replay, and clean shutdown."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry_harness.cli.main import main
from tests.procs import children_of

REPORT_FILES = ("report.json", "report.md", "history.jsonl", "timeline.html")


def test_fuzz_passes_and_writes_the_four_files(tmp_path, capsys):
    rc = main(["fuzz", "--max-examples", "8", "--seed", "0", "--report-dir", str(tmp_path),
               "--quiet"])
    assert rc == 0
    for name in REPORT_FILES:
        assert (tmp_path / name).stat().st_size > 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "pass" and report["target"] == "ferry_core:LeaseStore"
    assert {"examples", "steps", "race_rounds", "seconds"} <= set(report["stats"])
    assert report["replay"].startswith("ferry-harness replay")
    assert "PASS" in capsys.readouterr().out
    assert children_of(os.getpid()) == []


def test_violation_exit_code_and_replay(tmp_path, capsys):
    d = tmp_path / "r"
    rc = main(["fuzz", "--target", "tests.broken_stores:unconditional_lock", "--budget", "30",
               "--seed", "0", "--report-dir", str(d), "--quiet"])
    assert rc == 1
    out = capsys.readouterr().out
    assert "[lock-exclusive]" in out and "reproduced" in out
    assert main(["replay", str(d), "--tries", "3"]) == 1
    assert "reproduced 3/3" in capsys.readouterr().out
    # replaying the same steps against the correct store does not reproduce
    assert main(["replay", str(d), "--tries", "3", "--target", "ferry_core:LeaseStore"]) == 0
    assert "reproduced 0/3" in capsys.readouterr().out


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys, monkeypatch):
    assert main(["fuzz", "--target", "no_such_module:make"]) == 2
    err = capsys.readouterr().err
    assert "cannot import 'no_such_module'" in err and "Traceback" not in err
    assert main(["fuzz", "--target", "ferry_core"]) == 2
    assert "module:factory" in capsys.readouterr().err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["fuzz", "--report-dir", str(a_file / "sub"), "--max-examples", "1"]) == 2
    assert "cannot write the report directory" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "nothing")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", "--workers", "0"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["fuzz", "--jobs", "0"])
    assert exc.value.code == 2
    monkeypatch.setenv("FERRY_JOBS", "many")
    assert main(["fuzz", "--max-examples", "1", "--report-dir", str(tmp_path / "j")]) == 2
    assert "$FERRY_JOBS" in capsys.readouterr().err
    monkeypatch.delenv("FERRY_JOBS")
    assert main(["fuzz", "--target", "ferry_core:PgLeaseStore", "--jobs", "2",
                 "--max-examples", "1", "--report-dir", str(tmp_path / "pg")]) == 2
    assert "searches in one job" in capsys.readouterr().err
    assert not (tmp_path / "pg").exists()


def test_factory_that_raises_is_a_harness_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "raising_target.py").write_text(
        "def make(path, *, clock):\n    raise RuntimeError('cannot connect to the queue')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["fuzz", "--target", "raising_target:make", "--max-examples", "1",
                 "--report-dir", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "raised in a worker" in err and "cannot connect to the queue" in err
    assert children_of(os.getpid()) == []


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_stops_every_worker(tmp_path, jobs):
    """SIGINT to the whole run: exit 130 and no worker left (even re-parented ones); with
    two jobs, none of the other job's either, nor the job itself."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of the run become our children
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ferry_harness", "fuzz", "--budget", "60", "--quiet",
             "--jobs", jobs, "--report-dir", str(tmp_path)],
            cwd=Path(__file__).resolve().parents[3],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        want = 4 * int(jobs) + (int(jobs) - 1)  # every job's workers, and the other jobs

        def run_tree() -> list[int]:
            mine = children_of(proc.pid)
            return mine + [w for j in mine for w in children_of(j)]  # the other job's workers

        deadline = time.monotonic() + 20  # a loaded machine starts the other job's pool late
        while len(workers := run_tree()) < want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(workers) >= want
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted" in err
        time.sleep(0.2)
        left = [p for p in children_of(os.getpid()) if p in workers]
        for p in children_of(os.getpid()):  # reap anything re-parented to us
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
        assert left == []
    finally:
        libc.prctl(36, 0)
