"""A report's ``ferry.dirty``: uncommitted changes to the code anywhere in the checkout,
never the committed reports (regenerating reports/ one run after another rewrites them)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import ferry_harness.runtime.provenance as provenance_module


def _checkout(tmp_path: Path) -> Path:
    """A git checkout holding a copy of provenance.py where ferry keeps it, a test file and
    a committed report."""
    root = tmp_path / "ferry"
    (root / "harness" / "runtime").mkdir(parents=True)
    shutil.copy(provenance_module.__file__, root / "harness" / "runtime" / "provenance.py")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("x = 1\n")
    (root / "reports").mkdir()
    (root / "reports" / "report.json").write_text("{}\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    return root


def _dirty(root: Path) -> str | None:
    spec = importlib.util.spec_from_file_location("copied_provenance",
                                                  root / "harness" / "runtime" / "provenance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.provenance()["dirty"]


def test_dirty_means_the_code_not_the_reports(tmp_path):
    root = _checkout(tmp_path)
    assert _dirty(root) == "no"
    (root / "reports" / "report.json").write_text('{"regenerated": true}\n')
    assert _dirty(root) == "no"  # a regenerated report is not a code change
    (root / "tests" / "test_x.py").write_text("x = 2\n")  # outside harness/: still the code
    assert _dirty(root) == "yes"
