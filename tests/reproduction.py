"""How often a reported minimal example must replay: the two rates README.md states (How
the harness works, "Nondeterminism"), held by the fuzz and fault tests, and checked
against the README's sentence by ``tests/test_readme_figures.py``."""

from __future__ import annotations

REPLAYS = 10  # a minimal example is replayed this many times (ferry_harness.run.campaign)
MIN_HITS = 1  # an example found without faults (a racing one replays 2/10 on a loaded machine)
FAULT_ONLY_MIN_HITS = 1  # one found only by a kill fault (shrunk to aim after-commit)


def hits(reproduced: str | None) -> int:
    """The hits of a report's ``"hits/tries"``, which must be out of :data:`REPLAYS`."""
    assert reproduced, "the violation records no replay count"
    got, tries = map(int, reproduced.split("/"))
    assert tries == REPLAYS, f"replayed {tries} times, not {REPLAYS}: {reproduced}"
    return got
