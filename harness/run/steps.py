"""Steps: what an example does, one typed value per action, and their one JSON codec.

The generator draws steps, the executor carries them out, the shrinker cuts lists of them
down, and reports and the example database store them as JSON (``step_to_json`` /
``step_from_json``), so ``ferry-harness replay`` runs exactly what was found.

References inside steps (``task``, ``claim``, ``depends_on``) are positions among what the
run has produced so far, counted from the newest (0 = the task dispatched last, the claim
made last) and taken modulo the count: a shrunk or replayed list always resolves to
something, and small numbers (what shrinking tends to) point at the freshest objects.
Parameters that are protocol parameters carry PROTOCOL.md#operations' name (``queue_ttl_ms``,
``exec_ttl_ms``, ``max_attempts``, ``target_agent``, ``ttl_ms``); times are milliseconds
on the harness clock unless the name says otherwise.

>>> s = step_from_json({"kind": "dispatch", "queue_ttl_ms": 500, "exec_ttl_ms": 50})
>>> s
Dispatch(target_agent=None, queue_ttl_ms=500, exec_ttl_ms=50, max_attempts=1, depends_on=())
>>> step_to_json(s)
{'kind': 'dispatch', 'queue_ttl_ms': 500, 'exec_ttl_ms': 50, 'max_attempts': 1}
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any, Union

from ferry_harness.check.ops import JSONObject
from ferry_harness.errors import UsageError


@dataclass(frozen=True, kw_only=True)
class Scheduled:
    """Fields of the steps that may race several workers in one round (schedule mode)."""

    pct: int | None = None  # seed of the PCT drawer for this step's race rounds; None: default
    schedules: tuple[tuple[int, ...], ...] = ()  # per multi-call round, the worker chosen at
    # each schedule point, recorded when the step ran (a replay follows these, then the default order)
    sequential: str | None = None  # the shrinker's sequential form: a round's calls run one
    # after another, each alone, "in-order" (worker 0 first) or "reversed" (a failure that
    # still shows needs no race); None: they race


@dataclass(frozen=True, kw_only=True)
class Dispatch:
    """The client submits one task (PROTOCOL.md#dispatch); its payload is its number."""

    target_agent: str | None = None  # the only agent that may take it; None: any agent
    queue_ttl_ms: int  # how long it may wait to be claimed before it times out, ms
    exec_ttl_ms: int  # length of each lease on it, ms
    max_attempts: int = 1  # leases it may have before a lapsed one ends it TIMED_OUT
    depends_on: tuple[int, ...] = ()  # references to earlier tasks it waits for


@dataclass(frozen=True, kw_only=True)
class RaceClaim(Scheduled):
    """Agents race to ``claim`` one task by id (a poll race on a poll-only queue)."""

    task: int  # reference to the task
    agents: tuple[str, ...]  # one racer per agent name, one per worker (extra names dropped)
    window: int | None = None  # first go to the task's queue window end plus this, ms


@dataclass(frozen=True, kw_only=True)
class RacePoll(Scheduled):
    """Agents race ``poll_next``: each may be handed some ready task."""

    agents: tuple[str, ...]  # one racer per agent name, one per worker (extra names dropped)


@dataclass(frozen=True, kw_only=True)
class Holder(Scheduled):
    """A holder operation on a known claim: by its holder, racing copies of it, or a
    caller that must be refused."""

    claim: int  # reference to the claim
    op: str  # fulfill, fail, release, extend or salvage
    who: str = "holder"  # holder (the claim's own agent and token), impersonator (its
    # agent, no token), forged (a made-up token) or other-agent (its token, another agent)
    race: int = 1  # the holder sends the op from this many workers at once
    repeat: int | None = None  # the holder does ``op`` this many times in a row (extend,
    # or release and claim again): the per-claim limits must bite; None: once


@dataclass(frozen=True, kw_only=True)
class Hostile:
    """One call with a hostile argument, named in ``hostile.HOSTILE_CASES``."""

    case: str  # the case's name


@dataclass(frozen=True, kw_only=True)
class Clock:
    """Move the harness clock: by ``tick`` ms, or to a claim's lease expiry plus ``offset``."""

    tick: int | None = None  # advance by this many ms; None: go to a lease boundary
    claim: int | None = None  # reference to the claim whose lease expiry is the boundary
    offset: int | None = None  # ms from that expiry (-1, 0, +1: the half-open edge)


@dataclass(frozen=True, kw_only=True)
class LockRace(Scheduled):
    """Daemons race ``acquire_lock`` on one lock, maybe at its previous holder's expiry."""

    owners: tuple[str, ...]  # one racer per owner name, one per worker
    ttl_ms: int  # the lock's time to live for the winner, ms
    offset: int | None = None  # first go to the last known lock expiry plus this, ms


@dataclass(frozen=True, kw_only=True)
class LockOp:
    """One more lock call after a lock race."""

    op: str  # release_lock or lock_holder
    owner: str = "observer"  # who calls it (``release_lock`` releases as this owner)
    #: first go to the lock's last known expiry plus this, ms (None: no clock move), so an
    #: owner also releases a lock of its own that ran out and nobody took since
    offset: int | None = None


@dataclass(frozen=True, kw_only=True)
class IdlePoll:
    """Settle, then one measured poll: an idle poll must not write to the -wal."""


@dataclass(frozen=True, kw_only=True)
class Reads:
    """``get`` / ``salvaged`` / ``inspect`` of recent tasks, each measured: reads must not write."""


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A ``TRUNCATE`` checkpoint, which must empty the -wal unless a reader holds it open."""

    reader: bool = False  # an outside reader keeps a snapshot open meanwhile


@dataclass(frozen=True, kw_only=True)
class Audit:
    """The end of an example: materialise expiries, read everything back, check integrity."""


@dataclass(frozen=True, kw_only=True)
class Fault(Scheduled):
    """A fault the nemesis injects (``kill``, ``pause`` or ``clock``); the executor probes
    what it left behind. Fields left None are drawn when the step runs and recorded in
    the step as run, so a replay fires the same way."""

    fault: str  # kill, pause or clock
    claim: int | None = None  # kill/pause: reference to the victim claim (None: the newest)
    slot: int | None = None  # kill/pause: worker slot of the fresh victim lease, if one is made
    exec_ttl_ms: int | None = None  # kill/pause: lease length of that fresh victim task, ms
    aim: str | None = None  # kill: "write-tx" (hunt for the write transaction), "random",
    # or "after-commit" (the shrinker's: right after the call's after_commits-th commit)
    after_commits: int | None = None  # kill aim after-commit: commits let through first
    delay_us: int | None = None  # kill/pause: from the send of the victim's call, µs
    during: str | None = None  # kill: the call it lands in (faults.DURING; "any": drawn; None: fulfill)
    tick: int | None = None  # clock: jump forward this many ms (None: 1000)


Step = Union[Dispatch, RaceClaim, RacePoll, Holder, Hostile, Clock, LockRace, LockOp,  # noqa: UP007
             IdlePoll, Reads, Checkpoint, Audit, Fault]

# the JSON ``kind`` tag of each step type
KINDS: dict[str, type[Step]] = {
    "dispatch": Dispatch, "race_claim": RaceClaim, "race_poll": RacePoll, "holder": Holder,
    "hostile": Hostile, "clock": Clock, "lock_race": LockRace, "lock_op": LockOp,
    "idle_poll": IdlePoll, "reads": Reads, "checkpoint": Checkpoint, "audit": Audit,
    "fault": Fault,
}
KIND_OF: dict[type[Step], str] = {t: k for k, t in KINDS.items()}
# steps whose race rounds get a PCT seed drawn by the generator (schedule mode)
RACES: tuple[type[Step], ...] = (RaceClaim, RacePoll, Holder, LockRace)


def kind(step: Step) -> str:
    """The step's JSON ``kind`` tag (``race_claim``…)."""
    return KIND_OF[type(step)]


def step_to_json(step: Step) -> JSONObject:
    """The step as JSON data: its ``kind``, its own fields, then ``pct`` and ``schedules``;
    fields that are None or empty (not set) are left out, tuples become lists."""
    out: JSONObject = {"kind": kind(step)}
    scheduling = {f.name for f in fields(Scheduled)}  # last: the step's own fields lead
    for f in sorted(fields(step), key=lambda f: f.name in scheduling):
        v = getattr(step, f.name)
        if v is None or v == ():
            continue
        out[f.name] = _plain(v)
    return out


def step_from_json(data: Any) -> Step:
    """The step JSON data describes. Raises :class:`UsageError` naming the step when its
    kind or a field is unknown, a field is missing, or a value has the wrong type (a
    report or saved example written by another version of ferry)."""
    if not isinstance(data, dict):
        raise UsageError(f"a step must be a JSON object, got {_show(data)}")
    tag = data.get("kind")
    cls = KINDS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise UsageError(f"unknown step kind {tag!r} in step {_show(data)} (known: "
                         f"{', '.join(KINDS)}); was it written by another version of ferry?")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known) - {"kind"})
    if unknown:
        raise UsageError(f"unknown field(s) {', '.join(map(repr, unknown))} in {tag} step "
                         f"{_show(data)} (known: {', '.join(known) or 'none'}); was it "
                         "written by another version of ferry?")
    args: dict[str, Any] = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise UsageError(f"{tag} step {_show(data)} lacks the field {name!r}")
            continue
        value = _tuples(data[name])
        if not _conforms(value, hints[name]):
            raise UsageError(f"field {name!r} of {tag} step {_show(data)} is not a "
                             f"{_type_name(hints[name])}")
        args[name] = value
    return cls(**args)


def _plain(v: Any) -> Any:
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _conforms(value: Any, hint: Any) -> bool:
    """Does the JSON value fit the field's type (int, str, bool, None, tuples, unions)?"""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(_conforms(x, item) for x in value)
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _show(data: Any) -> str:
    text = json.dumps(data, default=str, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."
