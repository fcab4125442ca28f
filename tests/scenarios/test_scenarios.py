"""The named race scenarios (``scenarios/``) and ``ferry-harness scenarios``.

Every scenario must pass on ferry_core with both claim strategies, and fail, naming its
SPEC §8 invariant, on the broken store that has the bug it reproduces.

The whole module shares ONE worker pool: its workers are started with the ``routed``
factory below, which opens whichever target the database's directory names, so one pool
serves ferry_core and every broken store, and the fixture always closes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import multiprocess as mp
import pytest

from ferry_harness.check.checker import INVARIANTS
from ferry_harness.cli.main import main
from ferry_harness.runtime.client import WorkerPool
from ferry_harness.runtime.clock import SharedClock
from ferry_harness.runtime.target import load_factory
from ferry_scenarios import SCENARIOS, Scenario, ScenarioContext
from tests.broken_stores import BROKEN

CORE = ("ferry_core:cas_store", "ferry_core:immediate_store")
WORKERS = 4
REQUIRED = (
    "thundering-herd", "impersonation", "stale-holder-replay", "zombie-holder",
    "lease-boundary", "daemon-lock-takeover", "checkpoint-starvation", "idle-poll-quiet",
    "dag-unlock", "late-fulfill-salvage", "double-finish",
)
# scenario -> the broken store (tests/broken_stores.py) whose bug it reproduces
CATCHES = {
    "thundering-herd": "check_then_act",
    "impersonation": "agent_only_guard",
    "stale-holder-replay": "token_not_retired",
    "zombie-holder": "closed_lease",
    "lease-boundary": "closed_lease",
    "daemon-lock-takeover": "unconditional_lock",
    "checkpoint-starvation": "long_reader",
    "idle-poll-quiet": "busy_idle_poll",
    "dag-unlock": "dependency_ignored",
    "late-fulfill-salvage": "dropped_late_result",
    "double-finish": "double_finish",
}
# a few more bugs the same scripts also catch (the zombie comes back under the same name)
ALSO_CATCHES = [
    ("zombie-holder", "token_not_retired", "token-unique"),
    ("zombie-holder", "agent_only_guard", "token-unique"),
    ("stale-holder-replay", "agent_only_guard", "token-unique"),
    ("late-fulfill-salvage", "closed_lease", "lease-half-open"),
]


def routed(path: str, *, clock):
    """Test-only factory: the target is named by the database's directory (``~`` for ``:``)."""
    target = Path(path).parent.name.replace("~", ":")
    return load_factory(target)(path, clock=clock)


class SharedPool:
    """The module's one WorkerPool, and a scenario context per target."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = SharedClock()
        self.pool = WorkerPool("tests.scenarios.test_scenarios:routed", self.clock, WORKERS)

    def context(self, target: str) -> ScenarioContext:
        workdir = self.root / target.replace(":", "~")
        workdir.mkdir(exist_ok=True)
        return ScenarioContext(self.pool, self.clock, str(workdir))

    def run(self, name: str, target: str):
        return SCENARIOS[name].run(self.context(target))


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    pool = SharedPool(tmp_path_factory.mktemp("scenarios"))
    procs = []
    try:
        pool.pool.start()
        procs = [w.proc for w in pool.pool.slots]
        yield pool
    finally:
        procs += [w.proc for w in pool.pool.slots if w.proc not in procs]  # replacements
        pool.pool.close()
    assert not [p for p in procs if p.is_alive()], "worker processes outlived the pool"


def _explain(result) -> str:
    lines = [f"{result.name}: {result.status} [{result.invariant}] {result.explanation}"]
    lines += [f"  {v}" for v in result.violations]
    lines += [f"  {o.describe()}" for o in list(result.history)[-15:]]
    return "\n".join(lines)


# ---------------------------------------------------------------------- registry
def test_registry_has_every_required_scenario_with_a_spec_id_and_one_sentence():
    assert set(REQUIRED) <= set(SCENARIOS)
    assert set(CATCHES) == set(SCENARIOS), "every scenario needs a broken store it catches"
    for name, s in SCENARIOS.items():
        assert isinstance(s, Scenario) and s.name == name
        assert s.invariant in INVARIANTS and s.invariant != "typed-errors"
        assert s.description.endswith(".") and "\n" not in s.description
        assert s.description.count(". ") == 0, f"{name}: one sentence, please"
        assert s.source and callable(s.script)


def test_declared_invariant_is_what_the_matching_broken_store_is_registered_for():
    for name, store in CATCHES.items():
        assert SCENARIOS[name].invariant == BROKEN[store][0], name


# ---------------------------------------------------------------------- ferry_core passes
@pytest.mark.parametrize("target", CORE)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_passes_on_ferry_core(shared, name, target):
    result = shared.run(name, target)
    assert result.status == "pass", _explain(result)
    assert result.passed and not result.violations
    assert result.invariant == SCENARIOS[name].invariant
    assert result.explanation and "\n" not in result.explanation
    assert any(o.op != "dispatch" for o in result.history)
    assert not result.unknown


#: the scenarios that read views (get or inspect) (the others run with --ferry-thorough)
READ_VIEWS = ("dag-unlock", "zombie-holder", "double-finish", "impersonation", "checkpoint-starvation")


@pytest.mark.parametrize("name", [n if n in READ_VIEWS else pytest.param(n, marks=pytest.mark.thorough)
                                  for n in SCENARIOS])
def test_scenario_passes_views_with_only_the_required_fields(shared, name):
    """PROTOCOL.md#taskview-fields: a view may leave out every field but status,
    is_logically_expired and result (dag-unlock once demanded error_reason)."""
    result = shared.run(name, "tests.variants.sparse_views:make_without_ids")
    assert result.status == "pass", _explain(result)


def test_race_scenarios_repeat_the_race(shared):
    result = shared.run("thundering-herd", CORE[0])
    races = {o.round for o in result.history if o.op == "poll_next" and o.round is not None}
    assert result.rounds == 20 and len(races) >= 20
    assert max(sum(1 for o in result.history if o.round == r) for r in races) == WORKERS


# ---------------------------------------------------------------------- broken stores fail
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_fails_on_its_broken_store_naming_the_invariant(shared, name):
    store = CATCHES[name]
    result = shared.run(name, f"tests.broken_stores:{store}")
    assert result.status == "fail", _explain(result)
    assert not result.passed
    assert result.invariant == BROKEN[store][0] == SCENARIOS[name].invariant, _explain(result)
    assert result.violations[0].invariant == result.invariant
    assert result.violations[0].message in result.explanation
    history = {o.index for o in result.history}
    assert result.violations[0].ops and set(result.violations[0].ops) <= history


@pytest.mark.parametrize(("name", "store", "invariant"), ALSO_CATCHES)
def test_scenario_also_catches_related_bugs(shared, name, store, invariant):
    result = shared.run(name, f"tests.broken_stores:{store}")
    assert (result.status, result.invariant) == ("fail", invariant), _explain(result)


def test_zombie_is_frozen_then_woken_and_recorded(shared):
    result = shared.run("zombie-holder", CORE[0])
    faults = [o.args["fault"] for o in result.history if o.op == "nemesis"]
    assert faults[:2] == ["pause", "resume"]
    assert not any(w.paused for w in shared.pool.slots)
    zombie = [o for o in result.history if o.op == "fulfill" and o.args["result"] == {"by": "zombie"}]
    assert zombie and all(o.type == "fail" for o in zombie)


def test_checkpoint_starvation_measures_wal_growth(shared):
    result = shared.run("checkpoint-starvation", CORE[1])
    pinned = [o for o in result.history if o.op == "checkpoint" and o.extra.get("reader")]
    assert pinned and pinned[0].extra["wal_after"] > 0  # the outside reader pinned the WAL
    last = [o for o in result.history if o.op == "checkpoint"][-1]
    assert last.extra["wal_after"] == 0 and shared.pool.wal_size() == 0


# ---------------------------------------------------------------------- the CLI
def _children() -> set[int]:
    return {p.pid for p in mp.active_children()}


def test_cli_list_describes_every_scenario(capsys):
    assert main(["scenarios", "--list"]) == 0
    out = capsys.readouterr().out
    for name, s in SCENARIOS.items():
        assert name in out and s.invariant in out


def test_cli_runs_named_scenarios_on_ferry_core(capsys):
    before = _children()
    assert main(["scenarios", "--target", "ferry_core:cas_store", "--workers", "3",
                 "thundering-herd", "double-finish"]) == 0
    out = capsys.readouterr().out
    assert "thundering-herd" in out and "double-finish" in out and "PASS" in out
    assert "impersonation" not in out and "FAIL" not in out
    assert _children() <= before, "the CLI left worker processes behind"


def test_cli_fails_on_a_broken_store_and_writes_a_report(tmp_path, capsys):
    before = _children()
    rc = main(["scenarios", "--target", "tests.broken_stores:double_finish",
               "--report-dir", str(tmp_path), "thundering-herd", "double-finish"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL" in out and "token-unique" in out
    d = tmp_path / "double-finish"
    assert sorted(os.listdir(d)) == ["history.jsonl", "report.json", "report.md", "timeline.html"]
    assert not (tmp_path / "thundering-herd").exists()  # it passed: no report
    report = json.loads((d / "report.json").read_text())
    assert report["verdict"] == "fail" and report["violations"][0]["invariant"] == "token-unique"
    assert "ferry-harness scenarios" in report["replay"] and "double-finish" in report["replay"]
    md = (d / "report.md").read_text()
    assert "token-unique" in md and "## Scenario `double-finish`" in md
    assert "race at one barrier" in md
    assert _children() <= before


def test_cli_unknown_scenario_is_a_usage_error_listing_the_known_ones(capsys):
    assert main(["scenarios", "no-such-race"]) == 2
    err = capsys.readouterr().err
    assert "no-such-race" in err and all(n in err for n in SCENARIOS)


def test_cli_bad_target_or_workers_is_a_usage_error(capsys):
    assert main(["scenarios", "--target", "no_such_module:factory", "thundering-herd"]) == 2
    assert main(["scenarios", "--workers", "1", "thundering-herd"]) == 2
    err = capsys.readouterr().err
    assert "no_such_module" in err and "workers" in err


def test_a_failed_expectation_is_judged_by_the_checker_and_reported(shared, tmp_path):
    """``Session.expect`` records an ``expect`` op; the session's Checker names it."""
    from ferry_harness.cli.scenario import write_scenario_report

    def script(s) -> str:
        task = s.dispatch(title="A")
        op = s.call(1, "get", "auditor", task_id=task)
        s.expect(False, "single-winner", "two made-up winners", [op])
        return "unreachable"

    sc = Scenario(name="made-up-expectation", invariant="single-winner",
                  description="An expectation that never holds.", source="PROTOCOL.md#x",
                  script=script, needs=("dispatch", "get"))
    result = sc.run(shared.context(CORE[0]))
    assert result.status == "fail" and result.invariant == "single-winner"
    [v] = result.violations
    assert (v.message, v.detail) == ("two made-up winners", {"scenario": sc.name})
    last = list(result.history)[-1]
    assert last.op == "expect" and v.ops == [last.index - 1]
    assert result.explanation == "two made-up winners"
    d = write_scenario_report(sc, result, target=CORE[0], workers=WORKERS,
                              directory=tmp_path / "made-up")
    assert "two made-up winners" in (d / "report.md").read_text()
    assert json.loads((d / "report.json").read_text())["violations"][0]["invariant"] == \
        "single-winner"
