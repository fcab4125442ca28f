"""TTL bounds (PROTOCOL.md#limits): every positive integer below 2**62 is accepted and
works; ferry_core refuses 2**62 and more, where ``now + ttl`` could leave SQLite's
signed 64-bit integers."""

from __future__ import annotations

import pytest

from ferry_core import COMPLETED, InvalidArgument

BIG = 2**62 - 1


def test_the_largest_accepted_ttls_work_like_any_other(store, clock):
    tid = store.dispatch(None, queue_ttl_ms=BIG, exec_ttl_ms=BIG, max_attempts=2)
    now = clock()
    v = store.get(tid)
    assert (v.queue_ttl_ms, v.exec_ttl_ms, v.is_logically_expired) == (BIG, BIG, False)
    c = store.claim(tid, "w")
    assert c.lease_expires_at == now + BIG
    clock.advance(10)
    assert store.extend(tid, "w", c.token) == now + 10 + BIG
    store.fulfill(tid, "w", c.token, {"ok": 1})
    assert store.get(tid).status == COMPLETED


@pytest.mark.parametrize("key", ["queue_ttl_ms", "exec_ttl_ms"])
@pytest.mark.parametrize("ttl", [2**62, 2**63 - 1])
def test_a_ttl_of_2_62_or_more_is_refused(store, assert_refused, key, ttl):
    assert_refused(store, InvalidArgument, store.dispatch, None, **{key: ttl})
