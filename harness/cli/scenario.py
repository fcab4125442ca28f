"""``ferry-harness scenarios``: run the classic leasing-store races (``scenarios/``) by name.

One worker pool serves every scenario; each scenario gets a fresh database. The result is
a table (scenario, invariant, result, time, explanation); with ``--report-dir`` every
failing scenario also gets a report directory in the format of ``ferry-harness fuzz``
(report.json, report.md, history.jsonl, timeline.html), written by the same code.

Exit codes (:class:`ferry_harness.errors.ExitCode`): 0 every scenario passed (or was
skipped: the target lacks what it needs), 1 a scenario found a violation, 2 usage or harness
error, 3 a scenario could not run (its race could not be staged: nothing was decided),
130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ferry_harness.check.checker import invariant_status, refusals
from ferry_harness.cli.args import Handlers, positive_int
from ferry_harness.errors import ExitCode
from ferry_harness.report.markdown import fence
from ferry_harness.report.paths import check_report_dir
from ferry_harness.report.schema import (
    Provenance,
    Report,
    ScenarioInfo,
    ScenarioStats,
    violation_entry,
)
from ferry_harness.runtime.backend import refuse_postgres
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.provenance import provenance
from ferry_harness.runtime.target import add_target_option, load_factory

SCENARIO_EXIT_CODES = ("Exit codes: 0 every scenario passed or was skipped, 1 a scenario "
                       "found a violation, 2 usage or harness error, 3 a scenario could not "
                       "run (its race could not be staged; nothing was decided), 130 "
                       "interrupted.")
STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow", "error": "bold red"}
LABEL = {"pass": "passed", "fail": "failed", "skip": "skipped", "error": "could not run"}


def register(sub: Any) -> Handlers:
    p = sub.add_parser(
        "scenarios", help="run classic leasing-store races as named reproductions",
        description="Run named race scenarios (thundering herd, impersonation, zombie holder, "
        "lease boundary, …) against a store, one fresh database each, and judge every "
        "history with the harness checker (invariant ids: PROTOCOL.md#invariants).",
        epilog=SCENARIO_EXIT_CODES)
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="scenarios to run (default: all; see --list)")
    add_target_option(p)
    p.add_argument("--workers", type=positive_int, default=4, metavar="N",
                   help="worker processes (default 4, at least 2; races use all of them)")
    p.add_argument("--report-dir", default=None, metavar="DIR",
                   help="write a report directory DIR/<scenario>/ for every failing scenario "
                   "(replay it with: ferry-harness replay DIR/<scenario>)")
    p.add_argument("--list", action="store_true", help="describe every scenario and exit")
    return {"scenarios": cmd_scenarios}


def _console() -> Any:
    from rich.console import Console  # why: rich loads slowly; only output needs it

    wide = sys.stdout.isatty() or os.environ.get("COLUMNS")
    return Console(width=None if wide else 160, highlight=False)


def cmd_scenarios(args: argparse.Namespace) -> int:
    from ferry_scenarios import (
        SCENARIOS,  # why: loads ferry_harness.run; only this command needs it
    )

    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        print(f"ferry-harness scenarios: unknown scenario {unknown[0]!r}; known: "
              f"{', '.join(SCENARIOS)}", file=sys.stderr)
        return ExitCode.ERROR
    if args.list:
        _print_list(SCENARIOS)
        return ExitCode.OK
    # a bad --target is a usage error (exit 2), before any fork
    refuse_postgres("scenarios", args.target, load_factory(args.target))
    if args.report_dir:
        check_report_dir(args.report_dir)
    chosen = [SCENARIOS[n] for n in dict.fromkeys(args.names)] or list(SCENARIOS.values())
    results, seconds = run_scenarios(chosen, args.target, args.workers)
    reports = []
    if args.report_dir:
        for scenario, result in zip(chosen, results, strict=True):
            if result.status in ("fail", "error"):
                reports.append(write_scenario_report(
                    scenario, result, target=args.target, workers=args.workers,
                    directory=Path(args.report_dir) / scenario.name))
    _print_results(results, args.target, seconds, reports)
    return exit_code(results)


def exit_code(results: list[Any]) -> int:
    """1 when any scenario found a violation; else 3 when any could not run; else 0."""
    if any(r.status == "fail" for r in results):
        return ExitCode.VIOLATION
    if any(r.status == "error" for r in results):
        return ExitCode.UNKNOWN
    return ExitCode.OK


def run_scenarios(chosen: list[Any], target: str, workers: int) -> tuple[list[Any], float]:
    """Run scenarios in order on one pool, a fresh database each; (results, seconds)."""
    from ferry_scenarios import (
        ScenarioContext,  # why: loads ferry_harness.run; only this command needs it
    )

    t0 = time.perf_counter()
    clock = SharedClock()
    workdir = tempfile.mkdtemp(prefix="ferry-scenarios-")
    try:
        with WorkerPool(target, clock, workers) as pool:
            ctx = ScenarioContext(pool, clock, workdir)
            results = [s.run(ctx) for s in chosen]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results, time.perf_counter() - t0


def _print_list(scenarios: dict[str, Any]) -> None:
    from rich.table import Table  # why: rich loads slowly; only output needs it

    table = Table(title="ferry scenarios", title_justify="left")
    table.add_column("scenario", style="bold", no_wrap=True)
    table.add_column("invariant", no_wrap=True)
    table.add_column("what it does")
    table.add_column("rule (PROTOCOL.md)")
    for s in scenarios.values():
        table.add_row(s.name, s.invariant, s.description, s.source)
    _console().print(table)


def _print_results(results: list[Any], target: str, seconds: float, reports: list[Path]) -> None:
    from rich.table import Table  # why: rich loads slowly; only output needs it

    table = Table(title=f"ferry scenarios against {target}", title_justify="left")
    table.add_column("scenario", style="bold", no_wrap=True)
    table.add_column("invariant", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("explanation")
    for r in results:
        table.add_row(r.name, r.invariant, f"[{STYLE[r.status]}]{r.status.upper()}[/]",
                      f"{r.seconds:.2f}s", _one_line(r.explanation))
    console = _console()
    console.print(table)
    counts = {k: sum(1 for r in results if r.status == k) for k in STYLE}
    parts = [f"{n} {LABEL[k]}" for k, n in counts.items() if n]
    noun = "scenario" if len(results) == 1 else "scenarios"
    console.print(f"ferry: {len(results)} {noun}, {', '.join(parts)} in {seconds:.1f}s",
                  markup=False, soft_wrap=True)
    for d in reports:  # paths on one line each, never wrapped
        console.print(f"  report: {d}/report.md  timeline: {d}/timeline.html", markup=False,
                      soft_wrap=True)


def _one_line(text: str) -> str:
    from rich.markup import escape  # why: rich loads slowly; only output needs it

    return escape(" ".join(str(text).split()))


def write_scenario_report(scenario: Any, result: Any, *, target: str, workers: int,
                          directory: Path) -> Path:
    """A failing scenario as a report directory, written by :func:`campaign.write_report`."""
    # a scenario is a script, not generator steps (steps=()): see Report.script
    violations = [violation_entry(v, result.history, steps=()) for v in result.violations]
    report = Report(
        kind="scenario",
        verdict="fail",
        ferry=Provenance(**provenance()),
        target=target,
        mode=f"scenario {scenario.name}",
        workers=workers,
        scenario=ScenarioInfo(name=scenario.name, invariant=scenario.invariant,
                              description=scenario.description, source=scenario.source,
                              status=result.status, explanation=result.explanation),
        invariants=invariant_status(result.capabilities),
        violations=tuple(violations),
        stats=ScenarioStats(rounds=result.rounds, ops=len(result.history),
                            seconds=round(result.seconds, 3), refusals=refusals(result.history)),
        unknown=tuple(result.unknown),
        findings=() if result.violations else (result.explanation,),
        script=tuple(result.script),
    )
    from ferry_harness.run.campaign import (  # why: 0.5 s of imports (hypothesis)
        Outcome,
        write_report,
    )

    replay = f"ferry-harness scenarios --target {target} --workers {workers} {scenario.name}"
    outcome = Outcome("fail", report, directory, history=result.history)
    d = write_report(outcome, argv_replay=replay)
    md = (d / "report.md").read_text(encoding="utf-8")
    (d / "report.md").write_text(md + _script_section(scenario, result), encoding="utf-8")
    return d


def _script_section(scenario: Any, result: Any) -> str:
    lines = [f"\n## Scenario `{scenario.name}`", "", f"{scenario.description}",
             f"Rule: {scenario.source}. Expected invariant: `{scenario.invariant}`; "
             f"result: {result.status.upper()} after {result.rounds} round(s).", "",
             "What the script did, in order (t = the shared clock in ms):", "",
             fence("\n".join(result.script) or "(nothing)", "text"), ""]
    return "\n".join(lines)
