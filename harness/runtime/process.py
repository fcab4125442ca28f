"""Process hygiene for the processes ferry forks: none may outlive the controller."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal this process gets when its parent dies


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process if the controller dies, so none outlives it.

    Call it first thing in a forked child; then check ``os.getppid()`` once, since the
    parent may have died before the request took effect. A no-op where prctl is missing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
