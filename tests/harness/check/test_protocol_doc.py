"""PROTOCOL.md is the contract users implement from: it must cover what the code checks,
and every ``PROTOCOL.md#anchor`` the product prints must lead somewhere.

Anchors follow GitHub's rule (lower case, punctuation dropped, spaces to hyphens), so a
link in a report or ``--help`` opens the right section on GitHub and in most viewers.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ferry_core import errors
from ferry_harness.check import ops
from ferry_harness.check.checker import INVARIANTS

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "PROTOCOL.md"
REF = re.compile(r"PROTOCOL\.md#([A-Za-z0-9_-]+)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every Markdown heading outside code fences."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) (.+)", line)):
            out.append((len(m.group(1)), m.group(2)))
    return out


def section(text: str, title: str) -> list[str]:
    """Headings nested under the level-2 heading ``title``."""
    out, inside = [], False
    for level, head in headings(text):
        if level == 2:
            inside = head == title
        elif inside:
            out.append(head)
    return out


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_slug_follows_github() -> None:
    assert slug("Leases are half-open") == "leases-are-half-open"
    assert slug("queued_at after a lease expiry") == "queued_at-after-a-lease-expiry"
    assert slug("Declaring `refusal-order`") == "declaring-refusal-order"


def test_anchors_are_unique(doc: str) -> None:
    anchors = [slug(h) for _, h in headings(doc)]
    dupes = sorted({a for a in anchors if anchors.count(a) > 1})
    assert not dupes, f"headings with the same anchor (GitHub would suffix -1): {dupes}"


def test_every_invariant_has_its_section(doc: str) -> None:
    under = section(doc, "Invariants")
    assert sorted(under) == sorted(INVARIANTS), (
        "## Invariants must have one ### section per ferry_harness.check.checker.INVARIANTS id; "
        f"missing {sorted(set(INVARIANTS) - set(under))}, extra {sorted(set(under) - set(INVARIANTS))}")


def test_every_operation_has_its_section(doc: str) -> None:
    under = set(section(doc, "Operations"))
    missing = sorted(set(ops.PROTOCOL) - under)
    assert not missing, f"operations without a ### section under ## Operations: {missing}"


def test_declarations_and_refusals_are_documented(doc: str) -> None:
    for name in [*ops.FEATURES, "dag", *ops.STRICT_CHOICES, "ferry_capabilities",
                 "ferry_skips", "ferry_declares"]:
        assert f"`{name}`" in doc, f"PROTOCOL.md never names `{name}`"
    for cls in (errors.FerryError, *errors.REFUSALS):
        assert f"| `{cls.__name__}` |" in doc, f"error table lacks {cls.__name__}"


def test_internal_links_resolve(doc: str) -> None:
    anchors = {slug(h) for _, h in headings(doc)}
    links = set(re.findall(r"\]\(#([^)]+)\)", doc))
    broken = sorted(links - anchors)
    assert not broken, f"PROTOCOL.md links to missing sections: {broken}"


def test_product_references_resolve(doc: str) -> None:
    """Every ``PROTOCOL.md#x`` in README, harness, scenarios and ferry_core names a heading."""
    anchors = {slug(h) for _, h in headings(doc)}
    broken = []
    files = [ROOT / "README.md"] + [p for d in ("harness", "scenarios", "ferry_core")
                                    for p in sorted((ROOT / d).rglob("*.py"))]
    for path in files:
        if not path.exists():
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            broken += [f"{path.relative_to(ROOT)}:{no}: #{a}" for a in REF.findall(line)
                       if a not in anchors]
    assert not broken, "references to PROTOCOL.md sections that do not exist:\n" + "\n".join(broken)


def test_scenarios_point_into_the_protocol() -> None:
    from ferry_scenarios import SCENARIOS

    bad = {name: s.source for name, s in SCENARIOS.items() if not REF.fullmatch(s.source)}
    assert not bad, f"scenario sources must be PROTOCOL.md#anchor: {bad}"
