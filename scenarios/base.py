"""What every scenario is made of: a :class:`Session` to act in, and the :class:`Scenario` record.

A scenario is a short script of one race against the store protocol. It acts only through
the harness: a :class:`Session` *is* a :class:`ferry_harness.run.executor.Executor` (a fresh database,
the shared clock, the worker pool, one :class:`ferry_harness.check.history.History`), so every call it
makes runs in a real worker process and is recorded as an :class:`~ferry_harness.check.history.Op`.
After each call or race the harness :class:`~ferry_harness.check.checker.Checker` looks at what changed;
the first violation ends the scenario (:class:`Stop`). A scenario may state an extra
expectation with :meth:`Session.expect` only where no checker rule covers it, and must
name the invariant id (PROTOCOL.md#invariants) that expectation belongs to; the session's
Checker judges it too (the fuzz invariants plus ``scenario-expectations``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ferry_harness.check import ops as ops_module
from ferry_harness.check.annotations import WalSample, mark
from ferry_harness.check.checker import INVARIANTS, Checker, Violation, fuzz_invariants
from ferry_harness.check.history import OK, History, Op
from ferry_harness.check.invariants.expectations import EXPECT, ScenarioExpectations
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.sizes import WAL_BOUND_BYTES
from ferry_harness.errors import HarnessError, SetupFailed
from ferry_harness.errors import ScenarioStop as Stop
from ferry_harness.run.executor import Executor
from ferry_harness.run.steps import Step, step_to_json
from ferry_harness.runtime.client import PlannedCall, WorkerPool
from ferry_harness.runtime.clock import SharedClock

MAX_ROUNDS = 20  # a race is repeated at most this often; it stops at the first violation
QUEUE_TTL_MS = 600_000
EXEC_TTL_MS = 10_000

Call = tuple[int, str, str, dict[str, Any]]  # (worker slot, op, agent, args)


@dataclass
class ScenarioContext:
    """What the runner lends a scenario: the pool (already started) and where to put files."""

    pool: WorkerPool
    clock: SharedClock
    workdir: str
    max_rounds: int = MAX_ROUNDS
    wal_bound_bytes: int = WAL_BOUND_BYTES
    runs: int = 0  # scenarios run so far on this context (example numbers)


@dataclass
class ScenarioResult:
    """The outcome of one scenario run. ``invariant`` is the violated id, or the declared one."""

    name: str
    passed: bool
    invariant: str
    explanation: str
    history: History
    violations: list[Violation] = field(default_factory=list)
    status: str = "pass"  # pass | fail | skip | error
    seconds: float = 0.0
    rounds: int = 0
    script: list[str] = field(default_factory=list)
    capabilities: frozenset[str] = frozenset()
    unknown: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    """One named race: what it checks, where it comes from, and the script that stages it."""

    name: str
    invariant: str  # the invariant id this race is about (PROTOCOL.md#invariants)
    description: str  # one sentence
    source: str  # the PROTOCOL.md section (file#anchor) whose rule this race exercises
    script: Callable[[Session], str]  # runs the race; returns the pass explanation
    # operations / features the script cannot do without; TAKE: claim(id) or poll_next
    needs: tuple[str, ...] = ("dispatch", "claim", "fulfill")

    def __post_init__(self) -> None:
        if self.invariant not in INVARIANTS:
            raise ValueError(f"scenario {self.name}: unknown invariant id {self.invariant!r}")

    def run(self, ctx: ScenarioContext) -> ScenarioResult:
        """Run on a fresh database; never raises for what the target does."""
        t0 = time.perf_counter()
        session = Session(ctx, self)
        missing = [n for n in self.needs if not has_capability(session.capabilities, n)]
        explanation, status = "", "pass"
        if missing:
            status = "skip"
            explanation = f"skipped: the target lacks {', '.join(missing)}"
        else:
            try:
                explanation = self.script(session)
                session.audit()
            except Stop:
                status = "fail"
            except SetupFailed as exc:
                status, explanation = "error", f"could not stage the race: {exc}"
            except HarnessError:
                raise  # the pool itself is broken: nothing more can run
            except Exception as exc:  # the target answered in a shape the script cannot use
                status = "error"
                explanation = f"the scenario could not go on: {type(exc).__name__}: {exc}"
            finally:
                session.release_all()
        if status == "fail":
            first = session.violations[0]
            where = f" (round {session.rounds_run})" if session.rounds_run > 1 else ""
            explanation = f"{first.message}{where}"
        elif status == "pass" and session.checker.unknown:
            explanation += f"; undecided: {session.checker.unknown[0]}"
        invariant = session.violations[0].invariant if session.violations else self.invariant
        return ScenarioResult(
            name=self.name, passed=status in ("pass", "skip"), invariant=invariant,
            explanation=explanation, history=session.history,
            violations=list(session.violations), status=status,
            seconds=time.perf_counter() - t0, rounds=max(1, session.rounds_run),
            script=list(session.script), capabilities=frozenset(session.capabilities),
            unknown=list(session.checker.unknown))


class Session(Executor):
    """One scenario run: an Executor (fresh database, shared clock, pool, history, checker)
    with a few verbs for writing races as plain scripts."""

    def __init__(self, ctx: ScenarioContext, scenario: Scenario) -> None:
        ctx.runs += 1
        path = os.path.join(ctx.workdir, f"{scenario.name}.db")
        checks = [*fuzz_invariants(ctx.wal_bound_bytes), ScenarioExpectations()]
        super().__init__(ctx.pool, ctx.clock, path, example=ctx.runs,
                         checker=Checker(ModelConfig(), invariants=checks))
        self.scenario = scenario
        self.max_rounds = ctx.max_rounds
        self.rounds_run = 0
        self.script: list[str] = []
        self._paused: set[int] = set()

    # ------------------------------------------------------------------ bookkeeping
    @property
    def size(self) -> int:
        """How many worker processes there are (at least 2)."""
        return self.pool.size

    def now(self) -> int:
        return self.clock()

    def say(self, text: str) -> None:
        """Narrate a step of the script (shown in the report of a failing scenario)."""
        self.script.append(f"t={self.clock()}: {text}")

    def rounds(self, n: int | None = None) -> Iterator[int]:
        """Repeat a race: yields 1, 2, … up to ``n`` (default: the context's maximum)."""
        limit = self.max_rounds if n is None else min(n, self.max_rounds)
        for r in range(1, max(1, limit) + 1):
            self.rounds_run = r
            yield r

    def each(self, variants: Iterable[Any]) -> Iterator[Any]:
        """Repeat a race once per variant (a TTL, an offset…), counting rounds like :meth:`rounds`."""
        for r, variant in enumerate(list(variants)[: max(1, self.max_rounds)], 1):
            self.rounds_run = r
            yield variant

    def _checked(self, ops: list[Op]) -> list[Op]:
        """Let the harness checker look at what these ops touched; stop at a violation."""
        self._learn(ops)
        found = self.checker.check(self.history, ops)
        if found:
            self.violations.extend(found)
            raise Stop
        return ops

    def step(self, step: Step) -> None:
        """Run one of the Executor's own steps (``IdlePoll``, ``Checkpoint``, ``Reads``…)."""
        self.say(f"executor step {step_to_json(step)}")
        if self.run_step(step):
            raise Stop

    def expect(self, ok: bool, invariant: str, message: str, ops: Iterable[Op] = ()) -> None:
        """A scenario-specific expectation that no checker rule covers, under its invariant id.

        One that does not hold is recorded as an ``expect`` op and judged by the session's
        Checker (:mod:`ferry_harness.check.invariants.expectations`), which stops the scenario."""
        if ok:
            return
        if invariant not in INVARIANTS:
            raise ValueError(f"unknown invariant id {invariant!r}")
        t = time.monotonic_ns()
        op = self.history.append(Op(
            index=self.history.next_index(), process=-1, agent="scenario", op=EXPECT,
            args={"invariant": invariant, "message": message, "ops": [o.index for o in ops],
                  "scenario": self.scenario.name},
            invoke_ns=t, now=self.clock(), complete_ns=t, type=OK, value=False,
            example=self.example))
        self._checked([op])
        raise HarnessError(f"scenario {self.scenario.name}: the Checker did not report the "
                           f"failed expectation {invariant!r} (is scenario-expectations "
                           "among its invariants?)")

    # ------------------------------------------------------------------ acting
    def call(self, slot: int, op: str, agent: str, **args: Any) -> Op:
        """One operation in worker ``slot`` as ``agent`` (no barrier)."""
        return self.race([(slot, op, agent, args)])[0]

    def race(self, calls: list[Call]) -> list[Op]:
        """Several operations, one per worker slot, released together at one barrier."""
        planned = [PlannedCall(slot=slot % self.size, op=op, args=dict(args), agent=agent)
                   for slot, op, agent, args in calls]
        if len(planned) > 1:
            self.say(f"race at one barrier: {', '.join(f'w{c.slot} {c.agent} {c.op}' for c in planned)}")
        return self._checked(self._run(planned))

    def measured(self, calls: list[Call], *, idle: bool | None = None) -> list[Op]:
        """Like :meth:`race`, with the ``-wal`` size measured around it (for WAL rules).

        ``idle=True`` tells the checker nothing here had work to do, so the WAL must not grow;
        the default decides from the outcome (a poll or sweep that found nothing).
        """
        before = self.pool.wal_size()
        planned = [PlannedCall(slot=slot % self.size, op=op, args=dict(args), agent=agent)
                   for slot, op, agent, args in calls]
        ops = self._run(planned)
        after = self.pool.wal_size()
        quiet = idle if idle is not None else all(
            o.type == OK and not o.value for o in ops if o.op in ("poll_next", "sweep"))
        for o in ops:
            mark(o, WalSample(wal_before=before, wal_after=after, idle=quiet))
        self.say(f"measured {', '.join(o.op for o in ops)}: -wal {before} -> {after} bytes")
        return self._checked(ops)

    def dispatch(self, target: str | None = None, *, exec_ttl: int = EXEC_TTL_MS,
                 queue_ttl: int = QUEUE_TTL_MS, attempts: int = 1, deps: Iterable[str] = (),
                 title: str = "") -> str:
        """Dispatch one task (from worker 0, as ``client``); returns its id."""
        args: dict[str, Any] = {"target_agent": target, "title": title,
                                "queue_ttl_ms": queue_ttl, "exec_ttl_ms": exec_ttl,
                                "max_attempts": attempts, "payload": {"title": title}}
        if deps:
            args["depends_on"] = list(deps)
        op = self.call(0, "dispatch", "client", **args)
        self.need(op, f"dispatch {title or 'a task'}")
        self.say(f"dispatched {title or 'a task'} = {str(op.value)[:8]}")
        return op.value

    def claim(self, slot: int, agent: str, task_id: str) -> dict[str, Any]:
        """Claim a task that must be claimable now; returns the claim (task_id, token, …)."""
        op = self.call(slot, "claim", agent, task_id=task_id)
        self.need(op, f"claim of {task_id[:8]} by {agent}")
        self.say(f"w{slot} {agent} claimed {task_id[:8]} until {op.value['lease_expires_at']}")
        return op.value

    @property
    def poll_only(self) -> bool:
        """The target has no claim by id: tasks are taken with ``poll_next`` only."""
        return not has_capability(self.capabilities, "claim")

    def take(self, slot: int, agent: str, task_id: str) -> dict[str, Any]:
        """Take this task, which must be the one ready for ``agent`` now: ``claim`` it, or on
        a poll-only target ``poll_next`` and require the queue to hand out this very task
        (scenarios keep one ready task at a time, so a poll has no other choice)."""
        if not self.poll_only:
            return self.claim(slot, agent, task_id)
        op = self.need(self.call(slot, "poll_next", agent), f"poll for {task_id[:8]} by {agent}")
        got = op.value.get("task_id")
        if got != task_id:
            raise SetupFailed(f"the poll by {agent} was handed {str(got)[:8]}, not {task_id[:8]} "
                              "(the only task the script left ready)")
        self.say(f"w{slot} {agent} polled and got {task_id[:8]} until "
                 f"{op.value.get('lease_expires_at')}")
        return op.value

    def grab(self, slot: int, agent: str, task_id: str) -> Call:
        """A rival's attempt to take ``task_id``, for :meth:`race`: ``claim`` it by id, or
        ``poll_next`` on a poll-only target (it is the only task that could be handed out)."""
        if self.poll_only:
            return (slot, "poll_next", agent, {})
        return (slot, "claim", agent, {"task_id": task_id})

    def need(self, op: Op, what: str) -> Op:
        """A staging step must succeed (with a value where one is due), or the race cannot run."""
        if op.type != OK or (op.op in ("dispatch", "claim", "poll_next") and not op.value):
            got = f"{op.type} {op.error or ''} {op.message or op.note or ''}".strip()
            raise SetupFailed(f"{what} did not succeed ({got or 'returned nothing'})")
        return op

    def set_clock(self, ms: int, why: str = "") -> None:
        """Move the shared clock to exactly ``ms`` (forward only: leases never un-expire)."""
        if not self.move_clock(ms):
            raise ValueError(f"the clock only moves forward ({self.clock()} -> {ms})")
        self.say(f"clock set to {ms}{' (' + why + ')' if why else ''}")

    def pause(self, slot: int) -> None:
        """SIGSTOP a worker: alive, frozen, still holding whatever it held."""
        self.pool.pause(slot)
        self._paused.add(slot)
        self._mark("pause", slot=slot)

    def resume(self, slot: int) -> None:
        self.pool.resume(slot)
        self._paused.discard(slot)
        self._mark("resume", slot=slot)

    def hold_reader(self) -> None:
        """Open a read transaction in an outside process (a long reader pins the WAL)."""
        self.pool.hold_reader()
        self._mark("reader-open")

    def drop_reader(self) -> None:
        self.pool.drop_reader()
        self._mark("reader-closed")

    def _mark(self, what: str, **args: Any) -> None:
        """Record a fault as a history entry (process -1, like the nemesis), for the timeline."""
        t = time.monotonic_ns()
        self.history.append(Op(index=self.history.next_index(), process=-1, agent="nemesis",
                               op="nemesis", args={"fault": what, **args}, invoke_ns=t,
                               now=self.clock(), complete_ns=t, type=OK, example=self.example))
        self.say(f"{what} {args or ''}".strip())

    def release_all(self) -> None:
        """Leave the pool as we found it: no paused worker, no open reader."""
        for slot in list(self._paused):
            self.resume(slot)
        self.pool.drop_reader()

    def audit(self) -> None:
        """The Executor's closing audit: sweep, read every task back, checkpoint."""
        self.say("audit: sweep, get/salvaged of every task, checkpoint(TRUNCATE)")
        if self.finish():
            raise Stop

    # ------------------------------------------------------------------ small helpers
    def slot_of(self, op: Op) -> int:
        """The worker slot that ran ``op``."""
        return self.pool.slot_of(op.process)

    def have(self, names: Iterable[str]) -> list[str]:
        """Those of ``names`` (operations or protocol features) the target has."""
        return [n for n in names if has_capability(self.capabilities, n)]

    @staticmethod
    def winners(ops: Iterable[Op]) -> list[Op]:
        """The ops that returned a truthy value (claims that won, locks acquired)."""
        return [o for o in ops if o.type == OK and o.value]

    @staticmethod
    def forged_token() -> str:
        """A well-formed token nobody was ever issued."""
        return str(uuid.uuid4())


# in Scenario.needs: the script takes tasks with claim(id), or with poll_next where the
# target has no claim (Session.take / Session.grab)
TAKE = "claim-or-poll"
_NOT_FEATURES = frozenset(ops_module.PROTOCOL) | {"dag", "wal-file"}


def has_capability(capabilities: Iterable[str], name: str) -> bool:
    """Does the target have an operation (``claim``…), ``dag``, ``wal-file``, :data:`TAKE`
    (claim or poll_next), or a protocol feature (``lease``, ``targets``… from
    ``ferry_harness.check.ops.FEATURES``)?

    A feature this harness does not list is assumed present, as the harness assumes a
    store that declares nothing to be a full protocol store (PROTOCOL.md#capability-declarations).
    """
    if name in capabilities:
        return True
    if name == TAKE:
        return "claim" in capabilities or "poll_next" in capabilities
    if name in _NOT_FEATURES:
        return False
    features = getattr(ops_module, "FEATURES", None)
    if features is None:
        return True
    if name not in features:
        raise ValueError(f"unknown capability {name!r}: not an operation, 'dag', 'wal-file' "
                         f"or one of ferry_harness.check.ops.FEATURES {sorted(features)}")
    return False


def holder_args(op: str, task_id: str, token: str | None, tag: str) -> dict[str, Any]:
    """Arguments of a holder operation, with a payload that says who sent it."""
    args: dict[str, Any] = {"task_id": task_id, "token": token}
    if op == "fulfill":
        args["result"] = {"by": tag}
    elif op == "fail":
        args["reason"] = f"failed by {tag}"
    elif op == "release":
        args["reason"] = f"released by {tag}"
    elif op == "salvage":
        args["partial"] = {"by": tag}
    return args

