"""The composed Checker: invariants as named parts, a check that raises is a harness error,
and the checks the crash campaign and the scenarios report through."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.check.checker import Checker, fuzz_invariants
from harness.check.history import FAIL, INFO
from harness.check.invariant import INVARIANTS, NEEDS
from harness.check.invariants.crash_audit import FINAL_READ, crash_invariants
from harness.check.invariants.expectations import EXPECT, ScenarioExpectations
from harness.check.ops import FEATURES, PROTOCOL, STRICT_CHOICES
from harness.errors import HarnessError
from tests.histories import TOKEN_A, TOKEN_B, Recorder

ROOT = Path(__file__).resolve().parents[3]


def test_every_invariant_names_ids_and_needs_from_the_catalogue():
    known = set(PROTOCOL) | set(FEATURES) | set(STRICT_CHOICES) | {"dag", "wal-file"}
    for inv in [*fuzz_invariants(), *crash_invariants(), ScenarioExpectations()]:
        assert inv.ids and set(inv.ids) <= set(INVARIANTS), inv.name
        for need in inv.needs:
            assert set(need.split("|")) <= known, (inv.name, need)
    for need in NEEDS.values():  # the catalogue speaks the same language
        assert {c for n in need for c in n.split("|")} <= known


class _Broken:
    name, ids, needs, sees_invalid_args = "broken-check", ("no-lost-task",), (), True

    def check(self, run, fresh):
        raise KeyError("task_id")


def test_an_invariant_that_raises_is_a_harness_error_naming_it():
    rec = Recorder()
    rec.dispatch()
    checker = Checker(invariants=[*fuzz_invariants(), _Broken()])
    with pytest.raises(HarnessError, match="broken-check.*KeyError"):
        checker.check(rec.history)


def test_invariant_names_are_unique():
    with pytest.raises(ValueError, match="unique"):
        Checker(invariants=[_Broken(), _Broken()])


def _crash_history(result_stored=None, *, twice=False) -> Recorder:
    rec = Recorder()
    rec.dispatch("t1")
    rec.dispatch("t2")
    rec.claim("w1", TOKEN_A, tid="t1")
    rec.claim("w2", TOKEN_A if twice else TOKEN_B, tid="t2")
    rec.op("fulfill", "w1", {"task_id": "t1", "token": TOKEN_A, "result": {"by": "w1"}})
    rec.op("fulfill", "w2", {"task_id": "t2", "token": TOKEN_B, "result": {"by": "w2"}},
           type=INFO)  # killed: it may or may not have committed
    views = [{"task_id": "t1", "status": "COMPLETED", "result": {"by": "w1"}}]
    if result_stored is not None:
        views.append({"task_id": "t2", "status": "COMPLETED", "result": result_stored})
    o = rec.op("inspect", "auditor", {}, value=views)
    o.extra[FINAL_READ] = True
    return rec


def _audit(rec: Recorder):
    return Checker(invariants=crash_invariants()).check(rec.history)


def test_the_crash_audit_passes_a_complete_store():
    assert _audit(_crash_history({"by": "w2"})) == []


def test_the_crash_audit_finds_a_lost_a_changed_and_a_repeated_token():
    [lost] = _audit(_crash_history())
    assert (lost.invariant, lost.message) == ("no-lost-task", "task t2 is missing from the store")
    assert lost.detail == {"tally": "tasks_lost"}
    [changed] = _audit(_crash_history({"by": "nobody"}))
    assert "which no fulfill (accepted or killed) delivered" in changed.message
    assert changed.detail["tally"] == "changed_results"
    [tokens] = _audit(_crash_history({"by": "w2"}, twice=True))
    assert (tokens.invariant, tokens.message) == ("token-unique", "1 claim token(s) issued twice")


def test_the_crash_audit_reads_integrity_and_the_closing_checkpoint():
    rec = Recorder()
    rec.op("integrity_check", "nemesis", {"pragma": "integrity_check"}, value="*** page 3")
    ck = rec.op("checkpoint", "janitor", {"mode": "TRUNCATE"}, type=FAIL, error="Busy")
    ck.extra["wal_after"] = 4096
    found = _audit(rec)
    assert [(v.invariant, v.message) for v in found] == [
        ("integrity", "PRAGMA integrity_check: *** page 3"),
        ("wal-bounded", "checkpoint(TRUNCATE) -> Busy, -wal left at 4096 bytes")]


def test_a_failed_scenario_expectation_is_reported_by_the_checker():
    rec = Recorder()
    rec.dispatch()
    rec.op(EXPECT, "scenario", {"invariant": "single-winner", "message": "2 won",
                                "ops": [0], "scenario": "herd"}, value=False)
    found = Checker(invariants=[*fuzz_invariants(), ScenarioExpectations()]).check(rec.history)
    assert [(v.invariant, v.message, v.ops, v.detail) for v in found] == [
        ("single-winner", "2 won", [0], {"scenario": "herd"})]
    assert Checker().check(rec.history) == []  # the fuzz checks ignore it


def _imports(path: Path) -> list[tuple[str, list[str], bool]]:
    """(module, names, at module level) of every ``from … import``/``import`` in ``path``."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names], id(node) in top))
        elif isinstance(node, ast.Import):
            out.extend((a.name, [], id(node) in top) for a in node.names)
    return out


def test_the_check_layer_imports_only_itself_and_errors():
    for path in (ROOT / "harness" / "check").rglob("*.py"):
        for module, _names, _top in _imports(path):
            if module.startswith("harness"):
                assert module.startswith(("harness.check", "harness.errors")), (path, module)


@pytest.mark.parametrize("owned", ["harness/check", "harness/tools/crash.py",
                                   "harness/tools/recorder.py", "harness/cli/check.py",
                                   "scenarios"])
def test_no_private_name_crosses_a_module(owned):
    paths = [ROOT / owned] if owned.endswith(".py") else list((ROOT / owned).rglob("*.py"))
    for path in paths:
        for module, names, _top in _imports(path):
            if module.startswith(("harness", "scenarios", "ferry_core")):
                assert not [n for n in names if n.startswith("_")], (path, module, names)


def test_tools_do_not_import_the_cli():
    for path in (ROOT / "harness" / "tools").glob("*.py"):
        for module, _names, _top in _imports(path):
            assert not module.startswith("harness.cli"), (path, module)
