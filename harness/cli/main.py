"""``ferry-harness``: fuzz a leasing store, replay a failure, and more.

Exit codes: :class:`ferry_harness.errors.ExitCode` (0 no violation, 1 violation found or
reproduced, 2 usage or harness error, 3 nothing decided, 130 interrupted).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferry_harness.check.ops import JSONObject
from ferry_harness.check.sizes import WAL_BOUND_BYTES
from ferry_harness.cli import bench, check, crash, new_target, protocol, scenario
from ferry_harness.cli.args import (
    Handlers,
    jobs,
    positive_int,
    positive_seconds,
    random_seed,
    seed,
    size,
)
from ferry_harness.errors import (
    EXIT_CODES_HELP,
    ExitCode,
    FerryHarnessError,
    TargetError,
    UsageError,
)
from ferry_harness.report.markdown import overlap_line
from ferry_harness.report.paths import LATEST, check_report_dir, make_run_dir, run_dir_name
from ferry_harness.report.protocol import read_hint
from ferry_harness.report.schema import said_reproduced
from ferry_harness.report.story import database_note, exit_reason, headline
from ferry_harness.run.nemesis import FAULTS
from ferry_harness.runtime.provenance import provenance
from ferry_harness.runtime.target import add_import_root, add_target_option, load_factory

if TYPE_CHECKING:  # the campaign (Hypothesis) loads only for the commands that run it
    from ferry_harness.run.campaign import Snapshot


def _faults(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in FAULTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown fault {bad[0]!r}; choose from {','.join(FAULTS)}")
    return kinds


#: where ``fuzz`` writes without ``--report-dir``: one ``run-<UTC>-seed<N>/`` per run
DEFAULT_REPORT_ROOT = "reports"


class _VersionAction(argparse.Action):
    """``--version``: the version and, in a git checkout, the commit (computed only when
    asked: it runs git)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(version_line())
        parser.exit()


def version_line() -> str:
    """``ferry-harness 0.1.0 (commit 9516f16…, dirty)``; no commit for an installed wheel."""
    p = provenance()
    line = f"ferry-harness {p['version']}"
    if p.get("commit"):
        line += f" (commit {p['commit'][:12]}{', dirty' if p.get('dirty') == 'yes' else ''})"
    return line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ferry-harness",
        description="Concurrency verification and fuzzing for SQLite-WAL leasing stores. "
        "Races real worker processes on one WAL file and checks the invariants of "
        "PROTOCOL.md#invariants.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action=_VersionAction,
                        help="print the version (and the git commit of a checkout) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    fuzz = sub.add_parser("fuzz", help="run a fuzz campaign and write a report",
                          description="Draw operations with Hypothesis, race them on real "
                          "worker processes, check every invariant after each step, and on a "
                          "violation shrink it to a minimal replayable example.",
                          epilog=EXIT_CODES_HELP)
    add_target_option(fuzz)
    fuzz.add_argument("--workers", type=positive_int, default=4, metavar="N",
                      help="worker processes racing on the database (default 4, at least 2)")
    group = fuzz.add_mutually_exclusive_group()
    group.add_argument("--budget", type=positive_seconds, default=None, metavar="SECONDS",
                       help="search for this long (default 30 s); the whole run — search, "
                       "shrink, replays, report — ends within budget × 1.1 + 10 s")
    group.add_argument("--max-examples", type=positive_int, default=None, metavar="N",
                       help="stop after N examples instead of a time budget")
    fuzz.add_argument("--seed", type=seed, default=None,
                      help="generator seed (default: a fresh random one, printed in the "
                      "headline and recorded in the report; pass it to explore the same "
                      "examples again)")
    fuzz.add_argument("--steps", type=positive_int, default=30, metavar="N",
                      help="steps per example (default 30)")
    fuzz.add_argument("--mode", choices=("stress", "schedule"), default="stress",
                      help="stress: free-running barrier races (default); schedule: workers run "
                      "one SQL statement at a time in an order Hypothesis draws (PCT), so a "
                      "failure replays exactly")
    fuzz.add_argument("--faults", type=_faults, default=(), metavar="KINDS",
                      help="comma-separated faults to inject: kill,pause,clock (default none)")
    fuzz.add_argument("--report-dir", default=None, metavar="DIR",
                      help="where report.json, report.md, history.jsonl and timeline.html go, "
                      "exactly (default: a new reports/run-<UTC time>-seed<N>/ per run, with "
                      "reports/latest linked to it and failing examples kept in "
                      "reports/examples)")
    fuzz.add_argument("--example-db", default=None, metavar="SPEC",
                      help="Hypothesis example database where failing examples are saved and "
                      "replayed first next time: none | dir:PATH (or a plain path) | "
                      "redis://HOST:PORT/N (shared between machines; needs the redis "
                      "package) | github:OWNER/REPO[/ARTIFACT] (read-only). Default: "
                      "$FERRY_EXAMPLE_DB, else DIR/examples under the report directory "
                      "(reports/examples without --report-dir)")
    fuzz.add_argument("--wal-bound", type=size, default=WAL_BOUND_BYTES, metavar="SIZE",
                      help="the -wal may never grow past this (wal-bounded), e.g. 64MiB, "
                      "8MiB, 500000 (bytes; default 64MiB)")
    fuzz.add_argument("--op-timeout", type=positive_seconds, default=None, metavar="SECONDS",
                      help="an operation still running after this long is killed and reported "
                      "as a liveness finding (default: 20 × the slowest operation seen, "
                      "between 3 and 10 s)")
    fuzz.add_argument("--db-dir", default=None, metavar="WHERE",
                      help="where each example's database file is made: auto (default: "
                      "/dev/shm when it is a tmpfs, else the system temp directory), disk "
                      "(the system temp directory: a store that stalls on a real disk is a "
                      "finding too) or a directory; the report's stats say which")
    fuzz.add_argument("--pg-uri", default=None, metavar="URI",
                      help="a Postgres target (ferry_backend = 'postgres') runs on this "
                      "server (a libpq URI; default: $FERRY_PG_URI, else a throwaway cluster "
                      "started for the run); the run makes and drops a database of its own")
    fuzz.add_argument("--jobs", type=jobs, default=None, metavar="N",
                      help="controller processes the search is split over, each with its own "
                      "--workers pool and its share of the examples: a number or auto "
                      "(default: $FERRY_JOBS, else auto: one per core, at most 8, for a stress "
                      "search on SQLite; 1 in schedule mode, whose search repeats seed for "
                      "seed only in one job, and for a Postgres target); the shrink, replays "
                      "and report run in the first")
    fuzz.add_argument("--quiet", action="store_true", help="no progress display")

    replay = sub.add_parser("replay", help="re-run the minimal failing example of a report",
                            description="Re-run the minimal failing steps stored in DIR/report.json "
                            "and say how many tries reproduced the violation.",
                            epilog="A crash report (crash.json) is replayed by rerunning its "
                            "campaign until it shows the same invariant. Exit codes: 0 did not "
                            "reproduce (or nothing to replay), 1 reproduced at least once, 2 usage "
                            "or harness error (DIR holds neither report.json nor crash.json), "
                            "130 interrupted.")
    replay.add_argument("report_dir", metavar="DIR",
                        help="a report directory written by fuzz, scenarios --report-dir, the "
                        "pytest gate (ferry-reports/latest/fuzz, ferry-reports/latest/scenario/NAME) or crash "
                        "--report-dir (holds report.json or crash.json)")
    replay.add_argument("--tries", type=positive_int, default=10, help="how many runs (default 10)")
    replay.add_argument("--target", default=None, metavar="MODULE:FACTORY",
                        help="replay against another target (default: the report's, imported "
                        "from where the run imported it)")
    replay.add_argument("--mode", choices=("stress", "schedule"), default=None,
                        help="schedule: replay the interleaving found in schedule mode for an "
                        "example that replayed unreliably (default: the report's mode)")
    return parser


def _progress_printer(quiet: bool):
    """A live rich display on a terminal; a line every few seconds otherwise."""
    if quiet:
        return (lambda _s: None), (lambda: None)
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.live import Live

        console = Console(stderr=True)
        live = Live(console=console, refresh_per_second=4, transient=True)
        live.start()

        def show(s: Snapshot) -> None:
            budget = f"/{s['budget']:.0f}s" if s.get("budget") else "s"
            live.update(f"[bold]{s['phase']}[/] {s['elapsed']:.1f}{budget}  examples {s['examples']}  "
                        f"race rounds {s['race_rounds']}  ops {s['ops']}  "
                        f"violations [{'red' if s['violations'] else 'green'}]{s['violations']}[/]")
        return show, live.stop
    last = [0.0]

    def line(s: Snapshot) -> None:
        now = time.monotonic()
        if now - last[0] >= 5 or s["phase"] != "fuzzing":
            last[0] = now
            print(f"ferry: {s['phase']} {s['elapsed']:.0f}s examples={s['examples']} "
                  f"race_rounds={s['race_rounds']} violations={s['violations']}", file=sys.stderr)
    return line, (lambda: None)


def _example_db(option: str | None, report_dir: str) -> Any:
    """The example database a ``--example-db`` spec names (harness/run/example_db.py)."""
    # lazy: the fuzz engine (Hypothesis) loads only for the commands that run it
    from ferry_harness.run.example_db import ENV_VAR, open_example_db

    return open_example_db(option or os.environ.get(ENV_VAR), os.path.join(report_dir, "examples"))


def _jobs(args: argparse.Namespace) -> int:
    """``--jobs``, else $FERRY_JOBS, else auto (ferry_harness.run.jobs.auto_jobs)."""
    # lazy: the fuzz engine (multiprocess, the backends) loads only for the commands that run it
    from ferry_harness.run.jobs import ENV_VAR, POSTGRES_ONE_JOB, auto_jobs
    from ferry_harness.runtime.backend import POSTGRES, backend_of

    given = args.jobs
    if given is None:
        env = os.environ.get(ENV_VAR, "").strip()
        try:
            given = jobs(env) if env else "auto"
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"${ENV_VAR}: {exc}") from None
    postgres = backend_of(load_factory(args.target)) == POSTGRES
    if given == "auto":
        return auto_jobs(args.mode, postgres)
    if postgres and int(given) > 1:
        raise UsageError(f"--jobs {given}: {POSTGRES_ONE_JOB}")
    return int(given)


def cmd_fuzz(args: argparse.Namespace) -> int:
    # lazy: the fuzz engine (Hypothesis) loads only for the commands that run it
    from ferry_harness.run.campaign import Campaign, CampaignConfig, write_report

    load_factory(args.target)  # a bad target stops here, before any directory is made
    n_jobs = _jobs(args)  # so does a bad $FERRY_JOBS
    run_seed = args.seed if args.seed is not None else random_seed()
    # examples outlive the per-run directories; the database is opened before any
    # directory is made, so a bad --example-db leaves nothing behind
    examples_under = args.report_dir if args.report_dir is not None else DEFAULT_REPORT_ROOT
    database = _example_db(args.example_db, examples_under)
    if args.report_dir is not None:  # exactly there, as before
        report_dir = args.report_dir
        check_report_dir(report_dir)
    else:  # one directory per run, ``latest`` naming the newest
        report_dir = str(make_run_dir(DEFAULT_REPORT_ROOT, run_dir_name(run_seed)))
    budget = args.budget if args.budget is not None else (None if args.max_examples else 30.0)
    cfg = CampaignConfig(target=args.target, workers=args.workers, budget_s=budget,
                         max_examples=args.max_examples, seed=run_seed,
                         report_dir=report_dir, steps_per_example=args.steps,
                         faults=args.faults, mode=args.mode, op_timeout_s=args.op_timeout,
                         wal_bound_bytes=args.wal_bound,
                         database=database, db_dir=args.db_dir, pg_uri=args.pg_uri,
                         jobs=n_jobs)
    show, stop = _progress_printer(args.quiet)
    campaign = Campaign(cfg, progress=show)
    try:
        with _first_ctrl_c_stops(campaign):
            outcome = campaign.run()
    finally:
        stop()
    d = write_report(outcome)
    rep = outcome.report
    stats = rep.stats
    note = database_note(rep)  # what the example database replayed, and what it showed
    if note:
        print(f"ferry: {note}")
    # every distinct invariant found, safety first (PROTOCOL.md#several-findings)
    print(f"ferry: {headline(rep)} — {stats.examples} examples, {stats.race_rounds} race "
          f"rounds, {stats.ops} operations in {stats.seconds:.1f}s"
          f"{f' ({stats.jobs} search jobs)' if stats.jobs > 1 else ''} against {cfg.target} "
          f"(seed {cfg.seed}{'' if args.seed is not None else ', random: --seed fixes it'})")
    print(f"ferry: {overlap_line(stats, rep.mode)}")
    for v in rep.violations:
        anchor = v.protocol.partition("#")[2] or v.invariant
        print(f"  [{v.invariant}] {v.message} (see {v.protocol}: {read_hint(anchor)})")
        sched = f", schedule {v.schedule}" if v.schedule else ""
        print(f"    minimal example: {len(v.steps or ())} steps{sched}, reproduced "
              f"{said_reproduced(v, rep.mode) or '?'}")
        det = v.schedule_mode
        if det and det.found:
            print(f"    in schedule mode: schedule {det.schedule}, reproduced "
                  f"{det.reproduced} (replay with --mode schedule)")
        elif det:
            print(f"    no deterministic schedule found ({det.why}, "
                  f"{det.tried} interleavings tried)")
    skipped = [k for k, s in (rep.invariants or {}).items() if not s.startswith("checked")]
    if skipped:
        print(f"  skipped: {', '.join(skipped)} (see report)")
    link = Path(DEFAULT_REPORT_ROOT) / LATEST
    latest = f"  (also {link})" if args.report_dir is None and link.is_symlink() \
        and link.resolve() == Path(d).resolve() else ""
    print(f"  report: {d}/report.md  timeline: {d}/timeline.html{latest}")
    if rep.violations:
        print(f"  replay: ferry-harness replay {d}")
    code, why = exit_reason(rep)
    if campaign.stopping:
        print("ferry-harness: interrupted; the report covers what ran; all workers stopped",
              file=sys.stderr)
        if code == ExitCode.INTERRUPTED:
            print(f"  exit {int(code)}: {why}")
        return ExitCode.INTERRUPTED
    if rep.verdict == "unknown":
        print("ferry: UNKNOWN is not a pass: " + ("; ".join((rep.unknown or ())[:3])
                                                  or "no example completed within the budget"))
        return ExitCode.UNKNOWN
    print(f"  exit {int(code)}: {why}")
    return ExitCode.VIOLATION if rep.verdict == "fail" else ExitCode.OK


@contextlib.contextmanager
def _first_ctrl_c_stops(campaign: Any) -> Any:
    """The first Ctrl-C ends the campaign cleanly (report written, exit 130); the second
    interrupts at once. Never lets KeyboardInterrupt land inside Hypothesis."""
    def handler(signum: int, frame: Any) -> None:
        if campaign.stopping:
            raise KeyboardInterrupt
        campaign.request_stop()

    def on_term(signum: int, frame: Any) -> None:  # CI runners send SIGTERM before SIGKILL
        campaign.request_stop()

    previous = signal.signal(signal.SIGINT, handler)
    previous_term = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


def cmd_replay(args: argparse.Namespace) -> int:
    # lazy: the fuzz engine (Hypothesis) loads only for the commands that run it
    from ferry_harness.check.checker import Violation
    from ferry_harness.check.history import History
    from ferry_harness.run.campaign import CampaignConfig, Failure, Runner, replay_count
    from ferry_harness.run.steps import step_from_json

    path = Path(args.report_dir) / "report.json"
    if not path.exists() and (Path(args.report_dir) / "crash.json").exists():
        # lazy: the fuzz engine (Hypothesis) loads only for the commands that run it
        from ferry_harness.tools.crash import (
            replay_crash,  # a crash campaign: rerun it (see harness/tools/crash.py)
        )

        return replay_crash(args.report_dir, args.target, args.tries)
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TargetError(f"cannot read {path}: {exc}") from None
    if not report.get("violations"):
        print(f"ferry: {path} records no violation; nothing to replay")
        return ExitCode.OK
    v = report["violations"][0]
    target = args.target or report["target"]
    if not args.target:  # the report says where its target was imported from
        add_import_root(report.get("target_path"))
    if report.get("scenario"):
        return _replay_scenario(report, target, args.tries)
    load_factory(target)
    mode, steps = report.get("mode", "stress"), v["steps"]
    if args.mode == "schedule":
        det = v.get("schedule_mode") or {}
        if det.get("found"):  # the interleaving found for an unreliable stress example
            steps = det["steps"]
        mode = "schedule"
    cfg = CampaignConfig(target=target, workers=report.get("workers", 4),
                         faults=tuple(report.get("faults", ())), mode=mode)
    failure = Failure([step_from_json(st) for st in steps], History(),
                      [Violation(v["invariant"], v["message"])])
    with Runner(cfg) as runner:
        (hits, tries), _last = replay_count(runner, failure, args.tries)
    sched = f" (schedule {v['schedule']})" if v.get("schedule") else ""
    print(f"ferry: replayed {len(v['steps'])} steps{sched} against {target}: [{v['invariant']}] "
          f"reproduced {hits}/{tries}")
    return ExitCode.VIOLATION if hits else ExitCode.OK


# Further subcommands live in their own modules, each with
# ``register(subparsers) -> handler`` where ``handler(args) -> int`` (exit code).
def _subcommands(sub: Any) -> Handlers:
    """Every subcommand but fuzz and replay registers itself from its own cli module."""
    handlers: Handlers = {}
    for module in (bench, scenario, crash, new_target, check, protocol):
        handlers.update(module.register(sub))
    return handlers


def _replay_scenario(report: JSONObject, target: str, tries: int) -> int:
    """A scenario report replays by running the scenario again, ``tries`` times."""
    # lazy: the fuzz engine (Hypothesis) loads only for the commands that run it
    from ferry_harness.cli.scenario import run_scenarios
    from ferry_scenarios import SCENARIOS

    name = report["scenario"]["name"]
    if name not in SCENARIOS:
        raise TargetError(f"the report names scenario {name!r}, which this ferry does not have")
    load_factory(target)
    hits = 0
    for _ in range(tries):
        results, _secs = run_scenarios([SCENARIOS[name]], target, report.get("workers", 4))
        hits += any(not r.passed and r.invariant == report["violations"][0]["invariant"]
                    for r in results)
    print(f"ferry: replayed scenario {name} against {target}: "
          f"[{report['violations'][0]['invariant']}] reproduced {hits}/{tries}")
    return ExitCode.VIOLATION if hits else ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    handlers: Handlers = {"fuzz": cmd_fuzz, "replay": cmd_replay}
    handlers.update(_subcommands(sub))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return ExitCode.ERROR

    try:
        return handlers[args.command](args)
    except FerryHarnessError as exc:
        print(f"ferry-harness: error: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("ferry-harness: interrupted; all workers stopped", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        return ExitCode.ERROR
    except Exception as exc:
        if os.environ.get("FERRY_DEBUG"):
            raise
        print(f"ferry-harness: internal error: {type(exc).__name__}: {exc} "
              "(set FERRY_DEBUG=1 for the traceback, and please report it)", file=sys.stderr)
        return ExitCode.ERROR


if __name__ == "__main__":
    sys.exit(main())
