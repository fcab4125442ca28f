"""Facts an op carries for the checker are typed (:mod:`ferry_harness.check.annotations`): one
frozen dataclass each, put on ops with ``annotations.mark`` and read with ``fact``.

The source scan fails on any other write into ``Op.extra`` — a subscript assignment,
``extra.update``/``setdefault``, or an ``extra={...}`` argument — and on any other read of
it: outside the codec no module of ``harness/`` or ``scenarios/`` touches ``.extra`` at
all, so no bare-string key crosses a layer."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ferry_harness.check import annotations as a
from ferry_harness.check.history import History, Op

ROOT = Path(__file__).resolve().parents[1]
CODEC = "harness/check/annotations.py"


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


def extra_uses(tree: ast.AST) -> list[int]:
    """Lines of every ``<expr>.extra`` (read or write) and ``extra=`` argument."""
    lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.expr) and _is_extra(n)]
    lines += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
              for kw in n.keywords if kw.arg == "extra"]
    return sorted(lines)


def _sources() -> list[tuple[str, ast.AST]]:
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text()))
            for pkg in ("harness", "scenarios") for p in sorted((ROOT / pkg).rglob("*.py"))
            if p.relative_to(ROOT).as_posix() != CODEC]


def test_no_untyped_key_is_put_into_op_extra() -> None:
    bad = [f"{rel}:{line} writes Op.extra[{key!r}] (use annotations.mark)"
           for rel, tree in _sources() for line, key in extra_writes(tree)]
    assert bad == [], "\n".join(bad)


def test_nothing_but_the_codec_touches_op_extra() -> None:
    """Reads too: ``o.extra.get("idle")`` or ``"hung_s" in o.extra`` is a bare key."""
    bad = [f"{rel}:{line} uses Op.extra (use annotations.fact/has)"
           for rel, tree in _sources() for line in extra_uses(tree)]
    assert bad == [], "\n".join(bad)


def test_the_scan_sees_every_kind_of_read() -> None:
    src = ("x = o.extra.get('idle')\nif 'hung_s' in o.extra: pass\ny = o.extra['died']\n"
           "z = fact(o, Hung)\nOp(extra={})\n")
    assert extra_uses(ast.parse(src)) == [1, 2, 3, 5]


def test_every_key_in_use_is_a_fact() -> None:
    """The keys histories carry are the facts' keys (a FLAT fact: its fields)."""
    assert {"wal_before", "wal_after", "wal_mark_before", "wal_mark_after", "idle", "reader",
            "reader_hold_s", "wal_after_step", "cut_short", "hung_s", "died", "sql",
            "invalid_args", "writers_now_max", "probe", "zombie", "killed", "rescue"} <= a.KEYS


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
    a.WalSample(wal_before=1, wal_after=2, wal_mark_before="a", wal_mark_after="b", idle=True),
    a.WalSample(reader=True, reader_hold_s=0.5, wal_after=0, wal_after_step=9),
    a.CutShort(why="fault"), a.Hung(seconds=3.5), a.Died(exitcode=-9),
    a.Statements(ran=[[0, "BEGIN IMMEDIATE", False], [1, "COMMIT", True]]),
    a.InvalidArgs(why="task_id must be a string"), a.WritersNowMax(now=-1),
])
def test_every_fact_survives_the_history_file(f) -> None:
    op = a.mark(_op(), f)
    back = History.from_jsonl(History([op]).to_jsonl()).ops[0]
    assert a.fact(back, type(f)) == f
    assert a.has(back, type(f))
    keys = set(json.loads(History([op]).to_jsonl())["extra"])
    if getattr(type(f), "FLAT", False):  # its measured fields, each a key as before
        assert keys == {k for k, v in a.encode(f).items() if v is not None}
    else:
        assert keys == {type(f).KEY}


def test_a_wal_sample_reads_the_flat_keys_old_histories_have() -> None:
    """Histories written before the type carry the WAL keys loose in ``extra``."""
    old = _op(wal_before=10, wal_after=20, idle=True, probe={"task": "t"})
    assert a.fact(old, a.WalSample) == a.WalSample(wal_before=10, wal_after=20, idle=True)
    assert a.fact(_op(hung_s=2.0), a.WalSample) is None and not a.has(_op(), a.WalSample)
    marked = a.mark(a.mark(_op(hung_s=2.0), a.WalSample(wal_after=5, reader=False)),
                    a.WalSample(wal_after=7))  # replaces the earlier sample, not the others
    assert marked.extra == {"hung_s": 2.0, "wal_after": 7}


def test_old_histories_load_one_rescue_shape() -> None:
    """Before the types, fuzz wrote a rescue as {task, cause, lease, holder_op} and crash
    as {task, expires, race, at, last}: both read back as one ``Rescue``."""
    fuzz = _op(rescue={"task": "t", "cause": "killed", "lease": None, "holder_op": 2})
    crash = _op(rescue={"task": "t", "expires": 9, "race": 0, "at": 8, "last": False})
    assert a.fact(fuzz, a.Rescue) == a.Rescue(task="t", cause="killed", holder_op=2)
    assert a.fact(crash, a.Rescue) == a.Rescue(task="t", expires=9, at=8)
    assert a.fact(_op(rescue="garbage"), a.Rescue) is None
    assert a.fact(_op(), a.Rescue) is None
