"""Facts an op carries for the checker are typed (:mod:`ferry_harness.check.annotations`): one
frozen dataclass each, put on ops with ``annotations.mark`` and read with ``fact``.

The source scan fails on any other write into ``Op.extra`` — a subscript assignment,
``extra.update``/``setdefault``, or an ``extra={...}`` argument — except the writes listed
in ``NOT_YET_TYPED`` (the WAL samples and a few markers of other modules, each named; a
new one must be a fact, or be added here on purpose)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ferry_harness.check import annotations as a
from ferry_harness.check.history import History, Op

ROOT = Path(__file__).resolve().parents[1]

# module -> the extra keys it still writes by name (debt, not a pattern to copy)
NOT_YET_TYPED: dict[str, set[str]] = {
    # the WAL samples (idle calls, reads, checkpoints, every step's size)
    "harness/run/executor.py": {"wal_after_step", "wal_before", "wal_after", "wal_mark_before",
                                "wal_mark_after", "idle", "reader", "reader_hold_s"},
    "harness/tools/crash.py": {"wal_after"},
    "scenarios/base.py": {"wal_before", "wal_after", "idle"},
    "scenarios/checkpoint_starvation.py": {"reader", "wal_after"},
    # the pool's notes on a call it cut short, a dead worker, the statements it ran
    "harness/runtime/client.py": {"CUT_SHORT", "hung_s", "died", "sql"},
    # the checker's own notes on an op (arguments it rejects, concurrent writers' clock)
    "harness/check/checker.py": {"invalid_args"},
    "harness/check/runstate.py": {"invalid_args"},
    "harness/check/invariants/linearizable.py": {"WRITERS_NOW_MAX"},
}


def _key(node: ast.expr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ast.unparse(node)


def _is_extra(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "extra"


def extra_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of every write into an ``.extra`` mapping that bypasses the codec."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            if isinstance(t, ast.Subscript) and _is_extra(t.value):
                found.append((t.lineno, _key(t.slice)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if _is_extra(node.func.value) and node.func.attr in ("update", "setdefault"):
                found += [(node.lineno, kw.arg or "**") for kw in node.keywords]
                for arg in node.args[:1]:
                    if isinstance(arg, ast.Dict):
                        found += [(node.lineno, _key(k)) for k in arg.keys if k is not None]
                    elif node.func.attr == "setdefault":
                        found.append((node.lineno, _key(arg)))
                    else:
                        found.append((node.lineno, ast.unparse(arg)))
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
                    found += [(node.lineno, _key(k)) for k in kw.value.keys if k is not None]
    return found


def _untyped() -> list[str]:
    out = []
    for pkg in ("harness", "scenarios"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "harness/check/annotations.py":
                continue
            allowed = NOT_YET_TYPED.get(rel, set())
            for line, key in extra_writes(ast.parse(path.read_text())):
                if key not in allowed:
                    out.append(f"{rel}:{line} writes Op.extra[{key!r}] (use annotations.mark)")
    return out


def test_no_untyped_key_is_put_into_op_extra() -> None:
    assert _untyped() == [], "\n".join(_untyped())


def test_the_debt_list_is_exact() -> None:
    """A key typed since (or a file gone) leaves the list: it only ever shrinks."""
    for rel, keys in NOT_YET_TYPED.items():
        written = {k for _, k in extra_writes(ast.parse((ROOT / rel).read_text()))}
        assert keys <= written, f"{rel} no longer writes {sorted(keys - written)}"


def test_the_scan_sees_every_kind_of_write() -> None:
    src = ("o.extra['probe'] = 1\no.extra.update(zombie=2)\no.extra.update({'killed': 3})\n"
           "o.extra.setdefault('rescue', 4)\nOp(extra={'integrity': 'ok'})\n"
           "mark(o, Probe())\n")
    assert [k for _, k in extra_writes(ast.parse(src))] == [
        "probe", "zombie", "killed", "rescue", "integrity"]


def _op(**extra: object) -> Op:
    return Op(index=0, process=1, agent="a", op="claim", args={"task_id": "t"}, invoke_ns=0,
              now=0, extra=dict(extra))


@pytest.mark.parametrize("f", [
    a.Probe(task="t", expires=5, attempts_left=True, cause="killed", holder_op=3, by="claim",
            at="expires"),
    a.ProbeOther(task="t", expires=5, attempts_left=False, cause="paused", holder_op=3,
                 by="poll_next", at="expires-1"),
    a.Zombie(task="t", expires=None, rescued_by=4, landed="mid-op"),
    a.Killed(delay_us=12, in_write_tx=True),
    a.Rescue(task="t", expires=9, race=1, at=9, last=True),
    a.Rescue(task="t", cause="killed", holder_op=2),
    a.KilledHolder(granted_at=1, exec_ttl_ms=1000),
    a.CampaignRound(number=7), a.FinalRead(), a.Integrity(text="ok"),
])
def test_every_fact_survives_the_history_file(f) -> None:
    op = a.mark(_op(), f)
    back = History.from_jsonl(History([op]).to_jsonl()).ops[0]
    assert a.fact(back, type(f)) == f
    assert set(json.loads(History([op]).to_jsonl())["extra"]) == {type(f).KEY}


def test_old_histories_load_one_rescue_shape() -> None:
    """Before the types, fuzz wrote a rescue as {task, cause, lease, holder_op} and crash
    as {task, expires, race, at, last}: both read back as one ``Rescue``."""
    fuzz = _op(rescue={"task": "t", "cause": "killed", "lease": None, "holder_op": 2})
    crash = _op(rescue={"task": "t", "expires": 9, "race": 0, "at": 8, "last": False})
    assert a.fact(fuzz, a.Rescue) == a.Rescue(task="t", cause="killed", holder_op=2)
    assert a.fact(crash, a.Rescue) == a.Rescue(task="t", expires=9, at=8)
    assert a.fact(_op(rescue="garbage"), a.Rescue) is None
    assert a.fact(_op(), a.Rescue) is None
