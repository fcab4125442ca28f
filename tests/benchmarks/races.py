"""Wide races on one task, hand-built (shared by tests and benchmarks)."""

from __future__ import annotations

from typing import Any

from ferry_harness.check.history import FAIL, OK, Op

T = "task-1"


def tok(i: int) -> str:
    return f"{i:08x}-0000-4000-8000-{i:012x}"


def op(i: int, proc: int, agent: str, name: str, args: dict[str, Any], start: int, end: int,
       typ: str = OK, value: Any = None, error: str | None = None, now: int = 1000) -> Op:
    return Op(index=i, process=proc, agent=agent, op=name, args=args, invoke_ns=start,
              complete_ns=end, now=now, type=typ, value=value, error=error)


def _dispatch() -> Op:
    return op(0, 0, "client", "dispatch",
              {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": 100}, 0, 1, value=T)


def _claim(i: int, agent: str, token: str, start: int, end: int, attempt: int = 1) -> Op:
    return op(i, 0, agent, "claim", {"task_id": T}, start, end, value={
        "task_id": T, "agent_id": agent, "token": token, "claimed_at": 1000,
        "lease_expires_at": 1100, "attempt": attempt})


def claim_race(k: int, bad: str | None) -> list[Op]:
    """k concurrent claims, one winner; ``bad``: a refused racer ("refused") or a second
    winner that says attempt 2 ("attempt")."""
    h = [_dispatch()]
    for i in range(k):
        if i == k // 2:
            h.append(_claim(len(h), f"a{i}", tok(1), 10, 50))
        elif i == k - 1 and bad == "attempt":
            h.append(_claim(len(h), f"a{i}", tok(2), 10, 50, attempt=2))
        elif i == k - 1 and bad == "refused":
            h.append(op(len(h), i, f"a{i}", "claim", {"task_id": T}, 10, 50, typ=FAIL,
                        error="WrongState"))
        else:
            h.append(op(len(h), i, f"a{i}", "claim", {"task_id": T}, 10, 50))
    return h


def fulfill_race(k: int, bad: bool) -> list[Op]:
    """The holder races k fulfils: one wins, the rest are refused (``bad``: two win)."""
    h = [_dispatch(), _claim(1, "alice", tok(1), 2, 3)]
    for i in range(k):
        args = {"task_id": T, "token": tok(1), "result": {"by": i}}
        if i == 0 or (bad and i == k - 1):
            h.append(op(len(h), i, "alice", "fulfill", args, 10, 50))
        else:
            h.append(op(len(h), i, "alice", "fulfill", args, 10, 50, typ=FAIL, error="WrongState"))
    return h


def salvage_rounds(rounds: int, width: int, lost: int | None = None,
                   swap: tuple[int, int] | None = None) -> list[Op]:
    """``rounds`` rounds of ``width`` racing salvages by the holder, then one
    ``salvaged()`` read (each round in reverse order: legal). ``lost``: the read misses
    that entry; ``swap``: two entries of the read trade places."""
    h = [_dispatch(), _claim(1, "alice", tok(1), 2, 3)]
    t = 10
    parts = []
    for r in range(rounds):
        for w in range(width):
            p = {"part": w, "round": r}
            parts.append(p)
            h.append(op(len(h), w, "alice", "salvage",
                        {"task_id": T, "token": tok(1), "partial": p}, t, t + 10 + w))
        t += 100
    entries = [{"kind": "partial", "agent": "alice", "data": p} for p in parts]
    read: list[Any] = []
    for r in range(rounds):
        read += list(reversed(entries[r * width:(r + 1) * width]))
    if swap is not None:
        a, b = swap
        read[a], read[b] = read[b], read[a]
    if lost is not None:
        del read[lost]
    h.append(op(len(h), 0, "reader", "salvaged", {"task_id": T}, t, t + 5, value=read))
    return h
