"""What an invariant is: its ids (PROTOCOL.md#invariants), what it needs from the target,
the :class:`Violation` it reports, and the :class:`Invariant` protocol every check follows.

A check is a small object with one concept; :class:`ferry_harness.check.checker.Checker` composes
a named list of them (Jepsen's ``compose``) over one incremental
:class:`ferry_harness.check.runstate.RunState`. Helpers here are shared by several checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ferry_harness.check.annotations import CutShort, has
from ferry_harness.check.history import FAIL, OK, History, Op
from ferry_harness.check.ops import JSONObject
from ferry_harness.check.rules import anchor_for

if TYPE_CHECKING:  # the run state imports this module's helpers: types only
    from ferry_harness.check.runstate import RunState

INVARIANTS: dict[str, str] = {
    "single-winner": "a task is never held by two claims at once",
    "token-unique": "no token is issued twice; a retired token is never accepted again",
    "holder-guard": "only the current token holder changes a claimed task",
    "lease-half-open": "leases and locks hold on [start, expires): boundaries exact",
    "lock-exclusive": "at most one unexpired owner of a daemon lock",
    "dag-order": "no task is claimed before all its dependencies are COMPLETED",
    "no-lost-task": "every task in exactly one state; results and salvage never lost",
    "wal-bounded": "TRUNCATE checkpoint with no reader empties the -wal; WAL stays bounded",
    "idle-no-write": "idle polls and reads append nothing to the WAL",
    "linearizable": "every concurrent history has a legal sequential order",
    "typed-errors": "every refusal is a PROTOCOL.md#error-classes error class (ferry's addition)",
    "refusal-class": "a refusal names a check that really failed (ferry's addition)",
    "refusal-order": "a refusal names the first failing check (only when declared)",
    "integrity": "PRAGMA integrity_check is ok after faults (ferry's addition)",
    "liveness": "every call returns or raises in bounded time; no unexplained worker death "
                "(ferry's addition)",
}

# What each invariant needs from the target (operation names from ferry_harness.check.ops.PROTOCOL,
# features from ferry_harness.check.ops.FEATURES, "dag", "wal-file" when the -wal file exists,
# and "pg-probes" for a Postgres target, whose server the harness can measure).
# "a|b": either will do (the executor races poll_next when a target cannot claim by id).
NEEDS: dict[str, tuple[str, ...]] = {
    "single-winner": ("dispatch", "claim|poll_next"),
    "token-unique": ("dispatch", "claim|poll_next", "fulfill"),
    "holder-guard": ("dispatch", "claim|poll_next", "fulfill"),
    "lease-half-open": ("dispatch", "claim|poll_next", "fulfill", "lease"),
    "lock-exclusive": ("acquire_lock", "release_lock", "lock_holder"),
    "dag-order": ("dispatch", "claim|poll_next", "fulfill", "dag"),
    "no-lost-task": ("dispatch", "get"),
    "wal-bounded": ("checkpoint", "wal-file"),
    "idle-no-write": ("poll_next", "wal-file"),
    "linearizable": ("dispatch", "claim|poll_next"),
    "typed-errors": (),
    "refusal-class": ("dispatch", "claim|poll_next", "fulfill", "typed-refusals"),
    "refusal-order": ("dispatch", "claim|poll_next", "fulfill", "refusal-order"),
    "integrity": ("wal-file",),
    "liveness": (),
}

# Other sets of needs that also let an invariant fire, for a target without the first
# (same format as NEEDS): a daemon lock's boundaries are lease-half-open's
# (PROTOCOL.md#leases-are-half-open) and the per-object search orders lock calls too
# (PROTOCOL.md#linearizable); without get, no-lost-task still judges inspect() and every
# claim or poll (an empty one while a task is ready, a claim of a final task).
ALSO_NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "lease-half-open": (("acquire_lock",),),
    "linearizable": (("acquire_lock",),),
    "no-lost-task": (("dispatch", "inspect"), ("dispatch", "claim|poll_next")),
    # a Postgres target: measured by the server's probes (PROTOCOL.md#postgres-targets)
    "idle-no-write": (("poll_next", "pg-probes"), ("get|salvaged|inspect", "pg-probes")),
    "wal-bounded": (("pg-probes",),),
}

# Findings about the refusal's class, not about safety: named only when nothing else is.
MINOR = frozenset({"refusal-class", "refusal-order"})

# How specific an invariant's name is: the generic search verdict comes last.
GENERIC = frozenset({"linearizable"})

# Robustness findings (PROTOCOL.md#several-findings): how a store refuses, not what it
# does to tasks. One never ends the search for safety violations, and every safety
# finding ranks before it.
ROBUSTNESS = frozenset({"typed-errors", "refusal-class", "refusal-order"})

# A hang or an unexplained worker death: not wrong data, so it ranks after safety, but it
# ends the search (every further call would wait out the same timeout).
LIVENESS = frozenset({"liveness"})

# The order in which kinds of findings are named: safety, then liveness, then robustness.
KINDS = ("safety", "liveness", "robustness")


def invariant_kind(invariant: str) -> str:
    """``safety``, ``liveness`` or ``robustness`` (``integrity`` is safety: a corrupt
    file loses tasks)."""
    if invariant in ROBUSTNESS:
        return "robustness"
    return "liveness" if invariant in LIVENESS else "safety"


def rank(invariant: str) -> tuple[int, bool, bool]:
    """Sort key naming safety first, the generic ``linearizable`` last among safety, and
    ``refusal-class`` / ``refusal-order`` after ``typed-errors``."""
    return (KINDS.index(invariant_kind(invariant)), invariant in GENERIC, invariant in MINOR)


@dataclass
class Violation:
    """One broken rule, with the ops that show it (history indices)."""

    invariant: str
    message: str
    ops: list[int] = field(default_factory=list)
    detail: JSONObject = field(default_factory=dict)

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        d["protocol"] = self.protocol
        return d

    @property
    def protocol(self) -> str:
        """Where the broken rule is explained: the section of PROTOCOL.md that says the
        sentence behind it (harness/check/rules.py), else the invariant's own section."""
        return anchor_for(self.invariant, self.message)

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message} (see {self.protocol})"


class Invariant(Protocol):
    """One check of the composed :class:`~ferry_harness.check.checker.Checker`.

    ``check`` is called after every step with the run state (indexes over every op seen so
    far, already updated with the fresh ones) and the fresh ops, and returns what those ops
    make visible: never a finding about an op it was not handed, so an incremental check
    reports each violation once. It must not raise: the Checker turns an exception into a
    :class:`ferry_harness.errors.HarnessError` naming the check (``name``).
    """

    name: ClassVar[str]  # how the Checker's list and its harness errors name this check
    ids: ClassVar[tuple[str, ...]]  # the INVARIANTS ids its violations are reported under
    needs: ClassVar[tuple[str, ...]]  # capabilities it needs to find anything (NEEDS format)
    # True: handed every fresh op; False: only well-formed ones (no ``invalid_args``: ops
    # with hostile arguments are judged by the model alone)
    sees_invalid_args: ClassVar[bool]

    def check(self, run: RunState, fresh: list[Op]) -> list[Violation]: ...


def invariant_status(capabilities: Iterable[str],
                     skips: dict[str, str] | None = None) -> dict[str, str]:
    """``checked`` or ``skipped (why)`` for every invariant, from the target's capabilities
    and the skips it declares itself (``ferry_skips = {invariant: reason}`` on the store)."""
    caps = set(capabilities)

    def lacks(needs: tuple[str, ...]) -> list[str]:
        return [n for n in needs if not set(n.split("|")) & caps]

    out = {}
    for inv, needs in NEEDS.items():
        missing = lacks(needs)
        if skips and inv in skips:
            out[inv] = f"skipped ({skips[inv]})"
        elif missing and all(lacks(other) for other in ALSO_NEEDS.get(inv, ())):
            out[inv] = f"skipped (target lacks {', '.join(missing)})"
        else:
            out[inv] = "checked"
    return out


def first_fact_first(violations: list[Violation]) -> list[Violation]:
    """Order violations so safety leads and a specific name leads (the report names the
    run by the first): safety before liveness before robustness (:func:`rank`); within a
    kind the checks' own order (fault probes, two live holders, leaked tokens, the model's
    per-object verdicts, global rules), the generic ``linearizable`` verdict last."""
    return sorted(violations, key=lambda v: rank(v.invariant))


def refusals(history: History) -> dict[str, int]:
    """Count of typed refusals by class (for the report)."""
    out: dict[str, int] = {}
    for o in history:
        if o.type == FAIL:
            out[o.error or "?"] = out.get(o.error or "?", 0) + 1
    return out


# ----------------------------------------------------------------------------- helpers
def hashable(x: Any) -> Any:
    """``x`` as a dict key (a store may hand back unhashable ids or tokens)."""
    if type(x) is str or x is None:
        return x
    try:
        hash(x)
    except TypeError:
        return ("unhashable", json.dumps(x, sort_keys=True, default=str))
    return x


def injected(o: Op) -> bool:
    """The op ended early because of ferry itself (a fault, the budget), not the store."""
    return has(o, CutShort)


def concurrent(a: Op, b: Op) -> bool:
    """The two calls overlapped in real time."""
    return a.invoke_ns < (b.complete_ns or 0) and b.invoke_ns < (a.complete_ns or 0)


def lease_covers(claim: Op, now: int, closed: bool = False) -> bool:
    """The lease ``claim`` won still held at store instant ``now`` (``closed``: declared
    lease-closed, the expiry instant included)."""
    expires = claim.value.get("lease_expires_at")
    return not isinstance(expires, int) or claim.now <= now < expires + (1 if closed else 0)


def won_claims(ops: Iterable[Op]) -> list[Op]:
    """The claims and polls among ``ops`` that handed out a task."""
    return [o for o in ops if o.op in ("claim", "poll_next") and o.type == OK and o.value]
