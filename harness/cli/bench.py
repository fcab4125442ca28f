"""``ferry-harness bench``: the command line of :mod:`ferry_harness.tools.bench` (flags, their
validation, the progress display, the printed summary and the exit code)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

from ferry_core.busy import POLICIES
from ferry_core.store import STRATEGIES
from ferry_harness.errors import ExitCode
from ferry_harness.runtime.target import add_target_option
from ferry_harness.tools.bench.ceiling import same_sql_line
from ferry_harness.tools.bench.matrix import (
    DEFAULT_POLICIES,
    DEFAULT_TASKS,
    DEFAULT_WORKERS,
    run_bench,
)
from ferry_harness.tools.bench.records import ProgressEvent, RunRecord
from ferry_harness.tools.bench.report import compare_table, summary_table, write_report
from ferry_harness.tools.bench.targets import (
    BenchUsageError,
    ferry_core_only,
    resolve_target,
    split_targets,
)

MAX_WORKERS = 256


def _int_list(flag: str, text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise BenchUsageError(f"{flag} takes comma-separated whole numbers, got {part!r}") from None
        if not 1 <= value <= MAX_WORKERS:
            raise BenchUsageError(f"{flag}: each worker count must be 1..{MAX_WORKERS}, got {value}")
        out.append(value)
    return list(dict.fromkeys(out))


def _choices(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    if not out:
        raise BenchUsageError(f"{flag} needs at least one of {','.join(allowed)}")
    for p in out:
        if p not in allowed:
            raise BenchUsageError(f"{flag}: unknown value {p!r}; choose from {','.join(allowed)}")
    return list(dict.fromkeys(out))


class BenchOptions(TypedDict):
    """The validated options ``run_bench`` is called with."""

    target: str
    repeat: int
    workers: list[int]
    strategies: list[str]
    policies: list[str]
    tasks: int
    timeout_s: float
    db_dir: str | None
    pg_uri: str | None


def parse_options(args: argparse.Namespace) -> BenchOptions:
    """Validate the CLI strings (usage errors: one line, exit 2)."""
    try:
        tasks = int(args.tasks)
    except ValueError:
        raise BenchUsageError(f"--tasks must be a whole number, got {args.tasks!r}") from None
    if tasks < 1:
        raise BenchUsageError(f"--tasks must be at least 1, got {tasks}")
    try:
        timeout = float(args.timeout)
    except ValueError:
        raise BenchUsageError(f"--timeout must be seconds, got {args.timeout!r}") from None
    if not math.isfinite(timeout) or timeout <= 0:
        raise BenchUsageError(f"--timeout must be a finite number of seconds > 0, got {args.timeout!r}")
    try:
        repeat = int(args.repeat)
    except ValueError:
        raise BenchUsageError(f"--repeat must be a whole number, got {args.repeat!r}") from None
    if repeat < 1:
        raise BenchUsageError(f"--repeat must be at least 1, got {repeat}")
    specs = split_targets(args.target)
    # another store measured (alone or beside ferry_core): ferry_core is one row, its
    # defaults, unless --strategy / --busy-policy ask for its variants
    own = all(resolve_target(spec).ferry_core for spec in specs)
    strategy = args.strategy or ("cas,immediate" if own else "cas")
    policy = args.busy_policy or (",".join(DEFAULT_POLICIES) if own else "spin")
    opts: BenchOptions = {
        "target": args.target, "repeat": repeat,
        "workers": _int_list("--workers", args.workers),
        "strategies": _choices("--strategy", strategy, STRATEGIES),
        "policies": _choices("--busy-policy", policy, sorted(POLICIES)),
        "tasks": tasks, "timeout_s": timeout, "db_dir": args.db_dir,
        "pg_uri": getattr(args, "pg_uri", None),
    }
    if args.db_dir and not (os.path.isdir(args.db_dir) and os.access(args.db_dir, os.W_OK)):
        raise BenchUsageError(f"--db-dir: {args.db_dir!r} is not a writable directory")
    for flag, where in (("--json", args.json and os.path.dirname(os.path.abspath(args.json))),
                        ("--report-dir", args.report_dir)):
        if where:
            try:
                Path(where).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BenchUsageError(f"{flag}: cannot create {where!r}: {exc.strerror or exc}") from None
            if not os.access(where, os.W_OK):
                raise BenchUsageError(f"{flag}: {where!r} is not writable")
    return opts


class _Progress:
    """rich bars on a terminal; otherwise a line every few seconds and one per run."""

    def __init__(self, quiet: bool, every_s: float = 5.0) -> None:
        self.quiet = quiet
        self.every_s = every_s
        self.last = 0.0
        self.shown_ceiling: str | None = None  # say "ceiling before" once, not per sample
        self.live = None
        if not quiet and sys.stderr.isatty():
            # only for a terminal: a piped or quiet run never pays for importing rich
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.live = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
            self.overall = self.live.add_task("matrix", total=None)
            self.current = self.live.add_task("ceiling", total=None)
            self.live.start()

    def __call__(self, s: ProgressEvent) -> None:
        if self.quiet:
            return
        phase = s["phase"]
        if self.live is not None:
            if phase == "run":
                self.live.update(self.overall, total=s["total"], completed=s["index"],
                                 description="matrix")
            elif phase == "result":
                self.live.update(self.overall, completed=s["index"] + 1)
                self.live.console.print(self._result_line(s["record"]))
            elif phase in ("dispatch", "drain"):
                self.live.update(self.current, total=s["tasks"], completed=s["done"],
                                 description=f"{s['label']} {phase}")
            elif phase == "ceiling":  # no count: a fresh indeterminate bar
                self.live.remove_task(self.current)
                self.current = self.live.add_task(f"ceiling ({s['label']})", total=None)
            return
        now = time.monotonic()
        if phase == "result":
            print(f"ferry bench: [{s['index'] + 1}/{s['total']}] {self._result_line(s['record'])}",
                  file=sys.stderr, flush=True)
            self.last = now
        elif phase == "ceiling":
            if s["label"] != self.shown_ceiling:
                self.shown_ceiling = s["label"]
                self.last = now
                print(f"ferry bench: ceiling {s['label']}", file=sys.stderr, flush=True)
        elif phase == "run" or now - self.last >= self.every_s:
            self.last = now
            done = f" {s['done']}/{s['tasks']}" if s.get("tasks") else ""
            print(f"ferry bench: {phase} {s['label']}{done}", file=sys.stderr, flush=True)

    @staticmethod
    def _result_line(r: RunRecord) -> str:
        lat = r["latency_ms"]
        err = f"  ERROR {r['error']}" if r.get("error") else ""
        return (f"{r['workers']:>3}w {r.get('label') or r['strategy'] + '/' + r['busy_policy']}: "
                f"{r['claims_per_s']:,.0f} claims/s  p99 {lat['p99']:.2f} ms  p99.9 "
                f"{lat['p999']:.2f} ms  max {lat['max']:.2f} ms  Jain {r['jain_fairness']:.3f}"
                f"  once {'yes' if (r.get('verified') or {}).get('ok') else 'NO'}"
                f"  busy {r['busy_errors']}{err}")

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cmd_bench(args: argparse.Namespace) -> int:
    """``ferry-harness bench``: run the matrix, print the tables, write the report; exit 2
    if a run failed, 1 if a run did not complete every task exactly once, else 0."""
    opts = parse_options(args)
    show = _Progress(args.quiet)
    # SIGTERM (a CI runner's stop) unwinds like Ctrl-C: the workers are killed, the throwaway
    # Postgres cluster is stopped and removed, and the exit code is 130
    previous_term = signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = run_bench(opts["target"], opts["workers"], opts["strategies"], opts["policies"],
                           opts["tasks"], repeat=opts["repeat"], timeout_s=opts["timeout_s"],
                           progress=show,
                           db_dir=opts["db_dir"], pg_uri=opts["pg_uri"])
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        show.stop()
    files: list[str] = []
    if args.report_dir:
        files = write_report(result, args.report_dir)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    c = result["ceiling"]
    for note in result["notes"]:
        print(f"note: {note}")
    print(f"ceiling (raw single-process autocommit UPDATE): {c['updates_per_s']:,.0f}/s")
    if same_sql_line(c):
        print(same_sql_line(c))
    for line in summary_table(result):
        print(line)
    print()
    for line in compare_table(result):
        print(line)
    # the goal is the project's own (issue 19): a bench of another store does not judge it
    for g in result["goal"] if ferry_core_only(result) else ():
        failed = [k for k, ok in g["checks"].items() if not ok]
        print(f"goal ({g['workers']} workers, run {g['rep']}) {g['label']}: "
              f"{g['lifecycles_per_s']:,.0f} lifecycles/s = {g['lifecycle_ratio']:.2f} x raw/2, "
              f"p99 {g['p99_ms']:.2f} ms, p99.9 {g['p999_ms']:.1f} ms, max {g['max_ms']:.1f} ms,"
              f" Jain {g['jain']:.3f}, CAS miss {g['cas_miss']:.3f}: "
              f"{'MET' if g['met'] else 'not met (' + ', '.join(failed) + ')'}")
    if files:
        print(f"report: {os.path.join(args.report_dir, 'report.md')} ({len(files)} files)")
    if args.json:
        print(f"json: {args.json}")
    failed_runs = [r for r in result["runs"] if r.get("error")]
    if failed_runs:
        print(f"ferry-harness: error: {len(failed_runs)} run(s) failed: {failed_runs[0]['error']}",
              file=sys.stderr)
        return ExitCode.ERROR
    wrong = [r for r in result["runs"] if not (r.get("verified") or {}).get("ok")]
    if wrong:
        v = wrong[0].get("verified") or {}
        print(f"ferry-harness: {len(wrong)} run(s) did not complete every task exactly once "
              f"(first: {wrong[0].get('target')} {wrong[0]['workers']}w: "
              f"{v.get('claimed_twice', '?')} claimed twice, {v.get('completed_twice', '?')} "
              f"completed twice, {v.get('never_completed', '?')} never completed)",
              file=sys.stderr)
        return ExitCode.VIOLATION
    return ExitCode.OK


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add the ``bench`` subcommand to ``ferry-harness`` (see ferry_harness.cli.main)."""
    p = sub.add_parser(
        "bench", help="measure claim throughput, tail latency and fairness under contention",
        description="W worker processes start at one barrier and drain N pre-dispatched tasks "
        "(poll_next then fulfill) from one WAL database, for every combination of worker "
        "count, claim strategy and busy policy. --strategy and --busy-policy apply to "
        "ferry_core targets only; other stores are measured as they are. --target A,B,... "
        "compares stores in one interleaved run (same tasks, same order in every "
        "repetition). A Postgres target (ferry_core:PgLeaseStore) has each run in a "
        "fresh schema of one server: a throwaway cluster the bench starts and removes, or "
        "the server $FERRY_PG_URI names. Exit code 1 if a run did not complete every task "
        "exactly once.")
    add_target_option(p)
    p.add_argument("--workers", default=",".join(map(str, DEFAULT_WORKERS)), metavar="LIST",
                   help="comma-separated worker counts (default 1,2,4,8,16)")
    p.add_argument("--strategy", default=None, metavar="LIST",
                   help="ferry_core claim strategies (default cas,immediate; cas when "
                   "another store is measured beside it)")
    p.add_argument("--busy-policy", default=None, metavar="LIST",
                   help=f"ferry_core busy policies (default {','.join(DEFAULT_POLICIES)}; "
                   "spin, the store's default, when another store is measured beside it)")
    p.add_argument("--repeat", default="1", metavar="N",
                   help="run the whole matrix N times, interleaved (default 1): on a shared "
                   "machine, look at the spread")
    p.add_argument("--tasks", default=str(DEFAULT_TASKS), metavar="N",
                   help=f"tasks per run (default {DEFAULT_TASKS})")
    p.add_argument("--timeout", default="600", metavar="SECONDS",
                   help="give up on a run (killing its workers) after this long (default 600)")
    p.add_argument("--db-dir", default=None, metavar="DIR",
                   help="where the benchmark databases go (default: the system temp dir); "
                   "its file system matters: checkpoints fsync on a disk, not on tmpfs")
    p.add_argument("--pg-uri", default=None, metavar="URI",
                   help="a Postgres target runs on this server (a libpq URI; default: "
                   "$FERRY_PG_URI, else a throwaway cluster started for the bench); the bench "
                   "makes and drops a database of its own, a fresh schema for each run")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the results here")
    p.add_argument("--report-dir", default=None, metavar="DIR",
                   help="write report.md, bench.json and PNG plots here")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    return {"bench": cmd_bench}
