"""Wing–Gong linearizability search with Porcupine's memoisation, partitioned per object.

A history is linearizable when every operation can be placed at one instant between its
invoke and its completion so that the sequence is legal for the model. Tasks and locks
are independent objects (P-compositionality), so each is searched alone: small partitions
keep the exponential search cheap. ``info`` operations (crashed, timed out) may take effect
at any point after their invoke, or never.

Three things keep the search linear in the history and decisive on wide races:

- **closed prefixes**: a partition is cut wherever every earlier (determinate) op returned
  before every later op was invoked; every linearization places the earlier chunk first,
  so a chunk is searched once, from the *set* of states the previous chunk can end in (the
  frontier, with the ``info`` ops still free to take effect). A partition that gains ops
  later (incremental checks) continues from its frontier instead of starting over;
- **stutter steps**: an enabled determinate op that leaves the state unchanged (a refused
  racer, an empty claim, a read) is taken at once, without branching: any linearization
  that places it later can place it here with the same outcome, so a k-wide race with one
  winner is k steps, not 2^k;
- **doomed states**: a pending read whose answer no extension of the state can produce
  (``salvaged()`` lists entries in append order; entries are only ever appended) prunes
  the state before its permutations are tried.

On failure we return the longest legal prefix found and the operation that cannot follow
it, with the model's reason and the invariant id it breaks (PROTOCOL.md#invariants).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ferry_harness.check.history import INFO, LOCK_OPS, OK, Op
from ferry_harness.check.model import (
    ModelConfig,
    TaskState,
    Verdict,
    holds_value,
    step_lock,
    step_task,
)

Step = Callable[[Any, Op], Verdict]
# (state, op) -> True when no extension of ``state`` can ever make ``op`` legal
Doomed = Callable[[Any, Op], bool]
TERMINAL = frozenset({"COMPLETED", "FAILED", "TIMED_OUT"})
READ_OPS = frozenset({"get", "inspect", "salvaged", "lock_holder"})


@dataclass
class PartitionResult:
    """Verdict for one object (``task:<id>`` or ``lock:<name>``)."""

    key: str
    ok: bool | None  # None: search budget exhausted (unknown)
    ops: list[int]
    linearized: list[int] = field(default_factory=list)
    culprit: int | None = None
    invariant: str | None = None
    why: str | None = None
    explored: int = 0


def partition_key(op: Op) -> str | None:
    """The one object ``op`` acts on, or None for global ops (idle polls, sweeps)."""
    if op.op in LOCK_OPS:
        return f"lock:{op.args['name']}"
    tid = op.task_id
    return None if tid is None else f"task:{tid}"


def partition(ops: Iterable[Op]) -> dict[str, list[Op]]:
    """Group ops by the one object they act on; global ops (idle polls, sweeps) are left out."""
    parts: dict[str, list[Op]] = {}
    for op in ops:
        key = partition_key(op)
        if key is not None:
            parts.setdefault(key, []).append(op)
    return parts


@dataclass(frozen=True)
class FreeOrder:
    """A task state whose ``salvage`` holds runs of entries appended by concurrent calls in
    every possible order (``segs``: index ranges, kept sorted): one state instead of k!
    (the frontier of a chunk that held all k! orders collapses into it, exactly). The first
    ``salvaged()`` read fixes the order it observed."""

    st: TaskState
    segs: tuple[tuple[int, int], ...]


def _inner(st: Any) -> Any:
    return st.st if type(st) is FreeOrder else st


def match_salvage(expected: tuple[Any, ...], segs: tuple[tuple[int, int], ...], got: list[Any],
                  *, prefix: bool = False) -> list[int] | None:
    """An order of ``expected`` (entries inside a segment may be permuted) that ``got``
    shows: every required entry, in order, one entry each; optional ones may be absent.
    With ``prefix``, ``got`` may go on (entries appended later). None when none exists."""
    blocks: list[list[int]] = []
    i = 0
    starts = dict(segs)
    while i < len(expected):
        end = starts.get(i, i + 1)
        blocks.append(list(range(i, end)))
        i = end
    memo: dict[tuple[int, int, int], list[int] | None] = {}

    def f(bi: int, used: int, j: int) -> list[int] | None:
        key = (bi, used, j)
        if key in memo:
            return memo[key]
        res: list[int] | None = None
        if bi == len(blocks):
            res = [] if (prefix or j == len(got)) else None
        else:
            block = blocks[bi]
            if used == (1 << len(block)) - 1:
                res = f(bi + 1, 0, j)
            else:
                for t, idx in enumerate(block):
                    if used >> t & 1:
                        continue
                    want, required = expected[idx][2], expected[idx][3]
                    if not required:
                        rest = f(bi, used | 1 << t, j)
                        if rest is not None:
                            res = [idx, *rest]
                            break
                    if j < len(got) and holds_value(got[j], want):
                        rest = f(bi, used | 1 << t, j + 1)
                        if rest is not None:
                            res = [idx, *rest]
                            break
        memo[key] = res
        return res

    return f(0, 0, 0)


def free_step(step: Step) -> Step:
    """``step`` for task states that may be :class:`FreeOrder`."""
    def wrapped(state: Any, op: Op) -> Verdict:
        if type(state) is not FreeOrder:
            return step(state, op)
        inner = state.st
        if op.op == "salvaged" and op.type == OK:
            got = op.value if isinstance(op.value, list) else []
            order = match_salvage(inner.salvage, state.segs, got)
            if order is not None:  # the read fixes the order it saw
                fixed = replace(inner, salvage=tuple(inner.salvage[i] for i in order))
                return step(fixed, op)
            return step(inner, op)
        v = step(inner, op)
        if not v.ok or not isinstance(v.state, TaskState):
            return v
        return Verdict(True, FreeOrder(v.state, state.segs))
    return wrapped


def _multinomial(items: list[Any]) -> int:
    counts: dict[Any, int] = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    out = math.factorial(len(items))
    for c in counts.values():
        out //= math.factorial(c)
    return out


def collapse_orders(frontier: list[tuple[Any, tuple[Op, ...]]],
                    base: int) -> list[tuple[Any, tuple[Op, ...]]]:
    """Replace every group of frontier states that differ only in the order of the salvage
    entries appended since ``base``, and hold *all* those orders, by one FreeOrder state."""
    groups: dict[Any, list[tuple[Any, ...]]] = {}
    pends: dict[tuple[int, ...], tuple[Op, ...]] = {}
    out: list[tuple[Any, tuple[Op, ...]]] = []
    for state, pend in frontier:
        inner = _inner(state)
        if not isinstance(inner, TaskState) or len(inner.salvage) - base < 2:
            out.append((state, pend))
            continue
        segs = state.segs if type(state) is FreeOrder else ()
        tail = inner.salvage[base:]
        canon = replace(inner, salvage=inner.salvage[:base] + tuple(sorted(tail)))
        # ops are not hashable (mutable records): the search holds them, so ids are stable
        ids = tuple(id(o) for o in pend)
        pends[ids] = pend
        groups.setdefault((canon, segs, ids), []).append(tail)
    for (canon, segs, ids), tails in groups.items():
        pend = pends[ids]
        if len(set(tails)) == _multinomial(list(tails[0])):
            seg = (base, len(canon.salvage))
            out.append((FreeOrder(canon, (*segs, seg)), pend))
        else:
            for tail in tails:
                inner = replace(canon, salvage=canon.salvage[:base] + tail)
                out.append((FreeOrder(inner, segs) if segs else inner, pend))
    return out


def salvage_prefix_possible(st: Any, op: Op) -> bool:
    """Can the ``salvaged()`` answer of ``op`` still be produced by some extension of the
    task state ``st``? Entries are only appended, so the state's expected entries must
    match a prefix of the answer (required ones present, in order)."""
    segs = st.segs if type(st) is FreeOrder else ()
    st = _inner(st)
    if not isinstance(st, TaskState) or not st.salvage:
        return True
    got = op.value if isinstance(op.value, list) else []
    return match_salvage(st.salvage, segs, got, prefix=True) is not None


def task_doomed(st: Any, op: Op) -> bool:
    """A pending ``salvaged()`` read that no extension of ``st`` can satisfy."""
    inner = _inner(st)
    if op.op != "salvaged" or op.type != OK or not isinstance(inner, TaskState) or not inner.salvage:
        return False
    return not salvage_prefix_possible(st, op)


def droppable(st: Any, op: Op) -> bool:
    """An ``info`` op whose taking effect later can change nothing: a read, or any op on a
    task that is already final (it stays final, and no holder op or claim is legal)."""
    if op.op in READ_OPS:
        return True
    st = _inner(st)
    return isinstance(st, TaskState) and st.status in TERMINAL and not st.cascaded


def _ret(op: Op) -> float:
    return op.ret_ns


class PartitionSearch:
    """The search state of one object, kept between incremental checks.

    ``add`` new ops, then ``run``: only the ops added since the last run are searched, from
    the frontier of the closed prefix, unless they overlap it in real time (then the whole
    partition is searched again). A partition found broken or undecided stays so.
    """

    def __init__(self, key: str, step: Step, *, budget: int = 200_000,
                 doomed: Doomed | None = None, watched: Callable[[Op], bool] | None = None,
                 drop: Doomed | None = None, collapse: bool = False) -> None:
        self.key = key
        self.collapse = collapse
        self.step = step
        self.budget = budget
        self.doomed = doomed
        self.watched = watched
        self.drop = drop
        self.ops: list[Op] = []
        self.pending: list[Op] = []
        self._reset()
        self.result: PartitionResult | None = None  # set once broken or undecided
        self.explored = 0
        self._doom_cache: dict[tuple[int, Any], bool] = {}

    def _reset(self) -> None:
        # frontier: (state, info ops that may still take effect)
        self.frontier: list[tuple[Any, tuple[Op, ...]]] = [(None, ())]
        self.closed_ret = -math.inf
        self.witness: list[int] = []
        self.closed = 0  # ops in the closed prefix

    def add(self, ops: Iterable[Op]) -> None:
        for o in ops:
            self.ops.append(o)
            self.pending.append(o)

    @property
    def done(self) -> bool:
        """Broken or undecided: never searched again."""
        return self.result is not None

    def run(self) -> PartitionResult:
        """Search what was added since the last run."""
        if self.result is not None:
            return self.result
        pending = sorted(self.pending, key=lambda o: (o.invoke_ns, o.index))
        self.pending = []
        if pending and pending[0].invoke_ns <= self.closed_ret:
            self._reset()  # the new ops overlap the closed prefix: search it all again
            pending = sorted(self.ops, key=lambda o: (o.invoke_ns, o.index))
        start = 0
        horizon = self.closed_ret
        for j in range(1, len(pending) + 1):
            prev = pending[j - 1]
            if prev.type != INFO:
                horizon = max(horizon, prev.ret_ns)
            if j < len(pending) and pending[j].invoke_ns <= horizon:
                continue
            res = self._chunk(pending[start:j])
            if res is not None:
                self.result = res
                return res
            start = j
        # ``ops`` is left empty here: sorting every op at every step would make incremental
        # checks quadratic (check_partition and check_history fill it in)
        return PartitionResult(self.key, True, [], self.witness, explored=self.explored)

    def _doomed(self, state: Any, op: Op) -> bool:
        if self.doomed is None:
            return False
        key = (id(op), state)  # the search holds its ops: ids are stable while it lives
        hit = self._doom_cache.get(key)
        if hit is None:
            if len(self._doom_cache) > 100_000:
                self._doom_cache.clear()
            hit = self._doom_cache[key] = self.doomed(state, op)
        return hit

    def _indices(self) -> list[int]:
        return [o.index for o in sorted(self.ops, key=lambda o: (o.invoke_ns, o.index))]

    def _chunk(self, chunk: list[Op]) -> PartitionResult | None:
        """Search one chunk from the frontier; None when it linearizes (frontier updated)."""
        carried: list[Op] = []
        seen_ids: set[int] = set()
        for _, pend in self.frontier:
            for o in pend:
                if id(o) not in seen_ids:
                    seen_ids.add(id(o))
                    carried.append(o)
        ops = carried + chunk
        n = len(ops)
        pos = {id(o): i for i, o in enumerate(ops)}
        required = 0
        for i, o in enumerate(ops):
            if o.type != INFO:
                required |= 1 << i
        info_bits = [i for i, o in enumerate(ops) if o.type == INFO]
        watched = [(i, o) for i, o in enumerate(ops)
                   if self.watched is not None and o.type != INFO and self.watched(o)]
        rets = [_ret(o) for o in ops]
        invokes = [o.invoke_ns for o in ops]
        all_bits = (1 << len(carried)) - 1
        # node: (mask, state, parent node, op position)
        stack: list[tuple[int, Any, Any, int]] = []
        seen: set[tuple[int, Any]] = set()
        starts = self.frontier
        for state, pend in self.frontier:
            mask = all_bits
            for o in pend:
                mask &= ~(1 << pos[id(o)])
            node = (mask, state, None, -1)
            if (mask, state) not in seen:
                seen.add((mask, state))
                stack.append(node)
        finals: dict[tuple[Any, tuple[int, ...]], tuple[int, Any, Any, int]] = {}
        best: tuple[int, Any, Any, int] | None = None
        best_len = -1
        explored = 0
        step = self.step
        while stack:
            node = stack.pop()
            mask, state = node[0], node[1]
            if mask & required == required:
                left = tuple(i for i in info_bits if not mask >> i & 1
                             and not (self.drop is not None and self.drop(state, ops[i])))
                finals.setdefault((state, left), node)
                continue
            done_n = mask.bit_count()
            if done_n > best_len:
                best, best_len = node, done_n
            explored += 1
            if explored > self.budget:
                self.explored += explored
                return self._unknown(ops, chunk, best, explored)
            if watched and any(not mask >> i & 1 and self._doomed(state, o) for i, o in watched):
                continue
            horizon = min((rets[i] for i in range(n) if not mask >> i & 1 and rets[i] != math.inf),
                          default=math.inf)
            children: list[tuple[int, Any, Any, int]] = []
            stutter = None
            for i in range(n):
                if mask >> i & 1 or invokes[i] >= horizon:
                    continue
                verdict = step(state, ops[i])
                if not verdict.ok:
                    continue
                nxt = mask | 1 << i
                if (verdict.state is state or verdict.state == state) and (
                        ops[i].type != INFO or ops[i].op in READ_OPS):
                    stutter = (nxt, state, node, i)
                    break
                children.append((nxt, verdict.state, node, i))
            if stutter is not None:
                children = [stutter]
            for child in reversed(children):
                memo = (child[0], child[1])
                if memo in seen:
                    continue
                seen.add(memo)
                stack.append(child)
        self.explored += explored
        if not finals:
            return self._fail(ops, best)
        first = next(iter(finals.values()))
        self.witness += [ops[i].index for i in _path(first)]
        self.frontier = [(st, tuple(ops[i] for i in left)) for st, left in finals]
        if self.collapse and len(self.frontier) > 1:
            base = min((len(_inner(st).salvage) for st, _ in starts
                        if isinstance(_inner(st), TaskState)), default=0)
            self.frontier = collapse_orders(self.frontier, base)
        self.closed_ret = max(self.closed_ret, _max_ret(chunk))
        self.closed += len(chunk)
        return None

    def _unknown(self, ops: list[Op], chunk: list[Op], best: Any, explored: int) -> PartitionResult:
        res = PartitionResult(self.key, None, self._indices(), explored=self.explored)
        got = self.closed + max(0, (best[0].bit_count() if best else 0)
                                - (len(ops) - len(chunk)))
        res.linearized = list(self.witness) + ([ops[i].index for i in _path(best)] if best else [])
        res.why = (f"search budget of {self.budget} states exhausted on a chunk of "
                   f"{len(chunk)} concurrent ops (ops #{min(o.index for o in chunk)}…"
                   f"#{max(o.index for o in chunk)}); {got} of {len(self.ops)} ops of the "
                   "partition linearized so far")
        return res

    def _fail(self, ops: list[Op], best: Any) -> PartitionResult:
        res = PartitionResult(self.key, False, self._indices(), explored=self.explored)
        mask, state = (best[0], best[1]) if best is not None else (0, None)
        res.linearized = list(self.witness) + ([ops[i].index for i in _path(best)] if best else [])
        rets = [_ret(o) for o in ops]
        pending = [i for i in range(len(ops)) if not mask >> i & 1]
        horizon = min((rets[i] for i in pending if ops[i].type != INFO), default=math.inf)
        candidates = [i for i in pending if ops[i].invoke_ns < horizon and ops[i].type != INFO]
        verdicts = [(i, self.step(state, ops[i])) for i in candidates]
        failed = [(i, v) for i, v in verdicts if not v.ok]
        if not failed:
            failed = verdicts
        # prefer a specific invariant over the generic one, then the earliest completion
        # a specific safety invariant first, a refusal-class finding after, the generic last
        failed.sort(key=lambda iv: (iv[1].invariant in (None, "linearizable"),
                                    iv[1].invariant in ("refusal-class", "refusal-order"),
                                    rets[iv[0]]))
        if failed:
            i, v = failed[0]
            res.culprit = ops[i].index
            res.invariant = v.invariant or "linearizable"
            res.why = v.why or "no legal order of these concurrent operations"
        else:
            res.invariant = "linearizable"
            res.why = "no legal order of these concurrent operations"
        return res


def _max_ret(ops: Iterable[Op]) -> float:
    return max((o.ret_ns for o in ops if o.type != INFO), default=-math.inf)


def _path(node: Any) -> list[int]:
    out: list[int] = []
    while node is not None and node[3] >= 0:
        out.append(node[3])
        node = node[2]
    return out[::-1]


def task_search(key: str, cfg: ModelConfig, *, budget: int = 200_000) -> PartitionSearch:
    """A search for one task or lock partition under the model of ``cfg``."""
    if key.startswith("lock:"):
        def lock_step(state: Any, op: Op) -> Verdict:
            return step_lock(state, op, cfg)
        return PartitionSearch(key, lock_step, budget=budget, drop=droppable)

    def step(state: Any, op: Op) -> Verdict:
        return step_task(state, op, cfg)
    return PartitionSearch(key, free_step(step), budget=budget, doomed=task_doomed,
                           watched=lambda o: o.op == "salvaged", drop=droppable,
                           collapse=True)


def check_partition(key: str, ops: list[Op], step: Step, *, budget: int = 200_000) -> PartitionResult:
    """Search for a linearization of ``ops`` (one object) under ``step``."""
    task = key.startswith("task:")
    search = PartitionSearch(key, free_step(step) if task else step, budget=budget,
                             doomed=task_doomed if task else None,
                             watched=(lambda o: o.op == "salvaged") if task else None,
                             drop=droppable, collapse=task)
    search.add(ops)
    return _with_ops(search.run(), search)


def _with_ops(res: PartitionResult, search: PartitionSearch) -> PartitionResult:
    if res.ok and not res.ops:
        res.ops = search._indices()
        res.linearized = list(res.linearized)
    return res


def check_history(ops: Iterable[Op], cfg: ModelConfig | None = None, *,
                  budget: int = 200_000) -> list[PartitionResult]:
    """Check every partition; returns one result per task and lock."""
    cfg = cfg or ModelConfig()
    out = []
    for key, part in partition(ops).items():
        search = task_search(key, cfg, budget=budget)
        search.add(part)
        out.append(_with_ops(search.run(), search))
    return out
