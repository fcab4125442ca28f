"""Checker benchmarks (pytest-benchmark): full and incremental checks of synthetic legal
histories at 1k / 10k / 100k ops, and k-wide races on one task.

With benchmarks disabled (``--benchmark-disable``, or under xdist, which disables them)
only the small sizes run (as smoke tests, each asserting the verdict); ``--benchmark-only``
runs every size. The growth exponent is
log(t(100k) / t(10k)) / log(10) of the ``full`` group.
"""

from __future__ import annotations

import pytest

from ferry_harness.check.checker import Checker
from ferry_harness.check.history import History
from tests.benchmarks import races, synth

SIZES = (1_000, 10_000, 100_000)


def _sizes(benchmark, n: int) -> None:
    if n > 1_000 and benchmark.disabled:  # (xdist disables benchmarks too)
        pytest.skip("large sizes run only with --benchmark-only")


@pytest.mark.parametrize("n", SIZES)
def test_bench_full_check(benchmark, n):
    _sizes(benchmark, n)
    benchmark.group = "checker: full"
    h, _ = synth.history(n)

    def full():
        return Checker().check(h)

    found = benchmark.pedantic(full, rounds=1, iterations=1)
    assert found == []


@pytest.mark.parametrize("n", SIZES)
def test_bench_incremental_check(benchmark, n):
    """One check per generator step, as the executor runs it."""
    _sizes(benchmark, n)
    benchmark.group = "checker: incremental (whole history)"
    h, steps = synth.history(n)

    def incremental():
        checker, grown, prev, found = Checker(), History(), 0, []
        for end in steps:
            grown.ops.extend(h.ops[prev:end])
            found += checker.check(grown, grown.ops[prev:end])
            prev = end
        return found

    assert benchmark.pedantic(incremental, rounds=1, iterations=1) == []


@pytest.mark.parametrize("k", (4, 8, 20))
def test_bench_claim_race_with_bad_op(benchmark, k):
    benchmark.group = "checker: k-wide races"
    found = benchmark(lambda: Checker().check(History(races.claim_race(k, "refused"))))
    assert [v.invariant for v in found] == ["linearizable"]


@pytest.mark.parametrize("k", (4, 8, 20))
def test_bench_fulfill_race_two_winners(benchmark, k):
    benchmark.group = "checker: k-wide races"
    found = benchmark(lambda: Checker().check(History(races.fulfill_race(k, True))))
    assert [v.invariant for v in found] == ["token-unique"]


def test_bench_salvage_rounds_lost_one(benchmark):
    benchmark.group = "checker: k-wide races"
    found = benchmark(lambda: Checker().check(History(races.salvage_rounds(4, 4, lost=9))))
    assert [v.invariant for v in found] == ["no-lost-task"]
