"""``harness/__init__.py`` is the public API: every name it lists resolves, is documented,
and nothing private leaks through it."""

from __future__ import annotations

import importlib

import pytest

import harness


@pytest.mark.parametrize("name", harness.__all__)
def test_every_public_name_resolves_and_is_documented(name: str) -> None:
    value = getattr(harness, name)
    assert not name.startswith("_")
    assert (value.__doc__ or "").strip(), f"harness.{name} has no docstring"
    assert name in dir(harness)


def test_what_the_readme_recommends_is_public() -> None:
    """README: record your own integration test with ``Recorder`` (issue 25)."""
    from harness.tools.recorder import Recorder

    assert "Recorder" in harness.__all__ and harness.Recorder is Recorder


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = harness.Nope


def test_importing_the_package_loads_no_layer() -> None:
    """Workers and every pytest session import ``harness``: it must stay cheap."""
    import subprocess
    import sys

    code = ("import sys, harness; "
            "print(sorted(m for m in sys.modules if m.startswith('harness.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    assert importlib.import_module("harness").__all__ == sorted(harness.__all__)
