"""Sizes: the WAL bound every command defaults to, and the one parser every size option uses.

PROTOCOL.md#wal-bounded: the ``-wal`` "stays under 64 MiB however long the store runs its
ordinary workload"; ``--wal-bound`` (fuzz, check) and the checker's defaults all read
:data:`WAL_BOUND_BYTES`. Pure: no I/O.
"""

from __future__ import annotations

import math

WAL_BOUND_BYTES = 64 << 20  # PROTOCOL.md#wal-bounded: 64 MiB

# binary multiples whichever way they are written (KB = KiB = K), as the CLI always took them
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """``64MiB``, ``8MB``, ``512KiB``, ``1.5GiB``, ``500000`` -> bytes (> 0).

    Raises ValueError with a sentence for the user (a CLI turns it into a usage error)."""
    t = str(text).strip().upper().replace(" ", "")
    num = t.rstrip("KMGIB")
    unit = t[len(num):]
    try:
        value = float(num) * _UNITS[unit]
    except (ValueError, KeyError):
        raise ValueError(f"not a size: {text!r} (bytes, or a number with KiB, MiB, GiB, KB, "
                         "MB or GB: try 64MiB or 500000)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"a size must be positive, got {text!r}")
    return int(value)
