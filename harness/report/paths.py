"""Where reports go: a report directory is checked before a run starts, not after it, and
every run that judges a history writes the same four files into it."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from ferry_harness.check.history import History
from ferry_harness.errors import ReportDirError
from ferry_harness.report.markdown import render_markdown
from ferry_harness.report.schema import Report, report_to_json
from ferry_harness.report.timeline import render_timeline

__all__ = ["LATEST", "check_report_dir", "json_text", "make_run_dir", "point_latest",
           "run_dir_name", "write_report_dir"]

#: the link in a report root that names the newest run directory (Jepsen's ``latest``)
LATEST = "latest"

#: a bigger timeline is too heavy for a browser: its page is left out
TIMELINE_MAX_OPS = 20_000


def check_report_dir(path: str) -> None:
    """Create ``path`` if needed and prove it is writable, so a long run never ends
    unable to write its report. Raises :class:`ReportDirError` (exit code 2).

    >>> check_report_dir("/tmp/ferry-doctest-reports")
    """
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".ferry-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ReportDirError(f"cannot write the report directory {path!r}: {exc.strerror or exc}") from None


def run_dir_name(seed: int, now: float | None = None) -> str:
    """``run-20261201T192500Z-seed42``: one directory per run, sortable by time, naming the
    seed that fixes it again (``--seed``)."""
    return f"run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-seed{seed}"


def point_latest(root: Path, name: str) -> bool:
    """Make ``root/latest`` a relative symlink to ``root/name`` (atomically, so concurrent
    xdist workers agree). False, and nothing changed, if ``latest`` is a real directory (an
    explicit ``--report-dir …/latest`` wrote there) or links cannot be made."""
    link = root / LATEST
    if link.exists() and not link.is_symlink():
        return False
    tmp = root / f".{LATEST}-{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(name, tmp)
        os.replace(tmp, link)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def make_run_dir(root: str | os.PathLike[str], name: str) -> Path:
    """Create (and prove writable) ``root/name`` and point ``root/latest`` at it. Raises
    :class:`ReportDirError` (exit code 2)."""
    d = Path(root) / name
    check_report_dir(str(d))
    point_latest(Path(root), name)
    return d


def _finite(value: Any) -> Any:
    """NaN and infinities (no JSON for them) become null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def json_text(data: Any) -> str:
    """A report as strict JSON (``allow_nan=False``: a non-finite number is written as
    null, never as ``NaN``, which no JSON parser but Python's accepts)."""
    return json.dumps(_finite(data), indent=2, default=str, allow_nan=False) + "\n"


def write_report_dir(directory: Path, report: Report, history: History) -> Path:
    """``report.json``, ``history.jsonl``, ``report.md`` and (for a history a browser can
    hold, :data:`TIMELINE_MAX_OPS`) ``timeline.html`` in ``directory``; fuzz, scenarios and
    ``ferry-harness check`` all write through here."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json_text(report_to_json(report)))
    (directory / "history.jsonl").write_text(history.to_jsonl(), encoding="utf-8")
    (directory / "report.md").write_text(render_markdown(report))
    if len(history) <= TIMELINE_MAX_OPS:
        (directory / "timeline.html").write_text(render_timeline(list(history), report=report))
    return directory
