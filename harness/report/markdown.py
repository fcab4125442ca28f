"""Render a fuzz run's ``report.json`` (as a dict) into a GitHub-flavoured markdown summary.

Pure: :func:`render_markdown` takes the dict and returns text; the caller writes the file.
Every key is optional, so a partial or hand-written report still renders.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from harness.check.history import FAIL, OK, Op

_OP_FIELDS = frozenset(f.name for f in fields(Op))
_CELL_MAX = 120
_SQL_MAX = 100


def render_markdown(report: dict[str, Any]) -> str:
    """The whole report as markdown: verdict, invariants, violations, stats, replay command."""
    report = report if isinstance(report, dict) else {}
    verdict = str(report.get("verdict") or "unknown").upper()
    scenario = report.get("scenario") if isinstance(report.get("scenario"), dict) else None
    if scenario:  # say what ran: a scenario, not a fuzz run
        if scenario.get("status") == "error":
            verdict = "COULD NOT RUN"
        what = f"scenario {scenario.get('name')}"
    else:
        what = "fuzz run"
    out: list[str] = [f"# ferry {_text(what)}: {_text(verdict)}", ""]
    out += story_markdown(report)

    facts = [(k, report.get(k)) for k in ("target", "mode", "seed", "workers")]
    facts = [(k, v) for k, v in facts if v is not None]
    if facts:
        out += [f"- **{k}**: {_text(v)}" for k, v in facts] + [""]

    invariants = report.get("invariants") or {}
    if isinstance(invariants, dict) and invariants:
        out += ["## Invariants", "", "| invariant | status |", "| --- | --- |"]
        out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in invariants.items()]
        out.append("")

    violations = [v for v in report.get("violations") or [] if isinstance(v, dict)]
    if violations:
        out += [f"## Violations ({len(violations)})", ""]
        for n, v in enumerate(violations, 1):
            out += _violation(n, v)

    for key, heading in (("unknown", "Unknown / indeterminate"), ("findings", "Findings")):
        items = report.get(key) or []
        if isinstance(items, str):
            items = [items]
        if items:
            out += [f"## {heading}", ""] + [f"- {_text(x)}" for x in items] + [""]

    stats = report.get("stats") or {}
    if isinstance(stats, dict) and stats:
        flat = {k: v for k, v in stats.items() if not isinstance(v, dict)}
        out += ["## Stats", "", "| stat | value |", "| --- | ---: |"]
        out += [f"| {_cell(k)} | {_cell(_num(v))} |" for k, v in flat.items()]
        out.append("")
        # over the whole campaign, not only the example the timeline shows
        tables = [("Refusals by class", stats.get("refusals")),
                  ("Faults injected", stats.get("faults"))]
        coverage = stats.get("coverage") if isinstance(stats.get("coverage"), dict) else {}
        tables += [("Operations run", coverage.get("ops")),
                   ("Steps by kind (races, boundaries, hostile arguments)", coverage.get("steps"))]
        for heading, table in tables:
            if isinstance(table, dict) and table:
                out += [f"### {heading}", "", "| what | count |", "| --- | ---: |"]
                out += [f"| {_cell(k)} | {_cell(_num(v))} |" for k, v in table.items()]
                out.append("")

    schedule = report.get("schedule")
    if schedule:
        out += ["## Schedule", "", "```json", _json(schedule), "```", ""]

    replay = report.get("replay")
    if replay:
        out += ["## Replay", "", _fence(str(replay), "sh"), ""]

    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- story
def story_markdown(report: dict[str, Any]) -> list[str]:
    """The story timeline.html leads with, for a CI log or a PR comment: what broke and
    why it cannot be right, the minimal steps, the replay command, verdict and version."""
    from harness.report.timeline import build_story, culprit_sentence

    story = build_story(report)
    by_index = {}
    for v in report.get("violations") or []:
        for d in (v.get("history") or []) if isinstance(v, dict) else []:
            o = _op_from(d)
            if o is not None:
                by_index[o.index] = o
    out = [f"**{_text(story.verdict.upper())}** · {_text(story.ferry)}"
           + (f" · reproduced {_text(story.reproduced)}" if story.reproduced else ""), ""]
    for p in story.parts:
        out += [f"**`{_code(p.invariant)}` broken on {_text(p.label)}**: {_text(p.message)}", ""]
        if p.prefix:
            out += ["The legal order ferry found (its linearization):", ""]
            out += [f"{n}. {_text(op_cell(by_index[i])) if i in by_index else f'#{i}'}"
                    for n, i in enumerate(p.prefix, 1)] + [""]
        said = culprit_sentence(p, by_index)
        if said:
            c = by_index.get(p.culprit) if p.culprit is not None else None
            line = op_cell(c) if c else f"#{p.culprit}"
            out += [f"✗ then **{_text(line)}** cannot follow: {_text(said)}.", ""]
    if story.steps:
        out += ["Minimal steps:", ""] + [f"{n}. {_text(s)}" for n, s in enumerate(story.steps, 1)]
        out.append("")
    if story.replay:
        out += ["Replay:", "", _fence(story.replay, "sh"), ""]
    return out


# --------------------------------------------------------------------------- violations
def _violation(n: int, v: dict[str, Any]) -> list[str]:
    inv = v.get("invariant") or "?"
    inv_code = " ".join(str(inv).split()).replace("`", "'")
    out = [f"### {n}. `{inv_code}`", ""]
    if v.get("message"):
        out += [_text(v["message"]), ""]
    if v.get("reproduced"):
        out += [f"reproduced {_text(v['reproduced'])}", ""]
    bad = {i for i in v.get("ops") or [] if isinstance(i, int)}
    if bad:
        out += ["violating ops: " + ", ".join(f"#{i}" for i in sorted(bad)), ""]

    steps = v.get("steps") or []
    if steps:
        out += ["**Minimal steps**", ""]
        out += [f"{i}. {_text(format_step(s))}" for i, s in enumerate(steps, 1)]
        out.append("")

    history = v.get("history") or []
    if history:
        out += ["**Operations** (one column per worker, rows in invoke order)", ""]
        out += _op_table(history, bad) + [""]

    trace = v.get("schedule_trace") or []
    if trace:
        out += ["**SQL statements in the order they ran** (⇢ = switched worker here)", ""]
        out += _trace_table(trace) + [""]

    detail = v.get("detail")
    if detail:
        out += ["<details><summary>detail</summary>", "", "```json", _json(detail), "```",
                "", "</details>", ""]
    return out


def format_step(step: Any) -> str:
    """One generator step as a short line, e.g. ``race_claim task#0 by alice, bob``."""
    if not isinstance(step, dict):
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
        if s.get("target") is not None:
            head += f" to {s.pop('target')}"
        else:
            s.pop("target", None)
    else:
        head = kind
    rest = " ".join(f"{k}={_plain(v)}" for k, v in s.items() if v is not None)
    return f"{head} {rest}".strip()


def _op_from(d: Any) -> Op | None:
    if isinstance(d, Op):
        return d
    if not isinstance(d, dict):
        return None
    try:
        return Op.from_dict({k: v for k, v in d.items() if k in _OP_FIELDS})
    except (TypeError, ValueError):
        return None


def op_cell(op: Op) -> str:
    """``#3 alice claim(task_id=t1) → ok {…}``: an op without its worker and clock."""
    args = ", ".join(f"{k}={_plain(v)}" for k, v in (op.args or {}).items())
    if op.type == OK:
        out = f"ok {_plain(op.value)}"
    elif op.type == FAIL:
        out = f"fail {op.error}"
    else:
        out = f"info {op.error or op.note or 'indeterminate'}"
    return _clip(f"#{op.index} {op.agent} {op.op}({args}) → {out}", _CELL_MAX)


def _op_table(history: list[Any], bad: set[int]) -> list[str]:
    ops = [o for o in map(_op_from, history) if o is not None]
    if not ops:
        return ["_(no readable operations)_"]
    ops.sort(key=lambda o: (o.invoke_ns, o.index))
    workers = sorted({o.process for o in ops})
    col = {w: i for i, w in enumerate(workers)}
    rows = ["| now | " + " | ".join(f"worker {w}" for w in workers) + " |",
            "| ---: | " + " | ".join("---" for _ in workers) + " |"]
    for o in ops:
        cells = [""] * len(workers)
        text = _cell(op_cell(o))
        cells[col[o.process]] = f"**✗** {text}" if o.index in bad else text
        rows.append(f"| {o.now} | " + " | ".join(cells) + " |")
    return rows


def _trace_table(trace: list[Any]) -> list[str]:
    entries = [t for t in trace if isinstance(t, dict)]
    workers = sorted({int(t.get("worker", 0)) for t in entries})
    if not workers:
        return ["_(empty trace)_"]
    col = {w: i for i, w in enumerate(workers)}
    rows = ["| # | " + " | ".join(f"worker {w}" for w in workers) + " |",
            "| ---: | " + " | ".join("---" for _ in workers) + " |"]
    for n, t in enumerate(entries, 1):
        cells = [""] * len(workers)
        sql = " ".join(str(t.get("sql", "")).split())
        text = f"`{_code(_clip(sql, _SQL_MAX))}`"
        if t.get("op") is not None:
            text += f" (op #{_cell(t['op'])})"
        cells[col[int(t.get("worker", 0))]] = ("⇢ " if t.get("switch") else "") + text
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    return rows


# --------------------------------------------------------------------------- escaping
def _plain(v: Any) -> str:
    if isinstance(v, str):
        return v if len(v) <= 12 else v[:8] + "…"
    if isinstance(v, dict) and "token" in v:
        keep = ("task_id", "token", "attempt", "lease_expires_at")
        return "{" + ", ".join(f"{k}={_plain(x)}" for k, x in v.items() if k in keep) + "}"
    return _clip(json.dumps(v, default=str), 40)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _text(v: Any) -> str:
    """Inline text safe from HTML injection (GitHub renders raw HTML)."""
    s = " ".join(str(v).split())
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cell(v: Any) -> str:
    return _text(v).replace("|", "\\|")


def _code(v: Any) -> str:
    """Text for inside a code span in a table: no backticks, pipes escaped."""
    return " ".join(str(v).split()).replace("`", "'").replace("|", "\\|")


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def _json(v: Any) -> str:
    return json.dumps(v, indent=2, default=str, ensure_ascii=False).replace("```", "`\u200b``")


def _fence(body: str, lang: str = "") -> str:
    ticks = "```"
    while ticks in body:
        ticks += "`"
    return f"{ticks}{lang}\n{body}\n{ticks}"
