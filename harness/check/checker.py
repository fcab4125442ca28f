"""The invariants of PROTOCOL.md#invariants, checked on a history, each under its stable id.

Most rules are checked through the model (linearizability per task and per lock, with the
failing step classified by the rule it breaks); the rest need a global view of the
history: tokens across tasks, dependencies across tasks, and the WAL measurements that the
executor attaches to ops as ``extra``.
"""

from __future__ import annotations

import json
import math
import weakref
from bisect import bisect_left, insort
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.check.history import CUT_SHORT, FAIL, INFO, OK, History, Op
from harness.check.linearizability import PartitionSearch, partition_key, task_search
from harness.check.model import WRITERS_NOW_MAX, ModelConfig, _j, bad_arguments

STATES = frozenset({"SUBMITTED", "CLAIMED", "COMPLETED", "FAILED", "TIMED_OUT"})
COMPLETED = "COMPLETED"
READS = frozenset({"get", "inspect", "salvaged", "lock_holder"})
# ops whose arguments the generator may make hostile (wrong types, huge numbers, non-JSON)
HOSTILE_OPS = frozenset({"dispatch", "claim", "get", "salvaged", "fulfill", "salvage"})

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

# What each invariant needs from the target (operation names from harness.check.ops.PROTOCOL,
# features from harness.check.ops.FEATURES, "dag", and "wal-file" when the -wal file exists).
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


@dataclass
class Violation:
    """One broken rule, with the ops that show it (history indices)."""

    invariant: str
    message: str
    ops: list[int] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["protocol"] = self.protocol
        return d

    @property
    def protocol(self) -> str:
        """Where the broken rule is explained: its section of PROTOCOL.md."""
        return f"PROTOCOL.md#{self.invariant}"

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message} (see {self.protocol})"


def invariant_status(capabilities: Iterable[str],
                     skips: dict[str, str] | None = None) -> dict[str, str]:
    """``checked`` or ``skipped (why)`` for every invariant, from the target's capabilities
    and the skips it declares itself (``ferry_skips = {invariant: reason}`` on the store)."""
    caps = set(capabilities)
    out = {}
    for inv, needs in NEEDS.items():
        missing = [n for n in needs if not set(n.split("|")) & caps]
        if skips and inv in skips:
            out[inv] = f"skipped ({skips[inv]})"
        elif missing:
            out[inv] = f"skipped (target lacks {', '.join(missing)})"
        else:
            out[inv] = "checked"
    return out


class Checker:
    """Incremental: call :meth:`check` after each step with the objects that step touched.

    What it learnt about a history (indexes of claims, tokens, dispatches, fulfils, sweeps,
    and each object's search frontier) is kept between calls, keyed by the ``History``
    object: a call looks only at the ops appended since the last one, so checking after
    every step costs what the step added, and a full check is linear in the history.
    """

    def __init__(self, cfg: ModelConfig | None = None, *, wal_bound_bytes: int = 64 << 20,
                 search_budget: int = 200_000) -> None:
        self.cfg = cfg or ModelConfig()
        self.wal_bound = wal_bound_bytes
        self.search_budget = search_budget
        self.unknown: list[str] = []
        self._runs: dict[int, _Run] = {}

    def check(self, history: History, new_ops: list[Op] | None = None) -> list[Violation]:
        """All violations visible in ``history``; with ``new_ops``, only objects they touch."""
        run = _run_for(self, history, new_ops is None)
        run.ingest(history)
        everything = history.ops
        fresh_all = list(everything) if new_ops is None else list(new_ops)
        n = len(everything)
        for o in fresh_all:
            if 0 <= o.index < n and everything[o.index] is o:
                continue  # seen by run.ingest, which marked it already
            if o.op in HOSTILE_OPS and "invalid_args" not in o.extra:
                why = bad_arguments(o, self.cfg)
                if why:
                    o.extra["invalid_args"] = why
        # ops with invalid arguments are judged by the model alone (refused, or a
        # typed-errors finding); the global rules read only well-formed ones
        fresh = [o for o in fresh_all if "invalid_args" not in o.extra]
        out: list[Violation] = []
        out += self._faults(fresh, self.cfg.lease_closed)
        out += self._liveness(fresh_all)
        out += self._double_wins(run, fresh)
        out += self._secrets(run, fresh)
        out += self._linearizable(run, fresh_all)
        out += self._tokens(run, fresh)
        out += self._dag(run, fresh)
        out += self._wal(fresh)
        out += self._typed(fresh_all)
        out += self._inspect(run, fresh)
        out += self._ready_refused(run, fresh)
        out += self._cascade(run, fresh)
        return first_fact_first(out)

    # ----------------------------------------------------------------- per object
    @staticmethod
    def _mark_concurrent_writers(run: _Run, fresh: list[Op]) -> None:
        """For each fresh late-fulfill refusal, the latest clock any other possible writer
        ran at before it ended (the model decides from it whether the late result must have
        been kept: see model.WRITERS_NOW_MAX)."""
        for o in fresh:
            if (o.op == "fulfill" and o.type == FAIL and o.error == "LeaseExpired"
                    and WRITERS_NOW_MAX not in o.extra):
                o.extra[WRITERS_NOW_MAX] = run.writers.max_before(o.complete_ns or 0, o.index, -1)

    def _linearizable(self, run: _Run, fresh: list[Op]) -> list[Violation]:
        self._mark_concurrent_writers(run, fresh)
        touched = {k for k in map(partition_key, fresh) if k is not None}
        out = []
        for key in sorted(touched):
            search = run.parts.get(key)
            if search is None:
                continue
            res = search.run()
            if res.ok is None:
                if key not in run.unknown_said:
                    run.unknown_said.add(key)
                    self.unknown.append(f"{key}: {res.why}")
            elif not res.ok:
                out.append(Violation(
                    res.invariant or "linearizable", res.why or "not linearizable",
                    ops=[res.culprit] if res.culprit is not None else [],
                    detail={"object": key, "linearized_prefix": res.linearized,
                            "partition_ops": res.ops},
                ))
        return out

    # ----------------------------------------------------------------- global rules
    @staticmethod
    def _liveness(fresh: list[Op]) -> list[Violation]:
        """A call that never returned (no frozen worker to blame), or a worker that died
        with no fault injected: every call must end with a result or a typed error."""
        out = []
        for o in fresh:
            if o.op == "checkpoint":
                continue  # a TRUNCATE that cannot finish: wal-bounded's case (see _wal)
            if "hung_s" in o.extra:
                out.append(Violation(
                    "liveness",
                    f"{o.op} by {o.agent!r} on worker w{o.process} did not return within "
                    f"{o.extra['hung_s']:.1f}s (20× the slowest op seen, at least "
                    f"{3:.0f}s; --op-timeout sets it) and was killed: a call must end with a "
                    "result or a typed error, busy waits included", ops=[o.index]))
            elif "died" in o.extra:
                out.append(Violation(
                    "liveness",
                    f"worker w{o.process} died during {o.op} by {o.agent!r} (exit code "
                    f"{o.extra['died']}) with no fault injected: the store crashed the process",
                    ops=[o.index]))
        return out

    def _double_wins(self, run: _Run, fresh: list[Op]) -> list[Violation]:
        """Two concurrent claims of one task that both won, with neither lease over at the
        other's instant and nothing done with either token in between: two live holders,
        whatever order the search would try (``single-winner``, named before the search)."""
        out: list[Violation] = []
        fresh_claims = self._claims(fresh)
        if not fresh_claims:
            return out
        used = run.token_used  # token -> earliest invoke of an op that presented it
        reported: set[Any] = set()
        for c2 in fresh_claims:
            tid = c2.value.get("task_id")
            if _key(tid) in reported:
                continue
            for c1 in run.claims_by_task.get(_key(tid), []):
                if c1.index == c2.index or not _concurrent(c1, c2):
                    continue
                closed = self.cfg.lease_closed
                if not (_lease_covers(c1, c2.now, closed) and _lease_covers(c2, c1.now, closed)):
                    continue
                end = max(c1.complete_ns or 0, c2.complete_ns or 0)
                if any(used.get(_key(c.value.get("token")), end) < end for c in (c1, c2)):
                    continue
                first, second = sorted((c1, c2), key=lambda o: o.index)
                part = run.task_ops.get(_key(tid), [])
                out.append(Violation(
                    "single-winner",
                    f"task {tid} has two live holders: {first.agent!r} (op #{first.index}, lease "
                    f"until {first.value.get('lease_expires_at')}) and {second.agent!r} (op "
                    f"#{second.index}) both won concurrent claims at t={second.now}. A race on "
                    "one ready task has exactly one winner; likely fix: take the task in one "
                    "atomic statement (UPDATE … WHERE status='SUBMITTED', success iff one row "
                    "changed) or one BEGIN IMMEDIATE transaction, never select-then-update",
                    ops=[first.index, second.index],
                    detail={"object": f"task:{tid}",
                            "partition_ops": list(part),
                            "linearized_prefix": [i for i in part if i < first.index]
                            + [first.index],
                            "model_state": f"task {tid} CLAIMED by {first.agent!r} until "
                                           f"{first.value.get('lease_expires_at')}"}))
                reported.add(_key(tid))
                break
        return out

    @staticmethod
    def _secrets(run: _Run, fresh: list[Op]) -> list[Violation]:
        """No issued token appears anywhere in a read's value (``token-unique``: views never
        carry a token, PROTOCOL.md#operations), whatever the field is called."""
        reads = [o for o in fresh if o.op in ("get", "inspect", "salvaged") and o.type == OK]
        if not reads or not run.secrets:
            return []
        out = []
        for r in reads:
            hits = run.secrets_in(r.value)
            found = [(run.secrets[t][0], t) for t in hits if run.secrets[t][1].index < r.index]
            if found:
                _, token = min(found)
                claim = run.secrets[token][1]
                out.append(Violation(
                    "token-unique",
                    f"{r.op} returned the claim token {token[:8]}… issued to "
                    f"{claim.agent!r} for task {claim.value.get('task_id')} (op "
                    f"#{claim.index}): read APIs never carry a token, under any field name",
                    ops=[claim.index, r.index]))
        return out

    @staticmethod
    def _claims(ops: Iterable[Op]) -> list[Op]:
        return [o for o in ops if o.op in ("claim", "poll_next") and o.type == OK and o.value]

    def _tokens(self, run: _Run, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in self._claims(fresh):
            token = o.value.get("token")
            prev = run.first_claim.get(_key(token))
            if prev is not None and prev is not o and prev.index != o.index:
                out.append(Violation(
                    "token-unique",
                    f"token {str(token)[:8]}… issued twice: task {prev.value['task_id']} "
                    f"(op #{prev.index}) and task {o.value['task_id']} (op #{o.index})",
                    ops=[prev.index, o.index]))
        return out

    def _dag(self, run: _Run, fresh: list[Op]) -> list[Violation]:
        out = []
        for claim in self._claims(fresh):
            tid = claim.value["task_id"]
            for d in run.deps.get(_key(tid), []):
                done = run.fulfilled_any.get(_key(d))
                if done is None or done.invoke_ns >= (claim.complete_ns or 0):
                    out.append(Violation(
                        "dag-order",
                        f"task {tid} was claimed by {claim.agent!r} at t={claim.now} before its "
                        f"dependency {d} was COMPLETED",
                        ops=[claim.index] + ([done.index] if done else [])))
        return out

    def _wal(self, fresh: list[Op]) -> list[Violation]:
        out = []
        for o in fresh:
            x = o.extra
            if "wal_before" in x and "wal_after" in x and x.get("idle"):
                what = "an idle poll" if o.op == "poll_next" else f"a read ({o.op})"
                if x["wal_after"] != x["wal_before"]:
                    out.append(Violation(
                        "idle-no-write",
                        f"{what} grew the -wal file from {x['wal_before']} to {x['wal_after']} "
                        "bytes: it wrote although there was nothing to do",
                        ops=[o.index]))
                elif x.get("wal_mark_before") != x.get("wal_mark_after"):
                    out.append(Violation(
                        "idle-no-write",
                        f"{what} appended to the WAL (its header or frame count changed: "
                        f"{x.get('wal_mark_before')} -> {x.get('wal_mark_after')}), though the "
                        "file size stayed the same: it wrote although there was nothing to do",
                        ops=[o.index]))
            if (o.op == "checkpoint" and x.get("reader") and "hung_s" in x
                    and not _injected(o)):
                out.append(Violation(
                    "wal-bounded",
                    f"checkpoint(TRUNCATE) was still waiting {x['hung_s']:.1f}s after the "
                    f"outside reader let go (it held its snapshot {x.get('reader_hold_s', 0)}s): "
                    "something of the store itself keeps a read transaction open, so the WAL "
                    "can never be reset", ops=[o.index]))
            if (o.op == "checkpoint" and "wal_after" in x and not x.get("reader")
                    and o.type != OK and not _injected(o)):
                out.append(Violation(
                    "wal-bounded",
                    f"checkpoint(TRUNCATE) with no outside reader open was "
                    f"{'refused with ' + str(o.error) if o.type == FAIL else 'not answered'}"
                    f"{': ' + str(o.message)[:120] if o.message else ''}: with no reader it "
                    "must empty the -wal, or the WAL grows without bound", ops=[o.index]))
            if o.op == "checkpoint" and "wal_after" in x and not x.get("reader"):
                if o.type == OK and str(o.args.get("mode", "TRUNCATE")).upper() == "TRUNCATE" and x["wal_after"] > 0:
                    out.append(Violation(
                        "wal-bounded",
                        f"checkpoint(TRUNCATE) with no outside reader left the -wal at "
                        f"{x['wal_after']} bytes (returned {o.value}): a transaction or cursor "
                        "of the store itself is still open",
                        ops=[o.index]))
            peak = max(x.get("wal_after", 0), x.get("wal_after_step", 0))
            if peak > self.wal_bound:
                out.append(Violation(
                    "wal-bounded",
                    f"the -wal file reached {peak} bytes, over the bound of {self.wal_bound} "
                    "(--wal-bound): under the store's normal traffic its WAL must stay "
                    "bounded (checkpoints must be able to reset it)", ops=[o.index]))
        return out

    @staticmethod
    def _faults(fresh: list[Op], closed: bool = False) -> list[Violation]:
        """What the nemesis's probes found (annotations left by :mod:`harness.run.nemesis`).

        ``probe``: rescuers racing for a task whose holder was killed or frozen while its
        lease was still on (a ``get`` said so after the fault): none may win at
        ``expires - 1``; at ``expires`` exactly one must (attempts left), if all rescuers
        got a clean answer. ``zombie``: the frozen holder's fulfill, accepted after a
        rescuer reclaimed the task. ``integrity``: ``PRAGMA integrity_check`` not "ok".
        """
        out: list[Violation] = []
        probes: dict[tuple[int, str], list[Op]] = {}
        for o in fresh:
            x = o.extra
            if "integrity" in x and x["integrity"] != "ok":
                out.append(Violation(
                    "integrity", f"PRAGMA integrity_check after faults: {str(x['integrity'])[:400]}",
                    ops=[o.index]))
            if "probe" in x:
                probes.setdefault((x["probe"]["holder_op"], x["probe"]["at"]), []).append(o)
            z = x.get("zombie")
            if z and o.op == "fulfill" and o.type == OK and z.get("rescued_by") is not None:
                out.append(Violation(
                    "lease-half-open",
                    f"the frozen holder's fulfill of task {z['task']} was accepted after its "
                    f"lease ended at {z['expires']} and a rescuer reclaimed the task (op "
                    f"#{z['rescued_by']}): a zombie's result must be refused",
                    ops=[o.index, z["rescued_by"]]))
        for (holder, at), group in probes.items():
            p = group[0].extra["probe"]
            if closed and at == "expires":  # the declared closed lease still holds: no winner
                at = "expires-1"
            won = [o for o in group if o.type == OK and o.value]
            who = "killed" if p["cause"] == "killed" else "frozen (SIGSTOP)"
            ids = [o.index for o in group]
            if at == "expires-1" and won:
                out.append(Violation(
                    "lease-half-open",
                    f"task {p['task']} was reclaimed at t={won[0].now}, while the lease of its "
                    f"{who} holder (op #{holder}) still held (it ends at {p['expires']}"
                    f"{', inclusive: declared lease-closed' if closed else ''})",
                    ops=ids))
            elif at != "expires-1" and len(won) > 1:
                out.append(Violation(
                    "single-winner",
                    f"{len(won)} rescuers reclaimed task {p['task']} at t={won[0].now}; exactly "
                    "one may", ops=ids))
            elif (at != "expires-1" and not won and p["attempts_left"]
                  and all(o.type == OK for o in group)):
                out.append(Violation(
                    "lease-half-open",
                    f"the holder of task {p['task']} was {who} (op #{holder}) and left it "
                    f"CLAIMED with a lease ending at {p['expires']}; at t={group[0].now} "
                    f"({at}) none of {len(group)} rescuers could claim it: a dead holder's "
                    "lease must end at lease_expires_at, not later",
                    ops=[holder, *ids]))
        return out

    @staticmethod
    def _inspect(run: _Run, fresh: list[Op]) -> list[Violation]:
        """``inspect()`` lists every dispatched task exactly once, in a SPEC state, and
        every accepted result unchanged (``no-lost-task``)."""
        out: list[Violation] = []
        for o in fresh:
            if (o.op != "inspect" or o.type != OK or o.args.get("agent_id")
                    or not isinstance(o.value, list)
                    or not all(isinstance(v, dict) and "task_id" in v for v in o.value)):
                continue
            views = {}
            for v in o.value:
                tid = v.get("task_id")
                if tid in views:
                    out.append(Violation("no-lost-task", f"inspect() lists task {tid} twice",
                                         ops=[o.index]))
                views[tid] = v
                if v.get("status") not in STATES:
                    out.append(Violation("no-lost-task", f"inspect() shows task {tid} in "
                                         f"state {v.get('status')!r}, not a SPEC state",
                                         ops=[o.index]))
            for p in run.ok_writes:
                if not (p.complete_ns and p.complete_ns < o.invoke_ns):
                    continue
                if p.op == "dispatch" and p.value not in views:
                    out.append(Violation("no-lost-task", f"task {p.value} (dispatched by op "
                                         f"#{p.index}) is missing from inspect()",
                                         ops=[p.index, o.index]))
                elif p.op == "fulfill" and p.args.get("task_id") in views:
                    v = views[p.args["task_id"]]
                    if v.get("status") != COMPLETED or _j(v.get("result")) != _j(p.args.get("result")):
                        out.append(Violation(
                            "no-lost-task",
                            f"task {p.args['task_id']}: fulfill (op #{p.index}) was accepted with "
                            f"{_j(p.args.get('result'))}, but inspect() shows {v.get('status')} "
                            f"with {_j(v.get('result'))}", ops=[p.index, o.index]))
        return out

    @staticmethod
    def _ready_refused(run: _Run, fresh: list[Op]) -> list[Violation]:
        """A poll or claim that came back empty although a task was *certainly* ready for
        that agent (``no-lost-task``). Certain means: dispatched before the call, for this
        agent or any, every dependency fulfilled before the call, queue window open, and
        nothing that could have claimed or changed it started before the call ended."""
        out = []
        for e in fresh:
            if not (e.op in ("poll_next", "claim") and e.type == OK and e.value is None):
                continue
            end = e.complete_ns or 0
            if run.info_claim_min < end:
                continue  # an indeterminate claim may have taken anything
            if e.op == "claim":
                tid = e.args["task_id"]
                found = tid if run.ready_for(e, tid) else None
            else:
                found = run.first_ready(e)
            if found is None:
                continue
            d = run.dispatched[_key(found)]
            deps = d.args.get("depends_on") or []
            out.append(Violation(
                "no-lost-task",
                f"{e.op}({e.agent!r}) returned nothing at t={e.now}, but task {found} was "
                f"ready for it (dispatched by op #{d.index}, never claimed"
                f"{', dependencies completed' if deps else ''})", ops=[e.index, d.index]))
        return out

    @staticmethod
    def _cascade(run: _Run, fresh: list[Op]) -> list[Violation]:
        """After a dependency ended FAILED or TIMED_OUT and a sweep ran, no dependent may
        still read SUBMITTED (``dag-order``: PROTOCOL.md#dependencies-and-the-failure-cascade)."""
        reads = [o for o in fresh if o.op == "get" and o.type == OK and isinstance(o.value, dict)
                 and o.value.get("status") == "SUBMITTED" and o.value.get("depends_on")]
        out = []
        for r in reads:
            # the latest start of a sweep that ended before this read began
            swept = run.sweeps.max_before(r.invoke_ns)
            for dep in r.value["depends_on"]:
                t = run.ended.get(_key(dep))
                if t is not None and t < swept:
                    out.append(Violation(
                        "dag-order",
                        f"task {r.value['task_id']} is still SUBMITTED at t={r.now} although its "
                        f"dependency {dep} ended FAILED/TIMED_OUT and a sweep ran since: the "
                        "failure must cascade", ops=[r.index]))
                    break
        return out

    @staticmethod
    def _typed(fresh: list[Op]) -> list[Violation]:
        return [
            Violation("typed-errors",
                      f"{o.op} raised {o.error}: {o.message} — not a PROTOCOL.md#error-classes error class",
                      ops=[o.index])
            for o in fresh
            if o.type == INFO and o.error and o.note is None and o.error != "BarrierTimeout"
        ]


def _injected(o: Op) -> bool:
    """The op ended early because of ferry itself (a fault, the budget), not the store."""
    return CUT_SHORT in o.extra


def _concurrent(a: Op, b: Op) -> bool:
    return a.invoke_ns < (b.complete_ns or 0) and b.invoke_ns < (a.complete_ns or 0)


def _lease_covers(claim: Op, now: int, closed: bool = False) -> bool:
    expires = claim.value.get("lease_expires_at")
    return not isinstance(expires, int) or claim.now <= now < expires + (1 if closed else 0)


# Findings about the refusal's class, not about safety: named only when nothing else is.
MINOR = frozenset({"refusal-class", "refusal-order"})

# How specific an invariant's name is: the generic search verdict comes last.
_GENERIC = frozenset({"linearizable"})


def first_fact_first(violations: list[Violation]) -> list[Violation]:
    """Order violations so a specific name leads (the report names the run by the first):
    the checks run most-specific first (fault probes, two live holders, leaked tokens, the
    model's per-object verdicts, global rules), and the generic ``linearizable`` verdict
    goes last."""
    return sorted(violations, key=lambda v: (v.invariant in _GENERIC, v.invariant in MINOR))


def refusals(history: History) -> dict[str, int]:
    """Count of typed refusals by class (for the report)."""
    out: dict[str, int] = {}
    for o in history:
        if o.type == FAIL:
            out[o.error or "?"] = out.get(o.error or "?", 0) + 1
    return out


# ----------------------------------------------------------------------------- indexes
def _run_for(checker: Checker, history: History, fresh_start: bool) -> _Run:
    """The checker's state for ``history`` (a new one for a new or rewritten history)."""
    key = id(history)
    runs = checker._runs
    run = runs.get(key)
    if (fresh_start or run is None or run.ref() is not history or run.cfg != checker.cfg
            or run.budget != checker.search_budget or not run.consistent(history)):
        run = _Run(history, checker.cfg, checker.search_budget)
        runs.pop(key, None)
        while len(runs) >= 4:  # old examples' histories: forget them
            runs.pop(next(iter(runs)))
        runs[key] = run
    return run


def _key(x: Any) -> Any:
    """``x`` as a dict key (a store may hand back unhashable ids or tokens)."""
    if type(x) is str or x is None:
        return x
    try:
        hash(x)
    except TypeError:
        return ("unhashable", json.dumps(x, sort_keys=True, default=str))
    return x


def _leaf_texts(value: Any) -> Iterable[str]:
    """The JSON text of every key and scalar inside ``value`` (strings without quotes)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                stack.append(k)
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, str):
            yield json.dumps(v)[1:-1]
        else:
            yield json.dumps(v, default=str)


class _PrefixMax:
    """The largest value among entries whose key is below a limit (optionally not counting
    one entry): entries arrive in nearly sorted key order, so inserting is cheap."""

    def __init__(self) -> None:
        self.keys: list[float] = []
        self.values: list[float] = []
        self.idents: list[int] = []
        self.best: list[tuple[float, int, float | None]] = []  # prefix (max, its id, 2nd)
        self.stale = 0  # first position whose prefix entry must be recomputed

    def add(self, key: float, value: float, ident: int) -> None:
        if not self.keys or key >= self.keys[-1]:
            p = len(self.keys)
            self.keys.append(key)
            self.values.append(value)
            self.idents.append(ident)
        else:
            p = bisect_left(self.keys, key)
            self.keys.insert(p, key)
            self.values.insert(p, value)
            self.idents.insert(p, ident)
        self.stale = min(self.stale, p)

    def _refresh(self) -> None:
        n = len(self.keys)
        del self.best[self.stale:]
        for p in range(self.stale, n):
            v, i = self.values[p], self.idents[p]
            if not self.best:
                self.best.append((v, i, None))
                continue
            b1, i1, b2 = self.best[-1]
            if v > b1:
                self.best.append((v, i, b1))
            elif b2 is None or v > b2:
                self.best.append((b1, i1, v))
            else:
                self.best.append((b1, i1, b2))
        self.stale = n

    def max_before(self, limit: float, exclude: int | None = None,
                   default: float = -math.inf) -> float:
        p = bisect_left(self.keys, limit)
        if p == 0:
            return default
        if self.stale < len(self.keys):
            self._refresh()
        b1, i1, b2 = self.best[p - 1]
        if i1 == exclude:
            return default if b2 is None else b2
        return b1


class _Run:
    """What the checker knows about one history: indexes over the ops seen so far, each
    updated in O(1) per op, and every object's search (its closed prefix and frontier)."""

    def __init__(self, history: History, cfg: ModelConfig, budget: int) -> None:
        self.ref = weakref.ref(history)
        self.cfg = cfg
        self.budget = budget
        self.n = 0
        self.last: Op | None = None
        self.parts: dict[str, PartitionSearch] = {}
        self.unknown_said: set[str] = set()
        # over every op
        self.writers = _PrefixMax()  # invoke -> clock of ops that may write
        # over well-formed ops (no invalid_args)
        self.task_ops: dict[Any, list[int]] = {}
        self.claims_by_task: dict[Any, list[Op]] = {}
        self.first_claim: dict[Any, Op] = {}
        self.token_used: dict[Any, int] = {}
        self.secrets: dict[str, tuple[int, Op]] = {}  # token -> (first seen, last claim)
        self.secret_lengths: set[int] = set()
        self.deps: dict[Any, list[Any]] = {}
        self.fulfilled_any: dict[Any, Op] = {}
        self.fulfilled_ok: dict[Any, Op] = {}
        self.dispatched: dict[Any, Op] = {}
        self.disp_pos: dict[Any, int] = {}
        self.dup_dispatch = False
        self.ok_writes: list[Op] = []
        self.touch_min: dict[Any, int] = {}
        self.info_claim_min: float = math.inf
        self.ended: dict[Any, int] = {}
        self.sweeps = _PrefixMax()  # completion -> invoke of OK sweeps
        # tasks that may be ready (dependencies fulfilled), per target agent, as
        # [dispatch completion, dispatch position, task key or None once pruned], sorted
        self.groups: dict[Any, list[list[Any]]] = {}
        self.pruned: dict[Any, int] = {}
        self.waiting: dict[Any, list[Any]] = {}
        self.removed_touch: float = -math.inf
        self.removed_deadline: float = -math.inf

    def consistent(self, history: History) -> bool:
        """The history still starts with the ops this run has seen."""
        return self.n <= len(history.ops) and (self.n == 0 or history.ops[self.n - 1] is self.last)

    def ingest(self, history: History) -> None:
        ops = history.ops
        for o in ops[self.n:]:
            self._add(o)
        self.n = len(ops)
        self.last = ops[-1] if ops else None

    def _add(self, o: Op) -> None:
        if o.op in HOSTILE_OPS and "invalid_args" not in o.extra:
            why = bad_arguments(o, self.cfg)
            if why:
                o.extra["invalid_args"] = why
        key = partition_key(o)
        if key is not None:
            search = self.parts.get(key)
            if search is None:
                search = self.parts[key] = task_search(key, self.cfg, budget=self.budget)
            search.add((o,))
        if o.op not in READS:
            self.writers.add(o.invoke_ns, o.now, o.index)
        if "invalid_args" in o.extra:
            return
        tid = o.task_id
        if tid is not None:
            self.task_ops.setdefault(_key(tid), []).append(o.index)
        name, typ = o.op, o.type
        if name in ("claim", "poll_next"):
            if typ == OK and o.value:
                v = o.value
                self.claims_by_task.setdefault(_key(v.get("task_id")), []).append(o)
                token = v.get("token")
                self.first_claim.setdefault(_key(token), o)
                if isinstance(token, str) and len(token) >= 8 and token != v.get("task_id"):
                    seen = self.secrets.get(token)
                    self.secrets[token] = (len(self.secrets) if seen is None else seen[0], o)
                    self.secret_lengths.add(len(token))
            elif typ == INFO:
                self.info_claim_min = min(self.info_claim_min, o.invoke_ns)
        token = o.args.get("token")
        if token is not None and typ != FAIL:
            k = _key(token)
            self.token_used[k] = min(self.token_used.get(k, o.invoke_ns), o.invoke_ns)
        if name == "dispatch" and typ == OK:
            k = _key(o.value)
            self.deps[k] = list(o.args.get("depends_on") or ())
            if k in self.dispatched:
                self.dup_dispatch = True
            self.dispatched[k] = o
            self.disp_pos.setdefault(k, len(self.disp_pos))
            self.ok_writes.append(o)
            missing = [_key(x) for x in self.deps[k] if _key(x) not in self.fulfilled_ok]
            for x in missing:
                self.waiting.setdefault(x, []).append(k)
            if not missing:
                self._maybe_ready(k)
        elif name == "fulfill" and typ in (OK, INFO):
            k = _key(o.args.get("task_id"))
            self.fulfilled_any.setdefault(k, o)
            if typ == OK:
                self.ok_writes.append(o)
                if k not in self.fulfilled_ok:
                    self.fulfilled_ok[k] = o
                    for dependent in self.waiting.pop(k, ()):
                        if all(_key(x) in self.fulfilled_ok for x in self.deps.get(dependent, ())):
                            self._maybe_ready(dependent)
        elif name == "fail" and typ == OK:
            self._ended(o)
        elif (name == "get" and typ == OK and isinstance(o.value, dict)
              and o.value.get("status") in ("FAILED", "TIMED_OUT")):
            self._ended(o)
        elif name == "sweep" and typ == OK:
            self.sweeps.add(o.complete_ns or 0, o.invoke_ns, o.index)
        if name not in ("dispatch", "get", "salvaged") and not (
                name == "claim" and typ == OK and o.value is None):
            k = _key(tid)
            self.touch_min[k] = min(self.touch_min.get(k, o.invoke_ns), o.invoke_ns)

    def _ended(self, o: Op) -> None:
        k, t = _key(o.args.get("task_id")), o.complete_ns or 0
        self.ended[k] = min(self.ended.get(k, t), t)

    def _maybe_ready(self, k: Any) -> None:
        d = self.dispatched.get(k)
        if d is not None:
            group = self.groups.setdefault(_key(d.args.get("target_agent")), [])
            entry = [d.complete_ns or 0, self.disp_pos[k], k]
            if not group or entry >= group[-1]:
                group.append(entry)
            else:
                insort(group, entry)

    def ready_for(self, e: Op, tid: Any) -> bool:
        """Was ``tid`` certainly ready for the empty poll or claim ``e``?"""
        k = _key(tid)
        d = self.dispatched.get(k)
        if d is None or self.touch_min.get(k, math.inf) < (e.complete_ns or 0):
            return False
        if (d.complete_ns or 0) >= e.invoke_ns:
            return False
        a = d.args
        if a.get("target_agent") not in (None, e.agent):
            return False
        if not e.now < d.now + a.get("queue_ttl_ms", 0):
            return False
        for x in a.get("depends_on") or []:
            f = self.fulfilled_ok.get(_key(x))
            if f is None or (f.complete_ns or 0) >= e.invoke_ns:
                return False
        return True

    def first_ready(self, e: Op) -> Any:
        """The first task (in dispatch order) certainly ready for the empty poll ``e``."""
        end = e.complete_ns or 0
        if self.dup_dispatch or end <= self.removed_touch or e.now < self.removed_deadline:
            # something pruned might count for this (out-of-order) op: look at every task
            for d in self.dispatched.values():
                if self.ready_for(e, d.value):
                    return d.value
            return None
        best: tuple[int, Any] | None = None
        for g in {_key(None), _key(e.agent)}:
            group = self.groups.get(g)
            if not group:
                continue
            for entry in group:
                k = entry[2]
                if k is None:
                    continue
                if entry[0] >= e.invoke_ns:
                    break  # dispatched after the call began: not ready for it
                d = self.dispatched[k]
                touched = self.touch_min.get(k)
                if touched is not None and touched < end:
                    self._prune(g, entry)
                    self.removed_touch = max(self.removed_touch, touched)
                    continue
                deadline = d.now + d.args.get("queue_ttl_ms", 0)
                if not e.now < deadline:
                    self._prune(g, entry)
                    self.removed_deadline = max(self.removed_deadline, deadline)
                    continue
                if self.ready_for(e, d.value) and (best is None or entry[1] < best[0]):
                    best = (entry[1], d.value)
            if self.pruned.get(g, 0) * 2 > len(group):
                group[:] = [x for x in group if x[2] is not None]
                self.pruned[g] = 0
        return None if best is None else best[1]

    def _prune(self, g: Any, entry: list[Any]) -> None:
        entry[2] = None
        self.pruned[g] = self.pruned.get(g, 0) + 1

    def secrets_in(self, value: Any) -> set[str]:
        """Issued tokens that occur in ``value``'s JSON text."""
        found: set[str] = set()
        secrets, lengths = self.secrets, self.secret_lengths
        for text in _leaf_texts(value):
            n = len(text)
            for L in lengths:
                if n == L:
                    if text in secrets:
                        found.add(text)
                elif n > L:
                    for i in range(n - L + 1):
                        if text[i:i + L] in secrets:
                            found.add(text[i:i + L])
        return found
