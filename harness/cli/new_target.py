"""``ferry-harness new-target``: the command line of :mod:`ferry_harness.tools.new_target`."""

from __future__ import annotations

import argparse
import keyword
import sys
from pathlib import Path
from typing import Any

from ferry_harness.cli.args import Handlers
from ferry_harness.errors import EXIT_CODES_HELP, ExitCode
from ferry_harness.tools.new_target import RESERVED, render


def register(sub: Any) -> Handlers:
    p = sub.add_parser(
        "new-target", help="write a working store skeleton NAME.py and its pytest gate",
        description="Write NAME.py, a small but complete SQLite-WAL leasing store that passes "
        "ferry (every operation documented with its PROTOCOL.md section, a make_store(path, "
        "*, clock) factory, ferry_capabilities saying what it implements), and "
        "test_NAME_gate.py, which makes plain `pytest` run ferry's scenarios and a fuzz "
        "campaign against it. Then: pytest test_NAME_gate.py (green), change the store, run "
        "it again. Existing files are never overwritten.",
        epilog=EXIT_CODES_HELP.replace("1 violation found, ", "") + " (2 here: a bad NAME or a "
        "file that already exists.)")
    p.add_argument("name", metavar="NAME",
                   help="the module name of your store (a Python identifier, e.g. mystore)")
    p.add_argument("--dir", default=".", metavar="DIR",
                   help="where to write the two files (default: the current directory)")
    return {"new-target": cmd_new_target}


def cmd_new_target(args: argparse.Namespace) -> int:
    name = args.name
    if not name.isidentifier() or keyword.iskeyword(name) or name in RESERVED:
        print(f"ferry-harness new-target: {name!r} cannot be the module name of a store: use a "
              "Python identifier that is not a keyword and not one of "
              f"{', '.join(sorted(RESERVED))} (e.g. mystore)", file=sys.stderr)
        return ExitCode.ERROR
    directory = Path(args.dir)
    files = render(name)
    existing = [str(directory / f) for f in files if (directory / f).exists()]
    if existing:
        print(f"ferry-harness new-target: {', '.join(existing)} already exist(s); nothing "
              "written (new-target never overwrites: pick another NAME or --dir)",
              file=sys.stderr)
        return ExitCode.ERROR
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            with open(directory / fname, "x", encoding="utf-8") as fh:
                fh.write(text)
    except OSError as exc:
        print(f"ferry-harness new-target: cannot write in {directory}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return ExitCode.ERROR
    store, gate = (directory / f for f in files)
    print(f"ferry: wrote {store} (a working SQLite-WAL store: start from it)")
    print(f"       wrote {gate} (the gate: ferry's scenarios and a fuzz campaign)")
    cd = "" if directory.resolve() == Path.cwd().resolve() else f"cd {directory} && "
    print(f"next:  {cd}pytest {gate.name}    # green; then change the store and run it again")
    print(f"       or: ferry-harness fuzz --target {name}:make_store")
    return ExitCode.OK
