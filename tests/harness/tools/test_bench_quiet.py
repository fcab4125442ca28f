"""``ferry-harness bench --target`` on a user's store (issue 25): no project goal lines, one
"ceiling before", ferry_core as one row beside it unless its variants are asked for, and
plots with no text cut at the figure's edge and no legend over a note."""

from __future__ import annotations

import matplotlib
import matplotlib.figure
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ferry_harness.cli.main import main

USER = "tests.harness.tools.test_bench:stock_store"


def layout_problems(fig: matplotlib.figure.Figure) -> list[str]:
    """Texts outside the figure, and legends covering a text that is not theirs."""
    canvas = FigureCanvasAgg(fig)  # the figure was closed: give it a canvas again
    canvas.draw()
    r = canvas.get_renderer()
    box = fig.bbox
    out = []
    # what is drawn: each panel with its labels, ticks, title and legend; the figure's texts
    drawn = [(f"panel {ax.get_title()!r}", ax.get_tightbbox(r)) for ax in fig.axes
             if ax.get_visible()]
    drawn += [(repr(t.get_text()), t.get_window_extent(r))
              for t in [*fig.texts, fig._suptitle] if t is not None and t.get_text().strip()]
    for what, e in drawn:
        if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1:
            out.append(f"cut at the edge: {what}")
    notes = list(fig.texts) + [t for ax in fig.axes for t in ax.texts]
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        lb = legend.get_window_extent(r)
        out += [f"legend over {t.get_text()!r}" for t in notes
                if t.get_text().strip() and t.get_window_extent(r).overlaps(lb)]
    return out


@pytest.fixture
def figures(monkeypatch):
    """Every figure the bench saves, kept for inspection."""
    saved: list[tuple[str, matplotlib.figure.Figure]] = []
    original = matplotlib.figure.Figure.savefig

    def savefig(self, fname, *args, **kw):
        saved.append((str(fname), self))
        return original(self, fname, *args, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return saved


def test_bench_of_a_users_store_is_quiet_about_the_projects_goal(tmp_path, capsys, figures,
                                                                  monkeypatch):
    # the ceiling's samples, a tenth as long: this is about what is printed and drawn (the
    # full samples took 8 of the test's 11 s)
    from ferry_harness.tools.bench import matrix

    real = matrix.measure_ceiling
    monkeypatch.setattr(matrix, "measure_ceiling", lambda base, updates: real(base, updates // 10))
    out_dir = tmp_path / "bench"
    rc = main(["bench", "--target", f"{USER},ferry_core:LeaseStore", "--workers", "2",
               "--tasks", "20", "--report-dir", str(out_dir)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "goal (" not in captured.out, "the project's own goal, printed for a user's store"
    assert captured.err.count("ceiling before") == 1, captured.err
    variants = [line for line in captured.out.splitlines()
                if line.startswith(("| ferry_core cas/", "| ferry_core immediate/"))]
    assert len(variants) == 1, f"ferry_core expanded into its variants: {variants}"
    md = (out_dir / "report.md").read_text()
    assert "## Goal" not in md
    assert {name.rsplit("/", 1)[-1] for name, _ in figures} >= {"throughput.png", "latency.png",
                                                                "share.png", "tail.png"}
    for name, fig in figures:
        assert not layout_problems(fig), (name, layout_problems(fig))
        labels = [label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]]
        assert not any("goal" in label for label in labels), (name, labels)
