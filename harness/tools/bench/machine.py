"""What the numbers were measured on: CPUs, platform, SQLite, the database's file system,
the load average and the ferry version and commit (recorded in every report)."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import time
from pathlib import Path

from ferry_harness.runtime.provenance import provenance
from ferry_harness.tools.bench.records import Machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _fs_type(path: str) -> str:
    best, fstype = "", "?"
    real = os.path.realpath(path)
    for line in _read("/proc/mounts").splitlines():
        parts = line.split()
        if len(parts) >= 3 and real.startswith(parts[1]) and len(parts[1]) >= len(best):
            best, fstype = parts[1], parts[2]
    return fstype


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's total."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def machine_info(workdir: str) -> Machine:
    """The machine facts of a report (``bench.json``'s ``machine``; ``workdir`` is where
    the databases go, so its file system is named)."""
    model = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                  if line.startswith("model name")), platform.processor() or "?")
    usable = usable_cpus()
    commit = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=5, cwd=os.path.dirname(__file__)).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "cpu_count": os.cpu_count(), "cpus_usable": usable, "cpu_model": model,
        "platform": platform.platform(), "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "db_dir_fs": _fs_type(workdir),
        "loadavg_start": list(os.getloadavg()), "ferry_commit": commit,
        "ferry": provenance(),  # version, full commit, dirty: as every report.json records
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
