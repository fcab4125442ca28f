"""The shipped project must stand on its own: no reference to documents outside the repository.

A clone has no ``../shared`` directory, so a pointer to its specification or its source
articles is a dead link for every user; the store protocol lives in ``PROTOCOL.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("README.md", "PROTOCOL.md", "pyproject.toml", "harness", "scenarios", "ferry_core")
SUFFIXES = {".py", ".md", ".toml", ".txt", ".html", ".json", ".cfg", ".ini", ".yaml", ".yml"}
# a path into the outside tree, the outside spec by name, or a section of it ("SPEC §4")
OUTSIDE = re.compile(r"\.\./shared|/work/shared|shared/seeds|SPEC\.md|SPEC §")


def shipped_files() -> list[Path]:
    """Every text file a user gets with the project (sources, docs, packaging)."""
    out: list[Path] = []
    for name in SHIPPED:
        path = ROOT / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                          and "__pycache__" not in p.parts)
    return out


def outside_refs(files: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line: text`` for every line that points outside the repository."""
    hits = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for no, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(root)}:{no}: {line.strip()[:120]}")
    return hits


def test_the_pattern_finds_each_kind_of_reference(tmp_path: Path) -> None:
    samples = ["see ../shared/SPEC.md", "articles in shared/seeds/", "SPEC §5 order",
               "the contract (SPEC.md)", "/work/shared/hooks"]
    f = tmp_path / "sample.py"
    f.write_text("\n".join(samples + ["PROTOCOL.md#single-winner is fine"]), encoding="utf-8")
    hits = outside_refs([f], root=tmp_path)
    assert [h.split(":")[1] for h in hits] == ["1", "2", "3", "4", "5"]
    assert hits[0] == "sample.py:1: see ../shared/SPEC.md"


def test_shipped_files_are_found() -> None:
    files = {str(p.relative_to(ROOT)) for p in shipped_files()}
    assert {"README.md", "PROTOCOL.md", "pyproject.toml", "harness/cli/main.py",
            "scenarios/base.py", "ferry_core/store.py"} <= files


def test_no_reference_outside_the_repository() -> None:
    hits = outside_refs(shipped_files())
    assert not hits, (
        f"{len(hits)} reference(s) to documents outside the repository; point into "
        "PROTOCOL.md instead:\n" + "\n".join(hits))
