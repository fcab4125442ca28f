"""Where reports go: a report directory is checked before a run starts, not after it."""

from __future__ import annotations

from pathlib import Path

from harness.errors import ReportDirError

__all__ = ["check_report_dir"]


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
