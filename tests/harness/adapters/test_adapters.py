"""Third-party SQLite queues through harness/adapters: each library's verdict, asserted.

A test skips when its library is missing (``pip install '.[adapters]'`` installs them).
The campaigns use small budgets; the step lists below are the minimal reproductions of
reports/findings.md, each run a few times on fresh databases.
"""

from __future__ import annotations

import json

import pytest

from ferry_harness.check.checker import invariant_status
from ferry_harness.check.model import ModelConfig
from ferry_harness.check.ops import FEATURES, STRICT_CHOICES
from ferry_harness.run.campaign import Campaign, CampaignConfig, Runner, write_report
from ferry_harness.run.steps import Reads
from ferry_harness.runtime.calls import capabilities
from tests.steps import D, claim, holder, poll, via_json

LIBRARY = {"persist_queue": "persistqueue", "litequeue": "litequeue", "localqueue": "localqueue"}



SEQUENCES = {
    "claim-twice": [D, claim("alice"), claim("bob")],
    "poll-race": [D, poll("alice", "bob", "carol", "dave")],
    "release-repoll": [D, poll("alice"), holder("release"), poll("bob")],
    "double-ack": [D, poll("alice"), holder("fulfill", race=2)],
    "ack-then-nack": [D, poll("alice"), holder("fulfill"), holder("release")],
    "forged-receipt": [D, poll("alice"), holder("fulfill", who="forged")],
    "no-receipt": [D, poll("alice"), holder("fulfill", who="impersonator")],
    "ack-then-read": [D, poll("alice"), holder("fulfill"), Reads()],
}

# the invariant each sequence breaks (None: it holds), as observed with the tested versions
EXPECTED = {
    "persist_queue": {"claim-twice": "single-winner", "poll-race": "single-winner",
                      "release-repoll": "token-unique", "double-ack": "token-unique",
                      "ack-then-nack": "token-unique"},
    "litequeue": {"release-repoll": "token-unique", "double-ack": "token-unique",
                  "ack-then-nack": "token-unique", "forged-receipt": "holder-guard"},
    "localqueue": {},
}


def target(lib: str) -> str:
    pytest.importorskip(LIBRARY[lib])
    return f"ferry_harness.adapters.{lib}:make_store"


def campaign(tgt: str, tmp_path, budget: float, seed: int = 0):
    cfg = CampaignConfig(target=tgt, budget_s=budget, seed=seed, report_dir=str(tmp_path / "r"),
                         shrink_budget_s=5.0)
    outcome = Campaign(cfg).run()
    write_report(outcome)
    return outcome, json.loads((tmp_path / "r" / "report.json").read_text())


# ------------------------------------------------------------------ fuzz verdicts
def test_persist_queue_fails_single_winner(tmp_path, ferry_budget):
    outcome, report = campaign(target("persist_queue"), tmp_path, 10 * ferry_budget)
    assert outcome.verdict == "fail"
    v = report["violations"][0]
    assert v["invariant"] == "single-winner", v["message"]
    assert int(v["reproduced"].split("/")[0]) >= 5 and len(v["steps"]) <= 4
    assert report["invariants"]["lease-half-open"].startswith("skipped (SQLiteAckQueue has no lease")
    assert report["invariants"]["wal-bounded"].startswith("checked (")


def test_litequeue_fails_token_replay(tmp_path, ferry_budget):
    outcome, report = campaign(target("litequeue"), tmp_path, 10 * ferry_budget)
    assert outcome.verdict == "fail"
    v = report["violations"][0]
    assert v["invariant"] == "token-unique", v["message"]
    assert int(v["reproduced"].split("/")[0]) >= 5
    assert report["invariants"]["single-winner"].startswith("checked (")  # by poll races: no claim(id)


def test_localqueue_passes(tmp_path, ferry_budget):
    outcome, report = campaign(target("localqueue"), tmp_path, 8 * ferry_budget)
    assert outcome.verdict == "pass", report["violations"][:1]
    assert report["stats"]["race_rounds"] > 50
    inv = report["invariants"]
    for name in ("single-winner", "token-unique", "holder-guard", "idle-no-write", "linearizable"):
        assert inv[name].startswith("checked ("), (name, inv[name])
    assert "Rust SystemTime" in inv["lease-half-open"]
    assert inv["wal-bounded"].startswith("skipped (localqueue has no checkpoint")


# ------------------------------------------------------------------ minimal reproductions
@pytest.mark.parametrize("lib", sorted(LIBRARY))
def test_minimal_sequences(lib):
    tgt = target(lib)
    got: dict[str, set[str]] = {}
    with Runner(CampaignConfig(target=tgt, workers=4)) as runner:
        for name, steps in SEQUENCES.items():
            seen: set[str] = set()
            for _ in range(3):
                found, _ex = runner.run_steps(via_json(steps))
                seen |= {v.invariant for v in found}
            got[name] = seen
    for name in SEQUENCES:
        want = EXPECTED[lib].get(name)
        if want is None:
            assert not got[name], f"{lib} {name}: unexpected {got[name]}"
        else:
            assert want in got[name], f"{lib} {name}: expected {want}, got {got[name]}"


@pytest.mark.parametrize("lib", sorted(LIBRARY))
def test_a_starting_consumer_does_not_steal_claims(lib):
    """persist-queue's auto_resume (the default) re-readies every unacked message whenever
    any process opens the queue: a live consumer's message goes to the next poller."""
    tgt = target(lib)
    with Runner(CampaignConfig(target=tgt, workers=4)) as runner:
        ex = runner.executor()
        ex.run_step(D)
        ex.run_step(poll("alice"))
        runner.pool.replace(3)  # a new consumer process opens the queue
        found = ex.run_step(poll("bob"))
    broken = {v.invariant for v in found}
    assert broken == ({"single-winner", "token-unique"} if lib == "persist_queue" else set())


# ------------------------------------------------------------------ harness support
def test_declared_skips_and_poll_only_targets():
    caps = {"dispatch", "poll_next", "fulfill"}
    status = invariant_status(caps, {"lease-half-open": "no lease in this library"})
    assert status["single-winner"] == "checked"  # poll races stand in for claim(id)
    assert status["lease-half-open"] == "skipped (no lease in this library)"
    # without get, an empty poll while a task is ready is still a no-lost-task finding
    assert status["no-lost-task"] == "checked"
    assert invariant_status({"dispatch", "fulfill"})["no-lost-task"] == "skipped (target lacks get)"
    assert invariant_status(caps)["lease-half-open"] == "skipped (target lacks lease)"


def test_a_store_that_declares_nothing_is_held_to_spec_and_no_more(tmp_path):
    """SPEC §9: stricter choices (holder binding, refusal order) are checked only where a
    store declares them; ferry_core declares both."""
    from ferry_core import LeaseStore, ManualClock

    class Undeclared(LeaseStore):
        ferry_declares = frozenset()

    for cls in (LeaseStore, Undeclared):
        store = cls(str(tmp_path / f"{cls.__name__}.db"), clock=ManualClock(0))
        try:
            caps = capabilities(store)
        finally:
            store.close()
        assert set(FEATURES) <= caps and "dag" in caps
        cfg = ModelConfig().for_capabilities(caps)
        if cls is Undeclared:
            assert cfg == ModelConfig()
            assert not (cfg.holder_binding or cfg.refusal_order)
        else:
            assert set(STRICT_CHOICES) <= caps
            assert cfg.holder_binding and cfg.refusal_order
    bare = ModelConfig().for_capabilities({"dispatch", "poll_next"})
    assert not (bare.leases or bare.queue_ttl or bare.holder_binding or bare.results
                or bare.limits or bare.typed_refusals)


def test_unknown_declared_choice_is_a_clear_error():
    class Store:
        ferry_declares = frozenset({"holder-bindng"})

    with pytest.raises(ValueError, match="unknown choices"):
        capabilities(Store())
