"""Installing ferry must not break a project that has a ``harness/`` package of its own
(issue 25): the plugin loads in every pytest session, so its import names must be ferry's.

Runs the installed ferry (as a user has it), from a fresh project in a temporary directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OWN_PACKAGE = {
    "harness/__init__.py": '"""The project\'s own test harness (nothing to do with ferry)."""\n',
    "harness/core.py": "def answer():\n    return 42\n",
    "tests/test_own.py": "from harness.core import answer\n\n\n"
                         "def test_answer():\n    assert answer() == 42\n",
    # pythonpath: the project root is importable under either runner, as in a real project
    "pytest.ini": "[pytest]\naddopts = -p no:cacheprovider -p no:randomly\npythonpath = .\n",
}


#: both ways a user starts pytest (``python -m pytest`` also puts the project on sys.path)
RUNNERS = {"pytest": [str(Path(sys.executable).parent / "pytest")],
           "python -m pytest": [sys.executable, "-m", "pytest"]}


def _pytest(cwd, runner: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "FERRY_", "HYPOTHESIS", "PYTHONPATH"))}
    return subprocess.run([*RUNNERS[runner], "-q", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_project_with_its_own_harness_package_keeps_its_suite(tmp_path):
    for name, text in OWN_PACKAGE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for runner in RUNNERS:
        own = _pytest(tmp_path, runner)
        assert own.returncode == 0 and "1 passed" in own.stdout, (runner, own.stdout + own.stderr)
    gate = _pytest(tmp_path, "pytest", "--ferry-target", "ferry_core:LeaseStore",
                   "--ferry-no-scenarios", "--ferry-budget", "2")
    assert gate.returncode == 0 and "2 passed" in gate.stdout, gate.stdout + gate.stderr
