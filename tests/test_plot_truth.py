"""Renderers tell the truth (issue 11, item 2): captions name only the series drawn, every panel
names its unit, a null row's reason stays off the margin band, the screen names its workers.

The figures are built in memory (``*_figure``) and walked: legend entries, the line styles of
the lines drawn, axis labels and text extents, checked against the caption REPORT.md prints.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import matplotlib.pyplot as plt
import pytest
from test_plots import ROLE, WHY, _cells, _result

from specreplay.render.markdown import figure_block, figure_label
from specreplay.render.plots import (
    context_figure,
    depth_figure,
    forest_figure,
    screen_figure,
    survival_figure,
    survival_gap,
)
from specreplay.results.model import Cell, DepthFigure, Label, Level, Result, ScreenFigures

LABELS = [lb.value for lb in Label]
STYLE = {"-": "MEASURED", "--": "SIMULATED", ":": "ESTIMATED"}


def _labels_in(text: str) -> set[str]:
    return {lb for lb in LABELS if lb in text}


def _drawn(fig: Any) -> tuple[set[str], set[str]]:
    """Return (labels in the legend entries, labels of the line styles drawn in the axes)."""
    legend = {lb for leg in fig.legends for t in leg.get_texts() for lb in _labels_in(t.get_text())}
    styles = {
        STYLE[line.get_linestyle()]
        for ax in fig.axes
        for line in ax.get_lines()
        if line.get_linestyle() in STYLE and len(line.get_xdata()) > 1
    }
    return legend, styles


def _without_measured(result: Result) -> Result:
    cells = tuple(
        dataclasses.replace(c, arms={a: f for a, f in c.arms.items() if f.label != Label.MEASURED})
        for c in result.cells
    )
    return dataclasses.replace(result, cells=cells)


@pytest.mark.parametrize("measured", [True, False], ids=["with-measured", "simulated-only"])
@pytest.mark.parametrize("name", ["context.png", "survival.png"])
def test_every_caption_names_only_the_series_drawn(name: str, measured: bool) -> None:
    result = _result(_cells())
    if not measured:
        result = _without_measured(result)
    fig = {"context.png": context_figure, "survival.png": survival_figure}[name](result)
    try:
        legend, styles = _drawn(fig)
        title = fig._suptitle.get_text()
    finally:
        plt.close(fig)
    assert legend == styles  # every label in the legend is a line drawn, and the reverse
    # the requalification's survival is SIMULATED only: no MEASURED curve, whatever the arms
    assert legend == (
        {"MEASURED", "SIMULATED"} if measured and name == "context.png" else {"SIMULATED"}
    )
    block = figure_block(name, figure_label(result, name), result=result)
    caption = block.split("\n\n", 1)[1]  # "*name* (LABELS): caption" as REPORT.md prints it
    # the one sentence allowed to name a label not drawn says that it is not drawn
    gap = survival_gap(result) if name == "survival.png" else None
    assert (gap is not None) == (measured and name == "survival.png")
    if gap is not None:
        assert gap.startswith("No MEASURED curve") and gap in caption and gap in title
        caption, title = caption.replace(gap, ""), title.replace(gap, "")
    assert _labels_in(caption) == legend, caption
    assert _labels_in(title) <= legend, title


def _depth_result() -> Result:
    depths = tuple(
        DepthFigure(
            "a@3",
            d,
            1.0 + 0.5 * d,
            0.9 + 0.5 * d,
            1.1 + 0.5 * d,
            Label.SIMULATED,
            True,
            None,
            tokens_per_s=1000.0 * (1.0 + 0.5 * d) / (1 + 0.05 * d),
            tokens_per_s_lo=900.0,
            tokens_per_s_hi=2500.0,
        )
        for d in range(1, 5)
    )
    pooled = Cell(Level.POOLED, None, None, 40, {}, depths=depths, best_depth={"a@3": 4})
    return dataclasses.replace(
        _result((pooled,), "sweep"),
        arms=("a@3",),
        options={"estimator_used": "analytic", "cost": "linear:1:0.05"},
    )


def test_every_depth_panel_names_its_unit() -> None:
    fig = depth_figure(_depth_result())
    try:
        shown = [ax for ax in fig.axes if ax.get_visible()]
        units = {ax.get_title(): ax.get_ylabel() for ax in shown}
    finally:
        plt.close(fig)
    assert len(units) == 2  # R and, with a cost model, tokens/s
    for title, unit in units.items():
        want = "tokens per second" if "tokens/s" in title else "tokens per round"
        assert want in unit, (title, unit)


def _screen_cell(worker: str, batch: int, context: int) -> Cell:
    depths = tuple(
        DepthFigure(
            worker,
            d,
            1.5,
            1.4,
            1.6,
            Label.ESTIMATED,
            d <= 4,
            None if d <= 4 else "past",
            tokens_per_s=100.0 * d if d <= 4 else None,
            tokens_per_s_lo=90.0 * d,
            tokens_per_s_hi=110.0 * d,
            rank=5 - d if d <= 4 else None,
        )
        for d in range(1, 6)
    )
    fig = ScreenFigures(3, 0.2, 0.3, 10.0, 9.0, 11.0, 2, 500, ("s",), Label.MEASURED)
    return Cell(
        Level.SCREEN,
        None,
        None,
        0,
        {},
        depths=depths,
        batch=batch,
        context=context,
        worker=worker,
        screen=fig,
    )


def test_the_screen_names_its_workers() -> None:
    cells = (_screen_cell("w0", 4, 8192), _screen_cell("w1", 4, 8192), _screen_cell("w2", 8, 8192))
    result = dataclasses.replace(_result(cells, "screen"), arms=("w0", "w1", "w2"))
    fig = screen_figure(result)
    try:
        title = fig._suptitle.get_text()
        panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        shared = next(ax for t, ax in panels.items() if "batch 4" in t)
        legend = [t.get_text() for t in shared.get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert all(w in title for w in ("w0", "w1", "w2"))
    gone = "\nUNSUPPORTED: depth 5..5"
    want = ["worker w0, w1: batch 4, context 8192", "worker w2: batch 8, context 8192"]
    assert sorted(panels) == [w + gone for w in want]
    assert legend == ["w0", "w1"]


def _note_clear_of_band(cells: tuple[Cell, ...], margin: float) -> list[str]:
    """Draw the forest plot; assert each null row's reason lies right of the band, inside the
    axis; return the reasons as drawn."""
    fig = forest_figure(cells, role=ROLE, relative=True, margin=margin, title="t")
    try:
        ax = fig.axes[0]
        renderer = fig.canvas.get_renderer()
        band_right = ax.transData.transform((100.0 * margin, 0.0))[0]
        axis = ax.get_window_extent(renderer)
        notes = [t for t in ax.texts if t.get_text().strip().startswith("—")]
        assert notes
        for t in notes:
            box = t.get_window_extent(renderer)
            assert box.x0 >= band_right - 0.5 and box.x1 <= axis.x1 + 0.5, t.get_text()
        return [t.get_text() for t in notes]
    finally:
        plt.close(fig)


def test_a_null_rows_reason_does_not_run_over_the_margin_band() -> None:
    texts = _note_clear_of_band(_cells(), 0.005)
    assert [t.replace("\n", " ").strip() for t in texts] == [f"— {WHY}"]


def test_long_reasons_with_a_wide_band_still_stay_clear() -> None:
    long = "cell holds 2 requests, fewer than --min-requests 10, and more words to make it wide"
    cells = tuple(
        c
        if c.level != Level.FAMILY_BUCKET
        else dataclasses.replace(
            c,
            deltas=tuple(
                dataclasses.replace(
                    d,
                    point=None,
                    rel=None,
                    lo=None,
                    hi=None,
                    rel_lo=None,
                    rel_hi=None,
                    verdict=None,
                    null_reason=long,
                )
                for d in c.deltas
            ),
        )
        for c in _cells()
    )
    texts = _note_clear_of_band(cells, 0.2)  # a band as wide as ±20 %
    assert len(texts) == 10
