"""``ferry-harness protocol [ANCHOR]``: the contract a store is checked against, as installed.

A finding says ``see PROTOCOL.md#single-winner``; ``ferry-harness protocol single-winner``
prints that section wherever ferry was installed from (a wheel has no checkout to open).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ferry_harness.cli.args import Handlers
from ferry_harness.errors import ExitCode
from ferry_harness.report.protocol import close_matches, protocol_text, section


def register(sub: Any) -> Handlers:
    p = sub.add_parser(
        "protocol", help="print PROTOCOL.md, or one section of it",
        description="Print the store protocol shipped with this ferry: the whole document, "
        "or the section ANCHOR names (the part after PROTOCOL.md# in a finding, e.g. "
        "single-winner, missing-methods, leases-are-half-open).",
        epilog="Exit codes: 0 printed, 2 no section has that anchor.")
    p.add_argument("anchor", nargs="?", metavar="ANCHOR",
                   help="a section's GitHub anchor; omit it for the whole document")
    return {"protocol": cmd_protocol}


def cmd_protocol(args: argparse.Namespace) -> int:
    if not args.anchor:
        sys.stdout.write(protocol_text())
        return ExitCode.OK
    found = section(args.anchor)
    if found is None:
        near = close_matches(args.anchor)
        hint = f"; did you mean {', '.join(near)}?" if near else \
            " (ferry-harness protocol with no ANCHOR prints the whole document)"
        print(f"ferry-harness protocol: no section {args.anchor!r}{hint}", file=sys.stderr)
        return ExitCode.ERROR
    sys.stdout.write(found.text)
    return ExitCode.OK
