"""The facts an op carries for the checker, beyond what it asked and got: one frozen
dataclass per fact, one codec.

The fault runner (:mod:`ferry_harness.run.faults`) and the crash campaign
(:mod:`ferry_harness.tools.crash`) mark ops with what they know — a probe of an orphan, a
zombie's call, a kill, a rescue, a read-back — as do the executor and scenarios (the
``-wal`` measured around a call), the pool (a call it cut short, a hung call, a dead
worker, the statements a scheduled round ran) and the checker itself (arguments it
rejects, concurrent writers' clock); the invariants read the marks back. :func:`mark`
puts a fact on an op, :func:`fact` reads one; nothing else touches ``Op.extra``
(``tests/test_annotations.py`` fails on any other use). In ``history.jsonl`` a fact is a
JSON object (or, for the one-value facts, a scalar) under its ``KEY``; the WAL sample's
fields are top-level keys themselves (``FLAT``). That is the layout histories had before
these types existed, so older histories load: unknown fields are dropped and missing ones
take their defaults; a mark that is not a fact of its kind at all reads as absent.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from typing import Any, ClassVar, TypeVar

from ferry_harness.check.history import Op


@dataclass(frozen=True, kw_only=True)
class Probe:
    """A rescuer's race for a task whose holder was killed or frozen while its lease was
    on (fault runner): judged per instant by ``FaultProbes``."""

    KEY: ClassVar[str] = "probe"
    task: str  # the orphan's task id
    expires: int  # the instant (ms) the faulted holder's lease must end
    attempts_left: bool  # the task may be claimed again once the lease is over
    cause: str  # "killed" or "paused"
    holder_op: int  # history index of the faulted holder's op
    by: str = "claim"  # the rescuers' op: "claim", or "poll_next" on a poll-only queue
    at: str  # "expires-1", "expires", "later" or "after-expires" (the clock had passed)
    # the frozen holder's call may run to its end in the server while its client is
    # stopped (a Postgres target, PROTOCOL.md#postgres-targets): once it is accepted, the
    # task may have been finished before the rescuers came
    server_side: bool = False


@dataclass(frozen=True, kw_only=True)
class ProbeOther(Probe):
    """A polling rescuer handed another ready task: no evidence about the orphan."""

    KEY: ClassVar[str] = "probe_other"


@dataclass(frozen=True, kw_only=True)
class Zombie:
    """A frozen holder's fulfill (sent before its pause, or after it woke)."""

    KEY: ClassVar[str] = "zombie"
    task: str  # the task it held
    expires: int | None  # its lease's end (ms; None: not on the harness clock)
    rescued_by: int | None  # history index of the rescuer's winning claim, if one won
    landed: str  # "mid-op", "after-op", "in-write-tx" or "after resume"


@dataclass(frozen=True, kw_only=True)
class Killed:
    """The op whose worker was SIGKILLed (fault runner)."""

    KEY: ClassVar[str] = "killed"
    delay_us: int | None = None  # the kill's delay from the send, µs
    in_write_tx: bool = False  # the worker held SQLite's WAL write lock when killed


@dataclass(frozen=True, kw_only=True)
class Rescue:
    """A rescuer's claim (or poll) racing for an orphan, and the winner's fulfill: in a
    crash campaign (every field), or after a fuzz fault whose holder's lease is not on the
    harness clock (``expires`` None: the holder still holds; ``cause``, ``holder_op``)."""

    KEY: ClassVar[str] = "rescue"
    task: str  # the orphan's task id
    expires: int | None = None  # the instant (ms) its dead holder's lease must end
    race: int = 0  # this race's number among the orphan's races, from 0
    at: int | None = None  # store instant (ms) of this race
    last: bool = False  # the campaign's last race for this orphan
    cause: str | None = None  # fuzz: "killed" or "paused"
    holder_op: int | None = None  # fuzz: history index of the faulted holder's op


@dataclass(frozen=True, kw_only=True)
class KilledHolder:
    """A crash read-back of a task a killed worker held (``CLAIMED`` by it)."""

    KEY: ClassVar[str] = "killed_holder"
    granted_at: int  # store instant (ms) at which the dead holder's lease was granted
    exec_ttl_ms: int  # the lease length the task was dispatched with (ms)


@dataclass(frozen=True, kw_only=True)
class CampaignRound:
    """The crash campaign round an op belongs to (not ``Op.round``, the pool's batch)."""

    KEY: ClassVar[str] = "campaign_round"
    SCALAR: ClassVar[str] = "number"
    number: int  # from 0


@dataclass(frozen=True, kw_only=True)
class FinalRead:
    """An op of the crash campaign's final read-back."""

    KEY: ClassVar[str] = "final_read"
    SCALAR: ClassVar[str] = "final"
    final: bool = True  # always True (the mark's presence is the fact)


@dataclass(frozen=True, kw_only=True)
class Integrity:
    """``PRAGMA integrity_check``'s answer ("ok" or SQLite's list of problems)."""

    KEY: ClassVar[str] = "integrity"
    SCALAR: ClassVar[str] = "text"
    text: str


@dataclass(frozen=True, kw_only=True)
class WalSample:
    """The ``-wal`` file measured around an op (executor, scenarios, crash campaign): judged
    by ``WalRules`` and the crash audit. ``FLAT``: each measured field is its own key of
    ``Op.extra`` (a field not measured is absent, read as None)."""

    KEY: ClassVar[str] = "wal"  # names the fact only: its fields are the keys
    FLAT: ClassVar[bool] = True
    wal_before: int | None = None  # bytes before the call
    wal_after: int | None = None  # bytes after the call (a checkpoint: what it left)
    wal_mark_before: str | None = None  # the wal-index header before (its change counter)
    wal_mark_after: str | None = None  # ... and after
    idle: bool | None = None  # the call had nothing to do: the WAL must not change
    reader: bool | None = None  # a checkpoint ran while an outside reader held a snapshot
    reader_hold_s: float | None = None  # how long that reader held it (s)
    wal_after_step: int | None = None  # bytes after the step this op ended (executor)
    # a Postgres target (PROTOCOL.md#postgres-targets): the server's next transaction id
    # before and after the call (an idle call must not move it), and the target's
    # connections seen idle in transaction after the step this op ended ("" when none)
    xid_before: int | None = None
    xid_after: int | None = None
    open_tx_after_step: str | None = None


@dataclass(frozen=True, kw_only=True)
class CutShort:
    """ferry itself ended the op early (an injected fault, the budget, a frozen worker
    holding the lock), so nothing is judged from its missing answer (pool)."""

    KEY: ClassVar[str] = "cut_short"
    SCALAR: ClassVar[str] = "why"
    why: str  # "fault", "budget" or "frozen worker"


@dataclass(frozen=True, kw_only=True)
class Hung:
    """A call that did not answer in time with nothing of ferry's to blame (pool): judged by
    the liveness rule (and, on a checkpoint beside a reader, ``wal-bounded``)."""

    KEY: ClassVar[str] = "hung_s"
    SCALAR: ClassVar[str] = "seconds"
    seconds: float  # how long it was waited for


@dataclass(frozen=True, kw_only=True)
class Died:
    """The worker died during the call with no fault injected (pool)."""

    KEY: ClassVar[str] = "died"
    SCALAR: ClassVar[str] = "exitcode"
    exitcode: int | None  # the process's exit code (negative: the signal)


@dataclass(frozen=True, kw_only=True)
class Statements:
    """The SQL statements a scheduled round ran for this op, in the order they ran (pool,
    schedule mode): shown in the timeline, replayed by the campaign."""

    KEY: ClassVar[str] = "sql"
    SCALAR: ClassVar[str] = "ran"
    ran: list[list[Any]]  # [seq, sql, switch] each: seq over the round, switch: a context switch


@dataclass(frozen=True, kw_only=True)
class InvalidArgs:
    """The checker's note that the op's arguments break the protocol's types: the op is judged
    by the model alone (refused, or a typed-errors finding)."""

    KEY: ClassVar[str] = "invalid_args"
    SCALAR: ClassVar[str] = "why"
    why: str


@dataclass(frozen=True, kw_only=True)
class WritersNowMax:
    """The checker's note on a late fulfill's refusal: the latest clock value at which any
    *other* op that may write was running before this op ended (-1: none was). The model
    decides from it whether the late result had to be kept."""

    KEY: ClassVar[str] = "writers_now_max"
    SCALAR: ClassVar[str] = "now"
    now: int


FACTS: tuple[type, ...] = (Probe, ProbeOther, Zombie, Killed, Rescue, KilledHolder,
                           CampaignRound, FinalRead, Integrity, WalSample, CutShort, Hung, Died,
                           Statements, InvalidArgs, WritersNowMax)
# every key of Op.extra a fact may use (a FLAT fact's field names)
KEYS: frozenset[str] = frozenset(
    k for t in FACTS
    for k in ([f.name for f in fields(t)] if getattr(t, "FLAT", False) else [t.KEY]))  # type: ignore[attr-defined,arg-type]

F = TypeVar("F")


def encode(f: Any) -> Any:
    """A fact as the JSON value its key holds in ``Op.extra`` (a FLAT fact: the keys it sets)."""
    scalar = getattr(f, "SCALAR", None)
    if scalar:
        return getattr(f, scalar)
    if getattr(f, "FLAT", False):
        return {k: v for k, v in _plain(f).items() if v is not None}
    return _plain(f)


def _plain(value: Any) -> Any:
    """``dataclasses.asdict`` for facts (plain data all the way down), without its deep
    copy of every leaf: facts are encoded for every op a step makes."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(getattr(value, k)) for k in _flat_keys(type(value))}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def decode(kind: type[F], value: Any) -> F | None:
    """The fact ``value`` holds (unknown fields dropped), or None if it is not one."""
    scalar = getattr(kind, "SCALAR", None)
    if scalar:
        return kind(**{scalar: value})
    if not isinstance(value, dict):
        return None
    names = _names(kind)
    try:
        return kind(**{k: v for k, v in value.items() if k in names})
    except TypeError:  # a required field is missing: not this fact
        return None


@cache
def _flat_keys(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))  # type: ignore[arg-type]


@cache
def _names(kind: type) -> frozenset[str]:
    return frozenset(_flat_keys(kind))


def mark(op: Op, f: Any) -> Op:
    """Put fact ``f`` on ``op`` (replacing one of its kind)."""
    kind = type(f)
    if getattr(kind, "FLAT", False):
        for k in _flat_keys(kind):
            op.extra.pop(k, None)
        op.extra.update(encode(f))
    else:
        op.extra[kind.KEY] = encode(f)
    return op


def fact(op: Op, kind: type[F]) -> F | None:
    """The fact of ``kind`` on ``op``, or None."""
    if getattr(kind, "FLAT", False):
        present = {k: op.extra[k] for k in _flat_keys(kind) if k in op.extra}
        return decode(kind, present) if present else None
    key = kind.KEY  # type: ignore[attr-defined]
    if key not in op.extra:
        return None
    return decode(kind, op.extra[key])


def has(op: Op, kind: type) -> bool:
    """Does ``op`` carry a fact of ``kind``?"""
    if getattr(kind, "FLAT", False):
        return any(k in op.extra for k in _flat_keys(kind))
    return kind.KEY in op.extra  # type: ignore[attr-defined]
