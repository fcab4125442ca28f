"""Every rule that can file a finding traces to a PROTOCOL.md sentence (harness/check/rules.py).

The test walks ``harness/check/`` with ``ast`` and finds every place an invariant id is
bound to a message: a ``Violation`` or model ``Verdict``, a helper that builds one from
its parameters (``_illegal``, ``_lost``) at each of its call sites, a ``return "id",
message`` pair, and a message taken from a helper function's returns. A site without a
row, a row without a site, an anchor that is no PROTOCOL.md heading and a sentence its
section does not say all fail; the fixtures show each failure on a small package.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from ferry_harness.check import rules
from ferry_harness.check.invariant import INVARIANTS, Violation
from ferry_harness.check.rules import RULES, Rule, anchor_for, rule_for
from tests.harness.check.test_protocol_doc import headings, slug

ROOT = Path(__file__).resolve().parents[3]
CHECK = ROOT / "harness" / "check"
DOC = ROOT / "PROTOCOL.md"
# what builds a finding: class name -> positions of (invariant, message) among its fields
CONSTRUCTORS = {"Violation": (0, 1, "invariant", "message"), "Verdict": (2, 3, "invariant", "why")}
RELAY = ""  # the template of a message the site passes on from elsewhere


@dataclass(frozen=True)
class Site:
    module: str
    line: int
    ids: frozenset[str]  # "*": the id is passed on, too
    template: str  # literal text, "{}" for each placeholder; RELAY when passed on


def _template(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.IfExp):
        a, b = _template(node.body), _template(node.orelse)
        return None if a is None or b is None else f"{a}|{b}"
    return None


def _literal_ids(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in INVARIANTS}


def _assigned(fn: ast.AST | None, name: str) -> list[ast.AST]:
    """Values assigned to ``name`` in ``fn``; a tuple unpacking gives its whole value."""
    out = []
    for a in ast.walk(fn) if fn is not None else ():
        if isinstance(a, ast.Assign):
            for t in a.targets:
                if isinstance(t, ast.Name) and t.id == name:
                    out.append(a.value)
                elif isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name
                                                      for e in t.elts):
                    out.append(ast.Tuple(elts=[], ctx=ast.Load()))  # a producer's pair
    return out


def _args(call: ast.Call, pos: int, kw: str) -> ast.AST | None:
    if len(call.args) > pos:
        return call.args[pos]
    return next((k.value for k in call.keywords if k.arg == kw), None)


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def sites(root: Path) -> list[Site]:
    """Every place under ``root`` that binds an invariant id to a message."""
    trees = {p.relative_to(root).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
             for p in sorted(root.rglob("*.py"))}
    functions = {n.name: n for t in trees.values() for n in t.body if isinstance(n, ast.FunctionDef)}

    owner: dict[ast.AST, ast.FunctionDef] = {}  # node -> the innermost function around it
    for tree in trees.values():
        for f in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for n in ast.walk(f):
                owner[n] = f  # ast.walk goes outside in: an inner function comes later

    def enclosing(_tree: ast.AST, node: ast.AST) -> ast.FunctionDef | None:
        return owner.get(node)

    # helpers that build a finding from their own parameters: name -> (inv, msg) positions
    wrappers: dict[str, tuple[int | frozenset[str], int]] = {}
    for tree in trees.values():
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            spec = CONSTRUCTORS.get(_name(call) or "")
            fn = enclosing(tree, call)
            if spec is None or fn is None:
                continue
            params = [a.arg for a in fn.args.args]
            inv, msg = _args(call, spec[0], spec[2]), _args(call, spec[1], spec[3])
            if isinstance(msg, ast.Name) and msg.id in params:
                where = (params.index(inv.id) if isinstance(inv, ast.Name) and inv.id in params
                         else frozenset(_literal_ids(inv) if inv is not None else ()))
                wrappers[fn.name] = (where, params.index(msg.id))

    out: list[Site] = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            fn = enclosing(tree, node)
            inv = msg = None
            if isinstance(node, ast.Call) and (_name(node) or "") in CONSTRUCTORS:
                spec = CONSTRUCTORS[_name(node) or ""]
                inv, msg = _args(node, spec[0], spec[2]), _args(node, spec[1], spec[3])
                if fn is not None and fn.name in wrappers:
                    continue  # its call sites are the sites
            elif isinstance(node, ast.Call) and (_name(node) or "") in wrappers:
                where, m = wrappers[_name(node) or ""]
                msg = node.args[m] if len(node.args) > m else None
                inv = (node.args[where] if isinstance(where, int) and len(node.args) > where
                       else ast.Tuple(elts=[ast.Constant(i) for i in sorted(where)], ctx=ast.Load())
                       if not isinstance(where, int) else None)
            elif (isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)
                  and len(node.value.elts) == 2 and _literal_ids(node.value.elts[0])):
                inv, msg = node.value.elts
            if inv is None or msg is None:
                continue
            ids = set(_literal_ids(inv))
            if isinstance(inv, ast.Name):
                for value in _assigned(fn, inv.id):
                    ids |= _literal_ids(value)
            templates = _templates_of(msg, fn, functions)
            if templates is None:
                continue  # the message and id come from a producer's (id, message) pair
            for t in templates:
                out.append(Site(module, node.lineno, frozenset(ids or {"*"}), t))
    return out


def _templates_of(msg: ast.AST, fn: ast.FunctionDef | None,
                  functions: dict[str, ast.FunctionDef]) -> list[str] | None:
    """The message templates a site can file; None when a producer's pair is the site."""
    def from_helper(name: ast.Name) -> list[str] | None:
        """What a helper that built ``name`` returns (a message function such as
        ``_claim_value_ok``); None if ``name`` is half of a producer's pair."""
        values = _assigned(fn, name.id)
        if any(isinstance(v, ast.Tuple) for v in values):
            return None
        out = []
        for v in values:
            helper = functions.get(_name(v) or "") if isinstance(v, ast.Call) else None
            for r in ast.walk(helper) if helper is not None else ():
                if isinstance(r, ast.Return) and r.value is not None:
                    rt = _template(r.value)
                    if rt is not None:
                        out.append(rt)
        return out

    if isinstance(msg, ast.JoinedStr):  # a helper's message inside an f-string: each one
        out = [""]
        for v in msg.values:
            inner = (from_helper(v.value) if isinstance(v, ast.FormattedValue)
                     and isinstance(v.value, ast.Name) else None)
            parts = (inner or ["{}"]) if isinstance(v, ast.FormattedValue) else [v.value]
            out = [o + p for o in out for p in parts]
        return out
    t = _template(msg)
    if t is not None:
        return [t]
    if isinstance(msg, ast.Name):
        out = from_helper(msg)
        if out is None or out:
            return out
    return [RELAY]  # passed on from elsewhere (the model's verdict, a scenario's)


def uncovered(found: list[Site], table: tuple[Rule, ...]) -> list[Site]:
    """Sites no row explains."""
    def covers(r: Rule, s: Site) -> bool:
        same_id = r.invariant in s.ids or (r.invariant == "*" and s.ids == {"*"})
        text = r.fragment in s.template if r.fragment else s.template == RELAY
        return r.module == s.module and same_id and text
    return [s for s in found if not any(covers(r, s) for r in table)]


def stale(found: list[Site], table: tuple[Rule, ...]) -> list[Rule]:
    """Rows no site matches (a message changed, or the rule is gone)."""
    return [r for r in table if not any(
        r.module == s.module and (r.invariant in s.ids or r.invariant == "*")
        and (r.fragment in s.template if r.fragment else s.template == RELAY) for s in found)]


def _plain(text: str) -> str:
    """Markdown as a reader sees it: links, code marks and emphasis gone, one space."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").replace("**", "")
    return re.sub(r"\s+", " ", text)


def sections(doc: str) -> dict[str, str]:
    """GitHub anchor -> the plain text of that section, its sub-sections included."""
    lines = doc.splitlines()
    starts, fenced = [], False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) (.+)", line)):
            starts.append((i, len(m.group(1)), m.group(2)))
    out = {}
    for k, (i, level, head) in enumerate(starts):
        end = next((j for j, lv, _ in starts[k + 1:] if lv <= level), len(lines))
        out[slug(head)] = _plain("\n".join(lines[i + 1:end]))
    return out


def unsupported(table: tuple[Rule, ...], doc: str) -> list[str]:
    """Rows whose anchor is no heading, or whose section does not say their sentence."""
    secs = sections(doc)
    assert set(secs) == {slug(h) for _, h in headings(doc)}
    bad = []
    for r in table:
        if r.anchor not in secs:
            bad.append(f"{r.module} {r.fragment!r}: no heading #{r.anchor}")
        elif _plain(r.sentence) not in secs[r.anchor]:
            bad.append(f"{r.module} {r.fragment!r}: #{r.anchor} does not say {r.sentence!r}")
        if r.invariant not in INVARIANTS and r.invariant != "*":
            bad.append(f"{r.module} {r.fragment!r}: unknown invariant {r.invariant}")
    return bad


# ------------------------------------------------------------------------ the real table
@pytest.fixture(scope="module")
def found() -> list[Site]:
    return sites(CHECK)


def test_the_walk_finds_every_kind_of_site(found):
    kinds = {(s.module, s.template.split("{}")[0][:20]) for s in found}
    assert len(found) >= 100, len(found)
    assert ("model.py", "the claim of task ") in kinds  # from a helper's returns
    assert any(s.module == "model.py" and "PermissionDenied expected" in s.template
               for s in found)  # a (id, message) pair
    assert any(s.module == "invariants/crash_audit.py" and "is missing" in s.template
               for s in found)  # a wrapper's call site
    assert {s.module for s in found if s.template == RELAY} == {
        "invariants/linearizable.py", "invariants/expectations.py"}


def test_every_rule_has_a_row(found):
    missing = uncovered(found, RULES)
    assert not missing, "rules without a row in harness/check/rules.py:\n" + "\n".join(
        f"{s.module}:{s.line} {sorted(s.ids)} {s.template!r}" for s in missing)


def test_every_row_names_a_rule(found):
    unused = stale(found, RULES)
    assert not unused, "rows no message matches:\n" + "\n".join(map(repr, unused))


def test_every_row_cites_its_section():
    bad = unsupported(RULES, DOC.read_text(encoding="utf-8"))
    assert not bad, "\n".join(bad)


def test_a_finding_points_at_its_rule():
    v = Violation("dag-order", "task t2 claimed before its dependencies completed")
    assert v.protocol == "PROTOCOL.md#dag-order"
    v = Violation("holder-guard", "fulfill of task t1 by 'bob' accepted; the task is for "
                  "'alice' (PermissionDenied expected)")
    assert v.protocol == "PROTOCOL.md#the-holder-guard" and "see PROTOCOL.md#the-holder-guard" in str(v)
    assert anchor_for("single-winner", "no rule says this") == "PROTOCOL.md#single-winner"
    assert rule_for("linearizable", "anything") is None  # a relay never matches


# ------------------------------------------------------------------------ fixtures
FIXTURE = '''
from ferry_harness.check.invariant import Violation

def _pair(x):
    if x:
        return "single-winner", f"task {x} has two holders"
    return "token-unique", "a token was issued twice"

def _wrap(message):
    return Violation("no-lost-task", message)

def check(run, fresh):
    inv, why = _pair(1)
    return [Violation(inv, why), _wrap(f"task {fresh} vanished"),
            Violation("dag-order", "claimed too early")]
'''
DOC_FIXTURE = "# P\n\n## Readiness\n\nA task is ready once every dependency is `COMPLETED`.\n"


@pytest.fixture
def package(tmp_path) -> Path:
    (tmp_path / "check.py").write_text(FIXTURE, encoding="utf-8")
    return tmp_path


def test_a_rule_without_a_row_fails(package):
    found = sites(package)
    assert {s.template for s in found} == {"task {} has two holders", "a token was issued twice",
                                           "task {} vanished", "claimed too early"}
    table = (Rule("check.py", "single-winner", "two holders", "readiness", "x"),
             Rule("check.py", "token-unique", "issued twice", "readiness", "x"),
             Rule("check.py", "no-lost-task", "vanished", "readiness", "x"))
    [missing] = uncovered(found, table)
    assert missing.template == "claimed too early" and missing.ids == {"dag-order"}
    whole = (*table, Rule("check.py", "dag-order", "too early", "readiness", "x"))
    assert uncovered(found, whole) == []
    assert stale(found, (*whole, Rule("check.py", "dag-order", "gone", "readiness", "x")))


def test_a_row_without_its_anchor_or_sentence_fails():
    good = Rule("check.py", "dag-order", "too early", "readiness",
                "A task is ready once every dependency is COMPLETED.")
    assert unsupported((good,), DOC_FIXTURE) == []
    [no_heading] = unsupported((Rule(**{**good.__dict__, "anchor": "dag"}),), DOC_FIXTURE)
    assert "no heading #dag" in no_heading
    [unsaid] = unsupported((Rule(**{**good.__dict__, "sentence": "Tasks run in order."}),),
                           DOC_FIXTURE)
    assert "does not say" in unsaid


def test_the_table_is_plain_data():
    assert all(isinstance(r, Rule) for r in rules.RULES)
    assert len({(r.module, r.invariant, r.fragment) for r in RULES}) == len(RULES)
