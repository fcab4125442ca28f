"""Resolve ``--target module:factory`` into a callable, with errors that say what to fix."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from ferry_harness.errors import TargetError

DEFAULT_TARGET = "ferry_core:LeaseStore"


def add_target_option(parser: Any) -> None:
    """The ``--target`` option, worded the same for every subcommand that takes one."""
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, metavar="MODULE:FACTORY",
        help=f"store factory called as factory(path, clock=...) (default {DEFAULT_TARGET})")


def load_factory(spec: str) -> Callable[..., Any]:
    """Import ``module:attr`` (the current directory is importable, like ``python -m``)."""
    if ":" not in spec:
        raise TargetError(f"--target must look like module:factory, got {spec!r}")
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module raised while importing
        raise TargetError(f"cannot import {module_name!r} for --target: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise TargetError(f"{spec} is not callable; it must be factory(path, *, clock) -> store")
    try:
        sig = inspect.signature(obj)
        sig.bind("db-path", clock=lambda: 0)
    except TypeError as exc:
        raise TargetError(f"{spec} cannot be called as factory(path, *, clock): {exc}") from None
    except ValueError:
        pass  # builtins without a signature: trust it
    return obj


def import_root(spec: str) -> str | None:
    """The directory the target's module was imported from (what ``sys.path`` needs for
    ``replay`` to find it again from anywhere), or None for an installed package."""
    module_name = spec.partition(":")[0]
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path:
        return None
    root = os.path.dirname(os.path.abspath(path))
    depth = module_name.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)
    for _ in range(depth):
        root = os.path.dirname(root)
    if "site-packages" in root or "dist-packages" in root:
        return None
    return root


def add_import_root(root: str | None) -> None:
    """Make a recorded import root importable again (``replay`` from another directory)."""
    if root and os.path.isdir(root) and root not in sys.path:
        sys.path.insert(0, root)

