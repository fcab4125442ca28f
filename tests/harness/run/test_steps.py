"""Typed steps: one JSON codec, clear errors for steps of another ferry version, the
shrinker's renumbering on typed steps, and a one-way executor -> nemesis dependency."""

from __future__ import annotations

import ast
import json
from dataclasses import fields
from pathlib import Path

import pytest

from ferry_harness.errors import UsageError
from ferry_harness.run.campaign import _simplifications, public_steps, renumber
from ferry_harness.run.executor import Executor, StepTrace
from ferry_harness.run.steps import (
    KINDS,
    Audit,
    Checkpoint,
    Clock,
    Dispatch,
    Fault,
    Holder,
    Hostile,
    IdlePoll,
    LockOp,
    LockRace,
    RaceClaim,
    RacePoll,
    Reads,
    step_from_json,
    step_to_json,
)

RUN = Path(__file__).resolve().parents[3] / "harness" / "run"

EVERY_KIND = [
    Dispatch(target_agent="alice", queue_ttl_ms=500, exec_ttl_ms=50, max_attempts=2,
             depends_on=(0, 3)),
    RaceClaim(task=1, agents=("alice", "bob"), pct=7, schedules=((0, 1), (), (1, 1, 0))),
    RacePoll(agents=("alice",) * 3),
    Holder(claim=2, op="extend", who="forged", race=4, repeat=5),
    Hostile(case="claim-int-id"),
    Clock(tick=60),
    Clock(claim=0, offset=-1),
    LockRace(owners=("daemon-1", "daemon-2"), ttl_ms=30, offset=0),
    LockOp(op="release_lock", owner="daemon-2"),
    LockOp(op="release_lock", owner="daemon-1", offset=1),
    IdlePoll(),
    Reads(),
    Checkpoint(reader=True),
    Audit(),
    Fault(fault="kill", claim=3, slot=1, exec_ttl_ms=300, aim="write-tx", delay_us=0),
    Fault(fault="clock", tick=20_000),
]


@pytest.mark.parametrize("step", EVERY_KIND, ids=lambda s: type(s).__name__)
def test_every_step_survives_json_text(step):
    data = json.loads(json.dumps(step_to_json(step)))
    assert step_from_json(data) == step
    assert data["kind"] in KINDS and KINDS[data["kind"]] is type(step)


def test_every_kind_is_covered_and_every_field_is_documented():
    assert {type(s) for s in EVERY_KIND} == set(KINDS.values())
    for cls in KINDS.values():
        assert cls.__doc__, cls
        source = Path(RUN / "steps.py").read_text()
        for f in fields(cls):
            line = next(ln for ln in source.splitlines() if ln.strip().startswith(f"{f.name}:"))
            assert "#" in line, f"{cls.__name__}.{f.name} has no comment"


def test_unset_fields_are_left_out_and_spec_names_are_used():
    assert step_to_json(Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=50)) == {
        "kind": "dispatch", "queue_ttl_ms": 10_000, "exec_ttl_ms": 50, "max_attempts": 1}
    assert step_to_json(LockRace(owners=("d",), ttl_ms=5)) == {
        "kind": "lock_race", "owners": ["d"], "ttl_ms": 5}


@pytest.mark.parametrize("data, words", [
    ({"kind": "dispatch", "target": None, "qttl": 500, "ettl": 50, "attempts": 1, "deps": []},
     ["unknown field(s)", "'qttl'", "dispatch step", "another version of ferry"]),
    ({"kind": "teleport", "to": 3}, ["unknown step kind 'teleport'", "teleport"]),
    ({"task": 0}, ["unknown step kind None"]),
    ({"kind": "race_claim", "agents": ["alice"]}, ["race_claim step", "lacks the field 'task'"]),
    ({"kind": "holder", "claim": "0", "op": "fulfill"}, ["field 'claim' of holder step"]),
    ({"kind": "race_poll", "agents": "alice"}, ["field 'agents' of race_poll step"]),
    ({"kind": "checkpoint", "reader": 1}, ["field 'reader' of checkpoint step"]),
    (["dispatch"], ["a step must be a JSON object"]),
])
def test_a_step_it_cannot_read_is_a_one_line_usage_error(data, words):
    with pytest.raises(UsageError) as err:
        step_from_json(data)
    text = str(err.value)
    assert "\n" not in text
    for w in words:
        assert w in text, (w, text)


def test_reports_show_json_steps():
    assert public_steps([Clock(tick=5), IdlePoll()]) == [{"kind": "clock", "tick": 5},
                                                         {"kind": "idle_poll"}]


def test_renumber_keeps_references_on_the_same_objects():
    """Deleting the first dispatch shifts every later reference: renumber follows the
    traces of the failing run so the remaining steps still name the same task and claim."""
    d = Dispatch(queue_ttl_ms=10_000, exec_ttl_ms=50)
    steps = [
        (d, StepTrace(first_task=0, made_tasks=1, ops=1)),
        (d, StepTrace(first_task=1, made_tasks=1, ops=1)),
        (RaceClaim(task=1, agents=("alice",)),
         StepTrace(task_refs=(0,), first_task=2, made_claims=1, ops=1)),
        (Dispatch(queue_ttl_ms=1, exec_ttl_ms=1, depends_on=(2,)),
         StepTrace(task_refs=(0,), first_task=2, first_claim=1, made_tasks=1, ops=1)),
        (Holder(claim=0, op="fulfill"), StepTrace(claim_refs=(0,), first_task=3, first_claim=1,
                                                  ops=1)),
    ]
    kept = [steps[0], steps[2], steps[3], steps[4]]  # the second dispatch deleted
    assert renumber(kept) == [d, RaceClaim(task=0, agents=("alice",)),
                              Dispatch(queue_ttl_ms=1, exec_ttl_ms=1, depends_on=(0,)),
                              Holder(claim=0, op="fulfill")]


def test_simplifications_are_smaller_typed_steps():
    race = RaceClaim(task=0, agents=("a", "b", "c"), pct=3, schedules=((0, 2, 1),))
    out = _simplifications(race)
    assert RaceClaim(task=0, agents=("a", "b"), pct=3, schedules=((0, 2, 1),)) in out
    assert RaceClaim(task=0, agents=("a", "b"), pct=3, schedules=((0, 1, 1),)) in out
    assert RaceClaim(task=0, agents=("a", "b", "c"), schedules=((),)) in out
    assert RaceClaim(task=0, agents=("a", "b", "c"), schedules=((0, 2, 1),)) in out  # no pct
    assert _simplifications(Holder(claim=0, op="fulfill", race=2))[-1] == Holder(
        claim=0, op="fulfill", race=1)
    assert _simplifications(Dispatch(queue_ttl_ms=1, exec_ttl_ms=1, depends_on=(1,))) == [
        Dispatch(queue_ttl_ms=1, exec_ttl_ms=1)]


def test_the_executor_has_a_handler_for_every_step_kind():
    assert set(Executor._HANDLERS) == set(KINDS.values())


def _imports(path: Path) -> list[tuple[str, str, bool]]:
    """(module, name, at function level) for every ``from X import Y`` in the file."""
    tree = ast.parse(path.read_text())
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    return [(node.module or "", alias.name, id(node) in nested)
            for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names]


def test_the_nemesis_does_not_know_the_executor():
    assert all(not mod.startswith(("ferry_harness.run.executor", "ferry_harness.run.campaign",
                                   "ferry_harness.run.generator"))
               for mod, _name, _nested in _imports(RUN / "nemesis.py"))


@pytest.mark.parametrize("module", sorted(p.name for p in RUN.glob("*.py")))
def test_no_private_name_is_imported_and_lazy_imports_say_why(module):
    path = RUN / module
    lines = path.read_text().splitlines()
    for mod, name, _nested in _imports(path):
        if mod.startswith("ferry_harness."):
            assert not name.startswith("_"), f"{module} imports {mod}.{name}"
    tree = ast.parse(path.read_text())
    for f in ast.walk(tree):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(f):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                near = " ".join(lines[max(0, node.lineno - 3):node.lineno])
                assert "why" in near, f"{module}:{node.lineno}: a lazy import without a # why"
