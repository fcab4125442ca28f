"""``ferry-harness crash``: the command line of the crash campaign (harness/tools/crash.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ferry_harness.cli.args import fraction, positive_int, random_seed, seed
from ferry_harness.errors import ExitCode
from ferry_harness.report.paths import check_report_dir
from ferry_harness.runtime.target import add_target_option, load_factory
from ferry_harness.tools.crash import Crash, CrashConfig, Tally, summary_lines, write_report


def register(sub: Any) -> dict[str, Callable[[argparse.Namespace], int]]:
    p = sub.add_parser(
        "crash", help="kill workers mid-lifecycle (SIGKILL) and prove nothing is lost",
        description="Run claim/fulfill lifecycles on W worker processes while SIGKILLing random "
        "workers (mid-claim, mid-fulfill including inside the write transaction, or holding a "
        "lease); reclaim every orphaned lease at exactly its expiry; then check that every task "
        "completed exactly once with its accepted result, PRAGMA integrity_check is ok and the "
        "WAL checkpoints to 0 bytes (a Postgres target: no connection is left idle in "
        "transaction; no integrity check).",
        epilog="Exit codes: 0 nothing lost, 1 a loss, duplicate, integrity or lease finding, "
        "2 usage or harness error, 130 interrupted. Replay a failing run with: "
        "ferry-harness replay DIR (DIR from --report-dir).")
    p.add_argument("--rounds", type=positive_int, default=1000, metavar="N",
                   help="rounds of W lifecycles each (default 1000)")
    p.add_argument("--workers", type=positive_int, default=4, metavar="W",
                   help="worker processes (default 4, at least 2)")
    add_target_option(p)
    p.add_argument("--seed", type=seed, default=None,
                   help="seed for victims and kill timing (default: a fresh random one, "
                   "printed first)")
    p.add_argument("--kill-rate", type=fraction, default=0.35, metavar="P",
                   help="fraction of rounds in which one worker is killed (default 0.35)")
    p.add_argument("--report-dir", default=None, metavar="DIR",
                   help="also write crash.json, crash.md and history.jsonl here (without "
                   "it only the summary is printed; `ferry-harness replay DIR` reruns it)")
    p.add_argument("--pg-uri", default=None, metavar="URI",
                   help="a Postgres target (ferry_backend = 'postgres') runs on this server "
                   "(a libpq URI; default: $FERRY_PG_URI, else a throwaway cluster started for "
                   "the run); the run makes and drops a database of its own")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return {"crash": cmd_crash}


def cmd_crash(args: argparse.Namespace) -> int:
    load_factory(args.target)  # a bad target is a usage error before anything starts
    if args.report_dir:
        check_report_dir(args.report_dir)
    run_seed = args.seed if args.seed is not None else random_seed()
    cfg = CrashConfig(target=args.target, workers=args.workers, rounds=args.rounds,
                      seed=run_seed, report_dir=args.report_dir, kill_rate=args.kill_rate,
                      pg_uri=args.pg_uri)

    def show(t: Tally) -> None:
        if not args.quiet:
            print(f"ferry crash: {t.seconds:.0f}s round {t.rounds}/{cfg.rounds} kills={t.kills} "
                  f"orphans={t.orphans}", file=sys.stderr)

    crash = Crash(cfg, progress=show)
    rep = crash.run()
    for line in summary_lines(rep, args.report_dir):
        print(line)
    print(f"  seed {run_seed}" + ("" if args.seed is not None else
                                  f" (random: --seed {run_seed} runs the same victims again)"))
    if args.report_dir:
        d = write_report(rep, crash.history, args.report_dir)
        print(f"  report: {d}/crash.json  history: {d}/history.jsonl")
        if rep.violations:
            print(f"  replay: ferry-harness replay {d}")
    return ExitCode.VIOLATION if rep.verdict == "fail" else ExitCode.OK
