"""Stores that are slow, block or hang: the harness must keep its budget and say why.

Each is a correct store with one liveness property broken or one slow setting, so a test
can assert wall time, report presence and the liveness finding.
"""

from __future__ import annotations

import time
from typing import Any

from ferry_core import LeaseStore


class HangingClaimStore(LeaseStore):
    """BUG: ``claim`` and ``poll_next`` never return (a lost wake-up, a deadlock in the
    store's own locking): every call must end with a result or a typed error (liveness)."""

    def claim(self, task_id: str, agent_id: str) -> Any:
        time.sleep(3600)

    def poll_next(self, agent_id: str) -> Any:
        time.sleep(3600)


def hang_claim(path: str, *, clock: Any) -> HangingClaimStore:
    return HangingClaimStore(path, clock=clock)


def narrow_check_then_act(path: str, *, clock: Any) -> LeaseStore:
    """check_then_act (tests/broken_stores.py) without its widened window: the race is real
    but rarely lands in stress mode; schedule mode finds it every time."""
    from tests.broken_stores import CheckThenActStore

    store = CheckThenActStore(path, clock=clock)
    store.toctou_window_s = 0.0
    return store
