"""Every error the harness raises on purpose, and the exit codes of ``ferry-harness``.

One home for both, so a caller can tell a usage mistake (fix the command line) from a
harness failure (the store or the machine would not let ferry go on) from a finding (a
violation is data in the report, never an exception). Lowest layer: imports nothing of
ferry.

>>> from ferry_harness.errors import ExitCode, TargetError, UsageError
>>> int(ExitCode.VIOLATION)
1
>>> issubclass(TargetError, UsageError)
True
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExampleDbError", "ExitCode", "FerryError", "HarnessError", "ReportDirError",
           "TargetError", "UsageError"]


class ExitCode(IntEnum):
    """What ``ferry-harness`` (and ``python -m ferry_harness``) exits with; CI gates read it."""

    OK = 0  #: no violation (every scenario passed or was skipped)
    VIOLATION = 1  #: at least one invariant was broken; the report says which
    ERROR = 2  #: usage or harness error: one line on stderr, no traceback
    UNKNOWN = 3  #: nothing was decided (no example completed, the search gave up, a
    #: scenario could not run) — never a pass
    INTERRUPTED = 130  #: Ctrl-C or SIGTERM; the report covers what ran


EXIT_CODES_HELP = ("Exit codes: 0 no violation, 1 violation found, 2 usage or harness error, "
                   "3 unknown (nothing was decided: no example ran, or the checker's search "
                   "gave up), 130 interrupted (report written).")


class FerryError(Exception):
    """Base of every error ferry raises on purpose (never a store's own exception)."""


class UsageError(FerryError):
    """The command line or its inputs are wrong; exit code 2, message on one line."""


class TargetError(UsageError):
    """The target path or factory is unusable (``--target module:factory``)."""


class ReportDirError(UsageError):
    """The report directory cannot be created or written."""


class ExampleDbError(UsageError, ValueError):
    """The example database location (``--example-db``) is malformed or unreachable."""


class HarnessError(FerryError):
    """The harness itself cannot go on (a factory raises, workers cannot start)."""


class PgServerError(HarnessError):
    """A throwaway PostgreSQL cluster cannot be found, created or started."""
