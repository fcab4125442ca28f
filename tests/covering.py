"""A small deterministic pairwise covering-array generator, with constraints.

Used to turn the switches of `tests/variants/configurable.py` into combos: every pair of
choices of any two switches appears in at least one combo, except pairs that cannot
exist (a choice pair `allowed` rejects, or a switch that the combo's capabilities make
meaningless). Greedy, in the AETG spirit, but without randomness: the same switches give
the same combos, in the same order, on every machine (the harness imports a combo by
its name in every worker process). The first combos cover the most pairs, so a prefix
of the list is the best cheap slice.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

Row = dict[str, str]
Pair = tuple[tuple[str, str], tuple[str, str]]  # ((switch, value), (switch, value)), sorted


def _pair(a: str, va: str, b: str, vb: str) -> Pair:
    return ((a, va), (b, vb)) if a < b else ((b, vb), (a, va))


def required_pairs(switches: Mapping[str, tuple[str, ...]], *, pivot: str,
                   meaningful: Callable[[str], frozenset[str]],
                   allowed: Callable[[Mapping[str, str]], bool]) -> set[Pair]:
    """Every pair some valid combo can show: both switches meaningful under some value of
    `pivot` (the switch that decides meaningfulness) and the choices allowed together."""
    out: set[Pair] = set()
    names = list(switches)
    for a, b in itertools.combinations(names, 2):
        for va in switches[a]:
            for vb in switches[b]:
                for p in switches[pivot]:
                    vals = {a: va, b: vb}
                    if vals.setdefault(pivot, p) != p:
                        continue
                    keep = meaningful(p)
                    if a in keep and b in keep and allowed(vals):
                        out.add(_pair(a, va, b, vb))
                        break
    return out


def covered(row: Mapping[str, str], *, pivot: str,
            meaningful: Callable[[str], frozenset[str]]) -> set[Pair]:
    """The pairs one (normalised) combo shows."""
    keep = sorted(meaningful(row[pivot]))
    return {_pair(a, row[a], b, row[b]) for a, b in itertools.combinations(keep, 2)}


def generate(switches: Mapping[str, tuple[str, ...]], *, pivot: str,
             meaningful: Callable[[str], frozenset[str]],
             allowed: Callable[[Mapping[str, str]], bool]) -> list[Row]:
    """Combos covering every required pair. Each switch a combo's `pivot` value makes
    meaningless is pinned to its first (default) choice."""
    todo = required_pairs(switches, pivot=pivot, meaningful=meaningful, allowed=allowed)
    rows: list[Row] = []
    while todo:
        (a, va), (b, vb) = min(todo)
        row: Row = {a: va, b: vb}
        if pivot not in row:  # choose the capabilities first: they decide what counts
            row[pivot] = max(
                (p for p in switches[pivot]
                 if {a, b} <= meaningful(p) and allowed({**row, pivot: p})),
                key=lambda p: _gain(row, pivot, p, todo))
        keep = meaningful(row[pivot])
        for name in switches:
            if name in row:
                continue
            if name not in keep:
                row[name] = switches[name][0]
                continue
            row[name] = max((v for v in switches[name] if allowed({**row, name: v})),
                            key=lambda v: _gain(row, name, v, todo))
        row = {name: row[name] for name in switches}
        gained = covered(row, pivot=pivot, meaningful=meaningful) & todo
        if not gained:  # cannot happen: the seed pair is always new
            raise AssertionError(f"no progress at {row}")
        todo -= gained
        rows.append(row)
    return rows


def _gain(row: Mapping[str, str], name: str, value: str, todo: set[Pair]) -> int:
    """How many uncovered pairs choosing `name=value` adds next to the choices made.
    `max` keeps the first of equal gains, so ties go to the earlier (default) choice."""
    return sum(_pair(name, value, other, v) in todo for other, v in row.items())
