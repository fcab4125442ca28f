"""The committed reports are the ones ``tests/reports.py`` regenerates, made with the
arguments it documents, and each says which ferry made it.

Cheap: reads the committed files, runs nothing. A report made by hand, by an older command
or with uncommitted changes fails here, naming the file: regenerate it with the command
``python -m tests.reports --list`` prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.matrix import KINDS, render_dir
from tests.reports import REPORTS, Regenerated

ROOT = Path(__file__).resolve().parents[1]


def _files(rep: Regenerated) -> list[Path]:
    d = ROOT / rep.report_dir
    if rep.group == "matrix":
        return [d / f"{k}.json" for k in KINDS]
    return [d / ("bench.json" if rep.group == "bench" else "report.json")]


def _arg(argv: tuple[str, ...], flag: str, default: str | None = None) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else default


#: options that say where a matrix's files go and how many runs share the machine, not
#: which runs are made: a table written elsewhere and copied in is the same table
_PLACEMENT = ("--out", "--runs-dir", "--at-once", "--jobs")  # --jobs: --at-once's old name


def _without_placement(command: list[str]) -> list[str]:
    """``command`` without its placement options (``--out`` is put back as the documented
    ``reports/matrix``, where the table is committed)."""
    out, i = [], 0
    while i < len(command):
        if command[i] in _PLACEMENT and i + 1 < len(command):
            i += 2
            continue
        out.append(command[i])
        i += 1
    return [*out, "--out", "reports/matrix"] if out else out


def _provenance(data: dict[str, Any]) -> dict[str, Any] | None:
    """Where a report records its ferry: ``ferry`` (fuzz, matrix), ``machine.ferry`` (bench)."""
    return data.get("ferry") or (data.get("machine") or {}).get("ferry")


def test_every_committed_report_is_one_tests_reports_regenerates():
    committed = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*.json")}
    documented = {rep.report_dir for rep in REPORTS}
    assert committed - documented == set(), "committed reports no command in tests/reports.py makes"
    missing = [str(f.relative_to(ROOT)) for rep in REPORTS for f in _files(rep) if not f.exists()]
    assert not missing, f"tests/reports.py documents reports that are not committed: {missing}"


@pytest.mark.parametrize("rep", REPORTS, ids=[r.report_dir for r in REPORTS])
def test_a_committed_report_was_made_with_its_documented_arguments(rep):
    argv = rep.argv
    for path in _files(rep):
        data = json.loads(path.read_text())
        if rep.group == "adapters":
            got = (data["target"], data["seed"], data["budget"]["budget_s"], data["mode"],
                   data["faults"])
            want = (_arg(argv, "--target"), int(_arg(argv, "--seed")),
                    float(_arg(argv, "--budget")), "stress", [])
        elif rep.group == "bench":
            strategies = [s for s in data["strategies"] if s != "as-is"]  # non-ferry_core stores
            policies = [s for s in data["busy_policies"] if s != "as-is"]
            got = (data["target"], data["workers"], strategies, policies, data["tasks"],
                   data["repeat"])
            want = (_arg(argv, "--target", "ferry_core:LeaseStore"),
                    [int(w) for w in _arg(argv, "--workers").split(",")],
                    _arg(argv, "--strategy").split(","), _arg(argv, "--busy-policy").split(","),
                    int(_arg(argv, "--tasks")), int(_arg(argv, "--repeat", "1")))
        else:  # the matrix: tests.matrix's defaults, and the command it records
            # the whole matrix, or its one table (``--only KIND`` rewrites that table alone)
            command = list(data.get("command") or [])
            if command[3:5] == ["--only", path.stem]:
                command[3:5] = []
            command = _without_placement(command)
            got = (data["budget_s"], data["seeds"], command or None)
            want = (30.0, [0, 1, 2], data.get("command") and ["python", *argv])
            if data.get("command"):
                assert data["command"][:3] == ["python", "-m", "tests.matrix"], data["command"]
                assert "--budget" not in data["command"] and "--seeds" not in data["command"]
        assert got == want, f"{path.relative_to(ROOT)} was not made by `python {' '.join(argv)}`"




def test_every_committed_report_records_ferry_version_and_commit():
    bad = []
    for rep in REPORTS:
        for path in _files(rep):
            data = json.loads(path.read_text())
            prov = _provenance(data)
            name = str(path.relative_to(ROOT))
            if not prov or not prov.get("version") or not prov.get("commit"):
                bad.append(f"{name}: no ferry version and commit")
            elif prov.get("dirty") != "no":
                bad.append(f"{name}: made at {prov['commit'][:12]} with uncommitted changes")
            rows = [r.get("ferry_commit") for r in data.get("rows", ())]
            if prov and any(c != prov.get("commit") for c in rows):
                bad.append(f"{name}: its runs were made by another commit than the table says")
    assert not bad, ("regenerate these with the command `python -m tests.reports --list` "
                     "prints for them:\n  " + "\n  ".join(bad))


def test_the_committed_matrix_md_is_rendered_from_its_json():
    d = ROOT / "reports" / "matrix"
    assert (d / "matrix.md").read_text() == render_dir(d), \
        "reports/matrix/matrix.md differs from its JSON: python -m tests.matrix --render"
