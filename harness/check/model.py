"""The sequential reference model of PROTOCOL.md, one small immutable state per task and per lock.

Porcupine-style: ``step(state, op)`` says whether the *observed* outcome of ``op`` is legal
in ``state`` and returns the next state. Observed values that the model cannot predict
(task ids, claim tokens) are adopted from the observation and then checked for freshness.

The model is lenient exactly where PROTOCOL.md#freedoms-a-correct-store-may-take leaves
freedom to a store and strict elsewhere:
- a refusal is legal if *any* guard that fails could have produced it (PROTOCOL.md#the-holder-guard
  fixes an order for ferry_core, but the safety property is "refused and nothing changed");
- expiry is lazy (PROTOCOL.md#leases-are-half-open): after a lease ended, the first holder call may see
  ``LeaseExpired`` (row not yet swept) or ``WrongState`` (already swept);
- a re-queued task's new window may start anywhere from the lease's end to the instant
  the expiry is applied (PROTOCOL.md#queued_at-after-a-lease-expiry): ``queued_at`` is a range
  until claims and reads narrow it;
- inside one partition (a task) the model cannot see dependencies, so a task with
  dependencies may be FAILED by cascade at any moment while SUBMITTED; ``dag-order``
  checks dependencies across tasks.

Every illegal step names the PROTOCOL.md#invariants invariant it breaks, so reports can say *which* rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ferry_harness.check.annotations import WritersNowMax, fact
from ferry_harness.check.history import FAIL, INFO, OK, Op

# The task states of PROTOCOL.md: the model's own words (the check layer takes nothing from
# the reference store it judges).
SUBMITTED = "SUBMITTED"
CLAIMED = "CLAIMED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
TIMED_OUT = "TIMED_OUT"
TERMINAL = frozenset({COMPLETED, FAILED, TIMED_OUT})
STATES = frozenset({SUBMITTED, CLAIMED, COMPLETED, FAILED, TIMED_OUT})

UNKNOWN_TOKEN = "<unknown: claimed by an indeterminate op>"
UNKNOWN_TTL = -1  # exec_ttl_ms not given at dispatch: taken from the first claim
# TaskState.queued_hi of a lease expiry not yet pinned: the new queue window may start at
# any instant up to the ``now`` of the call that applies it (PROTOCOL.md#queued_at-after-a-lease-expiry)
OPEN_END = 1 << 80


@dataclass(frozen=True)
class ModelConfig:
    """The store settings the model must know (PROTOCOL.md#limits defaults)."""

    max_extends: int = 5
    max_releases: int = 3
    strict_tokens: bool = True
    # protocol behaviours a target may lack (ferry_harness.check.ops.FEATURES); a full protocol
    # store has all (PROTOCOL.md#ferry_capabilities).
    leases: bool = True  # "lease": claims expire at claimed_at + exec_ttl_ms (harness clock)
    queue_ttl: bool = True  # "queue-ttl": waiting tasks time out after queue_ttl_ms
    results: bool = True  # "results": get shows the accepted result
    limits: bool = True  # "limits": max_releases / max_extends / the extend cap
    typed_refusals: bool = True  # "typed-refusals": the refusal class names a failed guard
    # Stricter choices than the protocol (ferry_harness.check.ops.STRICT_CHOICES): checked only
    # when declared (PROTOCOL.md#stricter-choices-a-store-can-declare).
    holder_binding: bool = False  # "holder-binding": another agent is refused, even with the token
    # Lease conventions (ferry_harness.check.ops.CONVENTIONS): declared by queues that differ
    # from the protocol (PROTOCOL.md#lease-conventions).
    lease_closed: bool = False  # "lease-closed": the holder still wins at expires
    lease_at_claim: bool = False  # "lease-at-claim": the claim decides the lease length
    refusal_order: bool = False  # "refusal-order": the FIRST failing check of PROTOCOL.md#the-holder-guard names it
    # ferry_core's own choice, for the sequential model of its state-machine test only: a
    # lease expiry re-queues at lease_expires_at exactly (other stores may start the new
    # window later: PROTOCOL.md#queued_at-after-a-lease-expiry)
    requeue_at_expiry: bool = False

    def for_capabilities(self, caps: Any) -> ModelConfig:
        """This config, holding the target only to the protocol features it has and the
        stricter choices it declares."""
        caps = set(caps)
        return replace(self, leases="lease" in caps, queue_ttl="queue-ttl" in caps,
                       holder_binding="holder-binding" in caps, results="results" in caps,
                       limits="limits" in caps, typed_refusals="typed-refusals" in caps,
                       refusal_order="refusal-order" in caps,
                       lease_closed="lease-closed" in caps,
                       lease_at_claim="lease-at-claim" in caps)


@dataclass(frozen=True)
class Verdict:
    """Outcome of one model step: legal or not, the next state, and why not (with an id)."""

    ok: bool
    state: Any
    invariant: str | None = None
    why: str | None = None


def _legal(state: Any) -> Verdict:
    return Verdict(True, state)


def _illegal(state: Any, invariant: str, why: str) -> Verdict:
    return Verdict(False, state, invariant, why)


def canonical(value: Any) -> str:
    """``value`` as canonical JSON text (sorted keys, no spaces): two values are the same
    result exactly when their texts are equal, whatever their key order."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class TaskState:
    """What PROTOCOL.md#tasks says a task is, as a hashable value (search memoises on it)."""

    task_id: str
    status: str
    target: str | None
    has_deps: bool
    queue_ttl: int | None  # None: the target has no queue window
    exec_ttl: int | None  # None: the target has no lease on the harness clock
    max_attempts: int
    created_at: int
    queued_at: int  # when the queue window starts; the earliest such instant if queued_hi
    queued_hi: int | None = None  # the latest allowed start (None: queued_at exactly)
    holder: str | None = None
    token: str | None = None
    expires: int | None = None
    attempt: int = 0
    extend_count: int = 0
    release_count: int = 0
    result: str | None = None  # JSON text of the accepted result
    tokens: frozenset[str] = frozenset()  # every token issued for this task
    lapsed: tuple[str, str] | None = None  # (holder, token) of a lease ended by time
    lapsed_at: int | None = None  # the instant that lease ended (its lease_expires_at)
    late: frozenset[str] = frozenset()  # every token whose lease ended by time (not released)
    # what salvaged() must hold, in append order: (kind, agent, JSON of the kept value,
    # required). A required entry must be there; an optional one (a late result PROTOCOL.md#late-results
    # lets a store keep or not) may be. PROTOCOL.md#freedoms-a-correct-store-may-take leaves the entry's shape to the store.
    salvage: tuple[tuple[str, str, str, bool], ...] = ()
    cascaded: bool = False  # FAILED by a dependency, possibly not yet swept by the store
    seen: bool = False  # a read showed the store's row in a terminal state
    closed: bool = False  # the declared "lease-closed" convention: over only after expires
    at_claim: bool = False  # the declared "lease-at-claim" convention
    exact_requeue: bool = False  # ModelConfig.requeue_at_expiry
    window_over: bool = False  # TIMED_OUT because its queue window ended (not its last lease)
    # the dispatch's (queue_ttl_ms, exec_ttl_ms) as given, for the extend cap of a target
    # with `limits` but not both timing features (PROTOCOL.md#limits: it may apply it or not)
    cap_ttls: tuple[Any, Any] = (None, None)

    def lapsed_at_now(self, now: int) -> bool:
        """Is the current lease over at ``now`` (half-open, or closed if declared)?"""
        assert self.expires is not None
        return now > self.expires if self.closed else now >= self.expires

    @property
    def deadline(self) -> int | None:
        """The earliest instant the queue window may end."""
        return None if self.queue_ttl is None else self.queued_at + self.queue_ttl

    @property
    def deadline_hi(self) -> int | None:
        """The latest instant the queue window may end (its end for every allowed queued_at)."""
        if self.queue_ttl is None:
            return None
        return (self.queued_at if self.queued_hi is None else self.queued_hi) + self.queue_ttl

    def window_at(self, now: int, is_open: bool) -> TaskState | None:
        """This SUBMITTED task narrowed to the queued_at values under which the store applied
        its re-queue by ``now`` and its window is open (``is_open``) or over at ``now``; None
        when no allowed value gives that."""
        if self.queue_ttl is None:
            return self if is_open else None
        lo = hi = self.queued_at
        if self.queued_hi is not None:  # applied by now at the latest
            hi = min(self.queued_hi, now)
        if is_open:
            lo = max(lo, now - self.queue_ttl + 1)
        else:
            hi = min(hi, now - self.queue_ttl)
        if lo > hi:
            return None
        st = replace(self, queued_at=lo, queued_hi=None if lo == hi else hi)
        return st if is_open else replace(st, status=TIMED_OUT, window_over=True)

    def window_text(self) -> str:
        """When the queue window ends, for a message."""
        lo, hi = self.deadline, self.deadline_hi
        if lo == hi:
            return f"at {lo} (queued_at {self.queued_at} + queue_ttl_ms {self.queue_ttl})"
        return (f"between {lo} and {hi} (queued_at may be any instant from "
                f"{self.queued_at} to {self.queued_hi}, the expiry being applied then)")


def new_task(op: Op, cfg: ModelConfig | None = None) -> TaskState:
    """The state a successful ``dispatch`` creates."""
    a = op.args
    cfg = cfg or ModelConfig()
    return TaskState(
        task_id=op.value,
        status=SUBMITTED,
        target=a.get("target_agent"),
        has_deps=bool(a.get("depends_on")),
        # a TTL the dispatch left to the store's default: no queue window the model can
        # predict; the lease length is learnt from the first claim (UNKNOWN_TTL)
        queue_ttl=a.get("queue_ttl_ms") if cfg.queue_ttl else None,
        exec_ttl=a.get("exec_ttl_ms", UNKNOWN_TTL) if cfg.leases else None,
        max_attempts=a.get("max_attempts", 1),
        created_at=op.now,
        queued_at=op.now,
        closed=cfg.lease_closed,
        at_claim=cfg.lease_at_claim,
        exact_requeue=cfg.requeue_at_expiry,
        cap_ttls=(a.get("queue_ttl_ms"), a.get("exec_ttl_ms")),
    )


def advance(st: TaskState, now: int) -> TaskState:
    """Apply every time-driven transition due at ``now`` (PROTOCOL.md#leases-are-half-open, half-open intervals)."""
    while True:
        if st.status == CLAIMED and st.expires is not None and st.lapsed_at_now(now):
            when = st.expires
            lapsed = (st.holder, st.token)
            late = st.late | {st.token} if st.token else st.late
            if st.attempt < st.max_attempts:
                # a range: the new window starts anywhere from the lease's end to the
                # instant some call applies the expiry (PROTOCOL.md#queued_at-after-a-lease-expiry)
                st = replace(st, status=SUBMITTED, queued_at=when,
                             queued_hi=None if st.exact_requeue else OPEN_END, holder=None,
                             token=None, expires=None, extend_count=0, lapsed=lapsed,
                             late=late, lapsed_at=when)
            else:
                st = replace(st, status=TIMED_OUT, holder=None, token=None, lapsed=lapsed,
                             late=late, lapsed_at=when)
            continue
        # over for every allowed queued_at (in between, the observations decide)
        if st.status == SUBMITTED and st.deadline_hi is not None and now >= st.deadline_hi:
            st = replace(st, status=TIMED_OUT, window_over=True)
            continue
        return st


def _ready_for(st: TaskState, agent: str) -> bool:
    return st.status == SUBMITTED and (st.target is None or st.target == agent)


def _guard_failures(st: TaskState, agent: str, token: str | None,
                    cfg: ModelConfig) -> tuple[list[str], set[str]]:
    """The PROTOCOL.md#the-holder-guard checks that fail, in the reference order, and the classes a store *may* refuse
    with although acceptance is legal too (another agent presenting the live token: PROTOCOL.md#freedoms-a-correct-store-may-take
    lets a store bind claims to agents or not)."""
    fails: list[str] = []
    may: set[str] = set()
    if token is not None and token in st.late:
        may.add("LeaseExpired")  # this token's own lease did end (whatever came after)
    if st.target is not None and st.target != agent:
        fails.append("PermissionDenied")
    if st.status != CLAIMED:
        fails.append("WrongState")
        if st.lapsed is not None:
            fails.append("LeaseExpired")  # the row may not be swept yet
        # the row holds no live token, so the token check fails too (PROTOCOL.md#freedoms-a-correct-store-may-take: any order)
        if token is None:
            fails.append("TokenRequired")
        else:
            fails.append("InvalidToken")
        return fails, may
    if agent != st.holder:
        if cfg.holder_binding:
            fails += ["PermissionDenied", "InvalidToken"]
        else:
            may.add("PermissionDenied")
    if token is None:
        if cfg.strict_tokens or (cfg.holder_binding and agent != st.holder):
            fails.append("TokenRequired")
    elif token != st.token:
        fails.append("InvalidToken")
    return fails, may


def _accepted_wrongly(st: TaskState, op: Op, cfg: ModelConfig) -> tuple[str, str]:
    """Name the invariant an accepted-but-illegal holder op breaks."""
    token = op.args.get("token")
    short = f"{token[:8]}…" if isinstance(token, str) else repr(token)
    if st.lapsed is not None and st.status != CLAIMED and token == st.lapsed[1]:
        rule = ("declared lease-closed: the holder loses at lease_expires_at + 1" if st.closed
                else "half-open: the holder loses at lease_expires_at")
        return "lease-half-open", (
            f"{op.op} of task {st.task_id} accepted at t={op.now} although the lease of token "
            f"{short} ended at {st.lapsed_at} ({rule})")
    if token is not None and token in st.tokens and token != st.token:
        return "token-unique", (
            f"{op.op} of task {st.task_id} accepted a retired token {short} (replay); current "
            f"holder {st.holder!r}, status {st.status}: a released or expired token must be "
            "refused with InvalidToken forever")
    if st.status in TERMINAL:
        return "no-lost-task", (
            f"{op.op} changed task {st.task_id} in terminal state {st.status}: nothing leaves "
            "COMPLETED, FAILED or TIMED_OUT")
    if st.status != CLAIMED:
        return "holder-guard", f"{op.op} accepted on task {st.task_id} in state {st.status}"
    if st.target is not None and st.target != op.agent:
        return "holder-guard", (
            f"{op.op} of task {st.task_id} by {op.agent!r} accepted; the task is for "
            f"{st.target!r} (PermissionDenied expected)")
    if token == st.token:
        return "holder-guard", (
            f"{op.op} of task {st.task_id} by {op.agent!r} with the holder's token accepted, "
            f"but the claim is {st.holder!r}'s and the store declares holder-binding")
    what = "no token" if token is None else f"token {short}, not the current one"
    return "holder-guard", (
        f"{op.op} of task {st.task_id} by {op.agent!r} with {what} was accepted; the "
        f"holder is {st.holder!r} (only the current token may change a claimed task)")


def _claim_value_ok(st: TaskState, op: Op, claim: dict[str, Any]) -> str | None:
    tid = st.task_id
    if claim.get("task_id") != tid:
        return f"claim returned task {claim.get('task_id')!r}, asked for {tid!r}"
    if claim.get("claimed_at") != op.now:
        return (f"the claim of task {tid} says claimed_at={claim.get('claimed_at')}, but the "
                f"clock read {op.now} (times come from the injected clock)")
    if st.exec_ttl is not None and claim.get("lease_expires_at") != op.now + st.exec_ttl:
        return (f"the claim of task {tid} at t={op.now} has lease_expires_at="
                f"{claim.get('lease_expires_at')}, expected claimed_at + exec_ttl_ms = "
                f"{op.now + st.exec_ttl}")
    if claim.get("attempt") not in (None, st.attempt + 1):
        return (f"the claim of task {tid} by {op.agent!r} says attempt "
                f"{claim.get('attempt')}, but it is claim number {st.attempt + 1} of this task "
                "(attempt counts claims): a claim that did not see an earlier one")
    return None


def _do_claim(st: TaskState, op: Op, claim: dict[str, Any] | None, cfg: ModelConfig) -> Verdict:
    agent = op.agent
    if claim is None:
        if _ready_for(st, agent) and not st.has_deps:
            over = st.window_at(op.now, False) if st.queued_hi is not None else None
            if over is not None:  # re-queued early enough that its window is over by now
                return _legal(over)
            if st.lapsed is not None:
                return _illegal(st, "lease-half-open", (
                    f"task {st.task_id} is claimable at t={op.now} (the lease ended at "
                    f"{st.lapsed_at}; its queue window ends {st.window_text()}) but the "
                    "claim returned nothing"))
            return _illegal(st, "no-lost-task", (
                f"task {st.task_id} is ready for {agent!r} at t={op.now} but the claim "
                "returned nothing"))
        return _legal(st)
    if st.status == CLAIMED:
        return _illegal(st, "single-winner", (
            f"{agent!r} claimed task {st.task_id} at t={op.now} while {st.holder!r} holds it "
            + (f"until {st.expires}" if st.expires is not None else "(no lease: until it acks)")))
    if st.status == TIMED_OUT and st.window_over:
        return _illegal(st, "lease-half-open", (
            f"{agent!r} claimed task {st.task_id} at t={op.now}, but its queue window ended "
            f"{st.window_text()}: the window is half-open, so from queued_at + queue_ttl_ms "
            "on a claim gets None and the task is TIMED_OUT"))
    if st.status != SUBMITTED:
        return _illegal(st, "no-lost-task", f"claimed a {st.status} task {st.task_id}")
    if st.target is not None and st.target != agent:
        return _illegal(st, "holder-guard", (
            f"{agent!r} claimed task {st.task_id}, which is for {st.target!r}"))
    if ((st.exec_ttl == UNKNOWN_TTL or (st.at_claim and st.exec_ttl is not None))
            and isinstance(claim.get("lease_expires_at"), int)):
        st = replace(st, exec_ttl=claim["lease_expires_at"] - op.now)
    bad = _claim_value_ok(st, op, claim)
    if bad:
        inv = "lease-half-open" if "lease_expires_at" in bad else "linearizable"
        return _illegal(st, inv, bad)
    token = claim.get("token")
    if not token:
        return _illegal(st, "token-unique", "a claim came back without a token")
    if token in st.tokens:
        return _illegal(st, "token-unique", f"token {token[:8]}… issued twice for {st.task_id}")
    return _legal(replace(
        st, status=CLAIMED, holder=agent, token=token,
        expires=claim["lease_expires_at"] if st.exec_ttl is not None else None,
        attempt=st.attempt + 1, extend_count=0, tokens=st.tokens | {token}, lapsed=None))


def _late_salvage(st: TaskState, op: Op, cfg: ModelConfig) -> TaskState:
    """A late result kept as salvage (PROTOCOL.md#late-results). Required when the claiming
    agent presents its lapsed token, is refused with ``LeaseExpired``, and is the first call
    to see the expiry; optional otherwise (another agent with the token, a store that had
    already applied the expiry, a task claimed again since, a late ``fail``'s reason:
    PROTOCOL.md#freedoms-a-correct-store-may-take)."""
    token = op.args.get("token")
    if token not in st.late or op.op not in ("fulfill", "fail"):
        return st
    current = st.lapsed is not None and token == st.lapsed[1]
    # another agent with the token may or may not be its holder (a store may bind
    # claims to agents), so only the claiming agent's own late result is required
    holder = current and op.agent == st.lapsed[0]
    # the call that sees the expiry first must keep the result; once another call may have
    # applied it (any write at or after the lapse, concurrent racers included), a store may
    # refuse the late result without keeping it (PROTOCOL.md#freedoms-a-correct-store-may-take: when expiry is applied is free)
    noted = fact(op, WritersNowMax)
    others = noted.now if noted else -1
    alone = st.lapsed_at is None or others < st.lapsed_at
    value = op.args.get("result") if op.op == "fulfill" else op.args.get("reason")
    # a result that is not JSON is no result to keep, and a store without results keeps
    # none (PROTOCOL.md#late-results)
    required = (op.op == "fulfill" and op.error == "LeaseExpired" and holder and alone
                and cfg.results and _is_json(value))
    kind = "late_result" if op.op == "fulfill" else "late_failure"
    return replace(st, salvage=st.salvage + ((kind, op.agent, canonical(value), required),))


def bad_arguments(op: Op, cfg: ModelConfig | None = None) -> str | None:
    """Why an op's arguments are invalid whatever the state (a store must refuse it with
    ``InvalidArgument``, before any guard), or None. TTLs count only for a target whose
    leases / queue windows run on the harness clock (``cfg``)."""
    cfg = cfg or ModelConfig()
    a = op.args
    token = a.get("token")
    if token is not None and not isinstance(token, str):
        return f"token {token!r} is not a string"
    for key, used in (("result", cfg.results), ("partial", True)):
        if used and key in a and not _is_json(a[key]):
            return f"{key} {a[key]!r} is not JSON"
    for key in ("task_id", "agent_id"):
        if key in a and not (isinstance(a[key], str) and a[key]):
            return f"{key} {a[key]!r} is not a non-empty string"
    if op.op == "dispatch":
        for key, used in (("queue_ttl_ms", cfg.queue_ttl), ("exec_ttl_ms", cfg.leases)):
            v = a.get(key, 1)
            if not used:
                continue
            # no upper bound: a TTL >= 2**62 may be refused or accepted (PROTOCOL.md#limits)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                return f"{key} {v!r} is not a positive integer (PROTOCOL.md#limits)"
        deps = a.get("depends_on", ())
        if deps is not None and (isinstance(deps, (str, bytes))
                                 or not isinstance(deps, (list, tuple))):
            return f"depends_on {deps!r} is not a list of task ids"
        if "payload" in a and not _is_json(a["payload"]):
            return f"payload {a['payload']!r} is not JSON"
    return None


def optional_bad_arguments(op: Op, cfg: ModelConfig | None = None) -> str | None:
    """Why an op's arguments may be refused with ``InvalidArgument`` although acceptance
    is legal too, or None: a ``result`` that is not JSON, given to a target without
    ``results`` (it keeps no result, so it need not check one: PROTOCOL.md#limits)."""
    cfg = cfg or ModelConfig()
    if not cfg.results and "result" in op.args and not _is_json(op.args["result"]):
        return f"result {op.args['result']!r} is not JSON"
    return None


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _do_holder(st: TaskState, op: Op, cfg: ModelConfig) -> Verdict:
    token = op.args.get("token")
    fails, may = _guard_failures(st, op.agent, token, cfg)
    guard = list(fails)
    bad = bad_arguments(op, cfg)
    if bad:  # argument checks come before the guard
        fails = ["InvalidArgument", *fails]
    elif optional_bad_arguments(op, cfg):
        may = may | {"InvalidArgument"}
    if op.type == OK:
        if bad:
            return _illegal(st, "typed-errors", (
                f"{op.op} of task {st.task_id} was accepted although {bad}: an invalid "
                "argument is refused with InvalidArgument and changes nothing"))
        if fails:
            inv, why = _accepted_wrongly(st, op, cfg)
            return _illegal(st, inv, why)
        return _apply_holder(st, op, cfg)
    # a refusal
    err = op.error
    limit = _limit_reason(st, op, cfg)
    if limit:
        fails = fails + ["LimitExceeded"]
        guard = guard + ["LimitExceeded"]
    elif _optional_cap(st, op, cfg):  # a failing check if applied; the guard's order first
        if fails:
            fails = fails + ["LimitExceeded"]
        else:
            may = may | {"LimitExceeded"}
    if op.op == "fail" and not str(op.args.get("reason", "") or "").strip():
        fails = fails + ["InvalidArgument"]
    if err in may or (may and not cfg.typed_refusals):  # untyped: any class for a refusal allowed
        return _legal(_late_salvage(st, op, cfg))
    if not fails:
        if err == "LeaseExpired":
            return _illegal(st, "lease-half-open", (
                f"{op.op} of task {st.task_id} refused with LeaseExpired at t={op.now}, but the "
                f"lease runs until {st.expires} (half-open: the holder still wins at expires-1)"))
        if st.expires is not None and op.now == st.expires:  # live at expires: lease-closed
            return _illegal(st, "lease-half-open", (
                f"{op.op} of task {st.task_id} refused with {err} at t={op.now}, the instant its "
                "lease ends; the store declares lease-closed, so its holder still wins then "
                "(its holder check and its reaper disagree)"))
        return _illegal(st, "holder-guard", (
            f"{op.op} of task {st.task_id} by the holder {op.agent!r} with the current token "
            f"was refused with {err} at t={op.now}; every check of PROTOCOL.md#the-holder-guard passes"))
    if err in fails or not cfg.typed_refusals:  # untyped: any refusal class will do
        # the PROTOCOL.md#the-holder-guard order; a lapsed lease's row may or may not be swept yet (WrongState or
        # LeaseExpired first)
        first = {fails[0]} | ({"LeaseExpired"} if fails[0] == "WrongState" and st.lapsed else set())
        if bad and guard:  # argument checks are outside the order (PROTOCOL.md#declaring-refusal-order)
            first |= {guard[0]} | ({"LeaseExpired"} if guard[0] == "WrongState" and st.lapsed else set())
        if cfg.refusal_order and cfg.typed_refusals and err not in first:
            if st.lapsed is not None and op.now == st.lapsed_at:
                live = replace(st, status=CLAIMED, holder=st.lapsed[0], token=st.lapsed[1])
                live_fails = _guard_failures(live, op.agent, token, cfg)[0]
                if live_fails and err == live_fails[0]:
                    return _illegal(st, "lease-half-open", (
                        f"{op.op} of task {st.task_id} at t={op.now} was refused with {err}, "
                        "the answer for a lease still running; it ended at lease_expires_at = "
                        f"{st.lapsed_at} (half-open), so LeaseExpired or WrongState comes first"))
            return _illegal(st, "refusal-order", (
                f"{op.op} of task {st.task_id} refused with {err}; the store declares "
                f"refusal-order, and the first failing check in the PROTOCOL.md#the-holder-guard order is {fails[0]} "
                f"(all failing: {fails})"))
        return _legal(_late_salvage(st, op, cfg))
    if st.lapsed is not None:
        live = replace(st, status=CLAIMED, holder=st.lapsed[0], token=st.lapsed[1])
        if err in _guard_failures(live, op.agent, token, cfg)[0]:
            return _illegal(st, "lease-half-open", (
                f"{op.op} of task {st.task_id} at t={op.now} was refused with {err} as if the "
                "lease were still live; it ended at lease_expires_at (half-open), so "
                "PROTOCOL.md#leases-are-half-open expects LeaseExpired"))
    return _illegal(st, "refusal-class", (
        f"{op.op} of task {st.task_id} refused with {err}, but that check passes; the "
        f"checks that fail are {sorted(set(fails))} (a refusal must name one of them)"))


def _limit_reason(st: TaskState, op: Op, cfg: ModelConfig) -> str | None:
    if not cfg.limits:
        return None
    if op.op == "release" and st.release_count >= cfg.max_releases:
        return "max_releases"
    if op.op == "extend":
        if st.extend_count >= cfg.max_extends:
            return "max_extends"
        if (st.exec_ttl is not None and st.queue_ttl is not None
                and op.now + st.exec_ttl > st.created_at + 4 * st.queue_ttl):
            return "hard cap"
    return None


def _optional_cap(st: TaskState, op: Op, cfg: ModelConfig) -> bool:
    """Would the extend cap refuse this extend on a target with ``limits`` but without
    ``lease`` or ``queue-ttl``? Such a store may apply the cap or not (PROTOCOL.md#limits)."""
    if not cfg.limits or op.op != "extend" or (st.exec_ttl is not None and st.queue_ttl is not None):
        return False
    queue_ttl, exec_ttl = st.cap_ttls
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (queue_ttl, exec_ttl)):
        return False
    return op.now + exec_ttl > st.created_at + 4 * queue_ttl


def _apply_holder(st: TaskState, op: Op, cfg: ModelConfig) -> Verdict:
    limit = _limit_reason(st, op, cfg)
    if limit:
        what = {"max_releases": f"release number {st.release_count + 1} of this task",
                "max_extends": f"extend number {st.extend_count + 1} of this claim",
                "hard cap": "an extend past created_at + 4 × queue_ttl_ms"}.get(limit, limit)
        return _illegal(st, "holder-guard", (
            f"{op.op} of task {st.task_id} accepted past its limit ({limit}): {what} must be "
            "refused with LimitExceeded"))
    if op.op == "fulfill":
        return _legal(replace(st, status=COMPLETED, result=canonical(op.args.get("result")),
                              token=None, lapsed=None))
    if op.op == "fail":
        return _legal(replace(st, status=FAILED, token=None, lapsed=None))
    if op.op == "release":
        return _legal(replace(st, status=SUBMITTED, queued_at=op.now, queued_hi=None,
                              holder=None, token=None,
                              expires=None, extend_count=0, release_count=st.release_count + 1,
                              lapsed=None))
    if op.op == "extend":
        if st.exec_ttl is None:  # no lease on the harness clock: nothing to predict
            return _legal(replace(st, extend_count=st.extend_count + 1))
        want = op.now + st.exec_ttl
        if st.at_claim and isinstance(op.value, int) and op.value > op.now:
            want = op.value  # the store decides the new length too
        if op.value not in (None, want):
            return _illegal(st, "lease-half-open", f"extend returned {op.value}, expected {want}")
        return _legal(replace(st, expires=want, extend_count=st.extend_count + 1))
    if op.op == "salvage":
        entry = ("partial", op.agent, canonical(op.args.get("partial")), True)
        return _legal(replace(st, salvage=st.salvage + (entry,)))
    raise ValueError(op.op)


def _effective_status(view: dict[str, Any], st: TaskState, now: int) -> str:
    """The status a read's row means at ``now``: rows are swept lazily (PROTOCOL.md#leases-are-half-open)."""
    status = view.get("status")
    if not view.get("is_logically_expired") or status not in (CLAIMED, SUBMITTED):
        return status
    as_read = replace(
        st, status=status, attempt=view.get("attempt", st.attempt),
        # a view may leave the lease end out (PROTOCOL.md#taskview-fields): the model's
        expires=view.get("lease_expires_at",
                         st.expires if st.status == CLAIMED else st.lapsed_at),
        queued_at=view.get("queued_at", st.queued_at),
        queued_hi=None)
    return advance(as_read, now).status


def _counters_differ(view: dict[str, Any], st: TaskState, cfg: ModelConfig) -> str | None:
    """A view's counters and lease end against the model (only the fields it shows).

    ``extend_count`` counts per claim, so it is compared only while the task is CLAIMED;
    ``attempt`` (claims so far) and ``release_count`` always."""
    want: dict[str, Any] = {"attempt": st.attempt}
    if cfg.limits:
        want["release_count"] = st.release_count
    if st.status == CLAIMED and not view.get("is_logically_expired"):
        if cfg.limits:
            want["extend_count"] = st.extend_count
        if st.expires is not None and st.exec_ttl not in (None, UNKNOWN_TTL):
            want["lease_expires_at"] = st.expires
    for key, value in want.items():
        got = view.get(key, value)
        if got != value and not (got is None and value == 0):
            return (f"{key} is {got!r}, the model says {value!r} (a refused call changed it, "
                    "or the store counts it differently)")
    return None


def _window_seen(st: TaskState, view: dict[str, Any], status: str, now: int) -> TaskState:
    """``st`` narrowed by what a read shows of a re-queue whose queued_at is still a range
    (PROTOCOL.md#queued_at-after-a-lease-expiry): the row's own ``queued_at`` pins it, an
    applied SUBMITTED row says the window is open, a TIMED_OUT one that it is over."""
    if st.status != SUBMITTED or st.queued_hi is None:
        return st
    if status == TIMED_OUT and view.get("status") in (SUBMITTED, TIMED_OUT):
        return st.window_at(now, False) or st
    if view.get("status") != SUBMITTED or view.get("is_logically_expired"):
        return st  # the expiry is not applied yet: nothing is pinned
    seen = st.window_at(now, True) or st
    q = view.get("queued_at")
    if (isinstance(q, int) and not isinstance(q, bool) and seen.queued_hi is not None
            and seen.queued_at <= q <= seen.queued_hi):
        seen = replace(seen, queued_at=q, queued_hi=None)
    return seen


def _do_get(st: TaskState, op: Op, cfg: ModelConfig) -> Verdict:
    view = op.value or {}
    status = _effective_status(view, st, op.now)
    st = _window_seen(st, view, status, op.now)
    if view.get("status") == SUBMITTED and st.status == FAILED and st.cascaded:
        return _legal(st)  # the cascade of a lazily expired dependency is not swept yet
    if status == CLAIMED and st.lapsed is not None and st.status != CLAIMED:
        return _illegal(st, "lease-half-open", (
            f"get({st.task_id}) at t={op.now} shows a live lease until "
            f"{view.get('lease_expires_at')}; a lease is over at lease_expires_at (half-open)"))
    if status != st.status:
        if (view.get("status") == SUBMITTED and st.status == TIMED_OUT and st.window_over
                and not view.get("is_logically_expired")):
            return _illegal(st, "lease-half-open", (
                f"get({st.task_id}) at t={op.now} shows SUBMITTED without "
                f"is_logically_expired, but its queue window ended {st.window_text()}: views "
                "of a SUBMITTED task past queued_at + queue_ttl_ms must say "
                "is_logically_expired (reads never sweep, so the flag is how a read tells)"))
        if (st.status == CLAIMED and st.expires is not None
                and view.get("status") in (SUBMITTED, TIMED_OUT) and op.now >= st.expires - 1):
            kind = "closed: it still holds at expires" if st.closed else "half-open"
            return _illegal(st, "lease-half-open", (
                f"get({st.task_id}) at t={op.now} shows the lease over ({view.get('status')}), "
                f"but it runs until {st.expires} ({kind}): the boundary the store reaps at "
                "differs from the one its holder checks use"))
        lost = st.status in TERMINAL
        return _illegal(st, "no-lost-task" if lost else "linearizable", (
            f"get({st.task_id}) at t={op.now} says {view.get('status')}"
            f"{' (logically expired)' if view.get('is_logically_expired') else ''}, "
            f"the model says {st.status}"))
    bad = _counters_differ(view, st, cfg)
    if bad:
        return _illegal(st, "no-lost-task", f"get({st.task_id}) at t={op.now}: {bad}")
    if "claim_token" in view or "token" in view:
        return _illegal(st, "token-unique", "a read API exposed the claim token")
    if cfg.results and st.status == COMPLETED and canonical(view.get("result")) != st.result:
        return _illegal(st, "no-lost-task", (
            f"task {st.task_id} result is {canonical(view.get('result'))}, accepted was {st.result}"))
    if st.status == CLAIMED and view.get("claimed_by") not in (None, st.holder):
        return _illegal(st, "single-winner", (
            f"task {st.task_id} shows holder {view.get('claimed_by')!r}, model {st.holder!r}"))
    if view.get("status") in TERMINAL and not st.seen:
        return _legal(replace(st, seen=True))
    return _legal(st)


def holds_value(entry: Any, want: str) -> bool:
    """Does one ``salvaged()`` entry hold the value whose JSON is ``want``? PROTOCOL.md#freedoms-a-correct-store-may-take leaves
    the shape free: the value itself, nested anywhere in a dict or list, or JSON text."""
    if canonical(entry) == want:
        return True
    if isinstance(entry, dict):
        return any(holds_value(v, want) for v in entry.values())
    if isinstance(entry, (list, tuple)):
        return any(holds_value(v, want) for v in entry)
    if isinstance(entry, str) and entry[:1] in "{[\"":
        try:
            return holds_value(json.loads(entry), want)
        except ValueError:
            return False
    return False


def _salvage_matches(expected: tuple[tuple[str, str, str, bool], ...], got: list[Any]) -> bool:
    """One entry per kept value, in append order: every required value and nothing else."""
    memo: dict[tuple[int, int], bool] = {}

    def ok(i: int, j: int) -> bool:
        if (i, j) not in memo:
            if i == len(expected):
                memo[i, j] = j == len(got)
            else:
                _, _, want, required = expected[i]
                res = (not required and ok(i + 1, j)) or (
                    j < len(got) and holds_value(got[j], want) and ok(i + 1, j + 1))
                memo[i, j] = res
        return memo[i, j]

    return ok(0, 0)


def _do_salvaged(st: TaskState, op: Op) -> Verdict:
    got = op.value if isinstance(op.value, list) else []
    if _salvage_matches(st.salvage, got):
        return _legal(st)
    required = [e for e in st.salvage if e[3]]
    for kind, agent, data, _ in required:
        if not any(holds_value(g, data) for g in got):
            return _illegal(st, "no-lost-task", (
                f"salvaged({st.task_id}) lost a {kind} from {agent!r}: {data} is in none of "
                f"its {len(got)} entries"))
    return _illegal(st, "no-lost-task", (
        f"salvaged({st.task_id}) returned {len(got)} entries {canonical(got)[:200]}; the model "
        f"expects the kept values {[e[2] for e in st.salvage]} in append order "
        f"({len(required)} required), one entry each: an entry written by a refused call, "
        "or one out of order"))


def _may_cascade(st: TaskState) -> bool:
    """Could a dependency's failure have made this task FAILED without the model seeing it?

    Only for a task with dependencies that was never claimed, whose terminal state (if any)
    the model inferred from time rather than read from the store.
    """
    return (st.has_deps and st.attempt == 0 and not st.seen
            and st.status in (SUBMITTED, TIMED_OUT))


def step_task(st: TaskState | None, op: Op, cfg: ModelConfig) -> Verdict:
    """One operation on one task's state. ``st`` is None before the dispatch."""
    if op.op == "dispatch":
        bad = bad_arguments(op, cfg)
        if bad and op.type == OK:
            return _illegal(st, "typed-errors", (
                f"dispatch was accepted (task {op.value}) although {bad}: an invalid argument "
                "is refused with InvalidArgument"))
        if st is not None:
            return _illegal(st, "token-unique", f"task id {op.value} was issued twice")
        return _legal(new_task(op, cfg))
    if st is None:
        if op.type == FAIL and (op.error == "NotFound" or not cfg.typed_refusals
                                or (op.error == "InvalidArgument"
                                    and (bad_arguments(op, cfg) or optional_bad_arguments(op, cfg)))):
            return _legal(st)  # untyped (PROTOCOL.md#ferry_capabilities): any refusal class
        return _illegal(st, "linearizable", f"{op.op} on task {op.task_id} before its dispatch")
    before = st
    st = advance(st, op.now)
    verdict = _step_existing(st, op, cfg)
    if not verdict.ok and _may_cascade(before):
        # a dependency may have failed (or timed out) at any moment while this task waited:
        # the cascade would have made it FAILED before its own deadline passed
        cascaded = replace(before, status=FAILED, cascaded=True)
        retry = _step_existing(cascaded, op, cfg)
        if retry.ok:
            return retry
    return verdict


def _step_existing(st: TaskState, op: Op, cfg: ModelConfig) -> Verdict:
    if op.type == INFO:
        return _step_info(st, op, cfg)
    if op.op in ("claim", "poll_next"):
        if op.type == FAIL:
            if op.error == "NotFound":
                return _illegal(st, "no-lost-task", f"claim says task {st.task_id} does not exist")
            return _illegal(st, "linearizable", f"claim refused with {op.error}")
        return _do_claim(st, op, op.value, cfg)
    if op.op in ("fulfill", "fail", "release", "extend", "salvage"):
        return _do_holder(st, op, cfg)
    if op.op == "get":
        if op.type == FAIL:
            return _illegal(st, "no-lost-task", f"get says task {st.task_id} is gone ({op.error})")
        return _do_get(st, op, cfg)
    if op.op == "salvaged":
        if op.type == FAIL:
            return _illegal(st, "no-lost-task", f"salvaged({st.task_id}) refused: {op.error}")
        return _do_salvaged(st, op)
    raise ValueError(f"model has no rule for task op {op.op!r}")


def _step_info(st: TaskState, op: Op, cfg: ModelConfig) -> Verdict:
    """An indeterminate op that the search chose to take effect: assume it succeeded."""
    if op.op in ("claim", "poll_next"):
        if not _ready_for(st, op.agent):
            return _illegal(st, "linearizable", "indeterminate claim of a task that is not ready")
        return _legal(replace(
            st, status=CLAIMED, holder=op.agent, token=UNKNOWN_TOKEN,
            expires=None if st.exec_ttl in (None, UNKNOWN_TTL) else op.now + st.exec_ttl,
            attempt=st.attempt + 1, extend_count=0, lapsed=None))
    if op.op in ("fulfill", "fail", "release", "extend", "salvage"):
        if _guard_failures(st, op.agent, op.args.get("token"), cfg)[0] or _limit_reason(st, op, cfg):
            return _illegal(st, "linearizable", "indeterminate op that could not have succeeded")
        fake = Op(**{**op.__dict__, "type": OK, "value": None})
        return _apply_holder(st, fake, cfg)
    return _legal(st)  # reads change nothing


# ---------------------------------------------------------------------------- locks
@dataclass(frozen=True)
class LockState:
    name: str
    owner: str | None = None
    expires: int = 0


def step_lock(st: LockState | None, op: Op, cfg: ModelConfig) -> Verdict:
    """Daemon lock rules (PROTOCOL.md#operations): free, expired (expires_at <= now) or ours -> granted."""
    name = op.args["name"]
    st = st or LockState(name)
    held = st.owner is not None and op.now < st.expires
    if op.type == INFO:
        if op.op == "acquire_lock" and (not held or st.owner == op.args["owner"]):
            return _legal(LockState(name, op.args["owner"], op.now + op.args["ttl_ms"]))
        if op.op == "release_lock" and held and st.owner == op.args["owner"]:
            return _legal(LockState(name))
        return _legal(st)
    if op.type == FAIL:
        return _illegal(st, "lock-exclusive", f"{op.op} refused with {op.error}")
    if op.op == "acquire_lock":
        owner = op.args["owner"]
        may = not held or st.owner == owner
        if op.value and not may:
            inv = "lease-half-open" if op.now == st.expires - 1 else "lock-exclusive"
            return _illegal(st, inv, (
                f"{owner!r} acquired lock {name!r} at t={op.now} while {st.owner!r} holds it "
                f"until {st.expires}"))
        if not op.value and may:
            inv = "lease-half-open" if st.owner is not None and op.now == st.expires else "lock-exclusive"
            return _illegal(st, inv, (
                f"{owner!r} was refused lock {name!r} at t={op.now}, but it is "
                f"{'ours' if st.owner == owner and held else 'free (expired at ' + str(st.expires) + ')'}"))
        return _legal(LockState(name, owner, op.now + op.args["ttl_ms"]) if op.value else st)
    if op.op == "release_lock":
        mine = held and st.owner == op.args["owner"]
        # its own lock, expired, nobody took it since: True or False (PROTOCOL.md#release_lock)
        lapsed = not held and st.owner == op.args["owner"]
        if lapsed:
            return _legal(LockState(name) if op.value else st)
        if bool(op.value) != mine:
            return _illegal(st, "lock-exclusive", (
                f"release_lock({name!r}, {op.args['owner']!r}) returned {op.value}, "
                f"holder is {st.owner if held else None!r}"))
        return _legal(LockState(name) if mine else st)
    if op.op == "lock_holder":
        want = st.owner if held else None
        if op.value != want:
            inv = "lease-half-open" if st.owner is not None and op.now in (st.expires - 1, st.expires) else "lock-exclusive"
            return _illegal(st, inv, f"lock_holder({name!r}) = {op.value!r} at t={op.now}, expected {want!r}")
        return _legal(st)
    raise ValueError(op.op)


def _due_at(st: TaskState) -> int | None:
    if st.status == CLAIMED:
        return None if st.expires is None else st.expires + (1 if st.closed else 0)
    if st.status == SUBMITTED:
        return st.deadline
    return None


class SequentialModel:
    """All partitions together, for single-threaded use (the ferry_core state machine test).

    Unlike the per-partition search it knows every task, so it also checks what only a
    global view can: that ``poll_next`` returns the *oldest* ready task, or None only when
    nothing is ready, and that dependencies gate readiness.
    """

    def __init__(self, cfg: ModelConfig | None = None) -> None:
        # ferry_core's own choice of queued_at after a lease expiry: one value, not a range
        self.cfg = cfg or ModelConfig(requeue_at_expiry=True)
        self.tasks: dict[str, TaskState] = {}
        self.deps: dict[str, tuple[str, ...]] = {}
        self.order: dict[str, int] = {}
        self.locks: dict[str, LockState] = {}
        self.tokens: set[str] = set()

    def _advance_all(self, now: int) -> None:
        """Apply due events in time order, cascading failures at the instant they happen
        (a dependent whose dependency timed out first fails, even if its own window ends
        later): the same order ferry_core's sweep uses, so neither depends on who looked."""
        while True:
            due = [d for d in (_due_at(st) for st in self.tasks.values()) if d is not None and d <= now]
            if not due:
                break
            t = min(due)
            for tid, st in list(self.tasks.items()):
                if _due_at(st) == t:
                    self.tasks[tid] = advance(st, t)
            self._cascade()
        self._cascade()

    def _cascade(self) -> None:
        changed = True
        while changed:
            changed = False
            for tid, st in list(self.tasks.items()):
                if st.status == SUBMITTED and any(
                    self.tasks[d].status in (FAILED, TIMED_OUT) for d in self.deps[tid]
                ):
                    self.tasks[tid] = replace(st, status=FAILED, cascaded=True)
                    changed = True

    def ready(self, agent: str) -> list[str]:
        """Ready task ids for ``agent``, oldest first (PROTOCOL.md#poll_next order)."""
        out = [
            tid for tid, st in self.tasks.items()
            if _ready_for(st, agent) and all(self.tasks[d].status == COMPLETED for d in self.deps[tid])
        ]
        return sorted(out, key=lambda t: (self.tasks[t].queued_at, self.order[t]))

    def step(self, op: Op) -> Verdict:
        """Check one observed op and apply it."""
        self._advance_all(op.now)
        if op.op == "sweep":
            # after an explicit sweep every cascade is materialised: no more leniency
            for tid, st in self.tasks.items():
                if st.cascaded:
                    self.tasks[tid] = replace(st, cascaded=False)
            return _legal(None)
        if op.op in ("acquire_lock", "release_lock", "lock_holder"):
            v = step_lock(self.locks.get(op.args["name"]), op, self.cfg)
            if v.ok:
                self.locks[op.args["name"]] = v.state
            return v
        if op.op == "dispatch":
            if bad_arguments(op, self.cfg):
                if op.type == FAIL and (op.error == "InvalidArgument" or not self.cfg.typed_refusals):
                    return _legal(None)
                return step_task(None, op, self.cfg)
            deps = tuple(op.args.get("depends_on") or ())
            missing = [d for d in deps if d not in self.tasks]
            if op.type == FAIL:
                if missing and (op.error == "NotFound" or not self.cfg.typed_refusals):
                    return _legal(None)
                if op.error == "InvalidArgument":
                    return _legal(None)
                return _illegal(None, "linearizable", f"dispatch refused with {op.error}")
            if missing:
                return _illegal(None, "dag-order", f"dispatch accepted unknown dependencies {missing}")
            v = step_task(self.tasks.get(op.value), op, self.cfg)
            if v.ok:
                self.tasks[op.value] = v.state
                self.deps[op.value] = deps
                self.order[op.value] = len(self.order)
                self._advance_all(op.now)
            return v
        if op.op == "poll_next":
            ready = self.ready(op.agent)
            if op.value is None:
                if ready:
                    return _illegal(None, "no-lost-task", (
                        f"poll_next({op.agent!r}) returned nothing at t={op.now}; ready: {ready[:3]}"))
                return _legal(None)
            tid = op.value["task_id"]
            if tid not in ready:
                inv = "dag-order" if tid in self.tasks and self.tasks[tid].status == SUBMITTED else "single-winner"
                return _illegal(None, inv, f"poll_next({op.agent!r}) claimed {tid}, not ready")
            if tid != ready[0]:
                return _illegal(None, "linearizable", f"poll_next returned {tid}, oldest ready is {ready[0]}")
            return self._task_step(tid, op)
        if op.op == "claim" and op.type == OK and op.value is not None:
            tid = op.args["task_id"]
            if tid in self.tasks and any(self.tasks[d].status != COMPLETED for d in self.deps[tid]):
                return _illegal(None, "dag-order", f"task {tid} claimed before its dependencies completed")
        if op.op == "claim" and op.type == OK and op.value is None:
            tid = op.args["task_id"]
            if tid in self.ready(op.agent):
                return _illegal(None, "no-lost-task", f"claim({tid}) returned nothing but it is ready")
        tid = op.args.get("task_id")
        if tid not in self.tasks:
            return step_task(None, op, self.cfg)
        return self._task_step(tid, op)

    def _task_step(self, tid: str, op: Op) -> Verdict:
        st = self.tasks[tid]
        if op.op in ("claim", "poll_next") and op.type == OK and op.value:
            token = op.value.get("token")
            if token in self.tokens:
                return _illegal(st, "token-unique", f"token {token[:8]}… issued twice")
        v = step_task(st, op, self.cfg)
        if v.ok:
            self.tasks[tid] = v.state
            if op.op in ("claim", "poll_next") and op.type == OK and op.value:
                self.tokens.add(op.value["token"])
            self._advance_all(op.now)
        return v
