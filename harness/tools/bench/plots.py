"""PNG plots for ``ferry-harness bench`` (needs matplotlib: ``pip install 'ferry-harness[plots]'``).

Imported lazily by :mod:`ferry_harness.tools.bench.report`; without matplotlib the import fails
and the bench writes its report without plots.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402

from ferry_harness.tools.bench.records import BenchResult, RunRecord  # noqa: E402
from ferry_harness.tools.bench.stats import HIST_EDGES_MS  # noqa: E402
from ferry_harness.tools.bench.targets import ferry_core_only  # noqa: E402

_DPI = 110


def _series(result: BenchResult) -> dict[tuple[str, ...], list[RunRecord]]:
    """Runs grouped by (strategy, busy policy), each sorted by worker count."""
    groups: dict[tuple[str, ...], list[RunRecord]] = {}
    for r in result["runs"]:
        if r.get("error"):
            continue
        groups.setdefault((r["strategy"], r["busy_policy"], r.get("label", "")), []).append(r)
    for runs in groups.values():
        runs.sort(key=lambda r: r["workers"])
    return groups


def _agg(runs: list[RunRecord], value: Any) -> tuple[list[int], list[float],
                                                          list[float], list[float]]:
    """Per worker count: median, min and max of ``value(run)`` over the repetitions."""
    by_w: dict[int, list[float]] = {}
    for r in runs:
        by_w.setdefault(r["workers"], []).append(value(r))
    xs = sorted(by_w)
    med = [statistics.median(by_w[w]) for w in xs]
    return xs, med, [min(by_w[w]) for w in xs], [max(by_w[w]) for w in xs]


def _line(ax: Any, runs: list[RunRecord], value: Any, key: tuple[str, ...], index: int,
          floor: float = 0.0) -> None:
    xs, med, lo, hi = _agg(runs, value)
    style = _style(key, index)
    (line,) = ax.plot(xs, [max(v, floor) for v in med], label=_label(key), **style)
    if any(a != b for a, b in zip(lo, hi, strict=True)):  # repetitions: show the spread
        ax.fill_between(xs, [max(v, floor) for v in lo], [max(v, floor) for v in hi],
                        color=line.get_color(), alpha=0.15, linewidth=0)


def _style(key: tuple[str, ...], index: int) -> dict[str, str]:
    strategy = key[0]
    return {"marker": "os^Dv<>p*h"[index % 10],
            "linestyle": "-" if strategy in ("cas", "as-is") else "--"}


def _label(key: tuple[str, ...]) -> str:
    if len(key) > 2 and key[2]:
        return key[2]  # the bench's own label (names the store when several are compared)
    return "as measured" if key[:2] == ("as-is", "as-is") else f"{key[0]} / {key[1]}"


def _workers_axis(ax: Any, result: BenchResult) -> None:
    ws = sorted({r["workers"] for r in result["runs"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ws)
    ax.set_xticklabels([str(w) for w in ws])
    ax.set_xlabel("worker processes")
    ax.grid(True, which="both", alpha=0.3)


def plot_throughput(result: BenchResult, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (key, runs) in enumerate(sorted(_series(result).items())):
        _line(ax, runs, lambda r: r["claims_per_s"], key, i)
    ceiling = result["ceiling"]["updates_per_s"]
    top = max((r["claims_per_s"] for r in result["runs"]), default=0.0)
    note = None
    if ceiling * 0.5 <= 2.5 * top:
        ax.axhline(ceiling * 0.5, color="grey", linestyle=":",
                   label=f"0.5 × raw ceiling ({ceiling * 0.5:,.0f}/s)")
    else:  # drawing it would flatten every curve: say where it is, below the chart (a
        # note inside the axes sits under the legend or the curves)
        note = (f"0.5 × raw ceiling = {ceiling * 0.5:,.0f}/s, off the chart "
                f"({ceiling * 0.5 / top:.1f} × the best run)")
    ax.set_ylim(bottom=0, top=top * 1.08 if top > 0 else None)
    ax.set_ylabel("claims / s (each followed by fulfill)")
    ax.set_title(f"Throughput vs workers — {result['tasks']:,} tasks, "
                 f"{result['machine']['cpus_usable']} CPUs")
    _workers_axis(ax, result)
    _legend(ax)
    if note:
        fig.text(0.01, 0.01, note, ha="left", va="bottom", fontsize=8, color="dimgrey")
    fig.tight_layout(rect=(0, 0.04 if note else 0, 1, 1))
    _save(fig, path)


def _legend(ax: Any) -> None:
    """The legend where it covers no curve; outside the axes when there are many series."""
    n = len(ax.get_legend_handles_labels()[1])
    if n > 4:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    elif n:
        ax.legend(fontsize=8, loc="best")


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=_DPI, bbox_inches="tight")  # no label cut at the figure's edge
    plt.close(fig)


def plot_latency(result: BenchResult, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, stat, title in ((axes[0], "p99", "p99"), (axes[1], "max", "max")):
        for i, (key, runs) in enumerate(sorted(_series(result).items())):
            _line(ax, runs, lambda r, st=stat: r["latency_ms"][st], key, i, floor=1e-3)
        ax.set_yscale("log")
        ax.set_title(f"claim latency {title}")
        _workers_axis(ax, result)
    if ferry_core_only(result):  # the project's own goal; not a line for another store
        axes[1].axhline(50, color="grey", linestyle=":", label="goal max 50 ms")
    axes[0].set_ylabel("ms (poll_next until it returns a claim)")
    _legend(axes[1])
    fig.tight_layout()
    _save(fig, path)


def plot_share(result: BenchResult, path: Path) -> None:
    """Per-worker share of claims × W (1.0 = an equal share), one panel per series."""
    groups = sorted(_series(result).items())
    cols = min(2, len(groups)) or 1
    rows = (len(groups) + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.6 * rows), squeeze=False,
                             sharey=True)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax, (key, runs) in zip(axes.flat, groups, strict=False):
        lowest: dict[int, tuple[float, float]] = {}
        for r in runs:
            claims = r["per_worker_claims"]
            total = sum(claims) or 1
            shares = [c * len(claims) / total for c in claims]
            ax.scatter([r["workers"]] * len(shares), shares, s=14, alpha=0.5, color="C0")
            top = max(shares)
            j = r["jain_fairness"]
            prev = lowest.get(r["workers"])
            lowest[r["workers"]] = (min(j, prev[0]) if prev else j, max(top, prev[1]) if prev else top)
        for w, (j, top) in lowest.items():
            ax.annotate(f"J={j:.3f}", (w, top), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=7)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.margins(x=0.12, y=0.2)  # room for the J= labels inside the panel
        ax.set_title(_label(key), fontsize=10)
        ax.set_ylabel("claims share × workers")
        _workers_axis(ax, result)
    fig.suptitle("Per-worker share of claims\n(1.0 = equal; J = Jain's index, lowest repetition)",
                 fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def plot_tail(result: BenchResult, path: Path, workers: int) -> bool:
    """Survival function P(latency > x) at one worker count, from the runs' histograms."""
    merged: dict[tuple[str, ...], list[int]] = {}  # histograms summed over repetitions
    for r in result["runs"]:
        if r["workers"] == workers and not r.get("error"):
            key = (r["strategy"], r["busy_policy"], r.get("label", ""))
            prev = merged.get(key, [0] * len(r["latency_hist"]))
            merged[key] = [a + b for a, b in zip(prev, r["latency_hist"], strict=True)]
    if not merged:
        return False
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (key, counts) in enumerate(sorted(merged.items())):
        total = sum(counts) or 1
        xs, ys, above = [], [], total
        for edge, c in zip(HIST_EDGES_MS[1:], counts, strict=True):
            above -= c
            if above <= 0:
                break
            xs.append(edge)
            ys.append(above / total)
        ax.step(xs, ys, where="post", label=_label(key),
                linestyle=_style(key, i)["linestyle"])
    ax.axhline(1e-3, color="grey", linestyle=":", linewidth=0.8)
    ax.axvline(15, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("claim latency ms (histogram bin edges)")
    ax.set_ylabel("fraction of claims slower")
    reps = result.get("repeat", 1)
    ax.set_title(f"Claim latency tail, {workers} workers"
                 + (f" (all {reps} repetitions)" if reps > 1 else ""))
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    fig.tight_layout()
    _save(fig, path)
    return True


def write_plots(result: BenchResult, directory: Path | str) -> list[str]:
    """Write every plot into ``directory``; returns the file names."""
    d = Path(directory)
    names = []
    plot_throughput(result, d / "throughput.png")
    names.append("throughput.png")
    plot_latency(result, d / "latency.png")
    names.append("latency.png")
    plot_share(result, d / "share.png")
    names.append("share.png")
    ws = sorted({r["workers"] for r in result["runs"]})
    tail_w = 8 if 8 in ws else (ws[-1] if ws else None)
    if tail_w is not None and plot_tail(result, d / "tail.png", tail_w):
        names.append("tail.png")
    return names
