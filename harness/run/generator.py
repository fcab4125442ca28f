"""The generator: a Hypothesis state machine that draws steps and hands them to an Executor.

Rules only *draw*: each builds a step (:mod:`ferry_harness.run.steps`) and runs it.
The executor checks every invariant after each step; a violation raises
:class:`ViolationFound`, which the campaign turns into a minimal, replayable report.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from ferry_harness.check.checker import Violation
from ferry_harness.errors import ViolationFound
from ferry_harness.run.executor import Executor
from ferry_harness.run.faults import ANY_CALL
from ferry_harness.run.hostile import HOSTILE_CASES
from ferry_harness.run.steps import (
    RACES,
    Checkpoint,
    Clock,
    Dispatch,
    Fault,
    Holder,
    Hostile,
    IdlePoll,
    LockOp,
    LockRace,
    RaceClaim,
    RacePoll,
    Reads,
    Step,
)

AGENTS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
OWNERS = ("daemon-1", "daemon-2", "daemon-3", "daemon-4")
# what a holder step draws: fulfill twice as often (it is what ends most lifecycles)
HOLDER_DRAWS = ("fulfill", "fulfill", "fail", "release", "extend", "salvage")


class Context(Protocol):
    """What the machine needs from its campaign."""

    workers: int
    faults: tuple[str, ...]
    mode: str
    stopping: bool

    def halted(self) -> bool:
        """Ctrl-C, SIGTERM or the search budget ran out: finish the example doing nothing."""
        ...

    def new_executor(self) -> Executor: ...

    def record_failure(self, executor: Executor, violations: list[Violation]) -> None: ...

    def record_pass(self, executor: Executor) -> None: ...


def agents_for(k: int, same_name: bool) -> tuple[str, ...]:
    return ("alice",) * k if same_name else AGENTS[:k]


class FerryMachine(RuleBasedStateMachine):
    """Draws dispatches, race rounds, holder ops, clock boundaries, locks and WAL probes."""

    ctx: Context  # bound by :func:`machine_for`

    def __init__(self) -> None:
        super().__init__()
        self.ex = self.ctx.new_executor()
        self.failed = False
        self._pct_seeds: list[int] = []

    @precondition(lambda self: self.ctx.mode == "schedule")
    @rule(seeds=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=4))
    def interleavings(self, seeds):
        """Schedule mode: seeds for the PCT drawer of the next race rounds."""
        self._pct_seeds.extend(seeds)

    def _do(self, step: Step) -> None:
        if self.ctx.halted():
            # stop or budget: let Hypothesis finish this example quickly, doing nothing,
            # once the last step's deferred check has run
            if not self.failed:
                self._check_last_step()
            return
        if self.ctx.mode == "schedule" and isinstance(step, RACES):
            # PCT's random priorities and change points, drawn so Hypothesis controls them
            step = replace(step, pct=(self._pct_seeds.pop() if self._pct_seeds
                                      else 7919 * len(self.ex.steps) + self.ex.example))
        found = self.ex.run_step(step)
        if found:
            self.failed = True
            self.ctx.record_failure(self.ex, found)
            raise ViolationFound(found)

    def _check_last_step(self) -> None:
        """The last step's check, if it was deferred (the example ends without its audit)."""
        found = self.ex.check_deferred()
        if found:
            self.failed = True
            self.ctx.record_failure(self.ex, found)
            raise ViolationFound(found)

    def _k(self, data: st.DataObject) -> int:
        return data.draw(st.integers(2, self.ctx.workers), label="racers")

    @rule(for_agent=st.sampled_from([None, None, "alice", "bob"]),
          qttl=st.sampled_from([60, 500, 10_000, 10_000]), ettl=st.sampled_from([10, 50, 300]),
          attempts=st.sampled_from([1, 2]), deps=st.lists(st.integers(0, 40), max_size=2))
    def dispatch(self, for_agent, qttl, ettl, attempts, deps):
        self._do(Dispatch(target_agent=for_agent, queue_ttl_ms=qttl, exec_ttl_ms=ettl,
                          max_attempts=attempts, depends_on=tuple(deps) if self.ex.tasks else ()))

    @rule(for_agent=st.sampled_from([None, "alice"]), ettl=st.sampled_from([10, 50]),
          same_name=st.booleans(), op=st.sampled_from(HOLDER_DRAWS),
          who=st.sampled_from(["holder", "holder", "impersonator", "forged", "other-agent"]),
          race=st.sampled_from([1, 2, 4]), offset=st.sampled_from([None, None, -1, 0, 1]),
          window=st.sampled_from([None] * 6 + [-1, 0, 1]), data=st.data())
    def lifecycle(self, for_agent, ettl, same_name, op, who, race, offset, window, data):
        """The common path, in one rule: dispatch, k claimers race (maybe at the queue
        window's end), then a holder op — maybe at a lease boundary, maybe by an
        impersonator, maybe k racers with one token."""
        # a short window when aiming at its end, so the jump leaves other windows open
        self._do(Dispatch(target_agent=for_agent, queue_ttl_ms=10_000 if window is None else 60,
                          exec_ttl_ms=ettl, max_attempts=2))
        self._do(RaceClaim(task=0, agents=agents_for(self._k(data), same_name), window=window))
        if self.ex.claims:
            if offset is not None:
                self._do(Clock(claim=0, offset=offset))
            self._do(Holder(claim=0, op=op, who=who, race=race))

    @precondition(lambda self: "dag" in self.ex.capabilities)  # nothing to wait for without
    @rule(parent_ends=st.sampled_from(["fulfill", "fulfill", "fail", None]),
          poll=st.booleans(), same_name=st.booleans(), data=st.data())
    def dependent_waits(self, parent_ends, poll, same_name, data):
        """The claim-time dependency check (PROTOCOL.md#readiness): a parent and a task that
        depends on it; claimers race for the dependent (and maybe pollers) while the parent
        is not COMPLETED — nobody may get it — then the parent is claimed and ended, and the
        dependent is raced again (claimable once the parent is fulfilled; failed with it by
        the cascade otherwise)."""
        self._do(Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50,
                          max_attempts=1))
        self._do(Dispatch(target_agent=None, queue_ttl_ms=10_000, exec_ttl_ms=50,
                          max_attempts=1, depends_on=(0,)))
        self._do(RaceClaim(task=0, agents=agents_for(self._k(data), same_name)))
        if poll:
            self._do(RacePoll(agents=agents_for(self._k(data), same_name)))
        if parent_ends is None:
            return
        ex = self.ex
        parent = ex.tasks[-2] if len(ex.tasks) >= 2 else None
        if not (ex.claims and ex.claims[-1].task_id == parent):  # a poll may have taken it
            self._do(RaceClaim(task=1, agents=agents_for(1, False)))
        if ex.claims and ex.claims[-1].task_id == parent:
            self._do(Holder(claim=0, op=parent_ends, who="holder", race=1))
        self._do(RaceClaim(task=0, agents=agents_for(self._k(data), same_name)))

    @precondition(lambda self: self.ex.tasks)
    @rule(task=st.integers(0, 40), same_name=st.booleans(), data=st.data())
    def race_claim(self, task, same_name, data):
        self._do(RaceClaim(task=task, agents=agents_for(self._k(data), same_name)))

    @rule(same_name=st.booleans(), data=st.data())
    def race_poll(self, same_name, data):
        self._do(RacePoll(agents=agents_for(self._k(data), same_name)))

    @precondition(lambda self: self.ex.claims)
    @rule(claim=st.integers(0, 40), op=st.sampled_from(HOLDER_DRAWS),
          who=st.sampled_from(["holder", "holder", "holder", "impersonator", "forged", "other-agent"]),
          race=st.sampled_from([1, 1, 2, 4]))
    def holder(self, claim, op, who, race):
        self._do(Holder(claim=claim, op=op, who=who, race=race))

    @precondition(lambda self: self.ex.claims)
    @rule(claim=st.integers(0, 40), offset=st.sampled_from([-1, 0, 1]))
    def lease_boundary(self, claim, offset):
        self._do(Clock(claim=claim, offset=offset))

    @precondition(lambda self: self.ex.claims)
    @rule(claim=st.integers(0, 40), op=st.sampled_from(["extend", "release"]),
          times=st.integers(4, 7))
    def limit_run(self, claim, op, times):
        """Hit the per-claim extend cap and the release limit: the holder extends (or
        releases and re-claims) several times in a row."""
        self._do(Holder(claim=claim, op=op, who="holder", race=1, repeat=times))

    @rule(case=st.sampled_from(sorted(HOSTILE_CASES)))
    def hostile(self, case):
        """Wrong types, None, huge and negative numbers, non-JSON values, unknown ids: a
        store refuses each with a typed error (typed-errors), never a raw exception."""
        self._do(Hostile(case=case))

    @rule(ms=st.sampled_from([1, 9, 60, 700]))
    def tick(self, ms):
        self._do(Clock(tick=ms))

    @rule(ttl=st.sampled_from([5, 30]), offset=st.sampled_from([None, -1, 0, 1]),
          then=st.sampled_from([None, "release_lock", "lock_holder"]),
          owner=st.sampled_from(OWNERS), then_at=st.sampled_from([None, 0, 1]),
          data=st.data())
    def lock_race(self, ttl, offset, then, owner, then_at, data):
        """k daemons race for the lock (maybe at its expiry boundary), then one more call,
        maybe at the winner's expiry (``then_at``): its owner's release of a lock that ran
        out and nobody took since may answer either way (PROTOCOL.md#release_lock-on-an-expired-lock)."""
        self._do(LockRace(owners=OWNERS[: self._k(data)], ttl_ms=ttl, offset=offset))
        if then:
            self._do(LockOp(op=then, owner=owner, offset=then_at))

    @rule(probe=st.sampled_from(["idle_poll", "reads", "checkpoint", "checkpoint-reader"]))
    def wal_probe(self, probe):
        """Idle polls and reads must not write; TRUNCATE empties the WAL unless a reader is open."""
        if probe.startswith("checkpoint"):
            self._do(Checkpoint(reader=probe == "checkpoint-reader"))
        else:
            self._do(IdlePoll() if probe == "idle_poll" else Reads())

    @precondition(lambda self: bool(self.ctx.faults))
    @rule(data=st.data())
    def fault(self, data):
        kind = data.draw(st.sampled_from(self.ctx.faults), label="fault")
        step = Fault(fault=kind)
        if kind in ("kill", "pause"):
            step = replace(step, claim=data.draw(st.integers(0, 40), label="victim claim"))
        if kind == "kill":  # the call it lands in: drawn by the nemesis, weighted
            step = replace(step, during=ANY_CALL)
        if kind == "clock":
            step = replace(step, tick=data.draw(st.sampled_from([100, 1_000, 20_000]), label="jump"))
        self._do(step)

    def teardown(self):
        if self.failed:
            return
        if self.ctx.halted():
            self._check_last_step()
            return
        found = self.ex.finish()
        if found:
            self.ctx.record_failure(self.ex, found)
            raise ViolationFound(found)
        self.ctx.record_pass(self.ex)


def machine_for(ctx: Context) -> type[FerryMachine]:
    """A FerryMachine subclass bound to one campaign."""
    return type("FerryMachine", (FerryMachine,), {"ctx": ctx})
