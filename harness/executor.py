"""Runs *steps* — plain-data descriptions of what to do — against the worker pool.

The generator (Hypothesis) only draws steps; this module carries them out, records every
operation in the history, and checks the invariants after each step. Because steps are
plain data, a failing example is a JSON list that ``ferry-harness replay`` can run again,
and that our own shrinker can cut down, without Hypothesis.

References inside steps are indices into what the run has produced so far, counted from
the newest (0 = the task dispatched last, the claim made last), taken modulo the count, so
a shrunk or replayed list of steps always resolves to something, and small indices (what
shrinking tends to) point at the freshest, most interesting objects.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from . import schedule
from .checker import Checker, Violation
from .client import PlannedCall, WorkerPool
from .clock import SharedClock
from .history import OK, History, Op

LOCK_NAME = "ferry-daemon"
_SETTLE_POLLS = 50  # polls before an idle probe, each may take a ready task
READER_HOLD_S = 0.2  # how long the "checkpoint with a reader open" probe keeps its snapshot
STALL_S = 1.0  # an op that ran this long kept the other workers waiting: a report finding
START_MS = 1_000_000_000


@dataclass
class Stats:
    """Counters a campaign reports."""

    examples: int = 0
    steps: int = 0
    ops: int = 0
    race_rounds: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    # ops that kept the others waiting: (op name, seconds), slowest first, a few kept
    stalls: list[tuple[str, float]] = field(default_factory=list)

    def stalled(self, op: str, seconds: float) -> None:
        self.stalls = sorted(self.stalls + [(op, round(seconds, 3))], key=lambda s: -s[1])[:5]


@dataclass
class KnownClaim:
    task_id: str
    agent: str
    token: str
    slot: int
    expires: int | None


def _holder_hostile(field: str, value: Any) -> Any:
    def make(ex: Executor) -> dict[str, Any] | None:
        if not ex.claims:
            return None
        c = ex.claims[-1]
        args = {"task_id": c.task_id, "token": c.token, "_agent": c.agent,
                "result": {"ok": 1}, "partial": {"p": 1}}
        args[field] = value
        return args
    return make


def _dispatch_hostile(**bad: Any) -> Any:
    def make(ex: Executor) -> dict[str, Any]:
        args = {"target_agent": None, "queue_ttl_ms": 10_000, "exec_ttl_ms": 50,
                "max_attempts": 1, "payload": {"n": -1}}
        args.update(bad)
        return args
    return make


# name -> (op, args builder). Every one must end in a typed refusal (InvalidArgument or
# NotFound) or, where the protocol allows it, a plain answer: never a raw exception.
HOSTILE_CASES: dict[str, tuple[str, Any]] = {
    "dispatch-depends-on-int": ("dispatch", _dispatch_hostile(depends_on=5)),
    "dispatch-unknown-dependency": ("dispatch", _dispatch_hostile(depends_on=["no-such-task"])),
    "dispatch-huge-queue-ttl": ("dispatch", _dispatch_hostile(queue_ttl_ms=2**63 - 1)),
    "dispatch-huge-exec-ttl": ("dispatch", _dispatch_hostile(exec_ttl_ms=2**63 - 2)),
    "dispatch-negative-ttl": ("dispatch", _dispatch_hostile(queue_ttl_ms=-5)),
    "dispatch-ttl-as-text": ("dispatch", _dispatch_hostile(exec_ttl_ms="50")),
    "dispatch-non-json-payload": ("dispatch", _dispatch_hostile(payload={1, 2})),
    "claim-unknown-id": ("claim", lambda ex: {"task_id": "no-such-task"}),
    "claim-int-id": ("claim", lambda ex: {"task_id": 123}),
    "get-unknown-id": ("get", lambda ex: {"task_id": "no-such-task"}),
    "get-none-id": ("get", lambda ex: {"task_id": None}),
    "salvaged-int-id": ("salvaged", lambda ex: {"task_id": 123}),
    "fulfill-int-token": ("fulfill", _holder_hostile("token", 123)),
    "fulfill-non-json-result": ("fulfill", _holder_hostile("result", {1, 2})),
    "salvage-non-json-partial": ("salvage", _holder_hostile("partial", {3})),
}


class Executor:
    """One example: a fresh database, a fresh history, steps run one after another."""

    def __init__(self, pool: WorkerPool, clock: SharedClock, path: str, *,
                 checker: Checker | None = None, stats: Stats | None = None,
                 example: int = 0, nemesis: Any = None, mode: str = "stress") -> None:
        self.pool = pool
        self.clock = clock
        self.path = path
        self.checker = checker or Checker()
        self.stats = stats or Stats()
        self.example = example
        self.nemesis = nemesis
        self.mode = mode
        self.history = History()
        self._step: dict[str, Any] = {}
        self._round_in_step = 0
        self.steps: list[dict[str, Any]] = []
        self.tasks: list[str] = []
        self.claims: list[KnownClaim] = []
        self.lock_expires: int | None = None
        self.violations: list[Violation] = []
        self.round = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass
        clock.set(START_MS)
        pool.open(path)
        self.capabilities = set(pool.capabilities)
        if os.path.exists(path + "-wal"):
            self.capabilities.add("wal-file")
        # hold the target only to the SPEC features it has (harness.ops.FEATURES)
        self.checker.cfg = self.checker.cfg.for_capabilities(self.capabilities)

    # ------------------------------------------------------------------ plumbing
    def _chooser(self) -> schedule.Chooser | None:
        """In schedule mode: the step's recorded decisions for this round, then PCT."""
        if self.mode != "schedule" or "schedule-points" not in self.capabilities:
            return None
        recorded = self._step.get("schedules", [])
        explicit = recorded[self._round_in_step] if self._round_in_step < len(recorded) else []
        seed = self._step.get("pct")
        return schedule.Chooser(explicit=list(explicit), seed=seed)

    def _run(self, calls: list[PlannedCall], **extra: Any) -> list[Op]:
        self.round += 1
        chooser = self._chooser() if len(calls) > 1 else None
        if len(calls) > 1:
            self.stats.race_rounds += 1
        ops = self.pool.run(calls, self.history, round_id=self.round, example=self.example,
                            chooser=chooser)
        if chooser is not None:
            rounds = self._step.setdefault("schedules", [])
            while len(rounds) <= self._round_in_step:
                rounds.append([])
            rounds[self._round_in_step] = list(chooser.taken)  # replays follow these exactly
            self._round_in_step += 1
        for op in ops:
            op.extra.update(extra)
            self._note_stall(op)
        self.stats.ops += len(ops)
        return ops

    def _note_stall(self, op: Op) -> None:
        if op.complete_ns and op.type != "info":
            took = (op.complete_ns - op.invoke_ns) / 1e9
            if took >= STALL_S:
                self.stats.stalled(op.op, took)

    def _one(self, slot: int, op: str, agent: str, **args: Any) -> Op:
        return self._run([PlannedCall(slot % self.pool.size, op, args, agent)])[0]

    def _task(self, ref: int) -> str:
        return self.tasks[-1 - ref % len(self.tasks)]

    def _claim(self, ref: int) -> KnownClaim:
        return self.claims[-1 - ref % len(self.claims)]

    def _slot(self, i: int) -> int:
        return i % self.pool.size

    def _learn(self, ops: list[Op]) -> None:
        """Remember what the run produced: task ids, claims, lease and lock expiries."""
        for op in ops:
            if op.type != OK:
                continue
            if op.op == "dispatch":
                self.tasks.append(op.value)
            elif op.op in ("claim", "poll_next") and op.value:
                v = op.value
                slot = self.pool.slot_of(op.process)
                self.claims.append(KnownClaim(v["task_id"], op.agent, v["token"], slot,
                                              v["lease_expires_at"]))
            elif op.op == "extend" and isinstance(op.value, int):
                for c in self.claims:
                    if c.token == op.args.get("token"):
                        c.expires = op.value
            elif op.op == "acquire_lock" and op.value:
                self.lock_expires = op.now + op.args["ttl_ms"]

    def _set_clock(self, target: int) -> bool:
        """Move time forward to ``target`` (never backwards: leases would un-expire)."""
        if target < self.clock():
            return False
        self.clock.set(target)
        return True

    # ------------------------------------------------------------------ steps
    def run_step(self, step: dict[str, Any]) -> list[Violation]:
        """Carry out one step, then check the invariants on what it produced."""
        self.steps.append(step)
        self._step, self._round_in_step = step, 0
        self.stats.steps += 1
        start = len(self.history)
        handler = getattr(self, f"_step_{step['kind'].replace('-', '_')}", None)
        if handler is None:
            raise ValueError(f"unknown step kind {step['kind']!r}")
        handler(step)
        new = self.history.ops[start:]
        if new and "wal-file" in self.capabilities:  # the growth bound, sampled every step
            new[-1].extra["wal_after_step"] = self.pool.wal_size()
        self._learn(new)
        found = self.checker.check(self.history, new) if new else []
        self.violations.extend(found)
        return found

    def _step_dispatch(self, s: dict[str, Any]) -> None:
        deps = sorted({self._task(i) for i in s.get("deps", [])}) if self.tasks else []
        target = s.get("target") if "targets" in self.capabilities else None
        args: dict[str, Any] = {"target_agent": target, "queue_ttl_ms": s["qttl"],
                                "exec_ttl_ms": s["ettl"], "max_attempts": s.get("attempts", 1),
                                "payload": {"n": len(self.tasks)}}
        if deps and "dag" in self.capabilities:
            args["depends_on"] = deps
        self._one(0, "dispatch", "client", **args)

    def _step_race_claim(self, s: dict[str, Any]) -> None:
        if not self.tasks:
            return
        task = self._task(s["task"])
        agents = s["agents"][: self.pool.size]
        if "claim" in self.capabilities:
            self._run([PlannedCall(i, "claim", {"task_id": task}, a) for i, a in enumerate(agents)])
        else:
            self._step_race_poll(s)

    def _step_race_poll(self, s: dict[str, Any]) -> None:
        agents = s["agents"][: self.pool.size]
        self._run([PlannedCall(i, "poll_next", {}, a) for i, a in enumerate(agents)])

    def _holder_args(self, c: KnownClaim, op: str, tag: int) -> dict[str, Any]:
        args: dict[str, Any] = {"task_id": c.task_id, "token": c.token}
        if op == "fulfill":
            args["result"] = {"by": tag, "step": len(self.steps)}
        elif op == "fail":
            args["reason"] = f"failed by {tag}"
        elif op == "release":
            args["reason"] = "released"
        elif op == "salvage":
            args["partial"] = {"part": tag, "step": len(self.steps)}
        return args

    def _step_holder(self, s: dict[str, Any]) -> None:
        if not self.claims or s["op"] not in self.capabilities:
            return
        c = self._claim(s["claim"])
        op, who = s["op"], s.get("who", "holder")
        other = self._slot(c.slot + 1)
        if s.get("repeat"):  # the same holder again and again: limits must bite
            self._repeat(c, op, s["repeat"])
            return
        if who == "holder":
            racers = max(1, min(s.get("race", 1), self.pool.size))
            slots = [self._slot(c.slot + i) for i in range(racers)]
            self._run([PlannedCall(sl, op, self._holder_args(c, op, sl), c.agent) for sl in slots])
            return
        args = self._holder_args(c, op, other)
        agent = c.agent
        if who == "impersonator":  # same agent name, another process, no token
            args["token"] = None
        elif who == "forged":
            args["token"] = str(uuid.UUID(int=len(self.steps) + 1, version=4))
        elif who == "other-agent":  # the right token in the wrong agent's hands
            agent = "mallory"
        self._run([PlannedCall(other, op, args, agent)])

    def _repeat(self, c: KnownClaim, op: str, times: int) -> None:
        """``extend`` ``times`` times, or ``release`` and claim again ``times`` times."""
        for i in range(times):
            done = self._one(c.slot, op, c.agent, **self._holder_args(c, op, i))
            if done.type != OK or op != "release":
                continue
            verb = "claim" if "claim" in self.capabilities else "poll_next"
            args = {"task_id": c.task_id} if verb == "claim" else {}
            again = self._one(c.slot, verb, c.agent, **args)
            self._learn([again])
            if again.type != OK or not again.value or again.value.get("task_id") != c.task_id:
                return
            c = self.claims[-1]

    def _step_hostile(self, s: dict[str, Any]) -> None:
        """One call with a hostile argument (see HOSTILE_CASES)."""
        case = HOSTILE_CASES.get(s.get("case", ""))
        if case is None:
            return
        op, make = case
        if op not in self.capabilities:
            return
        args = make(self)
        if args is None:
            return
        if op == "dispatch" and "dag" not in self.capabilities:
            args.pop("depends_on", None)
        agent = args.pop("_agent", "mallory")
        self._one(1, op, agent, **args)

    def _step_clock(self, s: dict[str, Any]) -> None:
        if "tick" in s:
            self.clock.advance(s["tick"])
            return
        if not self.claims:
            return
        c = self._claim(s["claim"])
        if c.expires is not None:  # None: the target's lease is not on the harness clock
            self._set_clock(c.expires + s.get("offset", 0))

    def _step_lock_race(self, s: dict[str, Any]) -> None:
        if "acquire_lock" not in self.capabilities:
            return
        if s.get("offset") is not None and self.lock_expires is not None:
            self._set_clock(self.lock_expires + s["offset"])
        owners = s["owners"][: self.pool.size]
        self._run([PlannedCall(i, "acquire_lock", {"name": LOCK_NAME, "owner": o, "ttl_ms": s["ttl"]}, o)
                   for i, o in enumerate(owners)])

    def _step_lock_op(self, s: dict[str, Any]) -> None:
        if s["op"] not in self.capabilities:
            return
        args = {"name": LOCK_NAME}
        if s["op"] == "release_lock":
            args["owner"] = s["owner"]
        self._one(1, s["op"], s.get("owner", "observer"), **args)

    def _step_idle_poll(self, s: dict[str, Any]) -> None:
        """Settle, then poll: if nothing came back the poll was idle and must not write.

        Settling makes the measured poll idle by construction (PROTOCOL.md#freedoms-a-correct-store-may-take: a poll that applies
        a due expiry or claims a task has work to do and may write): sweep where the store
        has it, then poll until a poll comes back empty, all at one frozen instant."""
        if "wal-file" not in self.capabilities:
            return
        if "sweep" in self.capabilities:
            self._one(0, "sweep", "janitor")
        for _ in range(_SETTLE_POLLS):
            settle = self._one(0, "poll_next", "idle-probe")
            if settle.type != OK or settle.value is None:
                break
        else:
            return  # still claiming work: no idle instant to measure
        before, mark = self.pool.wal_size(), self.pool.wal_mark()
        op = self._one(0, "poll_next", "idle-probe")
        op.extra.update(wal_before=before, wal_after=self.pool.wal_size(),
                        wal_mark_before=mark, wal_mark_after=self.pool.wal_mark(),
                        idle=op.type == OK and op.value is None)

    def _step_reads(self, s: dict[str, Any]) -> None:
        """Reads must not write: measure the -wal around each one."""
        has_wal = "wal-file" in self.capabilities
        calls: list[tuple[str, dict[str, Any]]] = []
        for tid in self.tasks[-6:]:
            if "get" in self.capabilities:
                calls.append(("get", {"task_id": tid}))
            if "salvaged" in self.capabilities:
                calls.append(("salvaged", {"task_id": tid}))
        if "inspect" in self.capabilities:
            calls.append(("inspect", {}))
        for name, args in calls:
            before, mark = self.pool.wal_size(), self.pool.wal_mark()
            op = self._one(1, name, "reader", **args)
            if has_wal:
                op.extra.update(wal_before=before, wal_after=self.pool.wal_size(),
                                wal_mark_before=mark, wal_mark_after=self.pool.wal_mark(),
                                idle=True)

    def _step_checkpoint(self, s: dict[str, Any]) -> None:
        if "checkpoint" not in self.capabilities or "wal-file" not in self.capabilities:
            return
        reader = bool(s.get("reader"))
        if reader:  # the outside reader lets go after READER_HOLD_S, whatever the store does
            self.round += 1
            op = self.pool.run_with_reader(
                PlannedCall(0, "checkpoint", {"mode": "TRUNCATE"}, "janitor"), self.history,
                READER_HOLD_S, round_id=self.round, example=self.example)
            self.stats.ops += 1
            self._note_stall(op)
            op.extra.update(reader=True, reader_hold_s=READER_HOLD_S,
                            wal_after=self.pool.wal_size())
        else:
            op = self._one(0, "checkpoint", "janitor", mode="TRUNCATE")
            op.extra.update(reader=False, wal_after=self.pool.wal_size())

    def _step_audit(self, s: dict[str, Any]) -> None:
        """End of an example: materialise expiries, then read everything back."""
        if "sweep" in self.capabilities:
            self._one(0, "sweep", "janitor")
        for tid in self.tasks:
            if "get" in self.capabilities:
                self._one(1, "get", "auditor", task_id=tid)
            if "salvaged" in self.capabilities:
                self._one(1, "salvaged", "auditor", task_id=tid)
        self._step_checkpoint({"reader": False})
        if "wal-file" in self.capabilities:  # PRAGMA integrity_check, in a separate process
            from .nemesis import integrity_probe

            integrity_probe(self)

    def _step_fault(self, s: dict[str, Any]) -> None:
        if self.nemesis is None:
            return
        self.nemesis.inject(self, s)

    def finish(self) -> list[Violation]:
        """The closing audit step."""
        return self.run_step({"kind": "audit"})
