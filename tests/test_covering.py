"""The configurable store's combos are a pairwise covering array of its switches.

Checked by brute force, independently of tests/covering.py: for every two switches and
every two of their choices, either some combo shows that pair (both switches meaningful
under the combo's capabilities) or no valid combo could.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools

from tests import covering
from tests.variants import configurable as cfgmod


def _shows(cfg: cfgmod.Config, a: str, va: str, b: str, vb: str) -> bool:
    keep = cfgmod.meaningful(cfg.caps)
    return (a in keep and b in keep and getattr(cfg, a) == va and getattr(cfg, b) == vb)


def _possible(a: str, va: str, b: str, vb: str) -> bool:
    for caps in cfgmod.SWITCHES["caps"]:
        vals = {a: va, b: vb}
        if vals.setdefault("caps", caps) != caps:
            continue
        keep = cfgmod.meaningful(caps)
        if a in keep and b in keep and cfgmod.allowed(vals):
            return True
    return False


def missing_pairs(combos: list[cfgmod.Config]) -> list[tuple[str, str, str, str]]:
    out = []
    for a, b in itertools.combinations(cfgmod.SWITCHES, 2):
        for va, vb in itertools.product(cfgmod.SWITCHES[a], cfgmod.SWITCHES[b]):
            if _possible(a, va, b, vb) and not any(_shows(c, a, va, b, vb) for c in combos):
                out.append((a, va, b, vb))
    return out


def test_every_pair_of_choices_is_in_some_combo():
    combos = list(cfgmod.COMBOS.values())
    assert missing_pairs(combos) == []


def test_a_missing_pair_is_found():
    combos = list(cfgmod.COMBOS.values())
    # drop every combo that shows one particular pair: the check must name it
    pair = ("binding", "bound_declared", "caps", "no_claim")
    fewer = [c for c in combos if not _shows(c, *pair)]
    assert pair in missing_pairs(fewer)
    assert missing_pairs(combos[:-1]) != []  # every combo covers a pair no other does


def test_combos_are_normalised_allowed_and_distinct():
    combos = list(cfgmod.COMBOS.values())
    assert len(set(combos)) == len(combos)
    for cfg in combos:
        assert cfg.normalized() == cfg
        assert cfgmod.allowed(dataclasses.asdict(cfg))
    # every choice of every switch is used somewhere
    for name, choices in cfgmod.SWITCHES.items():
        assert {getattr(c, name) for c in combos} == set(choices), name


def test_every_combo_is_an_importable_factory_with_its_config():
    mod = importlib.import_module("tests.variants.configurable")
    for name, cfg in cfgmod.COMBOS.items():
        assert getattr(mod, name).config == cfg


def test_generator_is_deterministic_and_handles_constraints():
    switches = {"x": ("0", "1"), "y": ("a", "b", "c"), "z": ("p", "q")}

    def meaningful(x: str) -> frozenset[str]:
        return frozenset({"x", "y"}) if x == "1" else frozenset(switches)

    def allowed(vals) -> bool:
        return not (vals.get("y") == "c" and vals.get("z") == "q")

    rows = covering.generate(switches, pivot="x", meaningful=meaningful, allowed=allowed)
    assert rows == covering.generate(switches, pivot="x", meaningful=meaningful,
                                     allowed=allowed)
    need = covering.required_pairs(switches, pivot="x", meaningful=meaningful, allowed=allowed)
    assert (("y", "c"), ("z", "q")) not in need
    assert (("x", "1"), ("z", "q")) not in need  # z means nothing when x=1
    got = set().union(*(covering.covered(r, pivot="x", meaningful=meaningful) for r in rows))
    assert need <= got
    assert all(allowed(r) for r in rows)
    assert all(r["z"] == "p" for r in rows if r["x"] == "1")


def test_readme_states_the_generated_numbers():
    from pathlib import Path

    need = covering.required_pairs(cfgmod.SWITCHES, pivot="caps", meaningful=cfgmod.meaningful,
                                   allowed=cfgmod.allowed)
    text = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    assert (f"{len(cfgmod.SWITCHES)} switches, {len(need):,} pairs, "
            f"{len(cfgmod.COMBOS)} combinations") in text
