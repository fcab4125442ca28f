"""--db-dir: the examples' databases go on a tmpfs when there is one, on the disk when asked,
and the report says which."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from ferry_harness.errors import UsageError
from ferry_harness.run.campaign import Campaign, CampaignConfig
from ferry_harness.runtime.dbdir import SHM, database_dir, filesystem_of

HAS_SHM = filesystem_of(SHM) == "tmpfs"


@pytest.mark.skipif(not HAS_SHM, reason="no tmpfs at /dev/shm on this machine")
def test_auto_takes_the_tmpfs():
    d = database_dir()
    assert d.path == SHM and d.in_memory


def test_disk_is_the_system_temp_directory():
    d = database_dir("disk")
    assert d.path == tempfile.gettempdir()
    assert d.filesystem == filesystem_of(tempfile.gettempdir())


def test_a_directory_that_cannot_hold_databases_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="not a writable directory"):
        database_dir(str(tmp_path / "missing"))
    result = subprocess.run([sys.executable, "-m", "ferry_harness", "fuzz", "--max-examples", "1",
                             "--db-dir", str(tmp_path / "missing"), "--report-dir",
                             str(tmp_path / "r"), "--quiet"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert "--db-dir" in result.stderr


@pytest.mark.parametrize("where", ["chosen", "auto"])
def test_the_report_says_where_the_databases_were(where, tmp_path):
    own = tmp_path / "dbs"
    own.mkdir()
    cfg = CampaignConfig(max_examples=1, budget_s=20, report_dir=str(tmp_path / "r"),
                         db_dir=str(own) if where == "chosen" else None)
    stats = Campaign(cfg).run().report.stats
    expected = database_dir(cfg.db_dir)
    assert (stats.database_dir, stats.database_filesystem) == (expected.path, expected.filesystem)
    if where == "chosen":
        assert stats.database_dir == str(own) and os.listdir(own) == []  # removed afterwards


def test_the_stats_say_where_the_time_went(tmp_path):
    stats = Campaign(CampaignConfig(max_examples=2, budget_s=20,
                                    report_dir=str(tmp_path / "r"))).run().report.stats
    parts = (stats.setup_s, stats.rounds_s, stats.checking_s, stats.other_s)
    assert all(p >= 0 for p in parts) and stats.rounds_s > 0 and stats.setup_s > 0
    assert abs(sum(parts) - stats.seconds) < 0.01 + 1e-3 * len(parts), (parts, stats.seconds)
    # (from the unrounded seconds: within the rounding of seconds to 1 ms)
    assert stats.examples_per_s == pytest.approx(stats.examples / stats.seconds, rel=0.01)
    assert stats.ops_per_s == pytest.approx(stats.ops / stats.seconds, rel=0.01)
