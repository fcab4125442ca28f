"""The bench's report: markdown tables (also printed by the CLI), plain findings, and
``report.md`` + ``bench.json`` (+ the PNGs of :mod:`.plots` when matplotlib is there)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from ferry_harness.check.sizes import WAL_BOUND_BYTES
from ferry_harness.tools.bench.ceiling import same_sql_line
from ferry_harness.tools.bench.records import BenchResult, GoalRow, RunRecord
from ferry_harness.tools.bench.stats import spread
from ferry_harness.tools.bench.targets import ferry_core_only, short_name

MIB = 1 << 20


def _fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def summary_table(result: BenchResult) -> list[str]:
    """Markdown table of every run."""
    reps = result.get("repeat", 1) > 1
    multi = len(result.get("targets", [result.get("target")])) > 1
    lines = [
        ("| run " if reps else "") + ("| target " if multi else "")
        + "| workers | strategy | busy policy | claims/s | × ceiling | "
        "lifecycles/s | × raw/2 | p50 ms | p99 ms | p99.9 ms | max ms | CAS miss | busy err | "
        "Jain | exactly once | WAL end MiB | WAL max MiB | CPU used |",
        ("|---:" if reps else "") + ("|---" if multi else "")
        + "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|---:|---|---:|---:|---:|",
    ]
    for r in result["runs"]:
        lat = r["latency_ms"]
        err = f" ⚠ {r['error']}" if r.get("error") else ""
        ver = r.get("verified") or {}
        once = "yes" if ver.get("ok") else (
            f"NO ({ver.get('claimed_twice', '?')} claimed twice, "
            f"{ver.get('never_completed', '?')} never completed)" if ver else "?")
        lines.append(
            (f"| {r.get('rep', 1)} " if reps else "")
            + (f"| {short_name(r.get('target', ''))} " if multi else "")
            + f"| {r['workers']} | {r['strategy']} | {r['busy_policy']}{err} | "
            f"{_fmt_rate(r['claims_per_s'])} | {_opt(r, 'ceiling_ratio', '.3f')} | "
            f"{_fmt_rate(r['lifecycles_per_s'])} | {_opt(r, 'lifecycle_ratio', '.2f')} | "
            f"{lat['p50']:.2f} | {lat['p99']:.2f} | "
            f"{lat['p999']:.2f} | {lat['max']:.2f} | {r['cas_miss_ratio']:.3f} | "
            f"{r['busy_errors']} | {r['jain_fairness']:.3f} | {once} | "
            + (f"{r['wal_bytes'] / MIB:,.1f} | {r['wal_bytes_max'] / MIB:,.1f} | "
               if r.get("backend") != "postgres" else "— | — | ")
            + f"{r.get('cpu_util', 0):.0%} |")
    return lines


def _opt(run: RunRecord, key: str, fmt: str) -> str:
    """A ratio to the SQLite ceilings, or "—" for a run that has none (a Postgres run)."""
    return format(run[key], fmt) if key in run else "—"


def compare_table(result: BenchResult) -> list[str]:
    """One row per target variant: every worker count's lifecycles/s, and the tail at the
    largest worker count (the spread over repetitions, min–max)."""
    runs = [r for r in result["runs"] if not r.get("error")]
    if not runs:
        return []
    ws = sorted({r["workers"] for r in runs})
    tail_w = 8 if 8 in ws else ws[-1]
    labels = list(dict.fromkeys(r.get("label", "") for r in runs))
    head = ("| store | " + " | ".join(f"{w}w lifecycles/s (× raw/2)" for w in ws)
            + f" | {tail_w}w p99 ms | {tail_w}w p99.9 ms | {tail_w}w max ms | {tail_w}w Jain |"
            f" {tail_w}w CAS miss | exactly once |")
    lines = [head, "|---" + "|---:" * (len(ws) + 5) + "|---|"]
    for label in labels:
        mine = [r for r in runs if r.get("label", "") == label]
        cells = []
        for w in ws:
            at = [r for r in mine if r["workers"] == w]
            ratios = [r["lifecycle_ratio"] for r in at if "lifecycle_ratio" in r]
            cells.append(f"{spread([r['lifecycles_per_s'] for r in at], ',.0f')}"
                         + (f" ({spread(ratios, '.2f')})" if ratios else "")
                         if at else "—")
        tail = [r for r in mine if r["workers"] == tail_w]
        if tail:
            cells += [spread([r["latency_ms"][k] for r in tail], ".1f")
                      for k in ("p99", "p999", "max")]
            cells += [spread([r["jain_fairness"] for r in tail], ".2f"),
                      spread([r["cas_miss_ratio"] for r in tail], ".3f")]
        else:
            cells += ["—"] * 5
        bad = sum(1 for r in mine if not (r.get("verified") or {}).get("ok"))
        cells.append("yes" if not bad else f"NO in {bad} of {len(mine)} runs")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    raw = result["ceiling"]
    lines += ["", f"raw/2 = {_fmt_rate(raw.get('raw_half_per_s', raw['updates_per_s'] / 2))}"
              " lifecycles/s (best ceiling sample / 2; every run is compared with the samples "
              "taken right before and after its own repetition)."]
    return lines


def goal_table(result: BenchResult) -> list[str]:
    """Issue 19's goal, one row per checked run (empty when no run was at 1, 8 or 16, and
    for a bench of another store: the goal is ferry_core's, not a user's)."""
    goal = result.get("goal") or []
    if not goal or not ferry_core_only(result):
        return []
    mark = {True: "✅", False: "❌"}

    def cell(g: GoalRow, key: str, fmt: str) -> str:
        if key not in g["checks"]:
            return f"{format(g[key], fmt)}"
        return f"{mark[g['checks'][key]]} {format(g[key], fmt)}"

    lines = [
        "1 worker: lifecycles/s ≥ 0.6 × raw/2; 8 workers: ≥ 0.5 × raw/2, p99 ≤ 2 ms, "
        "p99.9 ≤ 10 ms, max ≤ 50 ms, Jain ≥ 0.99, CAS misses ≤ 1 %; 16 workers: the same "
        "tail with p99.9 ≤ 20 ms. Every task completed exactly once.",
        "",
        "| run | workers | store | lifecycles/s | × raw/2 | p99 ms | p99.9 ms | max ms | Jain |"
        " CAS miss | met |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for g in sorted(goal, key=lambda g: (g["workers"], g["label"], g["rep"])):
        failed = ", ".join(k for k, ok in g["checks"].items() if not ok)
        lines.append(
            f"| {g['rep']} | {g['workers']} | {g['label']} | {_fmt_rate(g['lifecycles_per_s'])} |"
            f" {cell(g, 'lifecycle_ratio', '.2f')} | {cell(g, 'p99_ms', '.2f')} |"
            f" {cell(g, 'p999_ms', '.1f')} | {cell(g, 'max_ms', '.1f')} | {cell(g, 'jain', '.3f')} |"
            f" {cell(g, 'cas_miss', '.3f')} | {'yes' if g['met'] else 'no: ' + failed} |")
    return lines


def findings(result: BenchResult) -> list[str]:
    """Plain facts the numbers show, so nobody has to dig them out of the table."""
    runs = [r for r in result["runs"] if not r.get("error")]
    out = []
    if not runs:
        return out
    solo = [r for r in runs if r["workers"] == 1]
    if solo:
        worst = max(solo, key=lambda r: r["latency_ms"]["max"])
        out.append(
            f"With one worker (no contention at all) the claim latency still reaches p99.9 "
            f"{worst['latency_ms']['p999']:.1f} ms / max {worst['latency_ms']['max']:.1f} ms "
            f"({worst['strategy']}/{worst['busy_policy']}): that much comes from the machine "
            "(scheduling, other jobs, the file system), not from contention.")
        best = max((r["ceiling_ratio"] for r in solo if "ceiling_ratio" in r), default=None)
        if best is not None:  # a SQLite run (a Postgres run has no ratio to that ceiling)
            out.append(
                f"The best single-worker run reaches {best:.3f} × the raw ceiling: one lifecycle "
                "is two write transactions (claim, fulfill) of several statements each, against "
                "one one-row UPDATE per transaction for the ceiling.")
    util = sorted(r.get("cpu_util", 0) for r in runs if r["workers"] >= result["machine"]["cpus_usable"])
    if util:
        med = util[len(util) // 2]
        if med < 0.85:
            out.append(
                f"With at least as many workers as CPUs, the workers used a median {med:.0%} of "
                "the machine's CPU time: the rest went to other jobs or waiting, so absolute "
                "numbers are depressed and noisy; compare runs within this report.")
    big = [r for r in runs if r["wal_bytes_max"] > WAL_BOUND_BYTES]
    if big:
        worst = max(big, key=lambda r: r["wal_bytes_max"])
        out.append(
            f"{len(big)} of {len(runs)} runs grew the `-wal` past the harness's wal-bounded "
            f"limit of {WAL_BOUND_BYTES // MIB} MiB (worst: {worst['wal_bytes_max'] / MIB:,.0f} "
            f"MiB, {worst['workers']} workers {worst['strategy']}/{worst['busy_policy']}): under "
            "sustained writes from several processes the passive auto-checkpoint never catches "
            "up, so the WAL is never restarted from the beginning.")
    return out


def render_report(result: BenchResult, plots: list[str], plot_note: str | None) -> str:
    """``report.md``: machine, ceiling, findings, the tables, the plots and a legend."""
    m, c = result["machine"], result["ceiling"]
    lines = [
        "# ferry bench: claim contention",
        "",
        f"Target `{result['target']}`, {result['tasks']:,} tasks per run"
        f"{', ' + str(result['repeat']) + ' repetitions, interleaved' if result.get('repeat', 1) > 1 else ''}, workers "
        f"{', '.join(map(str, result['workers']))}; strategies "
        f"{', '.join(result['strategies'])}; busy policies {', '.join(result['busy_policies'])}.",
        "",
        f"Machine: {m['cpu_model']}, {m['cpus_usable']} usable CPUs, {m['platform']}, Python "
        f"{m['python']}, SQLite {m['sqlite']}, database on {m['db_dir_fs']}; load average "
        f"{m['loadavg_start'][0]:.2f} at the start, {m.get('loadavg_end', [0])[0]:.2f} at the "
        f"end (other jobs share this machine: compare ratios within one run). ferry "
        f"{m['ferry_commit']}, {m['started_utc']}.",
        "",
    ]
    for note in result.get("notes", []):
        lines += [f"> **Note.** {note}", ""]
    lines += [
        "## Ceiling",
        "",
        f"Raw single-process autocommit UPDATE rate: **{_fmt_rate(c['updates_per_s'])}/s** "
        f"({c['method']}; samples " + ", ".join(_fmt_rate(s) for s in c["samples_per_s"])
        + f"). Statement: `{c['statement']}`.",
        "",
    ]
    if same_sql_line(c):
        lines += [f"{same_sql_line(c)} ({c['same_sql']['method']}).", ""]
    if "ferry_core_claim_update_per_s" in c:
        lines += [
            f"For scale: {c['ferry_core_claim_update_note']}: "
            f"**{_fmt_rate(c['ferry_core_claim_update_per_s'])}/s** "
            f"({c['ferry_core_claim_update_per_s'] / c['updates_per_s']:.2f} × the ceiling).",
            "",
        ]
    facts = findings(result)
    if facts:
        lines += ["## Findings", ""] + [f"- {f}" for f in facts] + [""]
    lines += ["## Stores compared (one interleaved run)", ""] + compare_table(result) + [""]
    goal = goal_table(result)
    if goal:
        lines += ["## Goal (issue 19)", ""] + goal + [""]
    lines += ["## Runs", ""] + summary_table(result) + [""]
    lines += ["## Plots", ""]
    if plots:
        lines += [f"![{p}]({p})" for p in plots] + [""]
    if plot_note:
        lines += [f"> {plot_note}", ""]
    lines += [
        "## What the columns mean",
        "",
        "- **claims/s**: claims by all workers / time from the barrier release to the last "
        "successful claim. Every worker loops `poll_next` then `fulfill`, so this is also about "
        "the lifecycle rate (**lifecycles/s**: fulfilled tasks / time to the last fulfill).",
        "- **× ceiling**: claims/s divided by the raw ceiling measured right before or after "
        "the run (same invocation).",
        "- **p50 … max**: time to obtain a claim, from the first `poll_next` attempt to the one "
        "that returned a claim (store-internal busy waits and retries included), nearest rank "
        "over every claim of the run.",
        "- **CAS miss**: lost claim attempts / all claim attempts. For ferry_core: the store's "
        "own claiming UPDATEs (`cas_miss_source=store-cas-update`); an UPDATE that changed no "
        "row because another worker took the task first is a miss (the `immediate` strategy "
        "picks under the write lock, so it never misses). For other targets: `poll_next` calls "
        "(`poll-none`); a None while tasks remained is a miss.",
        "- **busy err**: StoreError / OperationalError from a lock that stayed busy past the "
        "store's timeout (the call is retried, so no task is lost).",
        "- **Jain**: (Σx)² / (n·Σx²) over per-worker claim counts: 1 = equal shares.",
        "- **WAL end / max**: size of the `-wal` file when the drain ended (connections still "
        "open) and the largest size seen while it ran.",
        "- **CPU used**: CPU time of all workers / (wall time × usable CPUs).",
        "",
        "The raw data (per-worker claims, a latency histogram, fulfill latency) is in "
        "`bench.json`.",
        "",
    ]
    return "\n".join(lines)


def write_report(result: BenchResult, report_dir: str) -> list[str]:
    """bench.json, report.md and the PNGs (if matplotlib is installed) into ``report_dir``."""
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    note = None
    try:  # by name at call time: matplotlib is optional, and a missing one is a note
        plots_mod = importlib.import_module("ferry_harness.tools.bench.plots")
    except ImportError as exc:  # matplotlib missing
        note = (f"Plots skipped: {exc}. Install them with `pip install 'ferry-harness[plots]'` and "
                "re-run.")
    else:
        plots = plots_mod.write_plots(result, d)
    (d / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
    (d / "report.md").write_text(render_report(result, plots, note))
    result.setdefault("notes", [])
    if note:
        result["notes"].append(note)
    return ["report.md", "bench.json", *plots]
