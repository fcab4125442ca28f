"""The composed Checker: invariants as named parts, a check that raises is a harness error,
and the checks the crash campaign and the scenarios report through."""

from __future__ import annotations

import ast
from dataclasses import asdict
from pathlib import Path

import pytest

from ferry_harness.check.checker import Checker, fuzz_invariants
from ferry_harness.check.history import FAIL, INFO
from ferry_harness.check.invariant import INVARIANTS, NEEDS
from ferry_harness.check.invariants.crash_audit import FINAL_READ, crash_invariants
from ferry_harness.check.invariants.crash_rounds import (
    CAMPAIGN_ROUND,
    KILLED_HOLDER,
    RESCUE,
    KilledHolder,
    Rescue,
    RescueAtExpiry,
)
from ferry_harness.check.invariants.expectations import EXPECT, ScenarioExpectations
from ferry_harness.check.ops import FEATURES, PROTOCOL, STRICT_CHOICES
from ferry_harness.errors import HarnessError
from tests.histories import T0, TOKEN_A, TOKEN_B, Recorder

ROOT = Path(__file__).resolve().parents[3]


def test_every_invariant_names_ids_and_needs_from_the_catalogue():
    known = set(PROTOCOL) | set(FEATURES) | set(STRICT_CHOICES) | {"dag", "wal-file", "pg-probes"}
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


# --------------------------------------------------------------------------- crash rounds
def _found(rec: Recorder) -> list[tuple[str, str, list[int]]]:
    return [(v.invariant, v.message, v.ops) for v in _audit(rec)]


def _in_round(o, r=0):
    o.extra[CAMPAIGN_ROUND] = r
    return o


def test_a_refused_dispatch_of_a_round_is_a_lost_task():
    rec = Recorder()
    _in_round(rec.op("dispatch", "client", {}, value="t1"))
    bad = _in_round(rec.op("dispatch", "client", {}, type=FAIL, error="Busy"))
    bad.message = "database is locked"
    assert _found(rec) == [("no-lost-task", "dispatch refused: Busy database is locked", [1])]
    bad.type, bad.value, bad.error, bad.message = "ok", "t2", None, None
    assert _found(rec) == []


def _poll(rec: Recorder, agent: str, tid: str | None, token: str = TOKEN_A, r: int = 0):
    value = None if tid is None else {"task_id": tid, "token": token,
                                      "lease_expires_at": T0 + 50}
    return _in_round(rec.op("poll_next", agent, {}, value=value, concurrent=True), r)


def test_two_pollers_winning_one_task_in_a_round_break_single_winner():
    rec = Recorder()
    rec.dispatch("t1")
    _poll(rec, "w0", "t1")
    _poll(rec, "w1", None)
    _poll(rec, "w2", "t1", TOKEN_B)
    assert _found(rec) == [("single-winner", "task t1 was claimed by 2 pollers in one round",
                            [1, 3])]
    clean = Recorder()
    clean.dispatch("t1")
    _poll(clean, "w0", "t1")
    _poll(clean, "w1", "t1", TOKEN_B, r=1)  # the next round: its holder released it
    clean.op("poll_next", "w3", {}, value={"task_id": "t1", "token": TOKEN_B})  # a drain's
    assert _found(clean) == []


def test_a_refused_holder_fulfill_breaks_the_holder_guard_a_killed_one_does_not():
    rec = Recorder()
    rec.dispatch("t1")
    bad = _in_round(rec.op("fulfill", "w0", {"task_id": "t1", "token": TOKEN_A},
                           type=FAIL, error="InvalidToken"))
    bad.message = "stale token"
    _in_round(rec.op("fulfill", "w1", {"task_id": "t2", "token": TOKEN_B}, type=INFO))
    assert _found(rec) == [("holder-guard", "the holder's fulfill of task t1 was refused: "
                            "InvalidToken stale token", [1])]


def test_a_get_that_does_not_answer_is_a_lost_task():
    rec = Recorder()
    rec.op("get", "auditor", {"task_id": "t1"}, value={"task_id": "t1", "status": "SUBMITTED"})
    rec.op("get", "auditor", {"task_id": "t2"}, type=FAIL, error="NotFound")
    rec.op("get", "auditor", {"task_id": "t3"}, type=INFO).note = "worker died"
    assert _found(rec) == [("no-lost-task", "get(t2) failed: NotFound ", [1]),
                           ("no-lost-task", "get(t3) failed: worker died ", [2])]


def _read_back(rec: Recorder, tid: str, killed: bool = False, **view):
    o = _in_round(rec.op("get", "auditor", {"task_id": tid}, value={"task_id": tid, **view}))
    if killed:
        o.extra[KILLED_HOLDER] = asdict(KilledHolder(granted_at=T0, exec_ttl_ms=50))
    return o


def test_after_a_kill_a_task_is_waiting_done_or_held_by_the_dead():
    rec = Recorder()
    _read_back(rec, "t1", status="SUBMITTED")
    _read_back(rec, "t2", status="COMPLETED")
    _read_back(rec, "t3", killed=True, status="CLAIMED", claimed_by="w3",
               lease_expires_at=T0 + 50)
    assert _found(rec) == []
    _read_back(rec, "t4", status="CLAIMED", claimed_by="w1")
    _read_back(rec, "t5", status="FAILED", error_reason="boom")
    rec.op("get", "auditor", {"task_id": "t6"}, value={"status": "FAILED"})  # not a read-back
    assert _found(rec) == [
        ("no-lost-task", "task t4 is CLAIMED by live worker 'w1', which holds no claim on it", []),
        ("no-lost-task", "task t5 ended FAILED (boom) after a worker was killed", [])]


def test_a_dead_holders_lease_ends_at_granted_at_plus_exec_ttl():
    rec = Recorder()
    _read_back(rec, "t1", killed=True, status="CLAIMED", claimed_by="w3",
               lease_expires_at=T0 + 51)
    assert _found(rec) == [("lease-half-open", f"task t1 was claimed at {T0} with "
                            f"exec_ttl_ms=50, but its lease_expires_at is {T0 + 51}, "
                            f"not {T0 + 50}", [])]


def test_a_read_back_that_leaves_out_the_lease_end_is_not_compared():
    """PROTOCOL.md#taskview-fields: a field a view leaves out is not compared."""
    rec = Recorder()
    _read_back(rec, "t1", killed=True, status="CLAIMED", claimed_by="w3")
    assert _found(rec) == []
    _read_back(rec, "t2", killed=True, status="CLAIMED", claimed_by="w3",
               lease_expires_at=None)  # shown, and wrong
    assert [f[0] for f in _found(rec)] == ["lease-half-open"]


def test_the_crash_audit_compares_results_only_for_a_store_with_results():
    """A store without the `results` feature keeps no result (PROTOCOL.md#ferry_capabilities)."""
    rec = _crash_history({"by": "nobody"})
    checker = Checker(invariants=crash_invariants())
    checker.cfg = checker.cfg.for_capabilities({"dispatch", "claim", "fulfill", "get", "inspect"})
    assert checker.check(rec.history) == []
    assert _audit(_crash_history({"by": "nobody"})) != []  # with results it is a finding


EXPIRES = T0 + 50


def _race(rec: Recorder, race: int, at: int, winners: list[str | None], *,
          last: bool = False, tid: str = "t1"):
    mark = asdict(Rescue(task=tid, expires=EXPIRES, race=race, at=at, last=last))
    ops = []
    for n, won in enumerate(winners):
        value = None if won is None else {"task_id": won, "token": f"tok-{race}-{n}"}
        o = rec.op("claim", f"w{n}", {"task_id": tid}, now=at, value=value, concurrent=n > 0)
        o.extra[RESCUE] = mark
        ops.append(o)
    return ops


def test_a_rescue_won_at_exactly_expires_is_clean():
    rec = Recorder()
    _race(rec, 0, EXPIRES - 1, [None, None])
    [won, _] = _race(rec, 1, EXPIRES, ["t1", None])
    done = rec.op("fulfill", "w0", {"task_id": "t1", "token": won.value["token"]})
    done.extra[RESCUE] = won.extra[RESCUE]
    assert _found(rec) == []


def test_a_rescue_before_expires_breaks_the_half_open_lease():
    rec = Recorder()
    _race(rec, 0, EXPIRES - 1, ["t1", None])
    assert _found(rec) == [("lease-half-open", f"task t1 was reclaimed at t={EXPIRES - 1}, "
                            f"before its dead holder's lease ends at {EXPIRES}", [0])]


def test_a_poll_that_gets_another_task_before_expires_is_no_reclaim():
    """A rescuer's poll_next may hand it a task still waiting, not the orphan."""
    rec = Recorder()
    _race(rec, 0, EXPIRES - 1, ["t7", None])
    assert _found(rec) == []


def test_two_rescuers_winning_one_race_break_single_winner():
    rec = Recorder()
    _race(rec, 0, EXPIRES, ["t1", "t1"])
    _race(rec, 0, EXPIRES, ["t2", None], tid="t2")  # another orphan's race
    assert _found(rec) == [("single-winner", f"2 rescuers reclaimed task t1 at t={EXPIRES}",
                            [0, 1])]


def test_a_rescue_only_won_after_expires_is_late():
    rec = Recorder()
    _race(rec, 0, EXPIRES, [None, None])
    _race(rec, 1, EXPIRES + 1, [None, "t1"])
    assert _found(rec) == [("lease-half-open", f"task t1: its dead holder's lease ended at "
                            f"{EXPIRES}, but it could only be reclaimed at {EXPIRES + 1}", [3])]


def test_a_poll_race_at_expires_that_handed_out_older_tasks_says_nothing_of_the_lease():
    """At its expiry the orphan is the youngest ready task: rescuers whose polls both got
    older waiting tasks then leave it to a later race (a poll-only store, not late)."""
    rec = Recorder()
    _race(rec, 0, EXPIRES, ["t7", "t8"])
    _race(rec, 1, EXPIRES + 1, [None, "t1"])
    assert _found(rec) == []
    # the races reach the checker in two batches, as a campaign's rounds do
    checker = Checker(invariants=[RescueAtExpiry()])
    ops = rec.history.ops
    assert checker.check(rec.history, new_ops=ops[:2]) == []
    assert checker.check(rec.history, new_ops=ops[2:]) == []
    # one rescuer that came back with nothing is evidence: the orphan was not ready
    rec = Recorder()
    _race(rec, 0, EXPIRES, ["t7", None])
    _race(rec, 1, EXPIRES + 1, [None, "t1"])
    assert [v.invariant for v in _audit(rec)] == ["lease-half-open"]


def test_an_orphan_no_rescuer_could_claim_is_lost():
    rec = Recorder()
    _race(rec, 0, EXPIRES, [None, "t9"])  # a poll that got another task does not count
    _race(rec, 1, EXPIRES + 5000, [None, None], last=True)
    assert _found(rec) == [("lease-half-open", f"task t1: its holder was killed and its lease "
                            f"ended at {EXPIRES}, but no rescuer could claim it, even at "
                            f"{EXPIRES + 5000}: lost", [])]


def test_a_refused_rescuer_fulfill_breaks_the_holder_guard():
    rec = Recorder()
    [won, _] = _race(rec, 0, EXPIRES, ["t1", None])
    done = rec.op("fulfill", "w0", {"task_id": "t1", "token": "tok-0-0"}, type=FAIL,
                  error="InvalidToken")
    done.extra[RESCUE] = won.extra[RESCUE]
    rec.op("fulfill", "w1", {"task_id": "t2", "token": TOKEN_B}, type=FAIL)  # a drain's
    assert _found(rec) == [("holder-guard", "the rescuer's fulfill of task t1 was refused: "
                            "InvalidToken ", [2])]


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
            if module.startswith("ferry_harness"):
                assert module.startswith(("ferry_harness.check", "ferry_harness.errors")), (path, module)


@pytest.mark.parametrize("owned", ["harness/check", "harness/tools/crash.py",
                                   "harness/tools/recorder.py", "harness/cli/check.py",
                                   "scenarios"])
def test_no_private_name_crosses_a_module(owned):
    paths = [ROOT / owned] if owned.endswith(".py") else list((ROOT / owned).rglob("*.py"))
    for path in paths:
        for module, names, _top in _imports(path):
            if module.startswith(("ferry_harness", "ferry_scenarios", "ferry_core")):
                assert not [n for n in names if n.startswith("_")], (path, module, names)


def test_tools_do_not_import_the_cli():
    for path in (ROOT / "harness" / "tools").glob("*.py"):
        for module, _names, _top in _imports(path):
            assert not module.startswith("ferry_harness.cli"), (path, module)
