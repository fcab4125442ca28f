"""Render a run's :class:`~ferry_harness.report.schema.Report` into a GitHub-flavoured markdown
summary.

Pure: :func:`render_markdown` takes the report and returns text; the caller writes the
file. A section the report does not have is left out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from ferry_harness.check.history import FAIL, OK, Op
from ferry_harness.check.invariant import invariant_kind
from ferry_harness.report.protocol import read_hint
from ferry_harness.report.schema import (
    FuzzStats,
    Report,
    TraceStatement,
    ViolationReport,
    said_reproduced,
)
from ferry_harness.report.story import (
    build_story,
    clip,
    culprit_sentence,
    database_note,
    format_step,
    headline,
    same_run,
    short_value,
    verdict_label,
)

_CELL_MAX = 120
_SQL_MAX = 100


def render_markdown(report: Report) -> str:
    """The whole report as markdown: verdict, invariants, violations, stats, replay command."""
    verdict = verdict_label(report)
    if report.scenario is not None:  # say what ran: a scenario, not a fuzz run
        if report.scenario.status == "error":
            verdict = "COULD NOT RUN"
        what = f"scenario {report.scenario.name}"
    else:
        what = "fuzz run"
        verdict = headline(report)  # the verdict and every invariant found, safety first
    out: list[str] = [f"# ferry {_text(what)}: {_text(verdict)}", ""]
    if report.interrupted:
        out += ["_Interrupted (Ctrl-C or SIGTERM): the report covers what ran before it"
                + (" — nothing was decided, so this is not a pass._" if not report.violations
                   else "; the violations below were found before it and stand._"), ""]
    out += story_markdown(report)
    note = database_note(report)
    if note:
        out += [f"_{_text(note[0].upper() + note[1:])}._", ""]

    facts = [("target", report.target or None), ("mode", report.mode), ("seed", report.seed),
             ("workers", report.workers)]
    facts = [(k, v) for k, v in facts if v is not None]
    if facts:
        out += [f"- **{k}**: {_text(v)}" for k, v in facts] + [""]

    if report.backend is not None:  # a Postgres target (PROTOCOL.md#postgres-targets)
        b = report.backend
        out += [f"- **backend**: {_text(b.name)}"
                + (f" ({_text(b.server)}; {_text(b.isolation)})" if b.server else "")]
        out += [f"- **{_text(k)}** means: {_text(v)}" for k, v in b.meanings.items()]
        out += [f"- **{_text(k)}**: skipped ({_text(v)})" for k, v in b.skipped.items()]
        out.append("")

    if report.invariants:
        out += ["## Invariants", "", "| invariant | status |", "| --- | --- |"]
        out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in report.invariants.items()]
        out.append("")

    if report.violations:
        out += [f"## Violations ({len(report.violations)})", ""]
        for n, v in enumerate(report.violations, 1):
            out += _violation(n, v, report.mode)

    for items, heading in ((report.unknown, "Unknown / indeterminate"),
                           (report.findings, "Findings")):
        if items:
            out += [f"## {heading}", ""] + [f"- {_text(x)}" for x in items] + [""]

    if report.stats is not None:
        out += _stats(report.stats, report.mode)

    if report.replay:
        out += ["## Replay", "", fence(report.replay, "sh"), ""]

    return "\n".join(out).rstrip() + "\n"


def _stats(stats: Any, mode: str | None = None) -> list[str]:
    """The stats table (every number, in the order report.json has them), then the
    campaign-wide tables: refusals, faults, operations and steps by kind."""
    flat = []
    for f in fields(stats):
        v = getattr(stats, f.name)
        if f.name == "stalls":  # shown as the list report.json holds
            v = [asdict(s) for s in v]
        elif not isinstance(v, int | float | str | type(None)):
            continue
        flat.append((f.name, v))
    out = ["## Stats", "", "| stat | value |", "| --- | ---: |"]
    out += [f"| {_cell(k)} | {_cell(_num(v))} |" for k, v in flat]
    out.append("")
    if isinstance(stats, FuzzStats) and stats.race_overlap:
        out += ["### Race overlap (rounds whose racers' store calls all ran at one instant)", "",
                "| racers | rounds | overlapped | gated (held at their first SQL statement, "
                "released together) |", "| ---: | ---: | ---: | ---: |"]
        out += [f"| {r.racers} | {r.rounds} | {r.overlapped} ({_pct(r.overlapped, r.rounds)}) "
                f"| {r.gated} ({_pct(r.gated, r.rounds)}) |" for r in stats.race_overlap]
        out += ["", overlap_line(stats, mode), ""]
    # over the whole campaign, not only the example the timeline shows
    tables = [("Refusals by class", stats.refusals)]
    if isinstance(stats, FuzzStats):
        tables += [("Faults injected", stats.faults), ("Operations run", stats.coverage.ops),
                   ("Steps by kind (races, boundaries, hostile arguments)", stats.coverage.steps)]
    for heading, table in tables:
        if table:
            out += [f"### {heading}", "", "| what | count |", "| --- | ---: |"]
            out += [f"| {_cell(k)} | {_cell(_num(v))} |" for k, v in table.items()]
            out.append("")
    return out


def overlap_line(stats: FuzzStats, mode: str | None = None) -> str:
    """One sentence on how many race rounds really raced, per race size (the end-of-run
    summary line and report.md say it), e.g. "race overlap: 2 racers 71%, 4 racers 45%".
    ``mode`` is the run's (``Report.mode``): a schedule-mode run is never gated, and says
    why instead of blaming the target."""
    if not stats.race_overlap:
        return "race overlap: no race rounds"
    parts = ", ".join(f"{r.racers} racers {_pct(r.overlapped, r.rounds)}"
                      for r in stats.race_overlap)
    gated = sum(r.gated for r in stats.race_overlap)
    if not gated and mode == "schedule":
        parts += (" (schedule mode: the scheduler orders the racers' statements, so the "
                  "stress-mode race gate does not run)")
    elif not gated:
        parts += (" (no round was gated: the race gate holds racers at their first statement "
                  "through Python's sqlite3.connect, which a Postgres target or a store with its "
                  "own SQLite does not use; overlap was left to chance)")
    return f"race overlap: {parts}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


# --------------------------------------------------------------------------- story
def story_markdown(report: Report) -> list[str]:
    """The story timeline.html leads with, for a CI log or a PR comment: what broke and
    why it cannot be right, the minimal steps, the replay command, verdict and version."""
    story = build_story(report)
    by_index = {o.index: o for v in same_run(report) for o in v.history or ()}
    out = [f"**{_text(verdict_label(report))}** · {_text(story.ferry)}"
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
        out += ["Replay:", "", fence(story.replay, "sh"), ""]
    for inv, kind, message, said in story.also:  # each with its own example, below
        out += [f"**Also found: `{_code(inv)}`** ({_text(kind)}; its own minimal example is "
                f"under Violations): {_text(message)}"
                + (f" — reproduced {_text(said)}" if said else ""), ""]
    return out


# --------------------------------------------------------------------------- violations
def _violation(n: int, v: ViolationReport, mode: str | None = None) -> list[str]:
    inv_code = " ".join(v.invariant.split()).replace("`", "'")
    kind = invariant_kind(v.invariant)
    out = [f"### {n}. `{inv_code}`" + ("" if kind == "safety" else f" ({kind})"), ""]
    if v.message:
        out += [_text(v.message), ""]
    anchor = v.protocol.partition("#")[2] or v.invariant
    out += [f"The rule: {v.protocol} (installed with ferry: {read_hint(anchor)})", ""]
    said = said_reproduced(v, mode)
    if said:
        out += [f"reproduced {_text(said)}", ""]
    bad = set(v.ops)
    if bad:
        out += ["violating ops: " + ", ".join(f"#{i}" for i in sorted(bad)), ""]

    if v.steps:
        out += ["**Minimal steps**", ""]
        out += [f"{i}. {_text(format_step(s))}" for i, s in enumerate(v.steps, 1)]
        out.append("")

    if v.history:
        out += ["**Operations** (one column per worker, rows in invoke order)", ""]
        out += _op_table(list(v.history), bad) + [""]

    if v.schedule_trace:
        out += ["**SQL statements in the order they ran** (⇢ = switched worker here)", ""]
        out += _trace_table(list(v.schedule_trace)) + [""]

    detail = v.detail
    if detail:
        out += ["<details><summary>detail</summary>", "", "```json", _json(detail), "```",
                "", "</details>", ""]
    return out


def op_cell(op: Op) -> str:
    """``#3 alice claim(task_id=t1) → ok {…}``: an op without its worker and clock."""
    args = ", ".join(f"{k}={short_value(v)}" for k, v in (op.args or {}).items())
    if op.type == OK:
        out = f"ok {short_value(op.value)}"
    elif op.type == FAIL:
        out = f"fail {op.error}"
    else:
        out = f"info {op.error or op.note or 'indeterminate'}"
    return clip(f"#{op.index} {op.agent} {op.op}({args}) → {out}", _CELL_MAX)


def _op_table(ops: list[Op], bad: set[int]) -> list[str]:
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


def _trace_table(trace: list[TraceStatement]) -> list[str]:
    workers = sorted({t.worker for t in trace})
    if not workers:
        return ["_(empty trace)_"]
    col = {w: i for i, w in enumerate(workers)}
    rows = ["| # | " + " | ".join(f"worker {w}" for w in workers) + " |",
            "| ---: | " + " | ".join("---" for _ in workers) + " |"]
    for n, t in enumerate(trace, 1):
        cells = [""] * len(workers)
        sql = " ".join(t.sql.split())
        text = f"`{_code(clip(sql, _SQL_MAX))}`"
        if t.op is not None:
            text += f" (op #{_cell(t.op)})"
        cells[col[t.worker]] = ("⇢ " if t.switch else "") + text
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    return rows


# --------------------------------------------------------------------------- escaping
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


def fence(body: str, lang: str = "") -> str:
    """``body`` in a code fence longer than any run of backticks inside it."""
    ticks = "```"
    while ticks in body:
        ticks += "`"
    return f"{ticks}{lang}\n{body}\n{ticks}"
