"""``ferry-harness check HISTORY.jsonl``: judge a recorded history offline.

The history may come from a fuzz or crash report directory (``history.jsonl``) or from a
user's own integration test (:mod:`ferry_harness.tools.recorder`). It is checked with the same
invariants as ``fuzz`` (:func:`ferry_harness.check.checker.judge_history`), and with
``--report-dir`` a report is written in the format of ``fuzz`` (report.json, report.md,
history.jsonl, timeline.html), as Knossos and Elle do for Jepsen histories.

Exit codes: 0 no violation, 1 violation found, 2 usage or harness error, 3 undecided (the
search budget ran out on some object and nothing else was found).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ferry_harness.check.checker import full_capabilities, invariant_status, judge_history, refusals
from ferry_harness.check.history import History
from ferry_harness.check.sizes import WAL_BOUND_BYTES
from ferry_harness.cli.args import Handlers, size
from ferry_harness.errors import ExitCode
from ferry_harness.report.paths import write_report_dir
from ferry_harness.report.schema import (
    CheckStats,
    Provenance,
    Report,
    violation_entry,
)
from ferry_harness.runtime.provenance import provenance


def _capabilities_for(path: Path, option: str | None) -> tuple[set[str], str]:
    """``--target-caps``, else the capabilities the report next to the history recorded."""
    if option:
        caps = {c.strip() for c in option.split(",") if c.strip()}
        if "full" in caps:
            caps = (caps - {"full"}) | set(full_capabilities())
        return caps, "--target-caps"
    report = path.parent / "report.json"
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("capabilities"), list):
        return set(data["capabilities"]), str(report)
    return set(full_capabilities()), "default (a full protocol store)"


def build_report(history: History, path: Path, caps: set[str], caps_from: str,
                 violations: list[Any], unknown: list[str], seconds: float) -> Report:
    """The report as ``fuzz`` writes it, for an offline check."""
    entries = [violation_entry(v, history) for v in violations]
    ops = len(history.ops)
    return Report(
        kind="check", verdict="fail" if violations else ("unknown" if unknown else "pass"),
        ferry=Provenance(**provenance()), target=f"recorded history {path}", mode="check",
        capabilities=tuple(sorted(caps)), capabilities_from=caps_from,
        invariants=invariant_status(caps), violations=tuple(entries),
        stats=CheckStats(ops=ops, seconds=round(seconds, 3),
                         ops_per_s=round(ops / seconds, 1) if seconds else None,
                         refusals=refusals(history)),
        unknown=tuple(unknown), findings=(), replay=f"ferry-harness check {path}")


def register(sub: Any) -> Handlers:
    p = sub.add_parser(
        "check", help="check a recorded history (history.jsonl) offline",
        description="Check a recorded history — a fuzz or crash report's history.jsonl, or "
        "one written by ferry_harness.tools.recorder from your own integration test — against every "
        "invariant (PROTOCOL.md#invariants), as fuzz does after each step.",
        epilog="Exit codes: 0 no violation, 1 violation found, 2 usage or harness error, "
        "3 undecided (search budget exhausted).")
    p.add_argument("history", metavar="HISTORY.jsonl", help="the history to check")
    p.add_argument("--target-caps", default=None, metavar="CAPS",
                   help="comma-separated capabilities of the target that produced it "
                   "(operations, features such as lease,queue-ttl,results,limits,"
                   "typed-refusals,dag, declared choices such as holder-binding, "
                   "refusal-order, lease-closed; 'full' for a full protocol store). Default: "
                   "the capabilities in the report.json next to the history, else 'full'")
    p.add_argument("--report-dir", default=None, metavar="DIR",
                   help="write report.json, report.md, history.jsonl and timeline.html here")
    p.add_argument("--search-budget", type=int, default=200_000, metavar="N",
                   help="states the linearizability search may explore per object chunk "
                   "(default 200000)")
    p.add_argument("--wal-bound", type=size, default=WAL_BOUND_BYTES, metavar="SIZE",
                   help="the -wal size bound, e.g. 64MiB, 8MiB, 500000 (bytes; default 64MiB)")
    return {"check": cmd_check}


def cmd_check(args: argparse.Namespace) -> int:
    path = Path(args.history)
    try:
        history = History.from_jsonl(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError) as exc:
        print(f"ferry: cannot read the history {path}: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    caps, caps_from = _capabilities_for(path, args.target_caps)
    start = time.perf_counter()
    try:
        violations, unknown = judge_history(history, caps, wal_bound_bytes=args.wal_bound,
                                            search_budget=args.search_budget)
    except ValueError as exc:
        print(f"ferry: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    seconds = time.perf_counter() - start
    report = build_report(history, path, caps, caps_from, violations, unknown, seconds)
    if args.report_dir:
        try:
            write_report_dir(Path(args.report_dir), report, history)
        except OSError as exc:
            print(f"ferry: cannot write the report directory {args.report_dir!r}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return ExitCode.ERROR
    verdict = report.verdict.upper()
    print(f"ferry check: {verdict} — {len(history)} operations checked in {seconds:.2f}s "
          f"({path})")
    for v in violations[:10]:
        print(f"  {v}")
    for u in unknown[:5]:
        print(f"  undecided: {u}")
    if args.report_dir:
        print(f"  report: {Path(args.report_dir) / 'report.md'}")
    if violations:
        return ExitCode.VIOLATION
    return ExitCode.UNKNOWN if unknown else ExitCode.OK
