"""The package's shape is a tested contract: dependencies point one way.

Layers, lowest first (README "How the harness works"): ``ferry_harness.errors`` → ``check`` (pure)
→ ``runtime`` and ``adapters`` → ``report`` → ``run`` → ``scenarios`` → ``tools`` → ``cli``.
A module may import its own layer or a lower one — at module level or inside a function
alike — never a higher one, and the module graph has no cycle. No module imports another
module's private (``_``-prefixed) name, and every function-level import of a ferry module
says why on its line or the line above.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: directory -> the name it is installed (and imported) under (pyproject.toml's package-dir)
PACKAGES = {"harness": "ferry_harness", "scenarios": "ferry_scenarios"}

#: rank of each layer; a module may import a module of rank <= its own
LAYERS: dict[str, int] = {
    "ferry_harness": 0, "ferry_harness.errors": 0,
    "ferry_harness.check": 1,
    "ferry_harness.runtime": 2, "ferry_harness.adapters": 2,
    "ferry_harness.report": 3,
    "ferry_harness.run": 4,
    "ferry_scenarios": 5,
    "ferry_harness.tools": 6,
    "ferry_harness.cli": 7, "ferry_harness.__main__": 7,
}


@dataclass(frozen=True, kw_only=True)
class Edge:
    """One import of a ferry module by another."""

    source: str  #: importing module, dotted
    target: str  #: imported module, dotted
    names: tuple[str, ...]  #: names taken with ``from target import …`` (empty for ``import``)
    line: int  #: 1-based line of the import statement
    lazy: bool  #: inside a function (runs on call, not on import)
    commented: bool  #: a ``#`` comment on the import's line(s) or the line above


def _modules(root: Path = ROOT) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pkg, name in PACKAGES.items():
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            parts[0] = name
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _says_why(lines: list[str], node: ast.stmt) -> bool:
    """A ``#`` on the import's own lines, or on the comment line heading its block of
    consecutive imports (one reason may cover several imports)."""
    if any("#" in ln for ln in lines[node.lineno - 1: node.end_lineno]):
        return True
    i = node.lineno - 2
    while i >= 0 and lines[i].strip().startswith(("from ", "import ", ")", "#")):
        if "#" in lines[i]:
            return True
        i -= 1
    return False


def _edges(root: Path = ROOT) -> list[Edge]:
    mods = _modules(root)
    edges: list[Edge] = []
    for name, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        lazy_nodes = {id(n) for f in ast.walk(tree)
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                      for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        typing_only = {id(n) for f in ast.walk(tree)
                       if isinstance(f, ast.If) and "TYPE_CHECKING" in ast.unparse(f.test)
                       for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in typing_only:
                continue  # `if TYPE_CHECKING:` imports are for annotations: no runtime edge
            commented = _says_why(lines, node)
            if isinstance(node, ast.Import):
                targets: list[tuple[str, tuple[str, ...]]] = [(a.name, ()) for a in node.names]
            else:
                base = _resolve(name, path.name == "__init__.py", node)
                targets = []
                for a in node.names:  # `from pkg import module` imports the module itself
                    sub = f"{base}.{a.name}"
                    targets.append((sub, ()) if sub in mods else (base, (a.name,)))
            for target, names in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.append(Edge(source=name, target=target, names=names, line=node.lineno,
                                      lazy=id(node) in lazy_nodes, commented=commented))
    return edges


def _layer(module: str) -> str:
    best = ""
    for layer in LAYERS:
        below = module.startswith(layer + ".") and layer != "ferry_harness"  # the root holds no layer
        if (module == layer or below) and len(layer) > len(best):
            best = layer
    return best


def _unlayered(root: Path = ROOT) -> list[str]:
    return sorted(m for m in _modules(root) if not _layer(m))


def _upward(edges: list[Edge]) -> list[str]:
    return [f"{e.source}:{e.line} imports {e.target} "
            f"({_layer(e.source)} may not depend on {_layer(e.target)})"
            for e in edges
            if e.target != "ferry_harness" and _layer(e.source) and _layer(e.target)
            and LAYERS[_layer(e.target)] > LAYERS[_layer(e.source)]]


def _cycle(edges: list[Edge]) -> list[str]:
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.target != "ferry_harness":  # the package root only re-exports, lazily
            graph.setdefault(e.source, set()).add(e.target)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def _private_names(edges: list[Edge]) -> list[str]:
    return [f"{e.source}:{e.line} imports {n} from {e.target}"
            for e in edges for n in e.names if n.startswith("_") and not n.startswith("__")]


def _private_attributes(root: Path = ROOT) -> list[str]:
    """``module._name`` on an imported ferry module is the same leak as importing it."""
    found = []
    mods = _modules(root)
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    if f"{node.module}.{a.name}" in mods:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return found


def _silent_lazy(edges: list[Edge]) -> list[str]:
    return sorted({f"{e.source}:{e.line} imports {e.target} inside a function without a reason"
                   for e in edges if e.lazy and not e.commented})


EDGES = _edges()


def test_every_module_has_a_layer() -> None:
    assert not _unlayered(), f"modules outside every layer (add them to LAYERS): {_unlayered()}"


def test_no_upward_import() -> None:
    assert not _upward(EDGES), "\n".join(_upward(EDGES))


def test_no_import_cycle() -> None:
    assert not _cycle(EDGES), "import cycle: " + " -> ".join(_cycle(EDGES))


def test_no_private_name_crosses_modules() -> None:
    found = _private_names(EDGES) + _private_attributes()
    assert not found, "\n".join(found)


def test_every_lazy_import_says_why() -> None:
    assert not _silent_lazy(EDGES), "\n".join(_silent_lazy(EDGES))


def test_each_rule_fires_on_a_tree_that_breaks_it(tmp_path: Path) -> None:
    """A small package that breaks every rule once: each detector must name the break."""
    files = {
        "harness/__init__.py": "",
        "harness/check/__init__.py": "",
        "harness/check/model.py": "def f():\n    from ferry_harness.cli.main import go\n",
        "harness/cli/__init__.py": "",
        "harness/cli/main.py": ("from ferry_harness.check.model import _hidden\n"
                                "from ferry_harness.check import model as m\n"
                                "x = m._secret\n"),
        "harness/stray.py": "",
        "scenarios/__init__.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    edges = _edges(tmp_path)
    assert _unlayered(tmp_path) == ["ferry_harness.stray"]
    assert _upward(edges) == ["ferry_harness.check.model:2 imports ferry_harness.cli.main "
                              "(ferry_harness.check may not depend on ferry_harness.cli)"]
    assert _cycle(edges)[0] == _cycle(edges)[-1]
    assert set(_cycle(edges)) == {"ferry_harness.check.model", "ferry_harness.cli.main"}
    assert _private_names(edges) == ["ferry_harness.cli.main:1 imports _hidden from ferry_harness.check.model"]
    assert _private_attributes(tmp_path) == ["ferry_harness.cli.main:3 uses ferry_harness.check.model._secret"]
    assert _silent_lazy(edges) == ["ferry_harness.check.model:2 imports ferry_harness.cli.main inside a "
                                   "function without a reason"]


#: standard modules that reach outside the process (files, processes, sockets, SQLite)
IO_MODULES = frozenset({"os", "sys", "io", "pathlib", "shutil", "tempfile", "subprocess",
                        "signal", "socket", "sqlite3", "threading", "multiprocessing",
                        "multiprocess", "select", "ctypes", "time"})


def _impure(root: Path = ROOT) -> list[str]:
    """What in ``ferry_harness.check`` touches the world: an I/O module, ``open()``, ferry_core."""
    found = []
    for name, path in _modules(root).items():
        if _layer(name) != "ferry_harness.check":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                    else [])
            for m in mods:
                if m.split(".")[0] in IO_MODULES | {"ferry_core"}:
                    found.append(f"{name}:{node.lineno} imports {m}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                found.append(f"{name}:{node.lineno} calls open()")
    return found


def test_the_check_layer_is_pure() -> None:
    """Judging a history needs no file, process or clock: the same checker runs in fuzz,
    scenarios, crash and on a recorded history."""
    assert not _impure(), "\n".join(_impure())


def test_purity_fires_on_io(tmp_path: Path) -> None:
    (tmp_path / "harness" / "check").mkdir(parents=True)
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "harness" / "__init__.py").write_text("")
    (tmp_path / "harness" / "check" / "__init__.py").write_text("")
    (tmp_path / "harness" / "check" / "m.py").write_text(
        "import os\nfrom ferry_core import errors\n\ndef f():\n    return open('x')\n")
    assert _impure(tmp_path) == ["ferry_harness.check.m:1 imports os",
                                 "ferry_harness.check.m:2 imports ferry_core",
                                 "ferry_harness.check.m:5 calls open()"]
