"""Every figure the README (and reports/findings.md) quotes from a committed report equals
the JSON it came from.

:data:`FIGURES` holds, for each quoted figure, the sentence it stands in (a regex whose
group 1 is the figure), the committed JSON and how the figure is written from it (the
rounding the prose uses). A README edit that changes a number without regenerating, a
regeneration that changes a number the README still quotes, and a reworded sentence the
pattern no longer finds all fail here. :data:`PASSAGES` are the paragraphs that quote
reports: every number in them is one of the figures or a parameter listed with its reason,
so a new number cannot slip in unchecked. Cheap: reads files, runs nothing.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.reproduction import FAULT_ONLY_MIN_HITS, MIN_HITS, REPLAYS

ROOT = Path(__file__).resolve().parents[1]
README = "README.md"
FINDINGS = "reports/findings.md"
BASELINE = "reports/bench/bench.json"
GOAL = "reports/bench/goal/bench.json"
COMPARE = "reports/bench/compare/bench.json"
PRECISION, RECALL, BUDGET = (f"reports/matrix/{k}.json" for k in ("precision", "recall", "budget"))


@dataclass(frozen=True)
class Figure:
    doc: str  # the document that quotes it
    pattern: str  # a regex (whitespace matches any run of spaces and newlines); group 1 is the figure
    source: str  # the committed JSON it comes from
    value: Callable[[Any], str]  # the figure as the document must write it

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(re.sub(r"(\\ |\s)+", r"\\s+", self.pattern))


@cache
def _json(path: str) -> Any:
    return json.loads((ROOT / path).read_text())


@cache
def _text(path: str) -> str:
    return (ROOT / path).read_text()


# ---------------------------------------------------------------------- how prose rounds
def _round(x: float, places: int = 0) -> Decimal:
    return Decimal(repr(x)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _num(x: float, places: int = 0) -> str:
    return f"{_round(x, places):,}"


def _span(xs: list[float], fmt: Callable[[float], str]) -> str:
    lo, hi = fmt(min(xs)), fmt(max(xs))
    return lo if lo == hi else f"{lo}–{hi}"


def _hundreds(x: float) -> str:
    return f"{round(x, -2):,.0f}"


def _mib_ceil(b: float) -> str:
    return str(math.ceil(b / 2**20))


# ---------------------------------------------------------------------- selections
def _goal(strategy: str, policy: str) -> list[dict[str, Any]]:
    return [r for r in _json(GOAL)["runs"]
            if r["strategy"] == strategy and r["busy_policy"] == policy]


def _cmp(label: str, workers: int = 8) -> list[dict[str, Any]]:
    return [r for r in _json(COMPARE)["runs"] if r.get("label") == label and r["workers"] == workers]


FERRY = "ferry_core cas/spin"


def _load_span(d: Any) -> str:
    """A bench's 1-minute load average over its run, floor of the lower to ceiling of the higher."""
    lo, hi = sorted((d["machine"]["loadavg_start"][0], d["machine"]["loadavg_end"][0]))
    return f"{math.floor(lo)}–{math.ceil(hi)}"


def _lat(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [r["latency_ms"][key] for r in rows]


def _recall_medians(d: Any) -> list[float]:
    by: dict[str, list[float]] = {}
    for r in d["rows"]:
        if r["detect_s"] is not None and r["named"]:
            by.setdefault(r["name"], []).append(r["detect_s"])
    return [statistics.median(v) for v in by.values()]


def _all_named(d: Any) -> str:
    rows = d["rows"]
    return str(len(rows)) if all(r["named"] == r["want"] for r in rows) else \
        f"{sum(r['named'] == r['want'] for r in rows)} of {len(rows)}"


def _violation(lib: str) -> dict[str, Any]:
    return _json(f"reports/adapters/{lib}/report.json")["violations"][0]


def _adapter(lib: str) -> str:
    return f"reports/adapters/{lib}/report.json"


# ---------------------------------------------------------------------- the figures
FIGURES: list[Figure] = [
    # the bench baseline paragraph: the goal runs (8 workers, 20,000 tasks, 3 repetitions)
    Figure(README, r"At (\d+) workers and [\d,]+ tasks ferry_core's hybrid", GOAL,
           lambda d: ",".join(map(str, d["workers"]))),
    Figure(README, r"At \d+ workers and ([\d,]+) tasks ferry_core's hybrid", GOAL,
           lambda d: f"{d['tasks']:,}"),
    Figure(README, r"gives ([\d,–]+) claims/s with p99.9", GOAL,
           lambda d: _span([r["claims_per_s"] for r in _goal("cas", "hybrid")], _hundreds)),
    Figure(README, r"claims/s with p99.9 ([\d–]+) ms, max", GOAL,
           lambda d: _span(_lat(_goal("cas", "hybrid"), "p999"), _num)),
    Figure(README, r"ms, max ([\d–]+) ms and Jain", GOAL,
           lambda d: _span(_lat(_goal("cas", "hybrid"), "max"), _num)),
    Figure(README, r"ms and Jain ([\d.–]+); SQLite's stock", GOAL,
           lambda d: _span([r["jain_fairness"] for r in _goal("cas", "hybrid")], lambda x: _num(x, 3))),
    Figure(README, r"stock handler gives ~([\d,]+) claims/s", GOAL,
           lambda d: _hundreds(statistics.mean(r["claims_per_s"] for r in _goal("cas", "stock")))),
    Figure(README, r"claims/s but p99.9 ([\d–]+) ms", GOAL,
           lambda d: _span(_lat(_goal("cas", "stock"), "p999"), _num)),
    Figure(README, r"p99.9 [\d–]+ ms, max ([\d.–]+) s and Jain", GOAL,
           lambda d: _span([m / 1000 for m in _lat(_goal("cas", "stock"), "max")], lambda x: _num(x, 1))),
    Figure(README, r"s and Jain ([\d.–]+)\. The WAL", GOAL,
           lambda d: _span([r["jain_fairness"] for r in _goal("cas", "stock")], lambda x: _num(x, 2))),
    Figure(README, r"The WAL stays under (\d+) MiB in every run", GOAL,
           lambda d: _mib_ceil(max(r["wal_bytes_max"] or 0 for r in [*d["runs"], *_json(BASELINE)["runs"]]))),
    # ferry_core's decisions: the largest -wal of the benchmark matrix (the baseline)
    Figure(README, r"the largest `-wal` in the benchmark matrix is (\d+) MiB", BASELINE,
           lambda d: _num(max(r["wal_bytes_max"] or 0 for r in d["runs"]) / 2**20)),
    # stores compared in one run: 8 workers, three repetitions
    Figure(README, r"\((\d+) workers, three repetitions", COMPARE,
           lambda d: "8" if 8 in d["workers"] and d["repeat"] == 3 else f"{d['workers']} × {d['repeat']}"),
    Figure(README, r"a (\d+)-CPU machine shared with other jobs, load", COMPARE,
           lambda d: str(d["machine"]["cpus_usable"])),
    Figure(README, r"load average ([\d–]+)\): ferry_core", COMPARE,
           _load_span),
    Figure(README, r"ferry_core\s+([\d,–]+) lifecycles/s", COMPARE,
           lambda d: _span([r["lifecycles_per_s"] for r in _cmp(FERRY)], _num)),
    Figure(README, r"lifecycles/s, p99 ([\d–]+) ms, p99.9", COMPARE, lambda d: _span(_lat(_cmp(FERRY), "p99"), _num)),
    Figure(README, r"ms, p99.9 ([\d–]+) ms, max [\d–]+ ms, Jain", COMPARE,
           lambda d: _span(_lat(_cmp(FERRY), "p999"), _num)),
    Figure(README, r"ms, max ([\d–]+) ms, Jain", COMPARE, lambda d: _span(_lat(_cmp(FERRY), "max"), _num)),
    Figure(README, r"ms, Jain ([\d.–]+),\s+(?:\d+) CAS misses", COMPARE,
           lambda d: _span([r["jain_fairness"] for r in _cmp(FERRY)], lambda x: _num(x, 2))),
    Figure(README, r"Jain [\d.–]+,\s+(\d+) CAS misses", COMPARE,
           lambda d: str(sum(r["cas_misses"] for r in _cmp(FERRY)))),
    Figure(README, r"a WAL that stays under (\d+) MiB \(", COMPARE,
           lambda d: _mib_ceil(max(r["wal_bytes_max"] for r in _cmp(FERRY)))),
    Figure(README, r"under \d+ MiB \((\d+) MiB\s+at 16 workers\)", COMPARE,
           lambda d: _mib_ceil(max(r["wal_bytes_max"] for r in _cmp(FERRY, 16)))),
    Figure(README, r"litequeue ([\d,–]+)/s with a worst case", COMPARE,
           lambda d: _span([r["lifecycles_per_s"] for r in _cmp("litequeue")], _num)),
    Figure(README, r"with a worst case of ([\d.–]+) s", COMPARE,
           lambda d: _span([m / 1000 for m in _lat(_cmp("litequeue"), "max")], lambda x: _num(x, 1))),
    Figure(README, r"localqueue\s+([\d,–]+)/s, worst", COMPARE,
           lambda d: _span([r["lifecycles_per_s"] for r in _cmp("localqueue")], _num)),
    Figure(README, r"/s, worst ([\d.–]+) s; persist-queue", COMPARE,
           lambda d: _span([m / 1000 for m in _lat(_cmp("localqueue"), "max")], lambda x: _num(x, 1))),
    Figure(README, r"delivered tasks twice in (\d+ of \d+) runs", COMPARE,
           lambda d: (lambda rs: f"{sum(not (r.get('verified') or {}).get('ok') for r in rs)} of {len(rs)}")(
               [r for r in d["runs"] if r.get("label") == "persist_queue"])),
    Figure(README, r"\(litequeue's is ([\d–]+) ms\)", COMPARE, lambda d: _span(_lat(_cmp("litequeue"), "p99"), _num)),
    Figure(README, r"it stays at ([\d.–]+) × raw/2", COMPARE,
           lambda d: _span([g["lifecycle_ratio"] for g in d["goal"] if g["label"] == FERRY], lambda x: _num(x, 2))),
    # the precision, recall and budget matrix
    Figure(README, r"stress and schedule mode × (\d+) seeds × \d+ s: \d+ runs", PRECISION,
           lambda d: str(len(d["seeds"]))),
    Figure(README, r"× \d+ seeds × (\d+) s: \d+ runs, \d+ violations", PRECISION, lambda d: f"{d['budget_s']:g}"),
    Figure(README, r"× \d+ s: (\d+) runs, \d+ violations", PRECISION, lambda d: str(len(d["rows"]))),
    Figure(README, r"each of the configurable store's (\d+) combinations", PRECISION,
           lambda d: str(len({r["name"] for r in d["rows"] if r["name"].startswith("configurable/")}))),
    Figure(README, r"\d+ runs, (\d+) violations", PRECISION,
           lambda d: str(sum(r["verdict"] != "pass" for r in d["rows"]))),
    Figure(README, r"every broken store — (\d+) on ferry_core", RECALL,
           lambda d: str(len({r["name"] for r in d["rows"] if r["name"].startswith("ferry_core/")}))),
    Figure(README, r"and the same (\d+) bugs on the independent store", RECALL,
           lambda d: str(len({r["name"] for r in d["rows"] if r["name"].startswith("slow/")}))),
    Figure(README, r"\(`tests/variants/broken_slow.py`\) — × (\d+) seeds", RECALL, lambda d: str(len(d["seeds"]))),
    Figure(README, r"all (\d+) runs named under the store's own", RECALL, _all_named),
    Figure(README, r"the slowest median time to detect is ([\d.]+) s", RECALL,
           lambda d: _num(max(_recall_medians(d)), 1)),
    Figure(README, r"most are under (\d+) s\.", RECALL,
           lambda d: "1" if sum(m < 1 for m in _recall_medians(d)) > len(_recall_medians(d)) / 2 else "(not most)"),
    Figure(README, r"`--budget (\d+)`, both modes", BUDGET, lambda d: f"{d['budget_s']:g}"),
    Figure(README, r"both modes, (\d+) seeds: every run ended", BUDGET, lambda d: str(len(d["seeds"]))),
    Figure(README, r"every run ended within ([\d.]+) s", BUDGET, lambda d: _num(max(r["wall_s"] for r in d["rows"]), 1)),
    Figure(README, r"\(the limit is (\d+) s\)", BUDGET, lambda d: f"{d['budget_s'] * 1.1 + 10:g}"),
    Figure(README, r"the hanging one with a `(\w+)` finding", BUDGET,
           lambda d: "/".join(sorted({str(r["named"]) for r in d["rows"] if r["name"] == "hangs in claim"}))),
]

# SQLite against PostgreSQL (reports/bench/postgres)
PG_BENCH = "reports/bench/postgres/bench.json"


def _pg(target: str, workers: int) -> list[dict[str, Any]]:
    return [r for r in _json(PG_BENCH)["runs"] if r["target"] == target and r["workers"] == workers]


_PG, _LITE = "ferry_core:PgLeaseStore", "ferry_core:LeaseStore"
FIGURES += [
    Figure(README, r"`PgLeaseStore` drains ([\d,–]+) lifecycles/s with one worker", PG_BENCH,
           lambda d: _span([r["lifecycles_per_s"] for r in _pg(_PG, 1)], _num)),
    Figure(README, r"with one worker\s+and ([\d,–]+) with eight", PG_BENCH,
           lambda d: _span([r["lifecycles_per_s"] for r in _pg(_PG, 8)], _num)),
    Figure(README, r"\(([\d.–]+) × its one-worker rate", PG_BENCH,
           lambda d: _span([r["vs_1_worker"] for r in _pg(_PG, 8)], lambda x: _num(x, 2))),
    Figure(README, r"against ([\d,–]+) and [\d,–]+ for\s+ferry_core on SQLite", PG_BENCH,
           lambda d: _span([r["lifecycles_per_s"] for r in _pg(_LITE, 1)], _num)),
    Figure(README, r"against [\d,–]+ and ([\d,–]+) for\s+ferry_core on SQLite", PG_BENCH,
           lambda d: _span([r["lifecycles_per_s"] for r in _pg(_LITE, 8)], _num)),
    Figure(README, r"jobs: load average ([\d–]+)\) `PgLeaseStore`", PG_BENCH,
           _load_span),
    Figure(README, r"exactly once, with (no) CAS miss", PG_BENCH,
           lambda d: "no" if all(r["verified"]["ok"] and r["cas_miss_ratio"] == 0
                                 for r in d["runs"]) else "SOME"),
]

# the adapters table of the README and the summary table of findings.md
_LIBS = {"persist_queue": "persist-queue", "litequeue": "litequeue", "localqueue": "localqueue",
         "huey": "huey", "simplebroker": "simplebroker", "procrastinate": "procrastinate",
         "pgqueuer": "pgqueuer"}
for _lib, _name in _LIBS.items():
    _row = rf"\n\| {re.escape(_name)} [^|]*\| "
    FIGURES += [
        Figure(README, _row + r"(\w+) \|", _adapter(_lib), lambda d: d["verdict"].upper()),
        Figure(README, _row + r"\w+ \| (`[\w-]+`|—) \|", _adapter(_lib),
               lambda d: f"`{d['violations'][0]['invariant']}`" if d["violations"] else "—"),
        Figure(FINDINGS, rf"\n\| {re.escape(_name)} [^|]*\| [^|]* \| \*\*(\w+)\*\*", _adapter(_lib),
               lambda d: d["verdict"].upper()),
    ]
    if _lib == "localqueue":
        FIGURES += [
            Figure(README, _row + r"PASS \| — \| \d+ seeds × (\d+) s, (\d+) violations", _adapter(_lib),
                   lambda d: f"{d['budget']['budget_s']:g}"),
            Figure(README, _row + r"PASS \| — \| \d+ seeds × \d+ s, (\d+) violations", _adapter(_lib),
                   lambda d: str(len(d["violations"]))),
            Figure(FINDINGS, _row.replace(" [^|]*", r" \(`SimpleQueue`'s engine\) ") +
                   r"[^|]* \| \*\*PASS\*\* \| — \| — \| (\d+) s × \d+ seeds", _adapter(_lib),
                   lambda d: f"{d['budget']['budget_s']:g}"),
            Figure(FINDINGS, _row.replace(" [^|]*", r" \(`SimpleQueue`'s engine\) ") +
                   r"[^|]* \| \*\*PASS\*\* \| — \| — \| \d+ s × \d+ seeds, (\d+) violations", _adapter(_lib),
                   lambda d: str(len(d["violations"]))),
        ]
        continue
    FIGURES += [
        Figure(README, _row + r"FAIL \| `[\w-]+` \| [^|\n]*\((\d+/\d+)\)", _adapter(_lib),
               lambda d: d["violations"][0]["reproduced"]),
        Figure(FINDINGS, rf"\n\| {re.escape(_name)} [^|]*\| [^|]* \| \*\*FAIL\*\* \| [^|]* \| (\d+) steps",
               _adapter(_lib), lambda d: str(len(d["violations"][0]["steps"]))),
        Figure(FINDINGS, rf"\n\| {re.escape(_name)} [^|]*\| [^|]* \| \*\*FAIL\*\* \| [^|]* \| \d+ steps \| (\d+/\d+)",
               _adapter(_lib), lambda d: d["violations"][0]["reproduced"]),
    ]
FIGURES += [
    # pgqueuer's second finding, after the racy first
    Figure(README, r"\(`token-unique`, (\d+/\d+)\) \|", _adapter("pgqueuer"),
           lambda d: next(v["reproduced"] for v in d["violations"] if v["invariant"] == "token-unique")),
    Figure(README, r"the first-result variant passes \d+ seeds × (\d+) s", _adapter("huey/first_result"),
           lambda d: f"{d['budget']['budget_s']:g}" if d["verdict"] == "pass" else d["verdict"]),
]


@dataclass(frozen=True)
class Passage:
    """A paragraph that quotes reports: from ``start`` to ``end`` (both included)."""

    doc: str
    start: str
    end: str
    # numbers in it that are not figures of a report, each with the reason
    parameters: dict[str, str]


PASSAGES = [
    Passage(README, "In [reports/bench/postgres]", "with no CAS miss.",
            {"2 CPUs": "the machine named in the report's header, not a figure"}),
    Passage(README, "Baseline from this 2-CPU machine", "(ferry_core resets it past 8 MiB).",
            {"2-CPU": "the machine named in the report's header, not a figure",
             "2 ms": "the hybrid policy's definition", "0.1–1 ms": "the hybrid policy's definition",
             "8 MiB": "ferry_core's WAL reset threshold (store setting)",
             "3 shows": "the --repeat option"}),
    Passage(README, "From [reports/bench/compare/report.md]", "the raw ceiling one page per write.",
            {"issue 19": "an issue number", "8 and 16 workers": "the worker counts of the command",
             "at 16 workers": "the worker count that figure is for",
             "raw/2": "the definition of the lifecycle ceiling",
             "9.1 WAL pages": "schema version 4 in reports/bench/notes.md (measured by hand, no JSON)",
             "1 KiB": "ferry_core's page size (store setting)", "4 KiB": "SQLite's default page size",
             "schema version 4": "a version number",
             "7.8 of": "schema version 3 in reports/bench/notes.md (measured by hand, no JSON)"}),
    Passage(README, "- **Precision:** every correct store", "with a `liveness` finding.",
            {"10 s busy timeout": "the variant's definition",
             "10 s busy-timeout": "the variant's definition", "10 s and 30 s": "the variants' definitions"}),
    Passage(README, "| library | verdict | invariant | minimal reproduction |",
            "(10/10) |\n\n### A library", {
                "1.1.0": "library version", "0.9": "library version", "1.4.1": "library version",
                "3.5.4": "library version", "8.7.2": "library version",
                "3.10.0": "library version", "1.6.0": "library version",
                "3 seeds": "seeds 1 and 2 were run by hand; only seed 0 is committed (tests/reports.py)"}),
]


def _find(fig: Figure) -> re.Match[str]:
    hits = list(fig.regex.finditer(_text(fig.doc)))
    assert len(hits) == 1, (f"{fig.doc}: {len(hits)} matches for {fig.pattern!r} (the sentence "
                            "changed? update FIGURES in tests/test_readme_figures.py with it)")
    return hits[0]


@pytest.mark.parametrize("fig", FIGURES, ids=[f"{f.doc}:{f.pattern[:50]}" for f in FIGURES])
def test_a_quoted_figure_equals_its_report(fig):
    got = _find(fig).group(1)
    want = fig.value(_json(fig.source))
    assert got == want, (f"{fig.doc} says {got!r} where {fig.source} gives {want!r} "
                         f"(in {fig.pattern!r}): regenerate, or correct the text")


def _locate(text: str, phrase: str, pos: int) -> re.Match[str]:
    """``phrase`` in ``text`` from ``pos``, any run of whitespace matching any other."""
    found = re.compile(r"\s+".join(map(re.escape, phrase.split()))).search(text, pos)
    assert found, f"{phrase!r} is no longer in the document: update PASSAGES"
    return found


NUMBER = re.compile(r"(?<![\w.\-/#])\d[\d,]*(?:\.\d+)?(?:[–-]\d[\d,]*(?:\.\d+)?)?")


@pytest.mark.parametrize("passage", PASSAGES, ids=[p.start[:30] for p in PASSAGES])
def test_every_number_of_a_quoting_passage_is_checked(passage):
    text = _text(passage.doc)
    a = _locate(text, passage.start, 0).start()
    b = _locate(text, passage.end, a).end()
    covered = [m.span(1) for f in FIGURES if f.doc == passage.doc
               for m in f.regex.finditer(text) if a <= m.start(1) < b]
    for param in passage.parameters:
        covered += [(a + m.start(), a + m.end()) for m in
                    re.finditer(r"\s+".join(map(re.escape, param.split())), text[a:b])]
    loose = [m.group() for m in NUMBER.finditer(text, a, b)
             if not any(s <= m.start() and m.end() <= e for s, e in covered)]
    assert not loose, (f"{passage.doc}: numbers quoted near {passage.start!r} that no figure "
                       f"checks: {loose} (add a Figure, or a parameter with its reason)")


def test_findings_md_shows_each_committed_minimal_example():
    """The step lists findings.md prints (the first ```json block of a library's section)
    are the committed reports' minimal examples."""
    text = _text(FINDINGS)
    for lib, heading in (("persist_queue", "## persist-queue"), ("litequeue", "## litequeue"),
                         ("huey", "## huey"), ("simplebroker", "## simplebroker"),
                         ("procrastinate", "**procrastinate — "), ("pgqueuer", "**pgqueuer — ")):
        section = text[text.index(heading):]
        block = section[section.index("```json") + len("```json"):]
        shown = json.loads(block[:block.index("```")])
        assert shown == _violation(lib)["steps"], f"{FINDINGS} {heading}: not the committed example"


def test_the_readme_states_the_reproduction_rates_the_tests_hold():
    """tests/reproduction.py's two rates are the ones README.md promises (Nondeterminism)."""
    text = re.sub(r"\s+", " ", _text(README))
    without = re.search(r"a minimal example found without faults replays at least (\d+) times? "
                        r"in (\d+)", text)
    fault = re.search(r"found only by a `kill` or `pause` fault .*? replays at least (\d+) "
                      r"times? in (\d+)", text)
    assert without and fault, "the README no longer states both reproduction rates"
    assert (int(without[1]), int(without[2])) == (MIN_HITS, REPLAYS), without[0]
    assert (int(fault[1]), int(fault[2])) == (FAULT_ONLY_MIN_HITS, REPLAYS), fault[0]
