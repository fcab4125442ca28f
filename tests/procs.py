"""Child-process accounting for tests that race processes: none may outlive its test."""

from __future__ import annotations

import os


def children_of(pid: int) -> list[int]:
    """Live (non-zombie) direct children of ``pid``, from /proc (no psutil)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out
