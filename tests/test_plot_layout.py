"""The requalify's plots laid out from their texts' sizes (issue 18, item 3), and written fast.

``tight_layout`` is gone from forest.png, context.png and survival.png
(:mod:`specreplay.render.layout`); these tests draw each figure and read back where matplotlib
put every text: each lies inside the figure, the legend and the labels below a grid clear the
panels and one another, the forest plot's legend is never cut at the figure's sides (it was,
with five entries, before this issue), each panel keeps its title and ticks, and the grid names
its axes once. A PNG is written at zlib level 1, read from the zlib header of its first IDAT
chunk (RFC 1950: FLEVEL 0 is "fastest").
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
import test_plots
from test_plots import ROLE, _result

from specreplay.render import plots
from specreplay.render.canvas import new_figure
from specreplay.render.layout import Margins, place
from specreplay.results.model import Cell
from specreplay.stats.buckets import DEFAULT_BUCKETS

SLACK = 1.0  # pixels: a text's box may touch the figure's edge or its neighbour's by rounding


FOUR = ["math", "chat", "code", "translation"]
"""Four families: five panels, a grid of two rows (a row's titles under another's ticks)."""


def _cells() -> tuple[Cell, ...]:
    """test_plots' cells with :data:`FOUR` families."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(test_plots, "FAMILIES", FOUR)
        return test_plots._cells()


def _small_sample(cells: tuple[Cell, ...]) -> tuple[Cell, ...]:
    """Flag the second cell's delta small-sample: the forest legend then has five entries."""
    d = dataclasses.replace(cells[1].deltas[0], small_sample=True)
    return (cells[0], dataclasses.replace(cells[1], deltas=(d,)), *cells[2:])


def _figure(name: str) -> Any:
    cells = _small_sample(_cells())
    if name == "forest":
        return plots.forest_figure(cells, role=ROLE, relative=True, margin=0.005, title="t",
                                   buckets=DEFAULT_BUCKETS)  # fmt: skip
    return getattr(plots, f"{name}_figure")(_result(cells))


def _texts(fig: Any) -> list[Any]:
    """Every visible, non-empty text of ``fig``: figure texts, legends, titles, labels, ticks."""
    found = [*fig.texts, *(t for leg in fig.legends for t in leg.get_texts())]
    found += [t for t in (fig._suptitle, fig._supxlabel, fig._supylabel) if t is not None]
    for ax in fig.axes:
        if ax.get_visible():
            found += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
            found += _drawn_ticks(ax)
    return [t for t in found if t.get_visible() and t.get_text()]


def _drawn_ticks(ax: Any) -> list[Any]:
    """The tick labels drawn: matplotlib keeps labels for ticks outside the view, undrawn."""
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    xs = [t for t in ax.get_xticklabels() if x0 <= t.get_position()[0] <= x1]
    return xs + [t for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1]


def _overlap(a: Any, b: Any) -> bool:
    return (
        a.x0 < b.x1 - SLACK and b.x0 < a.x1 - SLACK and a.y0 < b.y1 - SLACK and b.y0 < a.y1 - SLACK
    )


@pytest.mark.parametrize("name", ["forest", "context", "survival"])
def test_every_text_lies_inside_the_figure(name: str) -> None:
    """No tick label, title, label, legend entry or footnote runs off the PNG (the forest
    legend of five entries did, at both sides, under ``ncol=len(handles)``)."""
    fig = _figure(name)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for t in _texts(fig):
        e = t.get_window_extent(renderer)
        if name == "forest" and t in fig.axes[0].texts and t.get_clip_on():
            continue  # a null row's reason is clipped to the axis (test_plot_truth checks it)
        assert e.x0 >= box.x0 - SLACK and e.x1 <= box.x1 + SLACK, (t.get_text(), e, box)
        assert e.y0 >= box.y0 - SLACK and e.y1 <= box.y1 + SLACK, (t.get_text(), e, box)


@pytest.mark.parametrize("name", ["forest", "context", "survival"])
def test_legend_labels_and_titles_clear_the_panels_and_one_another(name: str) -> None:
    """Below the panels: the x label (a grid's shared one, or the forest's), the legend and
    the forest's footnote, none over a panel's ticks or over one another; the title above
    every panel."""
    fig = _figure(name)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.get_visible()]
    legend = fig.legends[0].get_window_extent(renderer)
    below = [legend]
    if name == "forest":
        foot = next(t for t in fig.texts if t.get_gid() == "footnote")
        assert foot.get_text().startswith("Bar: the cell's")
        below.append(foot.get_window_extent(renderer))
        title = fig.axes[0].title.get_window_extent(renderer)
        assert title.y0 >= fig.axes[0].get_window_extent(renderer).y1 - SLACK
    else:
        below.append(fig._supxlabel.get_window_extent(renderer))
        title = fig._suptitle.get_window_extent(renderer)
        assert not any(_overlap(title, p) for p in panels)
        ylabel = fig._supylabel.get_window_extent(renderer)
        assert not any(_overlap(ylabel, p) for p in panels)
    for i, a in enumerate(below):
        assert not any(_overlap(a, p) for p in panels), (name, i)
        assert not any(_overlap(a, b) for b in below[i + 1 :]), (name, i)
    for i, a in enumerate(panels):  # a panel's titles and ticks clear its neighbours'
        assert not any(_overlap(a, b) for b in panels[i + 1 :]), (name, i)


def test_the_forest_legend_wraps_to_fit_and_the_figure_grows() -> None:
    """Five entries do not fit one row of a 9-inch figure: the legend takes two rows, keeps
    every entry, and the figure is taller than with one row by about a row's height."""
    narrow = _figure("forest")
    (legend,) = narrow.legends
    entries = [t.get_text() for t in legend.get_texts()]
    assert entries == ["EQUIVALENT", "DIFFERENT", "INCONCLUSIVE", plots.SMALL_SAMPLE_LEGEND,
                       "equivalence margin ±0.5%"]  # fmt: skip
    assert 1 < legend._ncols < len(entries)
    wide = plots.forest_figure(_cells(), role=ROLE, relative=True, margin=0.005, title="t",
                               buckets=DEFAULT_BUCKETS)  # fmt: skip
    assert wide.legends[0]._ncols == len(wide.legends[0].get_texts())  # four fit one row
    grown = narrow.get_figheight() - wide.get_figheight()
    assert 0.08 < grown < 0.3  # a 7-point row: about 0.15 inch


@pytest.mark.parametrize("name", ["context", "survival"])
def test_a_grid_names_its_axes_once_and_keeps_every_panel(name: str) -> None:
    """The x and y labels are the figure's (every panel shares them); each panel keeps its
    title, its own tick labels (the n under each bucket) and its y tick labels."""
    result = _result(_cells())
    fig = _figure(name)
    series = {"context": plots.context_series, "survival": plots.survival_series}[name](result)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    want_x = {"context": "context bucket (target context length); n = requests in the cell",
              "survival": "draft position j"}[name]  # fmt: skip
    assert fig._supxlabel.get_text() == want_x
    assert fig._supylabel.get_text() == {"context": "R, tokens per round",
                                         "survival": "P(A ≥ j)"}[name]  # fmt: skip
    assert len(shown) == 5  # pooled and four families: two rows
    assert [ax.get_title() for ax in shown] == [p.title for p in series]
    for ax, panel in zip(shown, series, strict=True):
        assert [t.get_text() for t in ax.get_xticklabels()] == list(panel.ticks)
        assert ax.get_xlabel() == ax.get_ylabel() == ""
        assert [t for t in ax.get_yticklabels() if t.get_text()]  # labelleft on every panel
    arms = {s.arm for p in series for s in p.series}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(legend) == len(arms) and all(any(a in e for e in legend) for a in arms)


def test_place_keeps_each_margin_in_inches() -> None:
    """Margins in inches become the panels' edges: 0.5 inch left of a 4-inch-wide figure is
    an eighth; two rows 0.4 inch apart around panels of (3 − 0.3 − 0.2 − 0.4) / 2 inches."""
    fig = new_figure(4.0, 3.0)
    fig.subplots(2, 1)
    place(fig, Margins(left=0.5, right=0.25, top=0.3, bottom=0.2, hgap=0.4), nrows=2)
    p = fig.subplotpars
    assert (p.left, p.right, p.top, p.bottom) == pytest.approx((0.125, 0.9375, 0.9, 0.2 / 3))
    assert p.hspace == pytest.approx(0.4 / ((3.0 - 0.3 - 0.2 - 0.4) / 2))
    top, bottom = (ax.get_position() for ax in fig.axes)
    assert (top.y0 - bottom.y1) * 3.0 == pytest.approx(0.4)


def test_place_keeps_a_panel_when_the_margins_overflow() -> None:
    """Margins wider than the figure are shrunk in proportion: the panel keeps a tenth."""
    fig = new_figure(2.0, 2.0)
    fig.subplots()
    place(fig, Margins(left=3.0, right=1.0, top=0.1, bottom=0.1))
    box = fig.axes[0].get_position()
    assert box.width == pytest.approx(0.1) and box.x0 == pytest.approx(0.9 * 3.0 / 4.0)


def _idat_flevel(png: bytes) -> int:
    """Return the FLEVEL bits of the zlib stream of the first IDAT chunk (RFC 1950, 2.2)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at = 8
    while True:
        (size,) = struct.unpack(">I", png[at : at + 4])
        kind = png[at + 4 : at + 8]
        if kind == b"IDAT":
            cmf, flg = png[at + 8], png[at + 9]
            assert (cmf * 256 + flg) % 31 == 0 and cmf & 0x0F == 8  # a deflate stream
            return flg >> 6
        at += 12 + size


def test_a_png_is_written_at_the_fastest_zlib_level(tmp_path: Path) -> None:
    """FLEVEL 0 ("fastest", zlib levels 0–1); Pillow's default 6 writes 2. The image is whole:
    its IDAT stream inflates to height × (1 + 4 × width) bytes (RGBA, a filter byte a row)."""
    path = tmp_path / "survival.png"
    plots.survival_plot(_result(_cells()), path)
    png = path.read_bytes()
    assert _idat_flevel(png) == 0
    width, height = struct.unpack(">II", png[16:24])
    chunks, at = [], 8
    while at < len(png):
        (size,) = struct.unpack(">I", png[at : at + 4])
        if png[at + 4 : at + 8] == b"IDAT":
            chunks.append(png[at + 8 : at + 8 + size])
        at += 12 + size
    assert len(zlib.decompress(b"".join(chunks))) == height * (1 + 4 * width)
