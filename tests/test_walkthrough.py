"""The README's "Write your own target" walkthrough, followed line by line in a fresh
directory outside the clone, and ``ferry-harness new-target`` itself.

``pip install`` is the one line not run (too slow for CI): the current venv's ferry stands
in for it. Every other line runs as written, with ``.venv/bin/`` pointing at this venv and
a small fuzz budget.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ferry_harness.cli.main import main
from ferry_harness.tools.new_target import render

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def walkthrough_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- walkthrough:.*?-->\n```sh\n(.*?)```\n<!-- /walkthrough -->", text,
                      re.S)
    assert block, "README.md lost its walkthrough block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "FERRY_", "HYPOTHESIS"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_readme_walkthrough_from_an_empty_directory(tmp_path):
    assert not str(tmp_path).startswith(str(ROOT))
    lines = walkthrough_lines()
    assert lines[0] == "mkdir myproject && cd myproject"
    assert lines[1].startswith("python3 -m venv .venv && .venv/bin/pip install -e ")
    cwd = tmp_path / "myproject"
    cwd.mkdir()
    outcomes = []
    for line in lines[2:]:
        command, _, comment = line.partition("   # ")
        command = command.replace(".venv/bin/", f"{BIN}/").replace("--ferry-budget 10",
                                                                    "--ferry-budget 3")
        if "pytest" in command:
            command += " -q -p no:cacheprovider -p no:randomly"
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        out = proc.stdout + proc.stderr
        outcomes.append((command, proc.returncode))
        if comment.startswith("green"):
            assert proc.returncode == 0, out
            assert "9 passed, 3 skipped" in out, out
        elif comment.startswith("fails"):
            assert proc.returncode == 1, out
            assert "[single-winner]" in out and "PROTOCOL.md#single-winner" in out, out
            assert re.search(r"FAILED test_mystore_gate\.py::gate::\S+ - \[single-winner\]",
                             out), out
            assert (cwd / "ferry-reports" / "latest" / "fuzz" / "report.json").exists()
        elif comment.startswith("exit 1"):
            assert proc.returncode == 1, out
            assert "reproduced" in out, out
        else:
            assert proc.returncode == 0, out
    assert [c for c, _ in outcomes if "sed -i" in c], "the walkthrough introduces the bug"
    assert (cwd / "mystore.py").read_text() == (cwd / "mystore.py.good").read_text()


def test_the_bug_line_is_in_the_template():
    """The walkthrough's sed deletes exactly one line: the compare-and-swap condition."""
    store = render("mystore")["mystore.py"]
    [bug_line] = [line for line in walkthrough_lines() if line.startswith("sed -i")]
    pattern = re.search(r"'/(.*)/d'", bug_line).group(1)
    hits = [line for line in store.splitlines() if pattern in line]
    assert [h.strip() for h in hits] == [
        "sql += \" AND status = 'SUBMITTED'\"  # the compare-and-swap: only a waiting row is taken"]


def test_new_target_writes_two_files_and_never_overwrites(tmp_path, capsys):
    assert main(["new-target", "inventory_store", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    store, gate = tmp_path / "inventory_store.py", tmp_path / "test_inventory_store_gate.py"
    assert f"wrote {store}" in out and f"wrote {gate}" in out
    assert 'ferry_gate("inventory_store:make_store")' in gate.read_text()
    text = store.read_text()
    assert "class InventoryStore:" in text and "def make_store(path: str, *, clock" in text
    for op in ("dispatch", "poll_next", "claim", "fulfill", "fail", "release", "extend",
               "sweep", "get", "inspect", "checkpoint", "salvage", "salvaged",
               "acquire_lock", "release_lock", "lock_holder", "close"):
        assert re.search(rf"def {op}\(.*?PROTOCOL\.md#{op}\b", text, re.S), op
    compile(text, str(store), "exec")
    store.write_text("# mine\n")
    assert main(["new-target", "inventory_store", "--dir", str(tmp_path)]) == 2
    assert "already exist" in capsys.readouterr().err
    assert store.read_text() == "# mine\n"  # untouched


@pytest.mark.parametrize("name", ["my-store", "class", "ferry_harness", "1store"])
def test_new_target_refuses_a_bad_name(tmp_path, capsys, name):
    assert main(["new-target", name, "--dir", str(tmp_path)]) == 2
    assert "cannot be the module name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_new_target_help_documents_it(capsys):
    with pytest.raises(SystemExit):
        main(["new-target", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "test_NAME_gate.py" in out and "never overwritten" in out and "Exit codes" in out
