"""The precision and recall matrix: correct stores × 0 violations, broken stores × their name.

    python -m tests.matrix                      # 3 seeds × 30 s, both modes (about 3 h)
    python -m tests.matrix --budget 5 --seeds 0 # a quick look
    python -m tests.matrix --only combos        # the configurable pairwise combos (about 2 h)

Every run is a real ``ferry-harness fuzz`` process, as a user would start it; two run at a
time. Writes, in ``--out`` (``reports/matrix``), one JSON per table — ``precision.json``,
``recall.json``, ``budget.json``: the ferry version and commit that ran it, the command,
every run — and ``matrix.md`` rendered from the JSON files there (``--only`` rewrites one
table's JSON and re-renders; ``--render`` only re-renders). Each run's report directory
goes to ``--runs-dir`` (a fresh temporary directory by default), not into ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ferry_harness.runtime.provenance import provenance

KINDS = ("precision", "recall", "budget")  # one JSON file per table, in this order

# correct stores: every one must pass (name -> target)
CORRECT: dict[str, str] = {
    "bearer_immediate": "tests.variants.bearer_immediate:make_store",
    "cas_lazy": "tests.variants.cas_lazy:make_store",
    "agent_bound": "tests.variants.agent_bound:make_store",
    "agent_bound+declared": "tests.variants.agent_bound:make_declared",
    "minimal_slow": "tests.variants.minimal_slow:make_store",
    "two_conn_slow30": "tests.variants.two_conn_slow30:make_store",
}


def combo_targets() -> dict[str, str]:
    """The configurable store's pairwise covering array (tests/variants/configurable.py):
    every pair of choices of any two freedom/capability switches in some combo."""
    from tests.variants.configurable import COMBOS

    return {f"configurable/{name}": f"tests.variants.configurable:{name}" for name in COMBOS}


# the budget promise (a slow, blocking or hanging store ends on time with a report)
BUDGET: dict[str, str] = {
    "ferry_core": "ferry_core:LeaseStore",
    "bearer_immediate (10 s busy timeout)": "tests.variants.bearer_immediate:make_store",
    "two_conn_slow30 (30 s busy timeout)": "tests.variants.two_conn_slow30:make_store",
    "polls that write (10 s busy timeout)": "tests.variants.broken_slow:busy_idle_poll",
    "hangs in claim": "tests.slow_stores:hang_claim",
}


def broken_targets() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Broken stores: name -> (target, the invariant it must be named under first, faults),
    on the ferry_core base and on the slow independent base (10 s busy timeout)."""
    from tests.broken_stores import BROKEN, FAULT_BROKEN
    from tests.variants.broken_slow import BROKEN_SLOW

    out = {f"ferry_core/{k}": (f"tests.broken_stores:{k}", inv, ())
           for k, (inv, _why) in BROKEN.items()}
    out.update({f"ferry_core/{k}": (f"tests.broken_stores:{k}", inv, faults)
                for k, (faults, inv, _why) in FAULT_BROKEN.items()})
    out.update({f"slow/{k}": (f"tests.variants.broken_slow:{k}", inv, faults)
                for k, (faults, inv, _why) in BROKEN_SLOW.items()})
    return out


def fuzz(target: str, *, mode: str, seed: int, budget: float, out: Path,
         faults: tuple[str, ...] = ()) -> dict[str, Any]:
    """One campaign in its own process; its report, plus the wall time it took."""
    cmd = [sys.executable, "-m", "ferry_harness", "fuzz", "--target", target, "--mode", mode,
           "--seed", str(seed), "--budget", str(budget), "--example-db", "none", "--quiet",
           "--report-dir", str(out)] + (["--faults", ",".join(faults)] if faults else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget * 1.1 + 60)
    wall = time.perf_counter() - t0
    try:
        report = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        report = {"verdict": "error", "violations": [], "stats": {},
                  "error": (proc.stderr or proc.stdout)[-400:]}
    report["wall_s"] = round(wall, 1)
    report["exit_code"] = proc.returncode
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.matrix", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per run (30)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (0,1,2)")
    parser.add_argument("--modes", default="stress,schedule", help="modes for correct stores")
    parser.add_argument("--at-once", type=int, default=2,
                        help="runs at a time (2); each run searches with fuzz's default "
                        "--jobs (set $FERRY_JOBS to choose)")
    parser.add_argument("--only", choices=("precision", "combos", "recall", "budget"),
                        default=None, help="one part (precision includes the combos)")
    parser.add_argument("--out", default="reports/matrix", help="output directory")
    parser.add_argument("--runs-dir", default=None,
                        help="where each run's report directory goes (default: a new temp dir)")
    parser.add_argument("--render", action="store_true",
                        help="run nothing: re-render matrix.md from the JSON files in --out")
    args = parser.parse_args(argv)
    if args.render:
        (Path(args.out) / "matrix.md").write_text(render_dir(Path(args.out)))
        return 0
    command = ["python", "-m", "tests.matrix", *(sys.argv[1:] if argv is None else argv)]
    runs_dir = Path(args.runs_dir or tempfile.mkdtemp(prefix="ferry-matrix-runs-"))
    seeds = [int(s) for s in args.seeds.split(",")]
    modes = args.modes.split(",")
    out = Path(args.out)
    runs: list[tuple[str, str, str, str, int, str | None, tuple[str, ...]]] = []
    if args.only in (None, "precision"):
        runs += [("precision", name, t, m, s, None, ()) for name, t in CORRECT.items()
                 for m in modes for s in seeds]
    if args.only in (None, "precision", "combos"):
        runs += [("precision", name, t, m, s, None, ()) for name, t in combo_targets().items()
                 for m in modes for s in seeds]
    if args.only in (None, "budget"):
        runs += [("budget", name, t, m, s, None, ()) for name, t in BUDGET.items()
                 for m in modes for s in seeds]
    if args.only in (None, "recall"):
        runs += [("recall", name, t, "stress", s, inv, faults)
                 for name, (t, inv, faults) in broken_targets().items() for s in seeds]

    def one(run: tuple[str, str, str, str, int, str | None, tuple[str, ...]]) -> dict[str, Any]:
        kind, name, target, mode, seed, want, faults = run
        d = runs_dir / f"{name.replace('/', '_')}-{mode}-{seed}"
        rep = fuzz(target, mode=mode, seed=seed, budget=args.budget, out=d, faults=faults)
        first = rep["violations"][0] if rep.get("violations") else None
        row = {"kind": kind, "name": name, "mode": mode, "seed": seed, "want": want,
               "faults": list(faults),
               "verdict": rep.get("verdict"), "named": first["invariant"] if first else None,
               "message": first["message"][:300] if first else None,
               "detect_s": rep.get("discovery", {}).get("seconds_to_detect"),
               "reproduced": first.get("reproduced") if first else None,
               "examples": rep.get("stats", {}).get("examples"),
               "seconds": rep.get("stats", {}).get("seconds"), "wall_s": rep["wall_s"],
               "exit_code": rep["exit_code"], "ferry_commit": (rep.get("ferry") or {}).get("commit")}
        print(f"{kind:9} {name:34} {mode:8} seed {seed}: {row['verdict']} "
              f"{row['named'] or ''} {row['detect_s'] or ''} wall {row['wall_s']}s", flush=True)
        return row

    with ThreadPoolExecutor(args.at_once) as pool:
        rows = list(pool.map(one, runs))
    out.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if mine:
            (out / f"{kind}.json").write_text(json.dumps(
                {"ferry": provenance(), "command": command, "budget_s": args.budget,
                 "seeds": seeds, "modes": modes, "rows": mine}, indent=2) + "\n")
    md = render_dir(out)
    (out / "matrix.md").write_text(md)
    print(md)
    print(f"each run's report: {runs_dir}")
    bad = [r for r in rows if (r["kind"] == "precision" and r["verdict"] != "pass")
           or (r["kind"] == "recall" and r["named"] != r["want"])
           or (r["kind"] == "budget" and r["wall_s"] > args.budget * 1.1 + 10)]
    return 1 if bad else 0


def render_dir(out: Path) -> str:
    """``matrix.md`` from the table JSON files in ``out``, with where each came from."""
    tables = {k: json.loads((out / f"{k}.json").read_text()) for k in KINDS
              if (out / f"{k}.json").exists()}
    if not tables:
        raise SystemExit(f"no {', '.join(k + '.json' for k in KINDS)} in {out}")
    rows = [r for t in tables.values() for r in t["rows"]]
    first = next(iter(tables.values()))
    lines = [render(rows, first["budget_s"], first["seeds"]).rstrip("\n"), "", "## Provenance", "",
             "| table | ferry | commit | command |", "| --- | --- | --- | --- |"]
    for kind, t in tables.items():
        ferry = t.get("ferry") or {}
        commit = ferry.get("commit") or "not recorded"
        if ferry.get("dirty") == "yes":
            commit += " (uncommitted changes)"
        command = f"`{' '.join(t['command'])}`" if t.get("command") else "not recorded"
        lines.append(f"| {kind}.json | {ferry.get('version') or 'not recorded'} | {commit} | "
                     f"{command} |")
    return "\n".join(lines) + "\n"


def render(rows: list[dict[str, Any]], budget: float, seeds: list[int]) -> str:
    """The two tables, as the README shows them."""
    lines = [f"# Precision and recall matrix ({len(seeds)} seeds × {budget:g} s per run)", "",
             "Regenerate: `python -m tests.matrix` (see its `--help`).", "",
             "## Correct stores (precision): violations per run", "",
             "| store | mode | runs | violations | examples (median) | wall s (max) |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    prec = [r for r in rows if r["kind"] == "precision"]
    combos = sorted({r["name"] for r in prec if r["name"].startswith("configurable/")})
    if combos:
        lines[-2:-2] = [combo_summary(combos, [r for r in prec if r["name"] in combos]), ""]
    for key in sorted({(r["name"], r["mode"]) for r in prec}):
        rs = [r for r in prec if (r["name"], r["mode"]) == key]
        fails = [r for r in rs if r["verdict"] != "pass"]
        ex = statistics.median(r["examples"] or 0 for r in rs)
        lines.append(f"| {key[0]} | {key[1]} | {len(rs)} | {len(fails)} | {ex:g} | "
                     f"{max(r['wall_s'] for r in rs):.1f} |")
        for r in fails:
            lines.append(f"|  ↳ seed {r['seed']} | | | {r['verdict']} | | {r['named']}: "
                         f"{(r['message'] or '').replace('|', '/')[:160]} |")
    bud = [r for r in rows if r["kind"] == "budget"]
    if bud:
        limit = budget * 1.1 + 10
        base = {(r["mode"], r["seed"]): r for r in bud if r["name"] == "ferry_core"}
        lines += ["", f"## The budget promise (limit {limit:g} s = budget × 1.1 + 10 s)", "",
                  "| store | mode | verdicts | wall s (max) | ≤ limit | examples/s vs ferry_core |",
                  "| --- | --- | --- | ---: | --- | --- |"]
        for key in sorted({(r["name"], r["mode"]) for r in bud}):
            rs = [r for r in bud if (r["name"], r["mode"]) == key]
            ratios = []
            for r in rs:
                b = base.get((r["mode"], r["seed"]))
                if b and b["examples"] and b["seconds"] and r["examples"] and r["seconds"]:
                    ratios.append((r["examples"] / r["seconds"]) / (b["examples"] / b["seconds"]))
            verdicts = " ".join(f"{r['verdict']}{'/' + r['named'] if r['named'] else ''}"
                                for r in rs)
            worst = max(r["wall_s"] for r in rs)
            ratio = f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "—"
            lines.append(f"| {key[0]} | {key[1]} | {verdicts} | {worst:.1f} | "
                         f"{'yes' if worst <= limit else 'NO'} | {ratio} |")
    rec = [r for r in rows if r["kind"] == "recall"]
    if rec:
        lines += ["", "## Broken stores (recall): the name ferry files it under first", "",
                  "| broken store | expected | named first (runs) | median s to detect | replays |",
                  "| --- | --- | --- | ---: | --- |"]
        for name in sorted({r["name"] for r in rec}):
            rs = [r for r in rec if r["name"] == name]
            named = ", ".join(sorted({str(r["named"]) for r in rs}))
            ok = sum(r["named"] == r["want"] for r in rs)
            times = [r["detect_s"] for r in rs if r["detect_s"] is not None and r["named"]]
            med = f"{statistics.median(times):.2f}" if times else "—"
            reps = " ".join(str(r["reproduced"]) for r in rs)
            lines.append(f"| {name} | {rs[0]['want']} | {named} ({ok}/{len(rs)}) | {med} | {reps} |")
    return "\n".join(lines) + "\n"


def combo_summary(names: list[str], rows: list[dict[str, Any]]) -> str:
    """One paragraph: how many combos of how many switches ran, and what failed."""
    from tests.covering import covered
    from tests.variants.configurable import COMBOS, SWITCHES, meaningful

    cfgs = [COMBOS[n.split("/", 1)[1]] for n in names]
    pairs = set().union(*(covered(dataclasses.asdict(c), pivot="caps", meaningful=meaningful)
                          for c in cfgs))
    bad = sum(r["verdict"] != "pass" for r in rows)
    return (f"The configurable store (`tests/variants/configurable.py`): {len(names)} "
            f"combinations of {len(SWITCHES)} switches covering {len(pairs)} pairs of "
            f"choices, {len(rows)} runs, {bad} with a violation "
            "(`python -m tests.variants.configurable` lists each combo's switches).")


if __name__ == "__main__":
    sys.exit(main())
