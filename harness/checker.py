"""The invariants of PROTOCOL.md#invariants, checked on a history, each under its stable id.

Most rules are checked through the model (linearizability per task and per lock, with the
failing step classified by the rule it breaks); the rest need a global view of the
history: tokens across tasks, dependencies across tasks, and the WAL measurements that the
executor attaches to ops as ``extra``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from .history import FAIL, INFO, OK, History, Op
from .linearizability import check_partition, partition
from .model import WRITERS_NOW_MAX, ModelConfig, _j, bad_arguments, step_lock, step_task

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

# What each invariant needs from the target (operation names from harness.ops.PROTOCOL,
# features from harness.ops.FEATURES, "dag", and "wal-file" when the -wal file exists).
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
    """Incremental: call :meth:`check` after each step with the objects that step touched."""

    def __init__(self, cfg: ModelConfig | None = None, *, wal_bound_bytes: int = 64 << 20,
                 search_budget: int = 200_000) -> None:
        self.cfg = cfg or ModelConfig()
        self.wal_bound = wal_bound_bytes
        self.search_budget = search_budget
        self.unknown: list[str] = []
        # invariants the target declared it cannot be held to (ferry_skips): never reported
        self.skips: frozenset[str] = frozenset()

    def check(self, history: History, new_ops: list[Op] | None = None) -> list[Violation]:
        """All violations visible in ``history``; with ``new_ops``, only objects they touch."""
        everything = list(history)
        for o in everything if new_ops is None else new_ops:
            if o.op in HOSTILE_OPS and "invalid_args" not in o.extra:
                why = bad_arguments(o, self.cfg)
                if why:
                    o.extra["invalid_args"] = why
        # ops with invalid arguments are judged by the model alone (refused, or a
        # typed-errors finding); the global rules read only well-formed ones
        ops = [o for o in everything if "invalid_args" not in o.extra]
        fresh_all = everything if new_ops is None else new_ops
        fresh = [o for o in fresh_all if "invalid_args" not in o.extra]
        out: list[Violation] = []
        out += self._faults(fresh, self.cfg.lease_closed)
        out += self._liveness(fresh_all)
        out += self._double_wins(ops, fresh)
        out += self._secrets(ops, fresh)
        out += self._linearizable(everything, fresh_all)
        out += self._tokens(ops, fresh)
        out += self._dag(ops, fresh)
        out += self._wal(fresh)
        out += self._typed(fresh_all)
        out += self._inspect(ops, fresh)
        out += self._ready_refused(ops, fresh)
        out += self._cascade(ops, fresh)
        return first_fact_first([v for v in out if v.invariant not in self.skips])

    # ----------------------------------------------------------------- per object
    @staticmethod
    def _mark_concurrent_writers(ops: list[Op], fresh: list[Op]) -> None:
        """For each fresh late-fulfill refusal, the latest clock any other possible writer
        ran at before it ended (the model decides from it whether the late result must have
        been kept: see model.WRITERS_NOW_MAX)."""
        late = [o for o in fresh if o.op == "fulfill" and o.type == FAIL
                and o.error == "LeaseExpired" and WRITERS_NOW_MAX not in o.extra]
        for o in late:
            end = o.complete_ns or 0
            o.extra[WRITERS_NOW_MAX] = max(
                (p.now for p in ops if p.index != o.index and p.op not in READS
                 and p.invoke_ns < end), default=-1)

    def _linearizable(self, ops: list[Op], fresh: list[Op]) -> list[Violation]:
        self._mark_concurrent_writers(ops, fresh)
        parts = partition(ops)
        touched = set(partition(fresh))
        out = []
        for key in sorted(touched):
            part = parts.get(key, [])
            if key.startswith("lock:"):
                def step(s, o):
                    return step_lock(s, o, self.cfg)
            else:
                def step(s, o):
                    return step_task(s, o, self.cfg)
            res = check_partition(key, part, step, budget=self.search_budget)
            if res.ok is None:
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
            if o.op == "checkpoint" and not o.extra.get("reader"):
                continue  # a TRUNCATE with no reader that cannot finish: wal-bounded's case
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

    def _double_wins(self, ops: list[Op], fresh: list[Op]) -> list[Violation]:
        """Two concurrent claims of one task that both won, with neither lease over at the
        other's instant and nothing done with either token in between: two live holders,
        whatever order the search would try (``single-winner``, named before the search)."""
        out = []
        fresh_claims = self._claims(fresh)
        if not fresh_claims:
            return out
        by_task: dict[str, list[Op]] = {}
        for o in self._claims(ops):
            by_task.setdefault(o.value.get("task_id"), []).append(o)
        used: dict[str, int] = {}  # token -> earliest invoke of an op that presented it
        for o in ops:
            token = o.args.get("token")
            if token is not None and o.type != FAIL:
                used[token] = min(used.get(token, o.invoke_ns), o.invoke_ns)
        reported: set[str] = set()
        for c2 in fresh_claims:
            tid = c2.value.get("task_id")
            if tid in reported:
                continue
            for c1 in by_task.get(tid, []):
                if c1.index == c2.index or not _concurrent(c1, c2):
                    continue
                closed = self.cfg.lease_closed
                if not (_lease_covers(c1, c2.now, closed) and _lease_covers(c2, c1.now, closed)):
                    continue
                end = max(c1.complete_ns or 0, c2.complete_ns or 0)
                if any(used.get(c.value.get("token"), end) < end for c in (c1, c2)):
                    continue
                first, second = sorted((c1, c2), key=lambda o: o.index)
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
                            "partition_ops": [o.index for o in ops if o.task_id == tid],
                            "linearized_prefix": [o.index for o in ops if o.task_id == tid
                                                  and o.index < first.index] + [first.index],
                            "model_state": f"task {tid} CLAIMED by {first.agent!r} until "
                                           f"{first.value.get('lease_expires_at')}"}))
                reported.add(tid)
                break
        return out

    @staticmethod
    def _secrets(ops: list[Op], fresh: list[Op]) -> list[Violation]:
        """No issued token appears anywhere in a read's value (``token-unique``: views never
        carry a token, PROTOCOL.md#operations), whatever the field is called."""
        reads = [o for o in fresh if o.op in ("get", "inspect", "salvaged") and o.type == OK]
        if not reads:
            return []
        # a receipt that is the task's own id (some queues) is public, not a secret
        tokens = {o.value["token"]: o for o in Checker._claims(ops)
                  if isinstance(o.value.get("token"), str) and len(o.value["token"]) >= 8
                  and o.value["token"] != o.value.get("task_id")}
        out = []
        for r in reads:
            text = json.dumps(r.value, default=str)
            for token, claim in tokens.items():
                if token in text and claim.index < r.index:
                    out.append(Violation(
                        "token-unique",
                        f"{r.op} returned the claim token {token[:8]}… issued to "
                        f"{claim.agent!r} for task {claim.value.get('task_id')} (op "
                        f"#{claim.index}): read APIs never carry a token, under any field name",
                        ops=[claim.index, r.index]))
                    break
        return out

    @staticmethod
    def _claims(ops: Iterable[Op]) -> list[Op]:
        return [o for o in ops if o.op in ("claim", "poll_next") and o.type == OK and o.value]

    def _tokens(self, ops: list[Op], fresh: list[Op]) -> list[Violation]:
        first: dict[str, Op] = {}
        out = []
        fresh_ids = {o.index for o in fresh}
        for o in self._claims(ops):
            token = o.value.get("token")
            if token in first and o.index in fresh_ids:
                prev = first[token]
                out.append(Violation(
                    "token-unique",
                    f"token {str(token)[:8]}… issued twice: task {prev.value['task_id']} "
                    f"(op #{prev.index}) and task {o.value['task_id']} (op #{o.index})",
                    ops=[prev.index, o.index]))
            first.setdefault(token, o)
        return out

    def _dag(self, ops: list[Op], fresh: list[Op]) -> list[Violation]:
        deps = {o.value: list(o.args.get("depends_on") or ()) for o in ops
                if o.op == "dispatch" and o.type == OK}
        fulfilled: dict[str, Op] = {}
        for o in ops:
            if o.op == "fulfill" and o.type in (OK, INFO):
                fulfilled.setdefault(o.args["task_id"], o)
        out = []
        for claim in self._claims(fresh):
            tid = claim.value["task_id"]
            for d in deps.get(tid, []):
                done = fulfilled.get(d)
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
        """What the nemesis's probes found (annotations left by :mod:`harness.nemesis`).

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
    def _inspect(ops: list[Op], fresh: list[Op]) -> list[Violation]:
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
            before = [p for p in ops if p.type == OK and p.complete_ns and p.complete_ns < o.invoke_ns]
            for p in before:
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
    def _ready_refused(ops: list[Op], fresh: list[Op]) -> list[Violation]:
        """A poll or claim that came back empty although a task was *certainly* ready for
        that agent (``no-lost-task``). Certain means: dispatched before the call, for this
        agent or any, every dependency fulfilled before the call, queue window open, and
        nothing that could have claimed or changed it started before the call ended."""
        empty = [o for o in fresh if o.op in ("poll_next", "claim") and o.type == OK
                 and o.value is None]
        if not empty:
            return []
        dispatched = {o.value: o for o in ops if o.op == "dispatch" and o.type == OK}
        fulfilled = {}
        for o in ops:
            if o.op == "fulfill" and o.type == OK:
                fulfilled.setdefault(o.args.get("task_id"), o)
        out = []
        for e in empty:
            end = e.complete_ns or 0
            if any(o.type == INFO and o.op in ("poll_next", "claim") and o.invoke_ns < end
                   for o in ops):
                continue  # an indeterminate claim may have taken anything
            touched = {o.task_id for o in ops if o.invoke_ns < end and o.op not in
                       ("dispatch", "get", "salvaged") and not (o.op == "claim" and o.value is None
                                                                  and o.type == OK)}
            wanted = [e.args["task_id"]] if e.op == "claim" else list(dispatched)
            for tid in wanted:
                d = dispatched.get(tid)
                if d is None or tid in touched or (d.complete_ns or 0) >= e.invoke_ns:
                    continue
                a = d.args
                if a.get("target_agent") not in (None, e.agent):
                    continue
                if not e.now < d.now + a.get("queue_ttl_ms", 0):
                    continue
                deps = a.get("depends_on") or []
                if not all(x in fulfilled and (fulfilled[x].complete_ns or 0) < e.invoke_ns
                           for x in deps):
                    continue
                out.append(Violation(
                    "no-lost-task",
                    f"{e.op}({e.agent!r}) returned nothing at t={e.now}, but task {tid} was "
                    f"ready for it (dispatched by op #{d.index}, never claimed"
                    f"{', dependencies completed' if deps else ''})", ops=[e.index, d.index]))
                break
        return out

    @staticmethod
    def _cascade(ops: list[Op], fresh: list[Op]) -> list[Violation]:
        """After a dependency ended FAILED or TIMED_OUT and a sweep ran, no dependent may
        still read SUBMITTED (``dag-order``: PROTOCOL.md#dependencies-and-the-failure-cascade)."""
        reads = [o for o in fresh if o.op == "get" and o.type == OK and isinstance(o.value, dict)
                 and o.value.get("status") == "SUBMITTED" and o.value.get("depends_on")]
        if not reads:
            return []
        sweeps = [o for o in ops if o.op == "sweep" and o.type == OK]
        ended: dict[str, int] = {}  # task -> when it was certainly FAILED/TIMED_OUT (ns)
        for o in ops:
            tid, t = o.args.get("task_id"), o.complete_ns or 0
            if o.op == "fail" and o.type == OK:
                ended[tid] = min(ended.get(tid, t), t)
            elif (o.op == "get" and o.type == OK and isinstance(o.value, dict)
                  and o.value.get("status") in ("FAILED", "TIMED_OUT")):
                ended[tid] = min(ended.get(tid, t), t)
        out = []
        for r in reads:
            for dep in r.value["depends_on"]:
                t = ended.get(dep)
                if t is not None and any(t < s.invoke_ns and (s.complete_ns or 0) < r.invoke_ns
                                         for s in sweeps):
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
    note = o.note or ""
    return "injected fault" in note or "budget" in note or "frozen" in note or "SIGKILL" in note


def _concurrent(a: Op, b: Op) -> bool:
    return a.invoke_ns < (b.complete_ns or 0) and b.invoke_ns < (a.complete_ns or 0)


def _lease_covers(claim: Op, now: int, closed: bool = False) -> bool:
    expires = claim.value.get("lease_expires_at")
    return not isinstance(expires, int) or claim.now <= now < expires + (1 if closed else 0)


# How specific an invariant's name is: the generic search verdict comes last.
_GENERIC = frozenset({"linearizable"})


def first_fact_first(violations: list[Violation]) -> list[Violation]:
    """Order violations so a specific name leads (the report names the run by the first):
    the checks run most-specific first (fault probes, two live holders, leaked tokens, the
    model's per-object verdicts, global rules), and the generic ``linearizable`` verdict
    goes last."""
    return sorted(violations, key=lambda v: v.invariant in _GENERIC)


def refusals(history: History) -> dict[str, int]:
    """Count of typed refusals by class (for the report)."""
    out: dict[str, int] = {}
    for o in history:
        if o.type == FAIL:
            out[o.error or "?"] = out.get(o.error or "?", 0) + 1
    return out
