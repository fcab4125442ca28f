"""A clock step aimed at the lease end of an accepted huge TTL must not wrap the harness
clock (a shared int64) negative: PROTOCOL.md#limits keeps the clock below 2**42 ms."""

from __future__ import annotations

from ferry_harness.run.executor import START_MS, Executor, KnownClaim
from ferry_harness.run.steps import Clock
from ferry_harness.runtime.clock import SharedClock


class _NoPool:
    size = 1
    capabilities = ("claim",)
    skips = ()

    def open(self, path: str, *, together: bool = False, first_opened=None) -> None:
        pass


def _executor(tmp_path) -> tuple[Executor, SharedClock]:
    clock = SharedClock()
    exe = Executor(_NoPool(), clock, str(tmp_path / "c.db"))  # type: ignore[arg-type]
    return exe, clock


def test_a_jump_to_a_huge_lease_end_is_skipped(tmp_path):
    exe, clock = _executor(tmp_path)
    exe.claims.append(KnownClaim(task_id="t", agent="a", token="x", slot=0,
                                 expires=START_MS + 2**63 - 1))
    exe.run_step(Clock(claim=0, offset=1))
    assert clock() == START_MS


def test_a_jump_to_an_ordinary_lease_end_is_taken(tmp_path):
    exe, clock = _executor(tmp_path)
    exe.claims.append(KnownClaim(task_id="t", agent="a", token="x", slot=0,
                                 expires=START_MS + 50))
    exe.run_step(Clock(claim=0, offset=1))
    assert clock() == START_MS + 51
