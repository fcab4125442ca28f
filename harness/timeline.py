"""Render a history as one self-contained HTML page, in the manner of Porcupine's visualiser.

One lane per worker, one bar per op from invoke to completion, coloured by outcome. Idle
stretches (no op in flight) are collapsed to a fixed gap so races stay legible in long runs;
inside a busy stretch time is linear, so ops that overlapped in time overlap on the page.
Pure: :func:`render_timeline` returns the text; the caller writes the file.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Iterable
from statistics import median

from harness.history import FAIL, INFO, OK, Op

MAX_OPS = 3000

_LEFT = 92  # px reserved for lane labels
_RIGHT = 24
_MIN_DRAW = 640  # minimum drawing width in px
_MIN_BAR = 3
_MIN_SEG = 6
_MAX_SEG = 900
_GAP = 8  # px for a collapsed idle stretch
_OPEN_TAIL = 48  # px past the last event, where open-ended ops keep running
_ROW = 26  # px per sub-row of a lane
_LANE_PAD = 6
_MARK_ROW = 13  # px per row of clock labels
_MARK_ROWS = 3
_CHAR_PX = 6.2  # rough width of one label character at 11px


def render_timeline(
    ops: list[Op],
    *,
    violating: Collection[int] = frozenset(),
    highlight: Collection[int] = frozenset(),
    title: str = "ferry timeline",
) -> str:
    """A standalone HTML page drawing ``ops`` per worker; ``violating``/``highlight`` are op indices."""
    bad, hot = set(violating), set(highlight) - set(violating)
    shown, note = _select(list(ops), bad | hot)
    body = _svg(shown, bad, hot) if shown else '<p class="empty">No operations to draw.</p>'
    counts = {t: sum(1 for o in shown if o.type == t) for t in (OK, FAIL, INFO)}
    workers = len({o.process for o in shown})
    summary = (f"{len(shown)} ops · {workers} worker{'s' if workers != 1 else ''} · "
               f"{counts[OK]} ok · {counts[FAIL]} fail · {counts[INFO]} info · "
               f"{sum(1 for o in shown if o.index in bad)} violating")
    t = html.escape(title)
    return _PAGE.format(
        title=t,
        summary=html.escape(summary),
        note=f'<p class="note">{html.escape(note)}</p>' if note else "",
        legend=_LEGEND,
        body=body,
        css=_CSS,
        js=_JS,
    )


# --------------------------------------------------------------------------- selection
def _select(ops: list[Op], wanted: set[int]) -> tuple[list[Op], str]:
    """At most about MAX_OPS ops: the examples holding wanted ops, else the last MAX_OPS."""
    if len(ops) <= MAX_OPS:
        return ops, ""
    examples = {o.example for o in ops if o.index in wanted and o.example is not None}
    if examples:
        picked = [o for o in ops if o.example in examples]
        if len(picked) <= MAX_OPS:
            return picked, (f"Showing {len(picked)} of {len(ops)} ops: only example(s) "
                            f"{', '.join(map(str, sorted(examples)))}, which hold the violating ops.")
    tail = ops[-MAX_OPS:]
    keep = {id(o) for o in tail}
    extra = [o for o in ops if o.index in wanted and id(o) not in keep]
    picked = extra + tail
    msg = f"Showing the last {len(tail)} of {len(ops)} ops"
    if extra:
        msg += f" plus {len(extra)} earlier violating/highlighted op(s)"
    return picked, msg + "."


# --------------------------------------------------------------------------- time axis
class _Axis:
    """Piecewise-linear ns -> px map: busy stretches linear, idle stretches collapsed."""

    def __init__(self, ops: list[Op]) -> None:
        spans = sorted((o.invoke_ns, _end_ns(o)) for o in ops)
        segs: list[list[int]] = []
        for a, b in spans:
            if segs and a <= segs[-1][1]:
                segs[-1][1] = max(segs[-1][1], b)
            else:
                segs.append([a, b])
        durs = [b - a for a, b in segs if b > a]
        target = min(80.0, max(10.0, 20000.0 / max(1, len(segs))))
        scale = target / median(durs) if durs else 0.0
        widths = [min(_MAX_SEG, max(_MIN_SEG, (b - a) * scale)) for a, b in segs]
        total = sum(widths) + _GAP * (len(segs) + 1)
        stretch = _MIN_DRAW / total if total < _MIN_DRAW else 1.0
        self.segs: list[tuple[int, int, float, float]] = []  # (start, end, x, width)
        self.gaps: list[tuple[float, int]] = []  # (x centre, idle ns)
        x = _LEFT + _GAP * stretch
        for (a, b), w in zip(segs, widths, strict=True):
            w *= stretch
            if self.segs:
                self.gaps.append((x - _GAP * stretch / 2, a - self.segs[-1][1]))
            self.segs.append((a, b, x, w))
            x += w + _GAP * stretch
        if any(_open_ended(o) for o in ops):
            x += _OPEN_TAIL  # room past the last event for ops that never completed
        self.end = x  # right edge of the time axis
        self.width = x + _RIGHT

    def x(self, t: int) -> float:
        """Pixel of time ``t`` (times before/after the data clamp to the ends)."""
        lo, hi = 0, len(self.segs) - 1
        while lo < hi:  # last segment starting at or before t
            mid = (lo + hi + 1) // 2
            if self.segs[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        a, b, x, w = self.segs[lo]
        if t <= a:
            return x
        if t >= b:
            return x + w
        return x + (t - a) / (b - a) * w


def _end_ns(o: Op) -> int:
    if o.complete_ns is not None and o.complete_ns >= o.invoke_ns:
        return o.complete_ns
    return o.invoke_ns


def _open_ended(o: Op) -> bool:
    return o.type == INFO or o.complete_ns is None


# --------------------------------------------------------------------------- drawing
def _outcome(o: Op) -> str:
    if o.type == OK:
        return "ok"
    if o.type == FAIL:
        return f"fail {o.error or ''}".strip()
    return "info"


def _label(o: Op, width: float) -> str:
    room = int((width - 6) / _CHAR_PX)
    for text in (f"{o.op} {_outcome(o)}", o.op):
        if len(text) <= room:
            return text
    return o.op[: room - 1] + "…" if room >= 3 else ""


def _svg(ops: list[Op], bad: set[int], hot: set[int]) -> str:
    axis = _Axis(ops)
    order = sorted(ops, key=lambda o: (o.invoke_ns, o.index))
    # Bars in pixels, then greedy sub-rows per lane so nothing in one lane overlaps.
    bars: dict[int, list[tuple[Op, float, float, int]]] = {}
    row_ends: dict[int, list[float]] = {}
    for o in order:
        x0 = axis.x(o.invoke_ns)
        x1 = axis.end if _open_ended(o) else axis.x(_end_ns(o))
        w = max(float(_MIN_BAR), x1 - x0)
        # An open-ended bar runs to the end of the axis behind later ops of its lane, so
        # only its real extent (or the minimum width) claims space in the packing.
        core = x0 + max(float(_MIN_BAR), (axis.x(_end_ns(o)) - x0) if o.complete_ns else 0.0)
        ends = row_ends.setdefault(o.process, [])
        row = next((i for i, e in enumerate(ends) if e <= x0), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = (core if _open_ended(o) else x0 + w) + 1
        bars.setdefault(o.process, []).append((o, x0, w, row))

    marks_h = _MARK_ROW * _MARK_ROWS + 6
    top = marks_h
    lane_y: dict[int, tuple[float, float]] = {}
    for p in sorted(bars):
        h = len(row_ends[p]) * _ROW + 2 * _LANE_PAD
        lane_y[p] = (top, h)
        top += h
    marks: list[str] = []
    prev: int | None = None
    free = [0.0] * _MARK_ROWS  # right end of the last label in each row
    for o in order:
        if o.now == prev:
            continue
        prev = o.now
        x = axis.x(o.invoke_ns)
        label = html.escape(f"t={o.now}")
        row = next((i for i, e in enumerate(free) if e <= x), None)
        if row is None:  # too crowded for a label: the line and its tooltip still show it
            marks.append(f'<g class="clock"><line x1="{x:.1f}" y1="{marks_h - 4:.1f}" '
                         f'x2="{x:.1f}" y2="{top:.1f}"/><title>{label} from op #{o.index}</title></g>')
            continue
        ly = _MARK_ROW * (row + 1)
        free[row] = x + 4 + len(f"t={o.now}") * _CHAR_PX * 10 / 11
        marks.append(f'<g class="clock"><line x1="{x:.1f}" y1="{ly + 2:.1f}" x2="{x:.1f}" '
                     f'y2="{top:.1f}"/><text x="{x + 2:.1f}" y="{ly:.1f}">{label}</text>'
                     f'<title>{label} from op #{o.index}</title></g>')

    width = max(axis.width, max(free) + 8)
    parts = [f'<svg width="{width:.0f}" height="{top + 4:.0f}" class="timeline">', _DEFS]
    for n, p in enumerate(sorted(bars)):
        y, h = lane_y[p]
        parts.append(f'<g class="lane" data-worker="{p}">'
                     f'<rect class="lane-bg{" alt" if n % 2 else ""}" x="0" y="{y:.1f}" '
                     f'width="{width:.0f}" height="{h:.1f}"/>'
                     f'<text class="lane-label" x="8" y="{y + h / 2 + 4:.1f}">'
                     f'worker {html.escape(str(p))}</text></g>')
    for gx, idle in axis.gaps:
        parts.append(f'<line class="gap" x1="{gx:.1f}" y1="{marks_h:.1f}" x2="{gx:.1f}" '
                     f'y2="{top:.1f}"><title>idle {idle / 1000:.1f} µs collapsed</title></line>')
    parts += marks

    t0 = order[0].invoke_ns
    # Open-ended bars first, so the ops drawn after them stay on top and hoverable.
    for first in (True, False):
        for p in sorted(bars):
            y, _ = lane_y[p]
            for o, x0, w, row in bars[p]:
                if _open_ended(o) == first:
                    parts.append(_bar(o, x0, w, y + _LANE_PAD + row * _ROW, t0, bad, hot))
    parts.append("</svg>")
    return "\n".join(parts)


def _bar(o: Op, x: float, w: float, y: float, t0: int, bad: set[int], hot: set[int]) -> str:
    cls = ["op", o.type if o.type in (OK, FAIL, INFO) else INFO]
    if _open_ended(o):
        cls.append("open")
    if o.index in bad:
        cls.append("violating")
    elif o.index in hot:
        cls.append("highlight")
    start = (o.invoke_ns - t0) / 1000
    span = "open-ended" if o.complete_ns is None else f"{(o.complete_ns - o.invoke_ns) / 1000:.1f} µs"
    tip = f"{o.describe()}\nnow={o.now} · invoke +{start:.1f} µs · {span}"
    if o.extra.get("sql"):  # schedule mode: this op's statements, in the order they ran
        tip += "\nSQL (#seq, ⇢ = a switch to this worker):" + "".join(
            f"\n  #{seq}{' ⇢' if switch else ''} {' '.join(str(sql).split())[:90]}"
            for seq, sql, switch in o.extra["sql"])
    if o.round is not None or o.example is not None:
        tip += f" · example {o.example} round {o.round}"
    task = o.task_id
    task_attr = f' data-task="{html.escape(str(task))}"' if task is not None else ""
    h = _ROW - 6
    label = _label(o, w)
    text = (f'<text x="{x + 3:.1f}" y="{y + h / 2 + 4:.1f}">{html.escape(label)}</text>'
            if label else "")
    return (f'<g class="{" ".join(cls)}" data-index="{o.index}"{task_attr} '
            f'data-tip="{html.escape(tip)}"><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
            f'height="{h}" rx="2"/>{text}<title>{html.escape(tip)}</title></g>')


def _legend_items() -> Iterable[str]:
    items = [
        ("sw-ok", "ok (returned)"),
        ("sw-fail", "fail (typed refusal)"),
        ("sw-info", "info (indeterminate, drawn to the end)"),
        ("sw-violating", "violating op"),
        ("sw-highlight", "other op of the violation"),
    ]
    for cls, text in items:
        yield f'<span class="item"><span class="sw {cls}"></span>{html.escape(text)}</span>'
    yield ('<span class="item"><span class="sw sw-clock"></span>t=… shared clock changes</span>'
           '<span class="item"><span class="sw sw-gap"></span>collapsed idle time</span>')


_LEGEND = '<div class="legend">' + "".join(_legend_items()) + "</div>"

_DEFS = ('<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
         'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e1bee7"/>'
         '<line x1="0" y1="0" x2="0" y2="6" stroke="#8e24aa" stroke-width="2"/></pattern></defs>')

_CSS = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px}
.summary{color:#555;margin:0 0 6px}
.note{background:#fff8e1;border:1px solid #ffe082;padding:4px 8px;display:inline-block}
.legend{margin:8px 0}.legend .item{margin-right:16px;white-space:nowrap}
.sw{display:inline-block;width:18px;height:11px;margin-right:4px;vertical-align:-1px;border:1px solid #666}
.sw-ok{background:#a5d6a7;border-color:#2e7d32}.sw-fail{background:#ffe0b2;border-color:#9e7b4f}
.sw-info{background:repeating-linear-gradient(45deg,#e1bee7 0 3px,#8e24aa 3px 5px);border:1px dashed #6a1b9a}
.sw-violating{background:#e53935;border:2px solid #7f0000}
.sw-highlight{background:#fff;border:2px solid #e53935}
.sw-clock{border:0;border-left:1px dashed #607d8b;width:8px}
.sw-gap{border:0;border-left:1px dotted #bbb;width:8px}
.scroll{overflow-x:auto;border:1px solid #ddd}
.empty{color:#777;font-style:italic}
svg.timeline{display:block;font-size:11px}
.lane-bg{fill:#fff}.lane-bg.alt{fill:#f6f7f9}
.lane-label{font-weight:600;fill:#333}
.gap{stroke:#ccc;stroke-dasharray:1 3}
.clock line{stroke:#607d8b;stroke-dasharray:3 3;stroke-width:1}
.clock text{fill:#455a64;font-size:10px}
.op rect{stroke-width:1;cursor:pointer}
.op text{fill:#222;pointer-events:none}
.op.ok rect{fill:#a5d6a7;stroke:#2e7d32}
.op.fail rect{fill:#ffe0b2;stroke:#9e7b4f}
.op.info rect{fill:url(#hatch);stroke:#6a1b9a;stroke-dasharray:4 2;fill-opacity:.5}
.op.open rect{stroke-dasharray:4 2}
.op.peer rect{stroke:#1565c0;stroke-width:2.5}
.op.highlight rect{stroke:#e53935;stroke-width:2.5}
.op.violating rect{fill:#e53935;stroke:#7f0000;stroke-width:3.5}
.op.violating text{fill:#fff;font-weight:600}
.op:hover rect{filter:brightness(.9)}
#tip{position:fixed;display:none;max-width:560px;background:#263238;color:#fff;padding:6px 8px;
border-radius:4px;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;
pointer-events:none;z-index:10}
"""

_JS = """
(function(){
  var tip=document.getElementById('tip');
  function peers(el,on){var t=el.getAttribute('data-task');if(t===null)return;
    document.querySelectorAll('g.op').forEach(function(g){
      if(g.getAttribute('data-task')===t)g.classList.toggle('peer',on);});}
  document.querySelectorAll('g.op').forEach(function(g){
    var t=g.querySelector('title');if(t)t.remove();
    g.addEventListener('mouseenter',function(){tip.textContent=g.getAttribute('data-tip');
      tip.style.display='block';peers(g,true);});
    g.addEventListener('mousemove',function(e){tip.style.left=(e.clientX+14)+'px';
      tip.style.top=(e.clientY+14)+'px';});
    g.addEventListener('mouseleave',function(){tip.style.display='none';peers(g,false);});
  });
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<h1>{title}</h1>
<p class="summary">{summary}</p>
{note}
{legend}
<div class="scroll">
{body}
</div>
<div id="tip"></div>
<script>{js}</script>
</body>
</html>
"""
