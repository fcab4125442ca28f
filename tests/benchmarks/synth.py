"""Synthetic, legal histories of any length for checker benchmarks (no store, no workers).

The mix follows the generator's rules: dispatches (some targeted, some with a dependency),
claim races of 2–4 workers with one winner, salvages, racing fulfils with one winner and
typed refusals for the rest, reads of finished tasks (get, salvaged), idle polls, sweeps,
and a daemon lock taken and released by racing owners (one object that lives as long as
the history). ``inspect_every`` adds a full ``inspect()`` every N steps, as the executor
records it today (every task in every snapshot: the history grows quadratically).
"""

from __future__ import annotations

import random
from typing import Any

from ferry_harness.check.history import FAIL, OK, History, Op

T0_MS = 1_000_000_000


class Synth:
    def __init__(self, seed: int = 0) -> None:
        self.rnd = random.Random(seed)
        self.ops: list[Op] = []
        self.ns = 0
        self.now = T0_MS
        self.tasks: list[str] = []
        self.done: dict[str, dict[str, Any]] = {}  # task -> view after fulfil
        self.salvage: dict[str, list[dict[str, Any]]] = {}
        self.steps: list[int] = []  # history length after each step

    def _op(self, proc: int, agent: str, name: str, args: dict[str, Any], start: int,
            end: int, *, typ: str = OK, value: Any = None, error: str | None = None) -> Op:
        o = Op(index=len(self.ops), process=proc, agent=agent, op=name, args=args,
               invoke_ns=start, complete_ns=end, now=self.now, type=typ, value=value,
               error=error)
        self.ops.append(o)
        return o

    def _tick(self, k: int = 1) -> tuple[int, int]:
        start = self.ns + 1
        self.ns += 100 * k
        return start, self.ns

    def lifecycle(self) -> None:
        n = len(self.tasks)
        tid = f"task-{n:07d}"
        deps = [self.rnd.choice(list(self.done))] if self.done and self.rnd.random() < 0.2 else []
        args: dict[str, Any] = {"target_agent": None, "queue_ttl_ms": 10_000_000,
                                "exec_ttl_ms": 60_000, "max_attempts": 1, "payload": {"n": n}}
        if deps:
            args["depends_on"] = deps
        s, e = self._tick()
        self._op(0, "client", "dispatch", args, s, e, value=tid)
        self.tasks.append(tid)
        self.steps.append(len(self.ops))
        # a claim race: one winner
        k = self.rnd.randint(2, 4)
        s, e = self._tick(2)
        win = self.rnd.randrange(k)
        token = f"{self.rnd.getrandbits(128):032x}"
        holder = f"agent-{win}"
        for i in range(k):
            value = None
            if i == win:
                value = {"task_id": tid, "agent_id": holder, "token": token,
                         "claimed_at": self.now, "lease_expires_at": self.now + 60_000,
                         "attempt": 1}
            self._op(i, f"agent-{i}", "claim", {"task_id": tid}, s + i, e - i, value=value)
        self.steps.append(len(self.ops))
        parts = []
        if self.rnd.random() < 0.3:
            s, e = self._tick(2)
            for i in range(self.rnd.randint(1, 3)):
                part = {"part": i, "task": n}
                parts.append(part)
                self._op(i, holder, "salvage", {"task_id": tid, "token": token, "partial": part},
                         s + i, e - i)
            self.steps.append(len(self.ops))
        self.salvage[tid] = [{"kind": "partial", "data": p} for p in parts]
        # racing fulfils by the holder: one wins, the others are refused
        r = self.rnd.randint(1, 3)
        s, e = self._tick(2)
        result = {"by": n}
        for i in range(r):
            a = {"task_id": tid, "token": token, "result": result}
            if i == 0:
                self._op(i, holder, "fulfill", a, s + i, e - i)
            else:
                self._op(i, holder, "fulfill", a, s + i, e - i, typ=FAIL, error="WrongState")
        self.steps.append(len(self.ops))
        self.done[tid] = {"task_id": tid, "status": "COMPLETED", "result": result,
                          "attempt": 1, "release_count": 0, "depends_on": deps}
        self.now += 1

    def reads(self) -> None:
        for tid in self.tasks[-3:]:
            s, e = self._tick()
            self._op(1, "reader", "get", {"task_id": tid}, s, e, value=dict(self.done[tid]))
            s, e = self._tick()
            self._op(1, "reader", "salvaged", {"task_id": tid}, s, e,
                     value=list(self.salvage[tid]))
        self.steps.append(len(self.ops))

    def inspect(self) -> None:
        s, e = self._tick()
        self._op(1, "reader", "inspect", {}, s, e,
                 value=[dict(self.done[t]) for t in self.tasks])
        self.steps.append(len(self.ops))

    def idle(self) -> None:
        s, e = self._tick()
        self._op(0, "janitor", "sweep", {}, s, e, value=0)
        s, e = self._tick()
        self._op(0, "idle-probe", "poll_next", {}, s, e, value=None)
        self.steps.append(len(self.ops))

    def lock(self) -> None:
        owners = ["d1", "d2", "d3"][: self.rnd.randint(2, 3)]
        s, e = self._tick(2)
        win = self.rnd.randrange(len(owners))
        for i, o in enumerate(owners):
            self._op(i, o, "acquire_lock", {"name": "ferry-daemon", "owner": o, "ttl_ms": 500},
                     s + i, e - i, value=i == win)
        s, e = self._tick()
        self._op(win, owners[win], "release_lock", {"name": "ferry-daemon",
                                                   "owner": owners[win]}, s, e, value=True)
        self.steps.append(len(self.ops))


def history(n_ops: int, *, seed: int = 0, inspect_every: int = 0) -> tuple[History, list[int]]:
    """A legal history of about ``n_ops`` ops, and the history length after each step."""
    g = Synth(seed)
    step = 0
    while len(g.ops) < n_ops:
        step += 1
        g.lifecycle()
        roll = g.rnd.random()
        if roll < 0.3:
            g.reads()
        elif roll < 0.45:
            g.idle()
        elif roll < 0.6:
            g.lock()
        if inspect_every and step % inspect_every == 0:
            g.inspect()
    return History(g.ops), g.steps
