"""Broken stores with more than one bug, composed from ``tests/broken_stores.py``: a
checker must report every distinct invariant such a store breaks, safety first
(PROTOCOL.md#several-findings)."""

from __future__ import annotations

from tests.broken_stores import CheckThenActStore, UntypedArgumentsStore


class UntypedAndRacyStore(CheckThenActStore, UntypedArgumentsStore):
    """Two bugs at once: ``dispatch`` lets TypeError/OverflowError escape on hostile
    arguments (``typed-errors``, robustness) and the claim is check-then-act
    (``single-winner``, safety)."""


def untyped_and_racy(path: str, *, clock) -> UntypedAndRacyStore:
    return UntypedAndRacyStore(path, clock=clock)
