"""Regenerate every committed report under ``reports/`` with one command.

    python -m tests.reports                 # adapters, matrix and bench (about 1 h 15 min)
    python -m tests.reports --only adapters # the five PyPI queues (about 8 min)

Every report records the ferry version and commit that wrote it (``report.json``'s
``ferry`` key), so a committed report can always be traced to the code that made it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# report directory under reports/adapters -> fuzz target (60 s, seed 0: the findings.md runs)
ADAPTERS: dict[str, str] = {
    "persist_queue": "harness.adapters.persist_queue:make_store",
    "litequeue": "harness.adapters.litequeue:make_store",
    "localqueue": "harness.adapters.localqueue:make_store",
    "huey": "harness.adapters.huey:make_store",
    "huey/first_result": "harness.adapters.huey:make_first_result_store",
    "huey/expiring": "harness.adapters.huey:make_expiring_store",
    "simplebroker": "harness.adapters.simplebroker:make_store",
}

BENCH = ["bench", "--target", "ferry_core:LeaseStore,harness.adapters.litequeue:make_store,"
         "harness.adapters.localqueue:make_store,harness.adapters.persist_queue:make_store",
         "--workers", "1,8,16", "--strategy", "cas", "--busy-policy", "hybrid", "--tasks", "5000",
         "--repeat", "3", "--report-dir", "reports/bench/compare"]


def _run(args: list[str]) -> int:
    print("$", " ".join(args), flush=True)
    return subprocess.run(args, cwd=ROOT).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reports", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("adapters", "matrix", "bench"), default=None)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per adapter run")
    args = parser.parse_args(argv)
    py = sys.executable
    failed = []
    if args.only in (None, "adapters"):
        for name, target in ADAPTERS.items():
            code = _run([py, "-m", "harness", "fuzz", "--target", target, "--budget",
                         str(args.budget), "--seed", "0", "--example-db", "none", "--quiet",
                         "--report-dir", f"reports/adapters/{name}"])
            if code not in (0, 1):  # a verdict either way; anything else is a problem
                failed.append(name)
    if args.only in (None, "matrix"):
        if _run([py, "-m", "tests.matrix", "--out", "reports/matrix"]) not in (0, 1):
            failed.append("matrix")
    if args.only in (None, "bench"):
        if _run([py, "-m", "harness", *BENCH]) not in (0, 1):
            failed.append("bench")
    if failed:
        print(f"could not regenerate: {', '.join(failed)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
