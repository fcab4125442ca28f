"""A pip user's first hour with ``ferry-harness`` (issue 25): the protocol is installed and
readable by section, ``--version``, finite budgets only, strict JSON reports, a random seed
by default with one report directory per run, and install hints that name the
distribution."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from ferry_harness.check.checker import INVARIANTS
from ferry_harness.cli.main import main
from ferry_harness.errors import UsageError
from ferry_harness.report.paths import json_text
from ferry_harness.report.protocol import protocol_text, section, sections
from ferry_harness.run.campaign import CampaignConfig

ROOT = Path(__file__).resolve().parents[3]
ANCHOR = re.compile(r"PROTOCOL\.md#([A-Za-z0-9_{}.-]*)")


def test_protocol_prints_one_section_or_the_whole_document(capsys):
    assert main(["protocol", "single-winner"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### single-winner\n") and "exactly one wins" in out
    assert "### token-unique" not in out  # only that section
    assert main(["protocol", "PROTOCOL.md#missing-methods"]) == 0
    assert capsys.readouterr().out.startswith("### Missing methods\n")
    assert main(["protocol"]) == 0
    assert capsys.readouterr().out == protocol_text()


def test_an_unknown_anchor_is_one_line_with_close_matches(capsys):
    assert main(["protocol", "single-winer"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean single-winner" in err[0]


def test_the_installed_protocol_is_the_repository_one():
    """harness/PROTOCOL.md is a link to the top-level file, shipped as package data."""
    link = ROOT / "harness" / "PROTOCOL.md"
    assert link.is_symlink() and os.readlink(link) == "../PROTOCOL.md"
    assert protocol_text() == (ROOT / "PROTOCOL.md").read_text(encoding="utf-8")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "PROTOCOL.md" in pyproject["tool"]["setuptools"]["package-data"]["ferry_harness"]


def test_every_anchor_named_in_the_harness_resolves_to_a_section():
    """Each ``PROTOCOL.md#…`` in harness/ (an f-string's ``{…}`` stands for every
    invariant id) is a section ``ferry-harness protocol`` can print."""
    names: set[str] = set()
    for path in sorted((ROOT / "harness").rglob("*.py")):
        for found in ANCHOR.findall(path.read_text(encoding="utf-8")):
            found = found.rstrip(".")
            if not found:
                continue  # the prefix alone, built up in code
            names |= set(INVARIANTS) if "{" in found else {found}
    assert len(names) > 30
    missing = sorted(a for a in names if section(a) is None)
    assert not missing, f"anchors no section has: {missing}"
    assert set(INVARIANTS) <= set(sections())


def test_version_names_the_version_and_commit(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert re.match(r"ferry-harness \d+\.\d+\.\d+", out)
    if (ROOT / ".git").exists():
        assert "commit " in out


@pytest.mark.parametrize("argv", [
    ["fuzz", "--budget", "nan"], ["fuzz", "--budget", "inf"], ["fuzz", "--budget", "0"],
    ["fuzz", "--budget", "-3"], ["fuzz", "--op-timeout", "nan"], ["fuzz", "--seed", "-1"],
    ["crash", "--seed", "x"],
], ids=" ".join)
def test_non_finite_or_non_positive_numbers_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_bench_timeout_must_be_finite(capsys):
    assert main(["bench", "--timeout", "nan", "--workers", "1", "--tasks", "1"]) == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.parametrize("field", ["budget_s", "op_timeout_s", "shrink_budget_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -3.0])
def test_the_api_refuses_a_budget_that_never_ends(field, value):
    with pytest.raises(UsageError, match=field):
        CampaignConfig(**{field: value})


def test_reports_are_strict_json():
    text = json_text({"budget": {"budget_s": math.nan}, "xs": [math.inf, 1.5]})
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in a report"))
    assert data == {"budget": {"budget_s": None}, "xs": [None, 1.5]}


def test_fuzz_draws_a_seed_and_writes_its_own_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["fuzz", "--max-examples", "2", "--quiet", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    seed = int(re.search(r"\(seed (\d+), random: --seed fixes it\)", out).group(1))
    latest = tmp_path / "reports" / "latest"
    assert latest.is_symlink() and os.readlink(latest).endswith(f"-seed{seed}")
    report = json.loads((latest / "report.json").read_text())
    assert report["seed"] == seed
    assert "reports/latest" in out
    # an explicit --report-dir is written exactly, and --seed fixes the seed
    assert main(["fuzz", "--max-examples", "1", "--quiet", "--steps", "5", "--seed", "7",
                 "--report-dir", "mine"]) == 0
    assert "(seed 7)" in capsys.readouterr().out
    assert json.loads((tmp_path / "mine" / "report.json").read_text())["seed"] == 7
    assert len(list((tmp_path / "reports").glob("run-*"))) == 1


def test_install_hints_name_the_distribution():
    """``pip install 'ferry[…]'`` names an unrelated project on the public index."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    hints = []
    for path in [ROOT / "README.md", *sorted((ROOT / "harness").rglob("*.py"))]:
        hints += re.findall(r"pip install '([\w.-]+)\[(\w+)\]'", path.read_text())
    assert hints
    for dist, extra in hints:
        assert dist in ("ferry-harness", "."), f"pip install '{dist}[{extra}]'"
        assert extra in extras
