"""What the checker knows about one history, kept between incremental checks.

Indexes over the ops seen so far (claims, tokens, dispatches, fulfils, sweeps…), each
updated in O(1) per op, and every object's linearizability search (its closed prefix and
frontier). Every :class:`ferry_harness.check.invariant.Invariant` reads it; only :meth:`RunState.ingest`
writes it, so invariants stay independent of one another.
"""

from __future__ import annotations

import json
import math
import weakref
from bisect import bisect_left, insort
from collections.abc import Iterable
from typing import Any

from ferry_harness.check.annotations import InvalidArgs, has, mark
from ferry_harness.check.history import FAIL, INFO, OK, History, Op
from ferry_harness.check.invariant import hashable
from ferry_harness.check.linearizability import PartitionSearch, partition_key, task_search
from ferry_harness.check.model import ModelConfig, bad_arguments

READS = frozenset({"get", "inspect", "salvaged", "lock_holder"})
# ops whose arguments the generator may make hostile (wrong types, huge numbers, non-JSON)
HOSTILE_OPS = frozenset({"dispatch", "claim", "get", "salvaged", "fulfill", "salvage"})


def leaf_texts(value: Any) -> Iterable[str]:
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
            # json.dumps(v)[1:-1], whose result is v itself for printable ASCII without
            # quotes or backslashes (ids, tokens, names: nearly every string here)
            plain = v.isascii() and v.isprintable() and '"' not in v and "\\" not in v
            yield v if plain else json.dumps(v)[1:-1]
        elif type(v) is int:
            yield str(v)  # json.dumps of an int (not a bool)
        else:
            yield json.dumps(v, default=str)


class PrefixMax:
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


class RunState:
    """What the checker knows about one history: indexes over the ops seen so far, each
    updated in O(1) per op, and every object's search (its closed prefix and frontier)."""

    def __init__(self, history: History, cfg: ModelConfig, budget: int) -> None:
        self.ref = weakref.ref(history)
        self.cfg = cfg  # the model's configuration (lease convention, features…)
        self.budget = budget  # states each object's search may explore
        self.n = 0
        self.last: Op | None = None
        self.parts: dict[str, PartitionSearch] = {}
        self.unknown_said: set[str] = set()
        # "object: why" for objects whose search gave up, not yet handed to the Checker
        self.undecided: list[str] = []
        # over every op
        self.writers = PrefixMax()  # invoke -> clock of ops that may write
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
        # tasks dispatched and not yet known to be over (fulfilled or seen FAILED/TIMED_OUT):
        # the partitions an indeterminate poll may have claimed from
        self.open_tasks: dict[Any, str] = {}
        # op index -> the extra partitions an indeterminate poll was added to
        self.spread: dict[int, list[str]] = {}
        self.sweeps = PrefixMax()  # completion -> invoke of OK sweeps
        # tasks that may be ready (dependencies fulfilled), per target agent, as
        # [dispatch completion, dispatch position, task key or None once pruned], sorted
        self.groups: dict[Any, list[list[Any]]] = {}
        self.pruned: dict[Any, int] = {}
        self.waiting: dict[Any, list[Any]] = {}
        self.removed_touch: float = -math.inf
        self.removed_deadline: float = -math.inf

    @property
    def history(self) -> History | None:
        """The history this state describes (None once it is gone)."""
        return self.ref()

    def consistent(self, history: History) -> bool:
        """The history still starts with the ops this run has seen."""
        return self.n <= len(history.ops) and (self.n == 0 or history.ops[self.n - 1] is self.last)

    def ingest(self, history: History) -> None:
        """Index the ops appended to ``history`` since the last call."""
        ops = history.ops
        for o in ops[self.n:]:
            self._add(o)
        self.n = len(ops)
        self.last = ops[-1] if ops else None

    def _add(self, o: Op) -> None:
        if o.op in HOSTILE_OPS and not has(o, InvalidArgs):
            why = bad_arguments(o, self.cfg)
            if why:
                mark(o, InvalidArgs(why=why))
        key = partition_key(o)
        if key is not None:
            search = self.parts.get(key)
            if search is None:
                search = self.parts[key] = task_search(key, self.cfg, budget=self.budget)
            search.add((o,))
        elif o.op == "poll_next" and o.type == INFO and not has(o, InvalidArgs):
            self._spread(o)
        if o.op not in READS:
            self.writers.add(o.invoke_ns, o.now, o.index)
        if has(o, InvalidArgs):
            return
        tid = o.task_id
        if tid is not None:
            self.task_ops.setdefault(hashable(tid), []).append(o.index)
        name, typ = o.op, o.type
        if name in ("claim", "poll_next"):
            if typ == OK and o.value:
                v = o.value
                self.claims_by_task.setdefault(hashable(v.get("task_id")), []).append(o)
                token = v.get("token")
                self.first_claim.setdefault(hashable(token), o)
                if isinstance(token, str) and len(token) >= 8 and token != v.get("task_id"):
                    seen = self.secrets.get(token)
                    self.secrets[token] = (len(self.secrets) if seen is None else seen[0], o)
                    self.secret_lengths.add(len(token))
            elif typ == INFO:
                self.info_claim_min = min(self.info_claim_min, o.invoke_ns)
        token = o.args.get("token")
        if token is not None and typ != FAIL:
            k = hashable(token)
            self.token_used[k] = min(self.token_used.get(k, o.invoke_ns), o.invoke_ns)
        if name == "dispatch" and typ == OK:
            k = hashable(o.value)
            self.deps[k] = list(o.args.get("depends_on") or ())
            if k in self.dispatched:
                self.dup_dispatch = True
            self.dispatched[k] = o
            pk = partition_key(o)
            if pk is not None:
                self.open_tasks[k] = pk
            self.disp_pos.setdefault(k, len(self.disp_pos))
            self.ok_writes.append(o)
            missing = [hashable(x) for x in self.deps[k] if hashable(x) not in self.fulfilled_ok]
            for x in missing:
                self.waiting.setdefault(x, []).append(k)
            if not missing:
                self._maybe_ready(k)
        elif name == "fulfill" and typ in (OK, INFO):
            k = hashable(o.args.get("task_id"))
            self.fulfilled_any.setdefault(k, o)
            if typ == OK:
                self.ok_writes.append(o)
                if k not in self.fulfilled_ok:
                    self.fulfilled_ok[k] = o
                    self.open_tasks.pop(k, None)
                    for dependent in self.waiting.pop(k, ()):
                        if all(hashable(x) in self.fulfilled_ok for x in self.deps.get(dependent, ())):
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
            k = hashable(tid)
            self.touch_min[k] = min(self.touch_min.get(k, o.invoke_ns), o.invoke_ns)

    def _ended(self, o: Op) -> None:
        k, t = hashable(o.args.get("task_id")), o.complete_ns or 0
        self.ended[k] = min(self.ended.get(k, t), t)
        self.open_tasks.pop(k, None)

    def _spread(self, o: Op) -> None:
        """An indeterminate ``poll_next`` (its worker was killed or timed out) names no task,
        yet it may have claimed any task that was open: it joins the search of each of
        them as an ``info`` op that may or may not have taken effect there (PROTOCOL.md:
        a crashed call's effect is unknown). Without it, a killed poll that committed
        leaves a CLAIMED task no op explains."""
        keys = []
        for key in self.open_tasks.values():
            search = self.parts.get(key)
            if search is not None and not search.done:
                search.add((o,))
                keys.append(key)
        if keys:
            self.spread[o.index] = keys

    def _maybe_ready(self, k: Any) -> None:
        d = self.dispatched.get(k)
        if d is not None:
            group = self.groups.setdefault(hashable(d.args.get("target_agent")), [])
            entry = [d.complete_ns or 0, self.disp_pos[k], k]
            if not group or entry >= group[-1]:
                group.append(entry)
            else:
                insort(group, entry)

    def ready_for(self, e: Op, tid: Any) -> bool:
        """Was ``tid`` certainly ready for the empty poll or claim ``e``?"""
        k = hashable(tid)
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
            f = self.fulfilled_ok.get(hashable(x))
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
        for g in {hashable(None), hashable(e.agent)}:
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
        for text in leaf_texts(value):
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
