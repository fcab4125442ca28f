"""The story a report tells — what broke, on which task or lock, the legal order ferry
found and the op that cannot follow it — in the words report.md and timeline.html share.

Pure: :func:`build_story` reads a :class:`~ferry_harness.report.schema.Report` (and the run's
history, if at hand) and returns a :class:`Story`; the renderers lay it out.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ferry_harness.check.history import FAIL, OK, Op
from ferry_harness.check.invariant import invariant_kind
from ferry_harness.check.linearizability import check_partition, partition
from ferry_harness.check.model import ModelConfig, step_lock, step_task
from ferry_harness.errors import ExitCode
from ferry_harness.report.schema import Report, TraceStatement, ViolationReport, said_reproduced


# --------------------------------------------------------------------------- the story
@dataclass(frozen=True, kw_only=True)
class Partition:
    """One object (task or lock) a violation is about, with what the search found."""

    key: str  # the object, "task:<id>" or "lock:<name>" (or a made-up key for loose ops)
    label: str  # the object as the story names it, e.g. "task 7"
    invariant: str  # the invariant broken on it
    message: str  # the violation's message
    ops: list[int] = field(default_factory=list)  # every op of the partition
    prefix: list[int] = field(default_factory=list)  # the legal prefix, in linearization order
    culprit: int | None = None  # the op that cannot follow it
    bad: list[int] = field(default_factory=list)  # the violation's ops
    state: str | None = None  # the model state the culprit met, in words


@dataclass(frozen=True, kw_only=True)
class Story:
    """What went wrong, in the words both report.md and timeline.html use."""

    verdict: str  # "pass", "fail", "unknown" or "interrupted"
    title: str  # "ferry fail: <target>" ("ferry fail (interrupted): <target>")
    facts: list[tuple[str, str]]  # (name, value) of target, mode, seed, workers, faults
    ferry: str  # "ferry 0.1.0 (commit 0123456789ab)"
    parts: list[Partition]  # one per object a violation is about, in report order
    steps: list[str]  # the first violation's minimal steps, one line each
    replay: str  # the replay command ("" if none)
    reproduced: str | None  # the first violation's best reproduction, e.g. "10/10 in
    # schedule mode (2/10 in stress)"
    schedule_trace: list[TraceStatement]  # the first violation's SQL statements, in order
    # every other distinct invariant found, in rank order (each in a run of its own, so
    # not drawn): (invariant, kind, message, its best reproduction)
    also: list[tuple[str, str, str, str | None]] = field(default_factory=list)


def same_run(report: Report) -> tuple[ViolationReport, ...]:
    """The violations shown by the run whose history the report directory holds (the
    top-ranked finding's); the other findings' minimal examples ran on their own, and
    their op indices belong to their own histories."""
    found = report.invariants_found
    if not found or len(found) < 2:
        return report.violations
    return report.violations[:max(1, found[1].violation)]


def _obj_label(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"{kind} {name}" if name else key


def _ints(xs: Any) -> list[int]:
    return [i for i in xs or [] if isinstance(i, int) and not isinstance(i, bool)]


def outcome_text(o: Op) -> str:
    """``ok``, ``fail AlreadyClaimed`` or ``info WorkerCrashed``."""
    if o.type == OK:
        return "ok"
    if o.type == FAIL:
        return f"fail {o.error or ''}".strip()
    return f"info {o.error or o.note or 'indeterminate'}".strip()


def _short(v: Any, n: int = 10) -> str:
    s = str(v)
    return s if len(s) <= n else s[: n - 2] + "…"


def describe_state(state: Any, key: str) -> str:
    """A model state as a person says it: ``task 1 CLAIMED by alice with token a02…``."""
    label = _obj_label(key)
    if state is None:
        return f"{label} not dispatched yet"
    if key.startswith("lock:"):
        owner = getattr(state, "owner", None)
        if owner is None:
            return f"{label} free"
        return f"{label} held by {owner} until t={getattr(state, 'expires', '?')}"
    status = getattr(state, "status", "?")
    out = f"{label} {status}"
    holder, token = getattr(state, "holder", None), getattr(state, "token", None)
    if status == "CLAIMED" and holder is not None:
        out += f" by {holder}"
        if token:
            out += f" with token {_short(token)}"
        expires = getattr(state, "expires", None)
        if expires is not None:
            out += f", lease until t={expires}"
    attempt = getattr(state, "attempt", None)
    if isinstance(attempt, int) and attempt:
        out += f" (attempt {attempt})"
    return out


def _model_state(key: str, prefix: list[Op], capabilities: Collection[str]) -> str | None:
    """Replay the legal prefix through the reference model; None if the model disagrees."""
    try:
        try:
            cfg = ModelConfig(leases="lease" in capabilities) if capabilities else ModelConfig()
        except TypeError:
            cfg = ModelConfig()
        step = step_lock if key.startswith("lock:") else step_task
        state = None
        for o in prefix:
            verdict = step(state, o, cfg)
            if not verdict.ok:  # the model under default settings disagrees: say nothing
                return None
            state = verdict.state
        return describe_state(state, key)
    except Exception:  # noqa: BLE001 - the story must render whatever the model does
        return None


def _search(key: str, ops: list[Op], bad: list[int],
            capabilities: Collection[str]) -> tuple[list[int], list[int]] | None:
    """The partition's ops and longest legal prefix, for a violation the checker named
    without searching (``single-winner``); None when the search cannot say."""
    try:
        part = partition(ops).get(key, [])
        if not part or (key.startswith("task:") and not any(o.op == "dispatch" for o in part)):
            return None
        try:
            cfg = ModelConfig(leases="lease" in capabilities) if capabilities else ModelConfig()
        except TypeError:
            cfg = ModelConfig()
        step = step_lock if key.startswith("lock:") else step_task
        res = check_partition(key, part, lambda st, o: step(st, o, cfg), budget=20_000)
        if res.ok is not False or not any(i not in res.linearized for i in bad):
            return None
        return sorted(res.ops), list(res.linearized)
    except Exception:  # noqa: BLE001 - the story must render whatever the search does
        return None


def build_story(report: Report, ops: Sequence[Op] = ()) -> Story:
    """Everything the story says, from a report and the history (if at hand)."""
    by_index: dict[int, Op] = {o.index: o for o in ops}
    shown = same_run(report)
    for v in shown:  # the report's own copy of the involved ops fills gaps
        for o in v.history or ():
            by_index.setdefault(o.index, o)
    caps = list(report.capabilities or ())
    parts: list[Partition] = []
    seen: dict[str, int] = {}  # object -> its position in parts
    for n, v in enumerate(shown, 1):
        detail = v.detail
        bad = list(v.ops)
        key = detail.get("object")
        if isinstance(key, str) and key:
            if key in seen:  # a second violation on the same object: add its ops
                p = parts[seen[key]]
                parts[seen[key]] = replace(p, bad=sorted(set(p.bad) | set(bad)))
                continue
            prefix = _ints(detail.get("linearized_prefix"))
            part_ops = _ints(detail.get("partition_ops")) or sorted(set(prefix) | set(bad))
            if "linearized_prefix" not in detail:  # named before the search: search here
                part_ops, prefix = _search(key, list(by_index.values()), bad, caps) or \
                    (part_ops, prefix)
            culprit = next((i for i in bad if i in part_ops and i not in prefix), None)
            state = detail.get("model_state")
            if not (isinstance(state, str) and state):
                state = (_model_state(key, [by_index[i] for i in prefix], caps)
                         if all(i in by_index for i in prefix) else None)
            p = Partition(key=key, label=_obj_label(key), invariant=v.invariant,
                          message=v.message, ops=part_ops, prefix=prefix, culprit=culprit,
                          bad=bad, state=state)
            seen[key] = len(parts)
        else:
            p = Partition(key=f"violation:{n}", label=f"ops of {v.invariant}",
                          invariant=v.invariant, message=v.message, ops=sorted(set(bad)), bad=bad)
        parts.append(p)

    facts = [(k, str(val)) for k, val in (("target", report.target or None),
                                          ("mode", report.mode), ("seed", report.seed),
                                          ("workers", report.workers)) if val is not None]
    if report.faults:
        facts.append(("faults", ", ".join(report.faults)))
    version, commit = report.ferry.version or "", report.ferry.commit or ""
    ferry_text = (f"ferry {version}" if version else "ferry (version not recorded)") + \
        (f" (commit {commit[:12]})" if commit else "")
    first = report.violations[0] if report.violations else None
    steps = [format_step(st) for st in (first.steps or ())] if first else []
    trace = list(first.schedule_trace or ()) if first else []
    title = f"ferry {verdict_label(report).lower()}: {report.target}".strip().rstrip(":")
    also = [(v.invariant, invariant_kind(v.invariant), v.message,
             said_reproduced(v, report.mode)) for v in first_entries(report)[1:]]
    return Story(verdict=report.verdict, title=title, facts=facts, ferry=ferry_text,
                 parts=parts, steps=steps, replay=report.replay or "",
                 reproduced=said_reproduced(first, report.mode) if first else None,
                 schedule_trace=trace, also=also)


# --------------------------------------------------------------------------- headlines
def verdict_label(report: Report) -> str:
    """``FAIL``, ``PASS``, ``UNKNOWN``, ``INTERRUPTED``, or ``FAIL (interrupted)`` for a
    run stopped by Ctrl-C / SIGTERM after it had found a violation."""
    label = report.verdict.upper()
    if report.interrupted and report.verdict != "interrupted":
        label += " (interrupted)"
    return label


def found_invariants(report: Report) -> list[str]:
    """Every distinct invariant the report names, safety first (as the run ranked them)."""
    if report.invariants_found:
        return [f.invariant for f in report.invariants_found]
    out: list[str] = []
    for v in report.violations:
        if v.invariant not in out:
            out.append(v.invariant)
    return out


def headline(report: Report) -> str:
    """``FAIL: single-winner, then typed-errors (robustness)``: the verdict and every
    distinct invariant found, safety first."""
    names = found_invariants(report)
    if not names:
        return verdict_label(report)
    said = [n if invariant_kind(n) == "safety" else f"{n} ({invariant_kind(n)})" for n in names]
    return f"{verdict_label(report)}: " + ", then ".join(said)


def first_entries(report: Report) -> list[ViolationReport]:
    """One violation per distinct invariant found (each one's minimal example), in rank
    order."""
    if report.invariants_found:
        return [report.violations[f.violation] for f in report.invariants_found
                if 0 <= f.violation < len(report.violations)]
    seen: set[str] = set()
    out = []
    for v in report.violations:
        if v.invariant not in seen:
            seen.add(v.invariant)
            out.append(v)
    return out


def exit_reason(report: Report) -> tuple[int, str]:
    """The exit code of a fuzz run and why, naming safety first."""
    names = found_invariants(report)
    safety = [n for n in names if invariant_kind(n) == "safety"]
    rest = [n for n in names if n not in safety]
    if report.interrupted:
        what = (f"what was found before it stands: {', then '.join(names)}" if names
                else "nothing was decided, so this is not a pass")
        return ExitCode.INTERRUPTED, f"interrupted (Ctrl-C or SIGTERM); {what}"
    if report.verdict == "fail":
        if safety:
            also = f"; also found: {', '.join(rest)}" if rest else ""
            return ExitCode.VIOLATION, (f"safety violation{'s' if len(safety) > 1 else ''} "
                                        f"found: {', then '.join(safety)}{also}")
        kinds = sorted({invariant_kind(n) for n in rest})
        searched = (" (the search for safety violations went on to the end of the budget "
                    "and found none)" if "liveness" not in kinds else "")
        return ExitCode.VIOLATION, f"{' and '.join(kinds)} finding: {', '.join(rest)}{searched}"
    if report.verdict == "unknown":
        return ExitCode.UNKNOWN, "nothing was decided (UNKNOWN is not a pass)"
    if report.verdict == "interrupted":
        return ExitCode.INTERRUPTED, "interrupted before anything was decided: not a pass"
    return ExitCode.OK, "no violation"


def database_note(report: Report) -> str | None:
    """What the example database replayed and what it showed, or None if it played no
    part in the reported failure."""
    db = report.example_database
    if db is None or not db.failure_from_database:
        return None
    steps = db.saved_steps
    parts = ([f"{steps} step{'s' if steps != 1 else ''}"] if steps else []) + \
        ([f"saved as {db.saved_invariant}"] if db.saved_invariant else [])
    what = "a saved example" + (f" ({', '.join(parts)})" if parts else "")
    tries = (f" on try {db.failed_on_try} of {db.tries}"
             if db.failed_on_try and db.tries else "")
    shown = f" [{db.shown}]" if db.shown else ""
    return (f"replayed first from the example database: {what} failed again{shown}{tries}; "
            "the counts are of its minimal example, replayed afresh")


def gate_message(report: Report) -> tuple[str, str]:
    """The pytest gate's failure: (the top-ranked invariant, its message with the best
    reproduction, what the example database replayed, and every other distinct
    invariant found, safety first)."""
    entries = first_entries(report)
    top = entries[0]
    said = said_reproduced(top, report.mode) or "?"
    msg = f"{top.message}; reproduced {said}"
    note = database_note(report)
    if note:
        msg += f" ({note})"
    others = [f"[{v.invariant}] {v.message} (reproduced {said_reproduced(v, report.mode) or '?'})"
              for v in entries[1:]]
    if others:
        msg += "; also found, in rank order: " + "; ".join(others)
    if report.interrupted:
        msg += "; the run was interrupted"
    return top.invariant, msg


def culprit_sentence(p: Partition, by_index: dict[int, Op]) -> str | None:
    """``task 1 CLAIMED by alice with token 1…; bob's claim (#2) returned ok``."""
    if p.culprit is None:
        return None
    o = by_index.get(p.culprit)
    what = (f"{o.agent}'s {o.op} (#{o.index}) returned {outcome_text(o)}" if o
            else f"op #{p.culprit} returned anyway")
    return f"{p.state}; {what}" if p.state else what


def format_step(step: Any) -> str:
    """One generator step as a short line, e.g. ``race_claim task#0 by alice, bob``."""
    if not isinstance(step, Mapping):
        return str(step)
    s = dict(step)
    kind = str(s.pop("kind", "?"))
    if kind in ("race_claim", "race_poll", "lock_race"):
        who = s.pop("agents", None) or s.pop("owners", None) or []
        head = kind + (f" task#{s.pop('task')}" if "task" in s else "")
        head += " by " + ", ".join(map(str, who)) if who else ""
    elif kind == "holder":
        op = s.pop("op", "?")
        head = f"{op} claim#{s.pop('claim', '?')} by {s.pop('who', 'holder')}"
        race = s.pop("race", 1)
        if isinstance(race, int) and race > 1:
            head += f" ×{race}"
    elif kind == "clock" and "tick" in s:
        head = f"clock +{s.pop('tick')}ms"
    elif kind == "clock":
        off = s.pop("offset", 0)
        head = f"clock → claim#{s.pop('claim', '?')} expiry{off:+d}ms" if isinstance(off, int) \
            else f"clock → claim#{s.pop('claim', '?')} expiry{off}"
    elif kind == "lock_op":
        head = f"{s.pop('op', 'lock_op')} by {s.pop('owner', 'observer')}"
    elif kind == "dispatch":
        head = "dispatch"
        if s.get("target_agent") is not None:
            head += f" to {s.pop('target_agent')}"
        else:
            s.pop("target_agent", None)
    else:
        head = kind
    rest = " ".join(f"{k}={short_value(v)}" for k, v in s.items() if v is not None)
    return f"{head} {rest}".strip()


def short_value(v: Any) -> str:
    """A value shortened for one line: long strings cut, a claim as its key fields."""
    if isinstance(v, str):
        return v if len(v) <= 12 else v[:8] + "…"
    if isinstance(v, dict) and "token" in v:
        keep = ("task_id", "token", "attempt", "lease_expires_at")
        return "{" + ", ".join(f"{k}={short_value(x)}" for k, x in v.items() if k in keep) + "}"
    return clip(json.dumps(v, default=str), 40)


def clip(s: str, n: int) -> str:
    """``s`` cut to ``n`` characters, an ellipsis marking the cut."""
    return s if len(s) <= n else s[: n - 1] + "…"
