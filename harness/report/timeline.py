"""Render a run as one self-contained HTML page that explains its counter-example.

The page is what an engineer opens first when the gate fails, so it leads with the story
(plain HTML, readable without JavaScript): what broke, on which task or lock, the legal
order ferry found and the op that cannot follow it with the model state it met, the
minimal steps, the replay command, the verdict and ferry's version. Below it the timeline,
in the manner of Porcupine's visualiser: one lane per worker, the violating partition's
linearization marked and numbered on its bars, the op that cannot follow highlighted, other
partitions dimmed, faults, clock jumps and schedule-mode statements kept visible.

The timeline is drawn by the page's script from data embedded as JSON (a canvas for every
bar, plus focusable SVG for the partition being explained), so a 20,000-op history opens
in well under two seconds and zooms and pans without redrawing the DOM. Every string from
the store reaches the page either through ``html.escape`` or as JSON text placed with
``textContent``, so a payload such as ``<script>`` stays inert.
Pure: :func:`render_timeline` returns the text; the caller writes the file.
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ferry_harness.check.annotations import Statements, fact
from ferry_harness.check.checker import INVARIANTS
from ferry_harness.check.history import FAIL, INFO, OK, History, Op
from ferry_harness.check.ops import JSONObject
from ferry_harness.errors import ExitCode
from ferry_harness.report.schema import Report, report_from_json
from ferry_harness.report.story import (
    Partition,
    Story,
    build_story,
    culprit_sentence,
    outcome_text,
    same_run,
)

_NO_REPORT = Report(kind="fuzz", verdict="unknown")  # what a page drawn without a report tells
# Beyond this many ops only the examples holding the violation (else the tail) are drawn.
MAX_OPS = 100_000

_TYPE_CODE = {OK: 0, FAIL: 1, INFO: 2}
_FAULT_GLYPH = {"kill": "⚡ kill", "pause": "‖ SIGSTOP", "resume": "▶ SIGCONT",
                "clock": "» clock", "reader-open": "reader open", "reader-closed": "reader closed"}


def _linearization_points(prefix: list[Op], end: int) -> list[int]:
    """One instant per op, in order, inside each op's [invoke, completion] (Porcupine's marks).

    Each point sits in the middle of the window the order leaves it: no earlier than its
    invoke and the previous point, no later than its completion and the next op's latest."""
    def ret(o: Op) -> int:
        if o.type == INFO or o.complete_ns is None:
            return end
        return max(o.invoke_ns, o.complete_ns)

    latest = [ret(o) for o in prefix]
    for k in range(len(prefix) - 2, -1, -1):
        latest[k] = min(latest[k], latest[k + 1])
    out: list[int] = []
    prev = None
    for o, hi in zip(prefix, latest, strict=True):
        lo = o.invoke_ns if prev is None else max(o.invoke_ns, prev)
        p = (lo + max(lo, hi)) // 2
        p = p if prev is None else max(prev, p)
        out.append(p)
        prev = p
    return out


def op_line(o: Op) -> str:
    """``#2 w1 alice claim(task_id=1) → ok {…}``: one op for the story's lists."""
    return o.describe().replace(" -> ", " → ")


# --------------------------------------------------------------------------- HTML
def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _story_html(story: Story, by_index: dict[int, Op]) -> str:
    v = story.verdict.lower()
    out = [f'<header class="story" id="story"><p class="verdict verdict-{_e(v)}">'
           f'<span class="badge">{_e(story.verdict.upper())}</span> {_e(story.title)}</p>']
    facts = " · ".join(f"{_e(k)} <b>{_e(val)}</b>" for k, val in story.facts)
    out.append(f'<p class="facts">{facts}{" · " if facts else ""}'
               f'<span class="ferry-version">{_e(story.ferry)}</span>'
               + (f' · reproduced <b>{_e(story.reproduced)}</b>' if story.reproduced else "")
               + "</p>")
    if not story.parts:
        msg = ("No violation: every invariant held in this run." if v == "pass"
               else "Interrupted (Ctrl-C or SIGTERM) before anything was decided: not a pass."
               if v == "interrupted" else "No violation is recorded in this report.")
        out.append(f'<p class="sentence">{_e(msg)}</p>')
    for n, p in enumerate(story.parts):
        rule = INVARIANTS.get(p.invariant, "")
        out.append(f'<section class="violation" data-part="{n}">')
        out.append(f'<h2><span class="inv">{_e(p.invariant)}</span> broken on '
                   f'<span class="obj">{_e(p.label)}</span></h2>')
        out.append(f'<p class="sentence">{_e(p.message)}</p>')
        if rule:
            out.append(f'<p class="rule">The rule ({_e("PROTOCOL.md#" + p.invariant)}): '
                       f'{_e(rule)}.</p>')
        if p.prefix or p.culprit is not None:
            items = [f'<li value="{k}"><span class="linno">{k}</span> '
                     f'<code>{_e(op_line(by_index[i]) if i in by_index else f"#{i}")}</code></li>'
                     for k, i in enumerate(p.prefix, 1)]
            out.append('<div class="lin"><p>The legal order ferry found for '
                       f'{_e(p.label)} (its linearization):</p><ol class="linearization">'
                       + "".join(items) + "</ol>")
            said = culprit_sentence(p, by_index)
            if said:
                c = by_index.get(p.culprit) if p.culprit is not None else None
                line = op_line(c) if c else f"#{p.culprit}"
                out.append(f'<p class="cannot"><span class="x">✗</span> then <code>{_e(line)}'
                           f'</code> cannot follow: <b class="state">{_e(said)}</b>.</p>')
            out.append("</div>")
        elif p.bad:
            lines = [f"<li><code>{_e(op_line(by_index[i]) if i in by_index else f'#{i}')}"
                     "</code></li>" for i in p.bad]
            out.append('<p>The ops that show it:</p><ul class="badops">' + "".join(lines)
                       + "</ul>")
        out.append("</section>")
    for inv, kind, message, said in story.also:  # each ran on its own: not drawn below
        out.append(f'<p class="also">Also found: <span class="inv">{_e(inv)}</span> '
                   f'({_e(kind)}): {_e(message)}'
                   + (f' — reproduced <b>{_e(said)}</b>' if said else "") + "</p>")
    if story.steps:
        out.append('<div class="steps"><h3>Minimal steps</h3><ol class="program">'
                   + "".join(f"<li><code>{_e(s)}</code></li>" for s in story.steps) + "</ol></div>")
    if story.schedule_trace:
        rows = "".join(
            f'<tr><td>{k}</td><td>w{_e(t.worker)}</td>'
            f'<td>{"⇢" if t.switch else ""}</td>'
            f'<td><code>{_e(" ".join(t.sql.split())[:160])}</code></td>'
            f'<td>{_e("#" + str(t.op)) if t.op is not None else ""}</td></tr>'
            for k, t in enumerate(story.schedule_trace, 1))
        out.append('<details class="trace" open><summary>SQL statements in the order they ran '
                   '(⇢ = the scheduler switched to this worker)</summary><table><thead><tr>'
                   '<th>#</th><th>worker</th><th></th><th>statement</th><th>op</th></tr>'
                   f'</thead><tbody>{rows}</tbody></table></details>')
    if story.replay:
        out.append('<div class="replay"><h3>Replay</h3><div class="cmd"><pre id="replay-cmd">'
                   f'<code>{_e(story.replay)}</code></pre><button type="button" id="copy" '
                   'hidden>Copy</button></div></div>')
    out.append("</header>")
    return "\n".join(out)


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> element nor open a comment, whatever the strings."""
    text = json.dumps(data, separators=(",", ":"), default=str, ensure_ascii=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _select(ops: list[Op], wanted: set[int]) -> tuple[list[Op], str]:
    """At most about MAX_OPS ops: the examples holding wanted ops, else the last MAX_OPS."""
    if len(ops) <= MAX_OPS:
        return ops, ""
    examples = {o.example for o in ops if o.index in wanted and o.example is not None}
    if examples:
        picked = [o for o in ops if o.example in examples]
        if len(picked) <= MAX_OPS:
            return picked, (f"Showing {len(picked)} of {len(ops)} ops: only example(s) "
                            f"{', '.join(map(str, sorted(examples)))}, which hold the violation.")
    tail = ops[-MAX_OPS:]
    keep = {id(o) for o in tail}
    extra = [o for o in ops if o.index in wanted and id(o) not in keep]
    msg = f"Showing the last {len(tail)} of {len(ops)} ops"
    if extra:
        msg += f" plus {len(extra)} earlier op(s) of the violation"
    return extra + tail, msg + "."


def _label(o: Op) -> str:
    return f"{o.op} {outcome_text(o)}"


def _fault_label(o: Op) -> str:
    fault = str(o.args.get("fault", o.op))
    text = _FAULT_GLYPH.get(fault, fault)
    if "slot" in o.args:
        text += f" w{o.args['slot']}"
    if fault == "clock" and "ms" in o.args:
        text += f" +{o.args['ms']}ms"
    return text


def _timeline_data(ops: list[Op], parts: list[Partition], bad: set[int],
                   hot: set[int]) -> JSONObject:
    """The JSON the page's script draws: times in µs from the first invoke."""
    if not ops:
        return {"lanes": [], "ops": [], "parts": [], "faults": [], "clock": [], "sql": {}}
    t0 = min(o.invoke_ns for o in ops)
    end_ns = max(max(o.invoke_ns, o.complete_ns or 0) for o in ops)

    def us(t: int) -> float:
        return round((t - t0) / 1000, 2)

    procs = sorted({o.process for o in ops})
    lanes = [{"id": p, "label": "nemesis (faults)" if p < 0 else f"worker {p}"} for p in procs]
    lane_of = {p: i for i, p in enumerate(procs)}
    part_of: dict[int, int] = {}
    for n, p in enumerate(parts):
        for i in p.ops:
            part_of.setdefault(i, n)
    rows, sql, faults = [], {}, []
    for o in sorted(ops, key=lambda o: (o.invoke_ns, o.index)):
        done = o.complete_ns is not None and o.type != INFO
        flags = (1 if o.index in bad else 0) | (2 if o.index in hot else 0)
        rows.append([o.index, lane_of[o.process], us(o.invoke_ns),
                     us(max(o.invoke_ns, o.complete_ns)) if done else -1,
                     _TYPE_CODE.get(o.type, 2), _label(o), o.now, flags,
                     o.describe() + (f" · example {o.example} round {o.round}"
                                     if o.round is not None or o.example is not None else ""),
                     part_of.get(o.index, -1)])
        ran = fact(o, Statements)
        if ran and ran.ran:
            sql[str(o.index)] = [[s[0], " ".join(str(s[1]).split())[:160], bool(s[2])]
                                 for s in ran.ran if isinstance(s, list | tuple) and len(s) >= 3]
        if o.process < 0 and o.op == "nemesis":
            faults.append([us(o.invoke_ns), _fault_label(o), o.index])
    clock, prev = [], None
    for o in sorted(ops, key=lambda o: (o.invoke_ns, o.index)):
        if o.now != prev:
            clock.append([us(o.invoke_ns), o.now, None if prev is None else o.now - prev])
            prev = o.now
    by_index = {o.index: o for o in ops}
    pdata = []
    for p in parts:
        pre = [by_index[i] for i in p.prefix if i in by_index]
        points = _linearization_points(pre, end_ns) if len(pre) == len(p.prefix) else []
        lin = [[o.index, k, us(t)] for k, (o, t) in enumerate(zip(pre, points, strict=True), 1)]
        pdata.append({"key": p.key, "label": p.label, "invariant": p.invariant,
                      "message": p.message, "ops": p.ops, "lin": lin, "culprit": p.culprit,
                      "bad": p.bad, "cannot": culprit_sentence(p, by_index)})
    return {"lanes": lanes, "ops": rows, "parts": pdata, "faults": faults, "clock": clock,
            "sql": sql, "end": us(end_ns)}


def render_timeline(
    ops: Sequence[Op],
    *,
    violating: Collection[int] = frozenset(),
    highlight: Collection[int] = frozenset(),
    title: str | None = None,
    report: Report | None = None,
) -> str:
    """A standalone HTML page: the story of ``report`` and the timeline of ``ops``.

    ``violating``/``highlight`` are op indices marked without a report (older callers);
    with ``report`` the violations it holds are explained.
    """
    all_ops = [o for o in ops if isinstance(o, Op)]
    story = build_story(report or _NO_REPORT, all_ops)
    by_index = {o.index: o for o in all_ops}
    for v in same_run(report) if report else ():  # other findings ran on their own
        for o in v.history or ():
            by_index.setdefault(o.index, o)
    bad = set(violating) | {i for p in story.parts for i in p.bad}
    bad |= {p.culprit for p in story.parts if p.culprit is not None}
    hot = (set(highlight) | {i for p in story.parts for i in p.ops}) - bad
    if not story.parts and (bad or hot):  # no report: one group of the marked ops
        story = replace(story, parts=[Partition(
            key="marked", label="marked ops", invariant="marked",
            message="ops marked by the caller", ops=sorted(bad | hot), bad=sorted(bad))])
    if title is not None:
        story = replace(story, title=title)
    shown, note = _select(all_ops, bad | hot)
    data = _timeline_data(shown, story.parts, bad, hot)
    counts = {t: sum(1 for o in shown if o.type == t) for t in (OK, FAIL, INFO)}
    workers = len({o.process for o in shown if o.process >= 0})
    summary = (f"{len(shown)} ops · {workers} worker{'s' if workers != 1 else ''} · "
               f"{counts[OK]} ok · {counts[FAIL]} fail · {counts[INFO]} info · "
               f"{sum(1 for o in shown if o.index in bad)} violating")
    story_part = _story_html(story, by_index) if (report or story.parts) else \
        f'<header class="story" id="story"><p class="verdict">{_e(story.title)}</p></header>'
    picker = ""
    if len(story.parts) > 1:
        options = "".join(f'<option value="{n}">{_e(p.label)} ({_e(p.invariant)})</option>'
                          for n, p in enumerate(story.parts))
        picker = ('<label>partition <select id="part">' + options
                  + '<option value="-1">none (all ops alike)</option></select></label>')
    return _PAGE.format(
        title=_e(story.title),
        story=story_part,
        summary=_e(summary),
        note=f'<p class="note">{_e(note)}</p>' if note else "",
        legend=_LEGEND,
        picker=picker,
        empty='<p class="empty">No operations to draw.</p>' if not shown else "",
        data=_json_for_script(data),
        css=_CSS,
        js=_JS,
    )


def rerender(report_dir: str | Path) -> Path:
    """Write ``timeline.html`` again from a report directory's report.json and history.jsonl."""
    d = Path(report_dir)
    report = report_from_json(json.loads((d / "report.json").read_text(encoding="utf-8")))
    hist = History.from_jsonl((d / "history.jsonl").read_text(encoding="utf-8")) if (d / "history.jsonl").exists() else History()
    out = d / "timeline.html"
    out.write_text(render_timeline(list(hist), report=report), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m ferry_harness.report.timeline DIR...``: regenerate each directory's timeline.html."""
    dirs = sys.argv[1:] if argv is None else argv
    if not dirs:
        print("usage: python -m ferry_harness.report.timeline REPORT_DIR...", file=sys.stderr)
        return ExitCode.ERROR
    for d in dirs:
        print(rerender(d))
    return ExitCode.OK


_LEGEND = (
    '<div class="legend" aria-label="legend">'
    '<span class="item"><span class="sw sw-ok"></span>ok (returned)</span>'
    '<span class="item"><span class="sw sw-fail"></span>fail (typed refusal)</span>'
    '<span class="item"><span class="sw sw-info"></span>info (indeterminate, drawn to the end)'
    '</span>'
    '<span class="item"><span class="sw sw-violating">✗</span>violating op (cannot follow)'
    '</span>'
    '<span class="item"><span class="lin-sw">1</span>linearization point and order</span>'
    '<span class="item"><span class="sw sw-dim"></span>other partitions (dimmed)</span>'
    '<span class="item"><span class="sw sw-clock"></span>t=… shared clock jump</span>'
    '<span class="item"><span class="sw sw-fault"></span>fault (kill, SIGSTOP, SIGCONT)</span>'
    '<span class="item"><span class="sw sw-stmt"></span>SQL statement · ▼ switch point</span>'
    "</div>"
)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#1a1a1a}
code,pre{font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace}
.story{border:1px solid #cfd4da;border-left:6px solid #555;padding:10px 14px;margin-bottom:12px;
background:#fbfbfc;max-width:1100px}
.verdict{font-size:18px;font-weight:600;margin:0 0 4px}
.badge{display:inline-block;padding:1px 8px;border-radius:3px;background:#555;color:#fff}
.verdict-fail .badge{background:#a63603}.verdict-pass .badge{background:#08519c}
.facts{color:#444;margin:0 0 8px}
.violation h2{font-size:16px;margin:10px 0 2px}.inv{font-family:ui-monospace,Menlo,monospace;
background:#fde0c5;padding:0 4px;border-radius:3px}
.sentence{font-size:15px;margin:2px 0}.rule{color:#444;margin:2px 0}
ol.linearization{margin:4px 0;padding-left:0;list-style:none}
ol.linearization li{margin:1px 0}
.linno{display:inline-block;min-width:18px;height:18px;line-height:18px;border-radius:9px;
background:#0072b2;color:#fff;text-align:center;font-size:11px;font-weight:700;margin-right:4px}
.cannot{margin:4px 0}.cannot .x{display:inline-block;width:18px;height:18px;line-height:18px;
text-align:center;background:#d55e00;color:#fff;border:2px solid #000;font-weight:700}
.state{color:#7a2800}
.program{margin:2px 0 6px}.steps h3,.replay h3{font-size:14px;margin:8px 0 2px}
.cmd{display:flex;gap:8px;align-items:flex-start}
.cmd pre{margin:0;padding:6px 8px;background:#263238;color:#fff;border-radius:4px;
white-space:pre-wrap;word-break:break-all;flex:1}
.cmd button{padding:4px 10px}
.trace table{border-collapse:collapse;margin:4px 0}.trace td,.trace th{border:1px solid #ddd;
padding:1px 6px;text-align:left}
.summary{color:#555;margin:0 0 6px}
.note{background:#fff8e1;border:1px solid #ffe082;padding:4px 8px;display:inline-block}
.legend{margin:6px 0}.legend .item{margin-right:14px;white-space:nowrap;display:inline-block}
.sw{display:inline-block;width:18px;height:11px;margin-right:4px;vertical-align:-1px;
border:1px solid #666;font-size:9px;line-height:11px;text-align:center;color:#fff}
.sw-ok{background:#9ecae1;border-color:#08519c}.sw-fail{background:#fdd0a2;border-color:#8c510a}
.sw-info{background:repeating-linear-gradient(45deg,#e7d4e8 0 3px,#8e4585 3px 5px);
border:1px dashed #6a1b9a}
.sw-violating{background:#d55e00;border:2px solid #000;height:12px}
.sw-dim{background:#9ecae1;opacity:.3}
.sw-clock{border:0;border-left:2px dashed #37474f;width:8px}
.sw-fault{border:0;border-left:3px solid #000;width:8px}
.sw-stmt{border:0;border-left:2px solid #222;width:8px}
.lin-sw{display:inline-block;width:16px;height:16px;border-radius:8px;background:#0072b2;
color:#fff;font-size:10px;line-height:16px;text-align:center;font-weight:700;margin-right:4px}
.controls{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:6px 0}
.controls .keys{color:#555}
#view{position:relative;border:1px solid #ccc;overflow:hidden;user-select:none;cursor:grab;
background:#fff}
#view canvas{display:block}
#overlay{position:absolute;left:0;top:0;overflow:visible}
#overlay .op rect{stroke:#08519c;stroke-width:2;cursor:pointer}
#overlay .op.ok rect{fill:#9ecae1}#overlay .op.fail rect{fill:#fdd0a2;stroke:#8c510a}
#overlay .op.info rect{fill:url(#hatch);stroke:#6a1b9a;stroke-dasharray:4 2}
#overlay .op text{font-size:11px;fill:#111;pointer-events:none}
#overlay .op.violating rect{fill:url(#badhatch);stroke:#000;stroke-width:3.5}
#overlay .op.violating text{fill:#fff;font-weight:700}
#overlay .op.also-bad rect{stroke:#000;stroke-width:2.5;stroke-dasharray:6 2}
#overlay .op:focus{outline:none}#overlay .op:focus rect{stroke:#000;stroke-width:4;
stroke-dasharray:none}
#overlay .op.current rect{stroke:#000;stroke-width:4}
#overlay .lin-mark circle{fill:#0072b2;stroke:#fff;stroke-width:1.5}
#overlay .lin-mark text{fill:#fff;font-size:10px;font-weight:700;text-anchor:middle}
#overlay .lin-mark line{stroke:#0072b2;stroke-width:2}
#overlay .lin-path{fill:none;stroke:#0072b2;stroke-width:1.5;stroke-dasharray:5 3}
#overlay .cannot-mark rect{fill:#000}#overlay .cannot-mark text{fill:#fff;font-size:11px;
font-weight:700}
#overlay .fault line{stroke:#000;stroke-width:2}
#overlay .fault rect{fill:#ffe873;stroke:#000}#overlay .fault text{font-size:11px;fill:#000}
#overlay .stmt{stroke:#222;stroke-width:1.5}#overlay .op text.seq{font-size:9px;fill:#000}#overlay .stmt.switch{fill:#000}
#minimap{display:block;border:1px solid #ccc;border-top:0;cursor:pointer;background:#f4f5f7}
#tip{position:fixed;display:none;max-width:620px;background:#263238;color:#fff;padding:6px 8px;
border-radius:4px;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;
pointer-events:none;z-index:10}
#detail{min-height:1.4em;font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace;
white-space:pre-wrap;background:#f4f5f7;border:1px solid #ddd;padding:4px 8px;margin:6px 0}
.empty{color:#777;font-style:italic}
"""

_JS = r"""
(function(){
'use strict';
var T0=performance.now();
var D=JSON.parse(document.getElementById('ferry-data').textContent);
var view=document.getElementById('view'),cv=document.getElementById('bars'),
  ov=document.getElementById('overlay'),mm=document.getElementById('minimap'),
  tip=document.getElementById('tip'),detail=document.getElementById('detail');
var SVGNS='http://www.w3.org/2000/svg';
var copy=document.getElementById('copy');
if(copy){copy.hidden=false;copy.addEventListener('click',function(){
  var text=document.getElementById('replay-cmd').textContent;
  function done(){copy.textContent='Copied';setTimeout(function(){copy.textContent='Copy';},1500);}
  function fallback(){var r=document.createRange();r.selectNodeContents(document.getElementById('replay-cmd'));
    var s=getSelection();s.removeAllRanges();s.addRange(r);try{document.execCommand('copy');}catch(e){}done();}
  if(navigator.clipboard&&navigator.clipboard.writeText){navigator.clipboard.writeText(text).then(done,fallback);}
  else fallback();});}
if(!D.ops.length){window.ferryTimeline={ready:true,renderMs:0};document.body.setAttribute('data-ready','1');return;}
// ---- ops: [index,lane,inv,end,type,label,now,flags,desc,part]
var OPS=D.ops.map(function(r){return {i:r[0],lane:r[1],inv:r[2],end:r[3],type:r[4],label:r[5],
  now:r[6],bad:!!(r[7]&1),hot:!!(r[7]&2),desc:r[8],part:r[9],sql:D.sql[String(r[0])]||null};});
var BYI={};OPS.forEach(function(o){BYI[o.i]=o;});
var END=D.end||0;OPS.forEach(function(o){if(o.end>END)END=o.end;});
var LEFT=120,ROW=26,PAD=6,BARH=20,MINW=3,GAP=8,TAIL=48,TOP=D.faults.length?66:34;
var mode='collapsed',scale=1,x0=0,part=D.parts.length?0:-1,current=null;
var axis=null,lanes=null,H=0,W=0,STATS={draws:0};
// ---- time axis: busy stretches linear, idle stretches collapsed to GAP px (or linear)
function buildAxis(){
  var spans=OPS.map(function(o){return [o.inv,o.end<0?o.inv:o.end];}).sort(function(a,b){return a[0]-b[0];});
  var segs=[];spans.forEach(function(s){var l=segs[segs.length-1];
    if(l&&s[0]<=l[1]){if(s[1]>l[1])l[1]=s[1];}else segs.push([s[0],s[1]]);});
  var durs=segs.map(function(s){return s[1]-s[0];}).filter(function(d){return d>0;}).sort(function(a,b){return a-b;});
  var med=durs.length?durs[durs.length>>1]:1;
  var target=Math.min(80,Math.max(10,20000/Math.max(1,segs.length)));
  var k=target/med;
  if(mode==='linear'){var ok=OPS.filter(function(o){return o.end>=0;}).map(function(o){return o.end-o.inv;}).sort(function(a,b){return a-b;});
    var m=ok.length?Math.max(ok[ok.length>>1],0.5):1;var kl=40/m;
    return {x:function(t){return GAP+t*kl;},end:GAP+END*kl+TAIL,segs:null,gaps:[]};}
  var out=[],gaps=[],x=GAP;
  segs.forEach(function(s,n){var w=Math.min(900,Math.max(6,(s[1]-s[0])*k));
    if(n)gaps.push([x-GAP/2,s[0]-segs[n-1][1]]);out.push([s[0],s[1],x,w]);x+=w+GAP;});
  var xs=out;
  function X(t){var lo=0,hi=xs.length-1;while(lo<hi){var mid=(lo+hi+1)>>1;if(xs[mid][0]<=t)lo=mid;else hi=mid-1;}
    var s=xs[lo];if(t<=s[0])return s[2];if(t>=s[1])return s[2]+s[3];return s[2]+(t-s[0])/(s[1]-s[0])*s[3];}
  return {x:X,end:x+TAIL,segs:out,gaps:gaps};
}
// ---- lanes with sub-rows so no two bars of one lane overlap (packed at zoom 1)
function layout(){
  axis=buildAxis();MM=null;
  OPS.forEach(function(o){o.x0=axis.x(o.inv);o.x1=o.end<0?axis.end:Math.max(o.x0+MINW,axis.x(o.end));});
  var rowEnds=D.lanes.map(function(){return [];});
  OPS.forEach(function(o){var ends=rowEnds[o.lane];var core=o.end<0?o.x0+MINW:o.x1;
    var r=0;while(r<ends.length&&ends[r]>o.x0)r++;if(r===ends.length)ends.push(0);ends[r]=core+1;o.row=r;});
  var y=TOP;lanes=D.lanes.map(function(l,n){var h=Math.max(1,rowEnds[n].length)*ROW+2*PAD;
    var L={label:l.label,id:l.id,y:y,h:h};y+=h;return L;});
  H=y+4;W=axis.end;
  OPS.forEach(function(o){o.y=lanes[o.lane].y+PAD+o.row*ROW;});
}
function vw(){return Math.max(200,view.clientWidth);}
function sx(x){return LEFT+(x-x0)*scale;}  // world -> screen
function clampView(){var span=(vw()-LEFT)/scale;x0=Math.max(-10/scale,Math.min(x0,W-span*0.5));}
function inPart(o){if(part<0)return true;var P=D.parts[part];return o.part===part||P.ops.indexOf(o.i)>=0;}
function isBad(o){var P=D.parts[part];return o.i===P.culprit||P.bad.indexOf(o.i)>=0;}
var COL={0:['#9ecae1','#08519c'],1:['#fdd0a2','#8c510a'],2:['#e7d4e8','#6a1b9a']};
var hatch=null;
function draw(){
  var w=vw(),dpr=window.devicePixelRatio||1;
  if(cv.width!==Math.round(w*dpr)||cv.height!==Math.round(H*dpr)){cv.width=Math.round(w*dpr);cv.height=Math.round(H*dpr);
    cv.style.width=w+'px';cv.style.height=H+'px';}
  var c=cv.getContext('2d');c.setTransform(dpr,0,0,dpr,0,0);c.clearRect(0,0,w,H);
  c.font='11px system-ui,sans-serif';
  lanes.forEach(function(L,n){c.fillStyle=n%2?'#f6f7f9':'#fff';c.fillRect(0,L.y,w,L.h);});
  var lo=x0-10/scale,hi=x0+(w-LEFT)/scale;
  // collapsed idle time
  c.strokeStyle='#bbb';c.setLineDash([1,3]);c.beginPath();
  axis.gaps.forEach(function(g){if(g[0]<lo||g[0]>hi)return;var X=sx(g[0]);c.moveTo(X,TOP);c.lineTo(X,H);});c.stroke();
  // clock jumps: a dashed line, labelled where there is room
  c.setLineDash([3,3]);c.strokeStyle='#37474f';c.fillStyle='#263238';var free=[0,0];STATS.clockLines=0;STATS.clockLabels=0;
  D.clock.forEach(function(k){var X=sx(axis.x(k[0]));if(X<LEFT-1||X>w)return;c.beginPath();c.moveTo(X,12);c.lineTo(X,H);c.stroke();
    var lab='t='+k[1]+(k[2]!==null?' ('+(k[2]>=0?'+':'')+k[2]+'ms)':'');var r=free[0]<=X?0:(free[1]<=X?1:-1);
    STATS.clockLines++;if(r>=0){c.fillText(lab,X+2,11+r*12);free[r]=X+6+c.measureText(lab).width;STATS.clockLabels++;}});
  c.setLineDash([]);
  // bars: batched by style (one path per style), then labels and statements for wide ones
  var anyPart=part>=0;STATS.bars=0;STATS.dimmed=0;STATS.stmts=0;
  var B={},wide=[];
  for(var n=0;n<OPS.length;n++){var o=OPS[n];if(o.x1<lo||o.x0>hi)continue;
    var X=sx(o.x0),Wd=Math.max(MINW,(o.x1-o.x0)*scale);
    var dim=anyPart&&!inPart(o);STATS.bars++;if(dim)STATS.dimmed++;if(o.sql)STATS.stmts+=o.sql.length;
    var filled=o.bad&&!dim&&(!anyPart||isBad(o));
    var key=(filled?'b':o.type)+(dim?'d':'')+(o.type===2||o.end<0?'o':'');
    (B[key]||(B[key]=[])).push(X,o.y,Wd);
    if(Wd>8&&(o.sql||Wd>30))wide.push([o,X,Wd,filled,dim]);
  }
  Object.keys(B).forEach(function(key){var r=B[key],t=key[0],col=t==='b'?['#d55e00','#000']:(COL[t]||COL[2]);
    c.globalAlpha=key.indexOf('d')>=0?0.25:1;
    if(t==='2'){if(!hatch)hatch=mkHatch(c);c.fillStyle=hatch;}else c.fillStyle=col[0];
    c.beginPath();for(var j=0;j<r.length;j+=3)c.rect(r[j],r[j+1],r[j+2],BARH);c.fill();
    c.lineWidth=t==='b'?3:1;c.strokeStyle=col[1];c.setLineDash(key.indexOf('o')>=0?[4,2]:[]);
    c.beginPath();for(j=0;j<r.length;j+=3)c.rect(r[j]+.5,r[j+1]+.5,r[j+2]-1,BARH-1);c.stroke();c.setLineDash([]);});
  wide.forEach(function(q){var o=q[0],X=q[1],Wd=q[2],filled=q[3];c.globalAlpha=q[4]?0.25:1;
    if(o.sql){c.strokeStyle='#222';c.lineWidth=1.5;var m=o.sql.length;
      o.sql.forEach(function(s,j){var sxp=X+(j+1)*Wd/(m+1);c.beginPath();c.moveTo(sxp,o.y+BARH-6);c.lineTo(sxp,o.y+BARH);c.stroke();
        if(s[2]){c.fillStyle='#000';c.beginPath();c.moveTo(sxp-4,o.y-1);c.lineTo(sxp+4,o.y-1);c.lineTo(sxp,o.y+5);c.fill();}});}
    if(Wd>30){var lab=(o.bad?'✗ ':'')+o.label;c.fillStyle=filled?'#fff':'#111';
      var room=Math.floor((Wd-6)/6.2);if(room>=3){c.fillText(lab.length>room?lab.slice(0,room-1)+'…':lab,X+3,o.y+BARH/2+4);}}});
  c.globalAlpha=1;
  // faults: full-height bars, never dimmed
  c.strokeStyle='#000';c.lineWidth=2;STATS.faults=0;
  D.faults.forEach(function(f){var X=sx(axis.x(f[0]));if(X<LEFT||X>w)return;STATS.faults++;c.beginPath();c.moveTo(X,TOP-10);c.lineTo(X,H);c.stroke();});
  // lane labels over a white gutter
  c.fillStyle='#fff';c.fillRect(0,0,LEFT-4,H);c.fillStyle='#222';c.font='600 12px system-ui,sans-serif';
  lanes.forEach(function(L){c.fillText(L.label,8,L.y+L.h/2+4);});
  drawOverlay();drawMinimap();STATS.draws++;
}
function mkHatch(c){var p=document.createElement('canvas');p.width=6;p.height=6;var q=p.getContext('2d');
  q.fillStyle='#e7d4e8';q.fillRect(0,0,6,6);q.strokeStyle='#8e4585';q.lineWidth=1.5;q.beginPath();q.moveTo(0,6);q.lineTo(6,0);q.stroke();
  return c.createPattern(p,'repeat');}
function el(name,attrs,parent){var e=document.createElementNS(SVGNS,name);for(var k in attrs)e.setAttribute(k,attrs[k]);
  if(parent)parent.appendChild(e);return e;}
function txt(name,attrs,text,parent){var e=el(name,attrs,parent);e.textContent=text;return e;}
var DEFS='';
function drawOverlay(){
  var w=vw();ov.setAttribute('width',w);ov.setAttribute('height',H);
  while(ov.lastChild&&ov.lastChild.nodeName!=='defs')ov.removeChild(ov.lastChild);
  var g=el('g',{'class':'layer'},ov);
  var lo=x0-10/scale,hi=x0+(w-LEFT)/scale;
  // faults stay visible whatever partition is shown
  var free=[0,0];
  D.faults.forEach(function(f,n){var X=sx(axis.x(f[0]));if(X<LEFT||X>w)return;
    var fg=el('g',{'class':'fault','data-index':f[2]},g);var tw=f[1].length*6.4+8;
    var r=free[0]<=X?0:(free[1]<=X?1:-1);txt('title',{},f[1]+' (op #'+f[2]+')',fg);
    if(r<0){el('rect',{x:X-3,y:28,width:6,height:6},fg);return;}free[r]=X+tw+2;
    el('rect',{x:X-1,y:28+r*16,width:tw,height:14,rx:2},fg);txt('text',{x:X+3,y:39+r*16},f[1],fg);});
  if(part<0)return;
  var P=D.parts[part],mine=OPS.filter(function(o){return inPart(o)&&o.x1>=lo&&o.x0<=hi;});
  if(mine.length>3000)mine=mine.filter(function(o){return o.bad||o.i===P.culprit;});
  mine.forEach(function(o){
    var X=sx(o.x0),Wd=Math.max(MINW,(o.x1-o.x0)*scale);
    var mineBad=o.i===P.culprit||P.bad.indexOf(o.i)>=0;
    var cls='op '+['ok','fail','info'][o.type]+(o.end<0?' open':'')+(mineBad?' violating':(o.bad?' also-bad':''))+(o.i===P.culprit?' culprit':'')+(current===o.i?' current':'');
    var og=el('g',{'class':cls,'data-index':o.i,tabindex:'0',role:'button','aria-label':o.desc},g);
    el('rect',{x:X,y:o.y,width:Wd,height:BARH,rx:2},og);
    var lab=(mineBad?'✗ ':'')+o.label,room=Math.floor((Wd-6)/6.2);
    if(room>=3)txt('text',{x:X+3,y:o.y+BARH/2+4},lab.length>room?lab.slice(0,room-1)+'…':lab,og);
    if(o.sql){var m=o.sql.length;o.sql.forEach(function(s,j){var px=X+(j+1)*Wd/(m+1);
      var st=s[2]?el('path',{'class':'stmt switch',d:'M'+(px-4)+' '+(o.y-1)+'L'+(px+4)+' '+(o.y-1)+'L'+px+' '+(o.y+5)+'Z'},og)
        :el('line',{'class':'stmt',x1:px,y1:o.y+BARH-6,x2:px,y2:o.y+BARH},og);st.setAttribute('data-seq',s[0]);
      if(Wd/(m+1)>22)txt('text',{'class':'seq',x:px+2,y:o.y+BARH-1},'#'+s[0],og);});}
    og.addEventListener('mouseenter',function(e){show(o,e.clientX,e.clientY);});
    og.addEventListener('mousemove',function(e){place(e.clientX,e.clientY);});
    og.addEventListener('mouseleave',hide);
    og.addEventListener('focus',function(){current=o.i;var r=og.getBoundingClientRect();show(o,r.left,r.bottom);say(o);});
    og.addEventListener('blur',hide);
    og.addEventListener('click',function(){say(o);});
  });
  // linearization: a numbered mark at each op's linearization point, joined in order
  var pts=[];
  P.lin.forEach(function(l){var o=BYI[l[0]];if(!o)return;var X=sx(axis.x(l[2]));pts.push([X,o.y+BARH/2]);
    if(X<LEFT-20||X>w+20)return;var mg=el('g',{'class':'lin-mark','data-index':l[0],'data-order':l[1]},g);
    el('line',{x1:X,y1:o.y-2,x2:X,y2:o.y+BARH+2},mg);el('circle',{cx:X,cy:o.y,r:8},mg);
    txt('text',{x:X,y:o.y+3.5},String(l[1]),mg);txt('title',{},'linearized '+ordinal(l[1])+': '+o.desc,mg);});
  if(pts.length>1){el('polyline',{'class':'lin-path',points:pts.map(function(p){return p[0].toFixed(1)+','+p[1].toFixed(1);}).join(' ')},g);
    g.insertBefore(g.lastChild,g.firstChild);}
  var cu=BYI[P.culprit];
  if(cu){var lab='✗ cannot follow '+(P.lin.length>1?'1–'+P.lin.length:(P.lin.length?'1':'the start'));
    var tw=lab.length*6.6+8,X=sx(cu.x0)+Math.max(MINW,(cu.x1-cu.x0)*scale)+4,yy=cu.y+3;
    if(cu.end<0||X+tw>w){X=Math.max(LEFT,Math.min(sx(cu.x0),w-tw));yy=cu.y+BARH+1;}
    var cg=el('g',{'class':'cannot-mark','data-index':cu.i},g);
    el('rect',{x:X,y:yy,width:tw,height:14,rx:2},cg);txt('text',{x:X+4,y:yy+11},lab,cg);}
}
function ordinal(n){var s=['th','st','nd','rd'],v=n%100;return n+(s[(v-20)%10]||s[v]||s[0]);}
function info(o){var s=o.desc;var P=part>=0?D.parts[part]:null;
  if(P){var l=P.lin.filter(function(l){return l[0]===o.i;})[0];if(l)s+='\nlinearized '+ordinal(l[1])+' of '+P.lin.length+' in '+P.label;
    if(o.i===P.culprit)s+='\n✗ cannot follow the legal order: '+(P.cannot||P.message);
    else if(o.bad)s+='\n✗ '+P.invariant+': '+P.message;}
  if(o.sql)s+='\nSQL (#seq, ⇢ = a switch to this worker):'+o.sql.map(function(q){return '\n  #'+q[0]+(q[2]?' ⇢ ':' ')+q[1];}).join('');
  return s;}
function show(o,cx,cy){tip.textContent=info(o);tip.style.display='block';place(cx,cy);}
function place(cx,cy){var r=tip.getBoundingClientRect();var x=Math.min(cx+14,window.innerWidth-r.width-8);
  tip.style.left=Math.max(0,x)+'px';tip.style.top=(cy+14)+'px';}
function hide(){tip.style.display='none';}
function say(o){detail.textContent=info(o);}
// ---- minimap: density of the whole run, the view as a window
var MM=null;
function drawMinimap(){var w=vw(),h=28,dpr=window.devicePixelRatio||1;
  if(mm.width!==Math.round(w*dpr)){mm.width=Math.round(w*dpr);mm.height=h*dpr;mm.style.width=w+'px';mm.style.height=h+'px';MM=null;}
  var c=mm.getContext('2d'),k=(w-LEFT)/Math.max(1,W);
  if(!MM||MM.W!==W){MM=document.createElement('canvas');MM.width=mm.width;MM.height=mm.height;MM.W=W;
    var q=MM.getContext('2d');q.setTransform(dpr,0,0,dpr,0,0);q.fillStyle='#777';q.beginPath();
    OPS.forEach(function(o){q.rect(LEFT+o.x0*k,4+((o.lane*5)%18),Math.max(1,(o.x1-o.x0)*k),2);});q.fill();
    q.fillStyle='#d55e00';q.beginPath();OPS.forEach(function(o){if(o.bad)q.rect(LEFT+o.x0*k-1,0,3,h);});q.fill();
    q.fillStyle='#000';D.faults.forEach(function(f){q.fillRect(LEFT+axis.x(f[0])*k,0,1,h);});
    q.fillStyle='#333';q.font='11px system-ui,sans-serif';q.fillText('overview',8,18);}
  c.setTransform(1,0,0,1,0,0);c.clearRect(0,0,mm.width,mm.height);c.drawImage(MM,0,0);c.setTransform(dpr,0,0,dpr,0,0);
  c.strokeStyle='#0072b2';c.lineWidth=2;c.strokeRect(LEFT+x0*k,1,Math.max(4,(w-LEFT)/scale*k),h-2);}
mm.addEventListener('mousedown',function(e){var r=mm.getBoundingClientRect();var k=(vw()-LEFT)/Math.max(1,W);
  x0=(e.clientX-r.left-LEFT)/k-(vw()-LEFT)/scale/2;clampView();draw();});
// ---- navigation
function fit(){scale=Math.max(1e-4,(vw()-LEFT-20)/Math.max(1,W));x0=0;draw();}
function zoomAt(f,sxp){var wx=x0+(sxp-LEFT)/scale;scale=Math.max(1e-4,Math.min(400,scale*f));x0=wx-(sxp-LEFT)/scale;clampView();draw();}
function focusPart(){if(part<0){fit();return;}var P=D.parts[part];var os=P.ops.map(function(i){return BYI[i];}).filter(Boolean);
  if(!os.length){fit();return;}var a=Math.min.apply(null,os.map(function(o){return o.x0;})),
  b=Math.max.apply(null,os.map(function(o){return o.end<0?o.x0+60:o.x1;}));
  var span=Math.max(20,b-a);scale=Math.max(1e-4,Math.min(8,(vw()-LEFT)*0.7/span));x0=a-((vw()-LEFT)/scale-span)/2;clampView();draw();}
var BAD=OPS.filter(function(o){return o.bad;});
function jump(d){if(!BAD.length)return;var k=BAD.findIndex(function(o){return o.i===current;});
  k=k<0?(d>0?0:BAD.length-1):(k+d+BAD.length)%BAD.length;var o=BAD[k];current=o.i;
  if(part>=0&&!inPart(o)){var p=o.part>=0?o.part:D.parts.findIndex(function(P){return P.bad.indexOf(o.i)>=0;});
    if(p>=0){part=p;var s=document.getElementById('part');if(s)s.value=String(p);}}
  var span=(vw()-LEFT)/scale;if(o.x0<x0||o.x0>x0+span*0.9){x0=o.x0-span/2;clampView();}draw();
  var e=ov.querySelector('g.op[data-index="'+o.i+'"]');if(e)e.focus();say(o);}
document.addEventListener('keydown',function(e){var t=e.target.tagName;if(t==='SELECT'||t==='INPUT'||t==='TEXTAREA')return;
  if(e.ctrlKey||e.metaKey||e.altKey)return;var k=e.key,span=(vw()-LEFT)/scale;
  if(k==='n'||k===']'||k==='j'){jump(1);}else if(k==='p'||k==='['||k==='k'){jump(-1);}
  else if(k==='+'||k==='='){zoomAt(1.5,LEFT+(vw()-LEFT)/2);}else if(k==='-'){zoomAt(1/1.5,LEFT+(vw()-LEFT)/2);}
  else if(k==='0'){fit();}else if(k==='ArrowRight'&&e.shiftKey){x0+=span*0.25;clampView();draw();}
  else if(k==='ArrowLeft'&&e.shiftKey){x0-=span*0.25;clampView();draw();}else return;e.preventDefault();});
view.addEventListener('wheel',function(e){var r=view.getBoundingClientRect();
  if(e.ctrlKey||e.metaKey||Math.abs(e.deltaY)>Math.abs(e.deltaX)&&!e.shiftKey){zoomAt(Math.exp(-e.deltaY*0.0015),e.clientX-r.left);}
  else{x0+=(e.deltaX||e.deltaY)/scale;clampView();draw();}e.preventDefault();},{passive:false});
var drag=null;
view.addEventListener('mousedown',function(e){if(e.target.closest&&e.target.closest('g.op'))return;drag=[e.clientX,x0];});
window.addEventListener('mouseup',function(){drag=null;});
window.addEventListener('mousemove',function(e){if(!drag)return;x0=drag[1]-(e.clientX-drag[0])/scale;clampView();draw();});
// hover over any canvas bar
function hit(mx,my){var wx=x0+(mx-LEFT)/scale,tol=3/scale,best=null;
  for(var n=0;n<OPS.length;n++){var o=OPS[n];if(my<o.y||my>o.y+BARH)continue;
    var x1=o.end<0?o.x0+Math.max(MINW,60)/scale:Math.max(o.x1,o.x0+MINW/scale);
    if(wx>=o.x0-tol&&wx<=x1+tol){if(!best||o.x0>best.x0)best=o;}}return best;}
cv.addEventListener('mousemove',function(e){if(drag)return;var r=cv.getBoundingClientRect();var o=hit(e.clientX-r.left,e.clientY-r.top);
  if(o)show(o,e.clientX,e.clientY);else hide();});
cv.addEventListener('mouseleave',hide);
cv.addEventListener('click',function(e){var r=cv.getBoundingClientRect();var o=hit(e.clientX-r.left,e.clientY-r.top);if(o){current=o.i;say(o);}});
document.getElementById('zin').addEventListener('click',function(){zoomAt(1.5,LEFT+(vw()-LEFT)/2);});
document.getElementById('zout').addEventListener('click',function(){zoomAt(1/1.5,LEFT+(vw()-LEFT)/2);});
document.getElementById('fit').addEventListener('click',fit);
document.getElementById('next').addEventListener('click',function(){jump(1);});
document.getElementById('prev').addEventListener('click',function(){jump(-1);});
document.getElementById('idle').addEventListener('change',function(e){var P=part;mode=e.target.checked?'collapsed':'linear';layout();
  part=P;focusPart();});
var sel=document.getElementById('part');
if(sel)sel.addEventListener('change',function(){part=parseInt(sel.value,10);current=null;focusPart();});
window.addEventListener('resize',function(){draw();});
if(!BAD.length){document.getElementById('next').disabled=true;document.getElementById('prev').disabled=true;}
layout();
if(part>=0)focusPart();else if(W*1<=vw()-LEFT)fit();else{scale=1;x0=0;draw();}
var ms=performance.now()-T0;
window.ferryTimeline={ready:true,renderMs:ms,scriptMs:ms,ops:OPS.length,
  state:function(){return {scale:scale,x0:x0,mode:mode,part:part,current:current,width:W,stats:STATS};},
  jump:jump,fit:fit,zoom:zoomAt};
document.body.setAttribute('data-ready','1');
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
{story}
<section class="timeline" aria-label="timeline">
<p class="summary">{summary}</p>
{note}
{legend}
<div class="controls">{picker}
<button type="button" id="prev" title="previous violating op (p)">◀ prev violating</button>
<button type="button" id="next" title="next violating op (n)">next violating ▶</button>
<button type="button" id="zout" title="zoom out (-)">−</button>
<button type="button" id="zin" title="zoom in (+)">+</button>
<button type="button" id="fit" title="whole run (0)">fit</button>
<label><input type="checkbox" id="idle" checked> collapse idle time</label>
<span class="keys">keys: n / p next / previous violating op · + / − zoom · 0 fit · shift+arrows pan ·
wheel zooms, drag pans · Tab walks the explained ops</span>
</div>
{empty}
<noscript><p class="empty">The timeline is drawn by a script; the story above says what went
wrong without it.</p></noscript>
<div id="view"><canvas id="bars"></canvas><svg id="overlay" xmlns="http://www.w3.org/2000/svg">
<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse"
patternTransform="rotate(45)"><rect width="6" height="6" fill="#e7d4e8"/><line x1="0" y1="0"
x2="0" y2="6" stroke="#8e4585" stroke-width="2"/></pattern><pattern id="badhatch" width="8"
height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="8"
height="8" fill="#d55e00"/><line x1="0" y1="0" x2="0" y2="8" stroke="#8a3b00"
stroke-width="3"/></pattern></defs></svg></div>
<canvas id="minimap"></canvas>
<div id="detail" aria-live="polite">Hover or focus an op for its details.</div>
</section>
<div id="tip" role="tooltip"></div>
<script type="application/json" id="ferry-data">{data}</script>
<script>{js}</script>
</body>
</html>
"""

if __name__ == "__main__":
    raise SystemExit(main())
