"""Regenerate every committed report under ``reports/`` with one command.

    python -m tests.reports                   # all of it (about 1 h on 2 CPUs)
    python -m tests.reports --only adapters   # the seven PyPI queues (9 runs, about 10 min)
    python -m tests.reports --only matrix     # python -m tests.matrix (about 40 min)
    python -m tests.reports --only bench      # baseline, goal and compare runs (about 12 min)
    python -m tests.reports --list            # print every command, run nothing

:data:`REPORTS` is the list: each committed report directory with the command that writes
it. Every report records the ferry version and commit that wrote it (``report.json``'s
``ferry``, ``bench.json``'s ``machine.ferry``, each matrix table's ``ferry``), and
``tests/test_committed_reports.py`` checks that each committed report is one of these and
was made with these arguments. Written by hand from these runs, not regenerated:
``reports/findings.md`` (from ``reports/adapters``) and ``reports/bench/notes.md`` (from
``reports/bench``); ``tests/test_readme_figures.py`` checks the figures they and the README
quote against the JSON.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADAPTER_BUDGET_S = 60.0  # seconds per adapter run (seed 0: the findings.md runs)

# report directory under reports/adapters -> fuzz target
ADAPTERS: dict[str, str] = {
    "persist_queue": "ferry_harness.adapters.persist_queue:make_store",
    "litequeue": "ferry_harness.adapters.litequeue:make_store",
    "localqueue": "ferry_harness.adapters.localqueue:make_store",
    "huey": "ferry_harness.adapters.huey:make_store",
    "huey/first_result": "ferry_harness.adapters.huey:make_first_result_store",
    "huey/expiring": "ferry_harness.adapters.huey:make_expiring_store",
    "simplebroker": "ferry_harness.adapters.simplebroker:make_store",
    # PostgreSQL queues (a throwaway cluster per run)
    "procrastinate": "ferry_harness.adapters.procrastinate:make_store",
    "pgqueuer": "ferry_harness.adapters.pgqueuer:make_store",
}

PEERS = ("ferry_core:LeaseStore,ferry_harness.adapters.litequeue:make_store,"
         "ferry_harness.adapters.localqueue:make_store,ferry_harness.adapters.persist_queue:make_store")


@dataclass(frozen=True)
class Regenerated:
    """One committed report directory and the command (after ``python``) that writes it."""

    group: str  # adapters, matrix or bench (--only)
    report_dir: str  # relative to the repository root
    argv: tuple[str, ...]  # the arguments after ``python``


def _fuzz(name: str, target: str, budget: float) -> Regenerated:
    d = f"reports/adapters/{name}"
    return Regenerated("adapters", d, ("-m", "ferry_harness", "fuzz", "--target", target, "--budget",
                                       f"{budget:g}", "--seed", "0", "--example-db", "none",
                                       "--quiet", "--report-dir", d))


def _bench(d: str, *args: str) -> Regenerated:
    return Regenerated("bench", d, ("-m", "ferry_harness", "bench", *args, "--report-dir", d))


def reports(adapter_budget: float = ADAPTER_BUDGET_S) -> list[Regenerated]:
    """Every committed report, with its command."""
    return [
        *(_fuzz(name, target, adapter_budget) for name, target in ADAPTERS.items()),
        Regenerated("matrix", "reports/matrix", ("-m", "tests.matrix", "--out", "reports/matrix")),
        # the baseline matrix of reports/bench/report.md (about 2 min of runs)
        _bench("reports/bench", "--workers", "1,2,4,8,16", "--strategy", "cas,immediate",
               "--busy-policy", "hybrid,jitter,stock", "--tasks", "20000"),
        # the goal at 8 workers, three repetitions interleaved (reports/bench/goal/report.md)
        _bench("reports/bench/goal", "--workers", "8", "--strategy", "cas,immediate",
               "--busy-policy", "hybrid,stock", "--tasks", "20000", "--repeat", "3"),
        # stores compared in one run (reports/bench/compare/report.md)
        _bench("reports/bench/compare", "--target", PEERS, "--workers", "1,8,16", "--strategy",
               "cas", "--busy-policy", "spin", "--tasks", "5000", "--repeat", "3"),
        # contention: the same-SQL ceiling beside ferry_core (reports/bench/contention/report.md)
        _bench("reports/bench/contention", "--workers", "1,2,8,16", "--strategy", "cas",
               "--busy-policy", "spin,hybrid", "--tasks", "10000", "--repeat", "3"),
        # ferry_core on SQLite against ferry_core on PostgreSQL (reports/bench/postgres)
        _bench("reports/bench/postgres", "--target", "ferry_core:LeaseStore,ferry_core:PgLeaseStore",
               "--workers", "1,8,16", "--strategy", "cas", "--busy-policy", "hybrid",
               "--tasks", "5000", "--repeat", "3"),
    ]


REPORTS: list[Regenerated] = reports()


def _run(args: list[str]) -> int:
    print("$", " ".join(args), flush=True)
    return subprocess.run(args, cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reports", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("adapters", "matrix", "bench"), default=None)
    parser.add_argument("--budget", type=float, default=ADAPTER_BUDGET_S,
                        help="seconds per adapter run (the committed ones: 60)")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    failed = []
    for rep in reports(args.budget):
        if args.only not in (None, rep.group):
            continue
        if args.list:
            print("python", " ".join(rep.argv))
            continue
        # a verdict either way (1: a violation, or a store that lost a task in the bench)
        if _run([sys.executable, *rep.argv]) not in (0, 1):
            failed.append(rep.report_dir)
    if failed:
        print(f"could not regenerate: {', '.join(failed)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
