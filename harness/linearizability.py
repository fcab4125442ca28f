"""Wing–Gong linearizability search with Porcupine's memoisation, partitioned per object.

A history is linearizable when every operation can be placed at one instant between its
invoke and its completion so that the sequence is legal for the model. Tasks and locks
are independent objects (P-compositionality), so each is searched alone: small partitions
keep the exponential search cheap. ``info`` operations (crashed, timed out) may take effect
at any point after their invoke, or never.

On failure we return the longest legal prefix found and the operation that cannot follow
it, with the model's reason and the invariant id it breaks (PROTOCOL.md#invariants).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .history import INFO, LOCK_OPS, Op
from .model import ModelConfig, Verdict, step_lock, step_task

Step = Callable[[Any, Op], Verdict]


@dataclass
class PartitionResult:
    """Verdict for one object (``task:<id>`` or ``lock:<name>``)."""

    key: str
    ok: bool | None  # None: search budget exhausted (unknown)
    ops: list[int]
    linearized: list[int] = field(default_factory=list)
    culprit: int | None = None
    invariant: str | None = None
    why: str | None = None
    explored: int = 0


def partition(ops: Iterable[Op]) -> dict[str, list[Op]]:
    """Group ops by the one object they act on; global ops (idle polls, sweeps) are left out."""
    parts: dict[str, list[Op]] = {}
    for op in ops:
        if op.op in LOCK_OPS:
            key = f"lock:{op.args['name']}"
        else:
            tid = op.task_id
            if tid is None:
                continue
            key = f"task:{tid}"
        parts.setdefault(key, []).append(op)
    return parts


def check_partition(key: str, ops: list[Op], step: Step, *, budget: int = 200_000) -> PartitionResult:
    """Search for a linearization of ``ops`` (one object) under ``step``."""
    ops = sorted(ops, key=lambda o: (o.invoke_ns, o.index))
    n = len(ops)
    required = sum(1 << i for i, o in enumerate(ops) if o.type != INFO)
    result = PartitionResult(key, None, [o.index for o in ops])
    best: tuple[int, list[int], Any] = (-1, [], None)
    seen: set[tuple[int, Any]] = set()
    # stack of (done mask, state, order so far)
    stack: list[tuple[int, Any, list[int]]] = [(0, None, [])]
    explored = 0
    while stack:
        done, state, order = stack.pop()
        if done & required == required:
            result.ok = True
            result.linearized = [ops[i].index for i in order]
            result.explored = explored
            return result
        if len(order) > best[0]:
            best = (len(order), order, state)
        explored += 1
        if explored > budget:
            result.explored = explored
            result.why = f"search budget of {budget} states exhausted ({n} ops)"
            return result
        horizon = min((ops[i].ret_ns for i in range(n)
                       if not done >> i & 1 and ops[i].type != INFO), default=math.inf)
        for i in reversed(range(n)):
            if done >> i & 1 or ops[i].invoke_ns >= horizon:
                continue
            verdict = step(state, ops[i])
            if not verdict.ok:
                continue
            nxt = done | 1 << i
            memo = (nxt, verdict.state)
            if memo in seen:
                continue
            seen.add(memo)
            stack.append((nxt, verdict.state, order + [i]))
    result.ok = False
    result.explored = explored
    _blame(result, ops, best[1], best[2], step)
    return result


def _blame(result: PartitionResult, ops: list[Op], order: list[int], state: Any, step: Step) -> None:
    """Name the op that cannot follow the longest legal prefix, and why."""
    result.linearized = [ops[i].index for i in order]
    done = set(order)
    pending = [i for i in range(len(ops)) if i not in done]
    horizon = min((ops[i].ret_ns for i in pending if ops[i].type != INFO), default=math.inf)
    candidates = [i for i in pending if ops[i].invoke_ns < horizon and ops[i].type != INFO]
    verdicts = [(i, step(state, ops[i])) for i in candidates]
    failed = [(i, v) for i, v in verdicts if not v.ok]
    if not failed:
        failed = verdicts
    # prefer a specific invariant over the generic one, then the earliest completion
    failed.sort(key=lambda iv: (iv[1].invariant in (None, "linearizable"), ops[iv[0]].ret_ns))
    if failed:
        i, v = failed[0]
        result.culprit = ops[i].index
        result.invariant = v.invariant or "linearizable"
        result.why = v.why or "no legal order of these concurrent operations"
    else:
        result.invariant = "linearizable"
        result.why = "no legal order of these concurrent operations"


def check_history(ops: Iterable[Op], cfg: ModelConfig | None = None, *,
                  budget: int = 200_000) -> list[PartitionResult]:
    """Check every partition; returns one result per task and lock."""
    cfg = cfg or ModelConfig()

    def task_step(state: Any, op: Op) -> Verdict:
        return step_task(state, op, cfg)

    def lock_step(state: Any, op: Op) -> Verdict:
        return step_lock(state, op, cfg)

    out = []
    for key, part in partition(ops).items():
        step = lock_step if key.startswith("lock:") else task_step
        out.append(check_partition(key, part, step, budget=budget))
    return out
