"""What gets installed under which name: the repository keeps ``harness/`` and ``scenarios/``,
installed they are ``ferry_harness`` and ``ferry_scenarios`` (a user's own ``harness/`` or
``scenarios/`` package must never meet ours), and nothing in the tree imports the old names."""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _tree_packages() -> list[str]:
    """Every directory with an ``__init__.py`` below the mapped roots, by installed name."""
    mapping = {"ferry_core": "ferry_core", **SETUPTOOLS["package-dir"]}
    found = []
    for name, directory in mapping.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / directory).parts
            found.append(".".join((name, *rel)))
    return sorted(found)


def test_the_installed_package_list_is_the_tree() -> None:
    assert sorted(SETUPTOOLS["packages"]) == _tree_packages()


def test_installed_names_cannot_collide_with_a_users_package() -> None:
    assert PYPROJECT["project"]["name"] == "ferry-harness"
    assert SETUPTOOLS["package-dir"] == {"ferry_harness": "harness",
                                         "ferry_scenarios": "scenarios"}
    assert PYPROJECT["project"]["entry-points"]["pytest11"]["ferry"].startswith("ferry_harness.")


def test_nothing_imports_the_directory_names() -> None:
    """``import harness`` would load a second copy of every module (or a user's package)."""
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        if any(part in (".venv", ".git", "build") for part in path.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                    if n.split(".")[0] in ("harness", "scenarios")]
    assert not bad, bad
