"""The ``ferry_check`` fixture judges a history in memory or recorded to a file."""

from __future__ import annotations

import pytest

from tests.histories import TOKEN_A, TOKEN_B, Recorder


def _two_winners() -> Recorder:
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    rec.claim("bob", TOKEN_B, concurrent=True)
    return rec


def test_a_recorded_file_is_checked_like_a_history(tmp_path, ferry_check):
    path = tmp_path / "history.jsonl"
    path.write_text(_two_winners().history.to_jsonl())
    found = ferry_check(path, strict=False)
    assert found and found[0].invariant == "single-winner"
    with pytest.raises(AssertionError, match="single-winner"):
        ferry_check(str(path))


def test_a_clean_history_passes_and_capabilities_hold_a_partial_target(ferry_check):
    rec = Recorder()
    rec.dispatch()
    rec.claim("alice", TOKEN_A)
    assert ferry_check(rec.history) == []
    assert ferry_check(_two_winners().history, strict=False,
                       capabilities={"dispatch", "claim"})[0].invariant == "single-winner"
