"""The statistics every bench run reports: nearest-rank percentiles, Jain's fairness index
and a log-spaced latency histogram (pure functions, no I/O)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence

#: Log-spaced latency histogram bin edges in ms: 1 us .. 100 s, 10 bins per decade.
HIST_EDGES_MS = [round(10 ** (i / 10 - 3), 6) for i in range(0, 81)]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1.0 when all equal, 1/n when one takes everything."""
    n = len(values)
    total = float(sum(values))
    squares = float(sum(v * v for v in values))
    if n == 0 or squares == 0:
        return 1.0
    return total * total / (n * squares)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in [0, 1])."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


def latency_summary(ns: Iterable[int]) -> dict[str, float]:
    """{p50, p99, p999, max, mean} in ms and the sample count, from durations in ns."""
    ms = sorted(v / 1e6 for v in ns)
    return {"p50": percentile(ms, 0.50), "p99": percentile(ms, 0.99),
            "p999": percentile(ms, 0.999), "max": ms[-1] if ms else 0.0,
            "mean": (sum(ms) / len(ms)) if ms else 0.0, "count": len(ms)}


def latency_histogram(ns: Iterable[int]) -> list[int]:
    """Counts per HIST_EDGES_MS bin (below the first edge counts in bin 0, above the last
    in the last bin)."""
    counts = [0] * (len(HIST_EDGES_MS) - 1)
    last = len(counts) - 1
    for v in ns:
        i = bisect.bisect_right(HIST_EDGES_MS, v / 1e6) - 1
        counts[min(max(i, 0), last)] += 1
    return counts


def spread(values: Sequence[float], fmt: str) -> str:
    """``min–max`` of ``values`` in ``fmt`` (one value where both print the same), e.g.
    ``spread([6622.4, 6904.9], ",.0f") == "6,622–6,905"``."""
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else (
        f"{format(lo, fmt)}–{format(hi, fmt)}")
