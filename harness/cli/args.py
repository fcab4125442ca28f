"""Argument types shared by every ``ferry-harness`` command, so each flag says the same thing
the same way (``--workers 0`` is refused before anything starts)."""

from __future__ import annotations

import argparse

__all__ = ["fraction", "positive_int"]


def positive_int(text: str) -> int:
    """A whole number > 0. ``positive_int("4") == 4``; ``"0"`` raises ArgumentTypeError."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return value


def fraction(text: str) -> float:
    """A number in [0, 1]. ``fraction("0.35") == 0.35``; ``"2"`` raises ArgumentTypeError."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {value}")
    return value
