"""The invariants of PROTOCOL.md#invariants, checked on a history, each under its stable id.

:class:`Checker` is a composition (Jepsen's ``compose``) over a named list of
:class:`~ferry_harness.check.invariant.Invariant` checks sharing one incremental
:class:`~ferry_harness.check.runstate.RunState`. ``fuzz`` (and ``ferry-harness check``, the
scenarios, the recorder) use :func:`fuzz_invariants`: most rules are checked through the
model (linearizability per task and per lock, the failing step classified by the rule it
breaks); the rest need a global view of the history: tokens across tasks, dependencies
across tasks, and the WAL measurements the executor attaches to ops as ``extra``. The crash
campaign composes its own checks with these (:func:`ferry_harness.check.invariants.crash_audit.crash_invariants`).

This module is the check layer's front door: it also exports the vocabulary the layers
above read (:class:`Violation`, :data:`INVARIANTS`, :func:`invariant_status`,
:func:`refusals`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ferry_harness.check.annotations import InvalidArgs, has, mark
from ferry_harness.check.history import History, Op
from ferry_harness.check.invariant import (
    GENERIC,
    INVARIANTS,
    NEEDS,
    ROBUSTNESS,
    Invariant,
    Violation,
    first_fact_first,
    invariant_kind,
    invariant_status,
    rank,
    refusals,
)
from ferry_harness.check.invariants.dag import DependenciesFirst, FailureCascades
from ferry_harness.check.invariants.faults import FaultProbes
from ferry_harness.check.invariants.holders import (
    TokensIssuedOnce,
    TokensNeverShown,
    TwoLiveHolders,
)
from ferry_harness.check.invariants.linearizable import PerObjectSearch
from ferry_harness.check.invariants.liveness import Liveness
from ferry_harness.check.invariants.lost import InspectShowsAll, ReadyNotRefused
from ferry_harness.check.invariants.typed import TypedErrors
from ferry_harness.check.invariants.wal import WalRules
from ferry_harness.check.model import ModelConfig, bad_arguments
from ferry_harness.check.ops import FEATURES, PROTOCOL
from ferry_harness.check.runstate import HOSTILE_OPS, RunState
from ferry_harness.check.sizes import WAL_BOUND_BYTES
from ferry_harness.errors import HarnessError

__all__ = ["GENERIC", "INVARIANTS", "NEEDS", "ROBUSTNESS", "Checker", "Invariant", "Violation",
           "first_fact_first", "full_capabilities", "fuzz_invariants", "invariant_kind",
           "invariant_status", "judge_history", "rank", "refusals"]


def fuzz_invariants(wal_bound_bytes: int = WAL_BOUND_BYTES) -> list[Invariant]:
    """Every check of a fuzz run, most specific first (fault probes, two live holders,
    leaked tokens, the model's per-object verdicts, then the global rules): the order in
    which their violations are reported, before :func:`first_fact_first`."""
    return [FaultProbes(), Liveness(), TwoLiveHolders(), TokensNeverShown(), PerObjectSearch(),
            TokensIssuedOnce(), DependenciesFirst(), WalRules(wal_bound_bytes), TypedErrors(),
            InspectShowsAll(), ReadyNotRefused(), FailureCascades()]


class Checker:
    """Incremental: call :meth:`check` after each step with the objects that step touched.

    What it learnt about a history (a :class:`RunState`: indexes of claims, tokens,
    dispatches, fulfils, sweeps, and each object's search frontier) is kept between calls,
    keyed by the ``History`` object: a call looks only at the ops appended since the last
    one, so checking after every step costs what the step added, and a full check is
    linear in the history.

    ``invariants`` (default :func:`fuzz_invariants`) are run in list order. One that raises
    is a bug of the harness, not a finding: :meth:`check` raises
    :class:`ferry_harness.errors.HarnessError` naming it (exit code 2), never a silent pass.
    """

    def __init__(self, cfg: ModelConfig | None = None, *, wal_bound_bytes: int = WAL_BOUND_BYTES,
                 search_budget: int = 200_000,
                 invariants: Sequence[Invariant] | None = None) -> None:
        self.cfg = cfg or ModelConfig()
        self.search_budget = search_budget
        self.invariants: list[Invariant] = (fuzz_invariants(wal_bound_bytes)
                                            if invariants is None else list(invariants))
        names = [inv.name for inv in self.invariants]
        if len(set(names)) != len(names):
            raise ValueError(f"invariant names must be unique: {names}")
        self.unknown: list[str] = []  # "object: why" for every search that gave up
        self.skips: frozenset[str] = frozenset()  # ferry_skips the executor reports
        self._runs: dict[int, RunState] = {}

    def check(self, history: History, new_ops: list[Op] | None = None) -> list[Violation]:
        """All violations visible in ``history``; with ``new_ops``, only objects they touch."""
        run = self._run_for(history, new_ops is None)
        run.ingest(history)
        everything = history.ops
        fresh_all = list(everything) if new_ops is None else list(new_ops)
        n = len(everything)
        for o in fresh_all:
            if 0 <= o.index < n and everything[o.index] is o:
                continue  # seen by run.ingest, which marked it already
            if o.op in HOSTILE_OPS and not has(o, InvalidArgs):
                why = bad_arguments(o, self.cfg)
                if why:
                    mark(o, InvalidArgs(why=why))
        # ops with invalid arguments are judged by the model alone (refused, or a
        # typed-errors finding); the global rules read only well-formed ones
        fresh = [o for o in fresh_all if not has(o, InvalidArgs)]
        out: list[Violation] = []
        try:
            for inv in self.invariants:
                try:
                    out += inv.check(run, fresh_all if inv.sees_invalid_args else fresh)
                except Exception as exc:
                    raise HarnessError(
                        f"the checker's invariant {inv.name!r} (reporting under "
                        f"{', '.join(inv.ids[:3])}{', …' if len(inv.ids) > 3 else ''}) raised "
                        f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.unknown.extend(run.undecided)
            run.undecided.clear()
        return first_fact_first(_one_per_object(out))

    def _run_for(self, history: History, fresh_start: bool) -> RunState:
        """The state for ``history`` (a new one for a new or rewritten history)."""
        key = id(history)
        runs = self._runs
        run = runs.get(key)
        if (fresh_start or run is None or run.ref() is not history or run.cfg != self.cfg
                or run.budget != self.search_budget or not run.consistent(history)):
            run = RunState(history, self.cfg, self.search_budget)
            runs.pop(key, None)
            while len(runs) >= 4:  # old examples' histories: forget them
                runs.pop(next(iter(runs)))
            runs[key] = run
        return run


def _one_per_object(found: list[Violation]) -> list[Violation]:
    """One finding per invariant and object: the first check to name it tells it (two live
    holders and the model's search both see one race; it is one violation)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for v in found:
        obj = v.detail.get("object")
        if isinstance(obj, str):
            if (v.invariant, obj) in seen:
                continue
            seen.add((v.invariant, obj))
        out.append(v)
    return out


def full_capabilities() -> frozenset[str]:
    """What a full protocol store has (the default when nothing says otherwise)."""
    return frozenset(set(PROTOCOL) | set(FEATURES) | {"dag"})


def judge_history(history: History, capabilities: Iterable[str] | None = None, *,
                  wal_bound_bytes: int = WAL_BOUND_BYTES,
                  search_budget: int = 200_000) -> tuple[list[Violation], list[str]]:
    """Every violation in a recorded ``history`` and what stayed undecided, for a target
    with ``capabilities`` (operations, features, declared choices; default a full store):
    what ``ferry-harness check``, the recorder and the pytest fixture report."""
    caps = set(full_capabilities() if capabilities is None else capabilities)
    checker = Checker(ModelConfig().for_capabilities(caps), wal_bound_bytes=wal_bound_bytes,
                      search_budget=search_budget)
    found = checker.check(history)
    return found, list(checker.unknown)
