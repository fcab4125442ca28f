"""PROTOCOL.md as installed with the package, read by section.

Every finding names the rule it breaks as ``PROTOCOL.md#`` and an anchor; a user who installed ferry
with pip has no checkout to open, so the document ships inside the package (package data)
and ``ferry-harness protocol ANCHOR`` prints the section. Anchors follow GitHub's rule
(lower case, punctuation dropped, spaces to hyphens), so the same name works in a browser.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Section", "close_matches", "protocol_text", "read_hint", "section", "sections",
           "slug"]

_HEADING = re.compile(r"(#{1,6}) (.+)")


@dataclass(frozen=True)
class Section:
    """One heading of the document and the text under it (down to the next heading of the
    same or a higher level, so a ``##`` section includes its ``###`` subsections)."""

    anchor: str
    level: int
    title: str
    text: str


def protocol_text() -> str:
    """The whole PROTOCOL.md shipped with this ferry (``harness/PROTOCOL.md``)."""
    return resources.files("ferry_harness").joinpath("PROTOCOL.md").read_text(encoding="utf-8")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: ``slug("Leases are half-open") == "leases-are-half-open"``."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def sections(text: str | None = None) -> dict[str, Section]:
    """Every heading outside code fences, by anchor, in document order."""
    lines = (protocol_text() if text is None else text).splitlines()
    marks: list[tuple[int, int, str]] = []  # (line number, level, title)
    fenced = False
    for no, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := _HEADING.match(line)):
            marks.append((no, len(m.group(1)), m.group(2).strip()))
    out: dict[str, Section] = {}
    for i, (no, level, title) in enumerate(marks):
        end = next((n for n, lv, _t in marks[i + 1:] if lv <= level), len(lines))
        body = "\n".join(lines[no:end]).rstrip() + "\n"
        out.setdefault(slug(title), Section(slug(title), level, title, body))
    return out


def section(anchor: str, text: str | None = None) -> Section | None:
    """The section ``anchor`` names (a leading ``#`` or ``PROTOCOL.md#`` is allowed), or None."""
    key = anchor.strip().removeprefix("PROTOCOL.md").lstrip("#").lower()
    return sections(text).get(key)


def close_matches(anchor: str, text: str | None = None, n: int = 5) -> list[str]:
    """Anchors that look like a mistyped ``anchor`` (for a usage error)."""
    key = anchor.strip().lstrip("#").lower()
    names = list(sections(text))
    found = difflib.get_close_matches(key, names, n=n, cutoff=0.5)
    return found or [a for a in names if key and key in a][:n]


def read_hint(anchor: str) -> str:
    """How a pip user reads the rule ``anchor`` names: ``ferry-harness protocol ANCHOR``."""
    return f"`ferry-harness protocol {anchor}`"
