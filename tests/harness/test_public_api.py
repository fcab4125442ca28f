"""``harness/__init__.py`` is the public API: every name it lists resolves, is documented,
and nothing private leaks through it."""

from __future__ import annotations

import importlib

import pytest

import ferry_harness


@pytest.mark.parametrize("name", ferry_harness.__all__)
def test_every_public_name_resolves_and_is_documented(name: str) -> None:
    value = getattr(ferry_harness, name)
    assert not name.startswith("_")
    assert (value.__doc__ or "").strip(), f"ferry_harness.{name} has no docstring"
    assert name in dir(ferry_harness)


def test_what_the_readme_recommends_is_public() -> None:
    """README: record your own integration test with ``Recorder`` (issue 25)."""
    from ferry_harness.tools.recorder import Recorder

    assert "Recorder" in ferry_harness.__all__ and ferry_harness.Recorder is Recorder


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = ferry_harness.Nope


def test_importing_the_package_loads_no_layer() -> None:
    """Workers and every pytest session import ``ferry_harness``: it must stay cheap."""
    import subprocess
    import sys

    code = ("import sys, ferry_harness; "
            "print(sorted(m for m in sys.modules if m.startswith('ferry_harness.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    assert importlib.import_module("ferry_harness").__all__ == sorted(ferry_harness.__all__)
