"""One root exception per package, with distinct names, and every exception class of the
harness in ``harness/errors.py`` (issue 26: ``from ferry_harness import FerryError`` used to
be a class that caught no store refusal)."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

import ferry_core.errors as core
import ferry_harness
from ferry_harness import errors

ROOT = Path(__file__).resolve().parents[1]


def _exception_classes(tree: ast.AST) -> list[str]:
    """Classes whose bases name an exception (``...Error``, ``Exception``, ``...Abort`` …)."""
    known = {name for name, v in vars(errors).items() if isinstance(v, type)
             and issubclass(v, BaseException)}
    return [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
            and any(ast.unparse(b).split(".")[-1] in known | {"Exception", "BaseException",
                                                               "AssertionError", "ValueError"}
                    or ast.unparse(b).endswith("Error") for b in n.bases)]


def test_the_two_roots_have_distinct_names_and_are_unrelated():
    harness_root, core_root = errors.FerryHarnessError, core.FerryError
    assert harness_root.__name__ != core_root.__name__
    assert not issubclass(core_root, harness_root) and not issubclass(harness_root, core_root)
    assert all(issubclass(c, core_root) for c in core.REFUSALS)
    for name in ("UsageError", "TargetError", "ReportDirError", "ExampleDbError",
                 "BenchUsageError", "HarnessError"):
        assert issubclass(getattr(errors, name), harness_root), name


def test_control_flow_signals_stay_outside_the_root():
    """``except FerryHarnessError`` (the CLI's one-line errors, the plugin's target errors)
    must never catch a signal: a found violation, a stopped scenario, a failed gate."""
    for name in ("ViolationFound", "ScheduleAbort", "ScenarioStop", "SetupFailed",
                 "FerryViolation"):
        assert not issubclass(getattr(errors, name), errors.FerryHarnessError), name
    assert issubclass(errors.ViolationFound, AssertionError)  # fails the Hypothesis test


def test_every_exception_class_of_the_harness_is_in_errors_py():
    outside = [f"{p.relative_to(ROOT)}: {name}"
               for pkg in ("harness", "scenarios") for p in sorted((ROOT / pkg).rglob("*.py"))
               if p.relative_to(ROOT).as_posix() != "harness/errors.py"
               for name in _exception_classes(ast.parse(p.read_text()))]
    assert outside == []


def test_the_scan_sees_an_exception_class():
    src = "class A(Exception): pass\nclass B(errors.UsageError): pass\nclass C: pass\n"
    assert _exception_classes(ast.parse(src)) == ["A", "B"]


def test_the_old_name_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match="FerryHarnessError"):
        assert errors.FerryError is errors.FerryHarnessError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "FerryError" not in ferry_harness.__all__
        assert ferry_harness.FerryHarnessError is errors.FerryHarnessError
    with pytest.warns(DeprecationWarning):
        assert ferry_harness.FerryError is errors.FerryHarnessError
