"""Permission checks as an unprivileged user, also when the suite runs as root (CI does).

Root reads and writes through any mode bits, so ``chmod`` alone proves nothing there. The
honest equivalent is to *be* an unprivileged user: :func:`unprivileged` runs the check in a
forked child that drops to uid/gid 65534 (``nobody``) first (it forks, it does not exec:
the interpreter under ``/root`` is not readable by nobody). Not running as root, the check
runs in this process. Where root cannot give up its privileges (no setuid in a container)
the test is skipped, saying so; it is never passed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

NOBODY = 65534


def as_nobody(fn: Callable[[], Any]) -> tuple[bool, Any]:
    """``fn()`` in a forked child running as uid/gid 65534: (privileges dropped, its JSON
    result or ``"ErrorClass: message"`` if it raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        try:
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            except OSError as exc:
                out: Any = [False, f"{type(exc).__name__}: {exc}"]
            else:
                try:
                    out = [True, fn()]
                except BaseException as exc:  # the outcome under test, whatever it is
                    out = [True, f"{type(exc).__name__}: {exc}"]
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    dropped, out = json.loads(data)
    return dropped, out


def unprivileged(fn: Callable[[], Any]) -> Any:
    """``fn()``'s result as an unprivileged user: as ``nobody`` in a child when running as
    root, in this process otherwise."""
    if os.geteuid() != 0:
        return fn()
    dropped, out = as_nobody(fn)
    if not dropped:
        pytest.skip(f"running as root and cannot drop privileges here ({out}); "
                    "permission bits do not bind root")
    return out


@contextmanager
def shared_dir(mode: int = 0o755) -> Iterator[str]:
    """A fresh directory the unprivileged user can enter (pytest's tmp_path is private to
    root), removed afterwards."""
    d = tempfile.mkdtemp(prefix="ferry-perm-")
    os.chmod(d, mode)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
