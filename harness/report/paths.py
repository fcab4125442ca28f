"""Where reports go: a report directory is checked before a run starts, not after it, and
every run that judges a history writes the same four files into it."""

from __future__ import annotations

import json
from pathlib import Path

from harness.check.history import History
from harness.errors import ReportDirError
from harness.report.markdown import render_markdown
from harness.report.schema import Report, report_to_json
from harness.report.timeline import render_timeline

__all__ = ["check_report_dir", "write_report_dir"]

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


def write_report_dir(directory: Path, report: Report, history: History) -> Path:
    """``report.json``, ``history.jsonl``, ``report.md`` and (for a history a browser can
    hold, :data:`TIMELINE_MAX_OPS`) ``timeline.html`` in ``directory``; fuzz, scenarios and
    ``ferry-harness check`` all write through here."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(
        json.dumps(report_to_json(report), indent=2, default=str) + "\n")
    (directory / "history.jsonl").write_text(history.to_jsonl(), encoding="utf-8")
    (directory / "report.md").write_text(render_markdown(report))
    if len(history) <= TIMELINE_MAX_OPS:
        (directory / "timeline.html").write_text(render_timeline(list(history), report=report))
    return directory
