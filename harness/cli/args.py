"""Argument types shared by every ``ferry-harness`` command, so each flag says the same thing
the same way (``--workers 0`` is refused before anything starts)."""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable

from ferry_harness.check.sizes import parse_size

# a subcommand's handler: parsed arguments -> exit code; each cli module's
# ``register(subparsers)`` returns its handlers by command name
Handler = Callable[[argparse.Namespace], int]
Handlers = dict[str, Handler]

__all__ = ["Handler", "Handlers", "fraction", "jobs", "positive_int", "positive_seconds", "random_seed", "seed", "size"]


def positive_int(text: str) -> int:
    """A whole number > 0. ``positive_int("4") == 4``; ``"0"`` raises ArgumentTypeError."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return value


def jobs(text: str) -> int | str:
    """``auto`` or a whole number > 0. ``jobs("2") == 2``; ``jobs("auto") == "auto"``; ``"0"``
    raises ArgumentTypeError."""
    if text.strip().lower() == "auto":
        return "auto"
    return positive_int(text)


def fraction(text: str) -> float:
    """A number in [0, 1]. ``fraction("0.35") == 0.35``; ``"2"`` raises ArgumentTypeError."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1], got {value}")
    return value


def positive_seconds(text: str) -> float:
    """Finite seconds > 0. ``positive_seconds("2.5") == 2.5``; ``"0"``, ``"-3"``, ``"nan"``
    and ``"inf"`` raise ArgumentTypeError (a NaN budget never ends, and a report cannot
    hold it as JSON)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def seed(text: str) -> int:
    """A seed: a whole number >= 0. ``seed("42") == 42``; ``"x"`` raises ArgumentTypeError."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole-number seed, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a seed >= 0, got {value}")
    return value


def random_seed() -> int:
    """A fresh seed for a run that was given none (printed and recorded, so it can be fixed)."""
    return random.SystemRandom().randrange(2**32)


def size(text: str) -> int:
    """``64MiB``, ``8MB``, ``500000`` -> bytes (binary units either way): every size option's
    type (:func:`ferry_harness.check.sizes.parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
