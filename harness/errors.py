"""Every error the harness raises on purpose, and the exit codes of ``ferry-harness``.

One home for both, so a caller can tell a usage mistake (fix the command line) from a
harness failure (the store or the machine would not let ferry go on) from a finding (a
violation is data in the report, never an exception). Lowest layer: imports nothing of
ferry.

The root is :class:`FerryHarnessError` — a different class from ``ferry_core``'s
``FerryError``, the root of a store's typed refusals (PROTOCOL.md#error-classes), so that
``except FerryHarnessError`` never swallows a refusal and ``except FerryError`` never a
harness failure. The control-flow signals at the end are listed here too, but are not
errors: they stay outside the root so no ``except FerryHarnessError`` catches them.

>>> from ferry_harness.errors import ExitCode, TargetError, UsageError
>>> int(ExitCode.VIOLATION)
1
>>> issubclass(TargetError, UsageError)
True
"""

from __future__ import annotations

import warnings
from enum import IntEnum
from typing import Any

__all__ = ["BenchUsageError", "ExampleDbError", "ExitCode", "FerryHarnessError",
           "FerryViolation", "HarnessError", "ReportDirError", "ScenarioStop",
           "ScheduleAbort", "SetupFailed", "TargetError", "UsageError", "ViolationFound"]


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


class FerryHarnessError(Exception):
    """Base of every error the harness raises on purpose (never a store's own exception)."""


class UsageError(FerryHarnessError):
    """The command line or its inputs are wrong; exit code 2, message on one line."""


class TargetError(UsageError):
    """The target path or factory is unusable (``--target module:factory``)."""


class ReportDirError(UsageError):
    """The report directory cannot be created or written."""


class ExampleDbError(UsageError, ValueError):
    """The example database location (``--example-db``) is malformed or unreachable."""


class BenchUsageError(UsageError):
    """Bad bench input: reported as one line with exit code 2."""


class HarnessError(FerryHarnessError):
    """The harness itself cannot go on (a factory raises, workers cannot start)."""


class PgServerError(HarnessError):
    """A throwaway PostgreSQL cluster cannot be found, created or started."""


# ---------------------------------------------------------------- control flow (not errors)
class ViolationFound(AssertionError):
    """An invariant broke during a generated example: fails the Hypothesis test (hence an
    ``AssertionError``); carries the violations (the campaign keeps the execution)."""

    def __init__(self, violations: list[Any]) -> None:
        super().__init__("; ".join(str(v) for v in violations))
        self.violations = violations


class ScheduleAbort(Exception):
    """In a worker: the controller gave up on this scheduled round (stall or timeout)."""


class ScenarioStop(Exception):
    """A violation was found: the scenario ends here (the session holds the violations)."""


class SetupFailed(Exception):
    """A step the scenario needs in order to stage its race was refused (not a race result)."""


class FerryViolation(Exception):
    """A ferry pytest item failed: pytest shows it as the failure. Carries the invariant and
    the report directory (the plugin writes the message, naming the rule's PROTOCOL.md
    section)."""

    def __init__(self, invariant: str, message: str, report: Any = None) -> None:
        where = f" — report: {report}" if report else ""
        super().__init__(f"[{invariant}] {message}{where}")
        self.invariant = invariant
        self.report = report


def __getattr__(name: str) -> Any:
    if name == "FerryError":  # the old name of the root, which ferry_core's refusals share
        warnings.warn("ferry_harness.errors.FerryError is deprecated: it is "
                      "FerryHarnessError (ferry_core.errors.FerryError is the refusals' root)",
                      DeprecationWarning, stacklevel=2)
        return FerryHarnessError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
