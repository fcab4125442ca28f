"""Where each example's database file is made: on a tmpfs when one is available.

An example opens a fresh database; on a disk, its creation, its WAL and each TRUNCATE
checkpoint wait for the file system (measured: a tmpfs gave 1.05-1.37x the examples per
second of ext4, median 1.13x, ``fuzz --budget 15``, 3 interleaved pairs on a loaded
machine). A store that stalls on a real disk is a finding too, so ``disk`` (or a
directory of your own) puts the files back where the system keeps temporary files.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from ferry_harness.errors import UsageError

AUTO = "auto"  # a tmpfs if one is writable with room, else the system temp directory
DISK = "disk"  # the system temp directory (TMPDIR), whatever it is on
SHM = "/dev/shm"  # Linux's tmpfs for shared memory, the usual candidate
MIN_FREE_BYTES = 256 << 20  # a tmpfs with less room left is not used


@dataclass(frozen=True)
class DatabaseDir:
    """Where the databases go and what holds them."""

    path: str  # the parent directory of the run's database directory
    filesystem: str  # its file system type, from /proc/mounts ("tmpfs", "ext4", …; "?": unknown)

    @property
    def in_memory(self) -> bool:
        """Is it a memory file system (tmpfs, ramfs)?"""
        return self.filesystem in ("tmpfs", "ramfs")


def filesystem_of(path: str) -> str:
    """The type of the file system ``path`` is on (the longest mount point that holds it),
    or ``"?"`` where /proc/mounts cannot tell."""
    real = os.path.realpath(path)
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, parts[2]
    except OSError:
        return "?"
    return kind


def _usable(path: str) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK) and st.f_bavail * st.f_frsize >= MIN_FREE_BYTES


def database_dir(choice: str | None = None) -> DatabaseDir:
    """Resolve ``--db-dir``: ``auto`` (default) takes /dev/shm when it is a writable tmpfs
    with room, else the system temp directory; ``disk`` the system temp directory; any
    other value is a directory that must exist and be writable.

    >>> database_dir("disk").path == tempfile.gettempdir()
    True
    """
    choice = choice or AUTO
    if choice == AUTO:
        if filesystem_of(SHM) in ("tmpfs", "ramfs") and _usable(SHM):
            return DatabaseDir(SHM, filesystem_of(SHM))
        choice = DISK
    path = tempfile.gettempdir() if choice == DISK else choice
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--db-dir {choice!r}: not a writable directory (use auto, disk or "
                         "an existing directory you can write to)")
    return DatabaseDir(path, filesystem_of(path))
