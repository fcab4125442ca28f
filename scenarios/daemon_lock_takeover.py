"""daemon-lock-takeover — two daemons race for one lock around its expiry and renewal.

Rule: PROTOCOL.md#acquire_lock (one UPSERT that updates only an expired lock or our own;
the number of changed rows says who got it).

Two daemons start in the same instant and race for the lock: one wins. The loser keeps
trying at ``expires - 1`` (refused); the winner renews then, so the loser is refused again
at the old expiry. At the new expiry both race once more (exactly one wins), and finally
the holder releases and the other takes over. An UPSERT without the WHERE lets the second
daemon steal a live lock, and two daemons sweep at once.
"""

from __future__ import annotations

from ferry_harness.check.history import Op

from .base import Scenario, Session

TTL_MS = 1_000
DAEMONS = ("daemon-a", "daemon-b")  # daemon i runs in worker slot i


def _acquire(s: Session, lock: str, *who: str) -> list[Op]:
    return s.race([(DAEMONS.index(d), "acquire_lock", d, {"name": lock, "owner": d, "ttl_ms": TTL_MS})
                   for d in who])


def _release(s: Session, lock: str, who: str) -> Op:
    return s.call(DAEMONS.index(who), "release_lock", who, name=lock, owner=who)


def _one_winner(s: Session, lock: str, ops: list[Op], when: str) -> tuple[str, str]:
    """(holder, the other daemon); exactly one of ``ops`` must have got the lock."""
    won = s.winners(ops)
    s.expect(len(won) == 1, "lock-exclusive",
             f"{len(won)} of {len(ops)} daemons got lock {lock!r} {when}; exactly one must", ops)
    holder = won[0].agent
    return holder, DAEMONS[1 - DAEMONS.index(holder)]


def daemon_lock_takeover(s: Session) -> str:
    for r in s.rounds(5):
        lock = f"sweeper-{r}"
        start = s.now()
        holder, other = _one_winner(s, lock, _acquire(s, lock, *DAEMONS), "when both started")
        s.set_clock(start + TTL_MS - 1, "expires-1")
        _acquire(s, lock, other)  # refused: the lock is live for one more millisecond
        s.call(1, "lock_holder", "observer", name=lock)
        _acquire(s, lock, holder)  # renew: the lock now runs until start + 2 * TTL - 1
        s.set_clock(start + TTL_MS, "the old expiry")
        _acquire(s, lock, other)  # refused: it was renewed
        s.set_clock(start + 2 * TTL_MS - 1, "the renewed lock's expiry")
        holder, other = _one_winner(s, lock, _acquire(s, lock, *DAEMONS), "at the renewed expiry")
        _release(s, lock, other)  # not its lock: False, and nothing changes
        _release(s, lock, holder)
        s.call(1, "lock_holder", "observer", name=lock)
        _one_winner(s, lock, _acquire(s, lock, other), "after the holder released it")
    return (f"{s.rounds_run} rounds: one daemon won each start race and each expiry race, "
            "renewal kept the lock past the old expiry, release handed it over")


SCENARIO = Scenario(
    name="daemon-lock-takeover",
    invariant="lock-exclusive",
    description="Two daemons race for the daemon lock at start, at its expiry boundary, "
                "around a renewal and after a release: never two owners.",
    source="PROTOCOL.md#acquire_lock",
    script=daemon_lock_takeover,
    needs=("acquire_lock", "release_lock", "lock_holder"),
)
