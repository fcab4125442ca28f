"""Child-process accounting for tests that race processes: none may outlive its test."""

from __future__ import annotations

import os
import time

import multiprocess


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) direct children of ``pid``, from /proc (no psutil)."""
    out = []
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _stat(pid: str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid`` (a run started with
    ``start_new_session``: the run itself and everything it forked)."""
    out = []
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields and int(fields[3]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def assert_no_children_left(before: set[int]) -> None:
    """Within 5 s, this process has no children but those in ``before`` (a bench or a
    run must reap every worker it started, even on failure)."""
    deadline = time.monotonic() + 5
    while True:
        left = set(children_of(os.getpid())) - before
        if not left and not multiprocess.active_children():
            return
        assert time.monotonic() < deadline, f"processes left behind: {sorted(left)}"
        time.sleep(0.05)
