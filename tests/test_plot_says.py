"""Plots that say what they draw (issue 16, item 7), read back from the figures' artists.

Each test draws a figure in memory (``*_figure``) and reads what it draws (axis limits, line
and collection coordinates, texts, z-orders, marker sizes) against figures computed here from
the result the plot was given, never against pixels:

- the Medusa forest plot (the MT-Bench answers of tests/data/medusa-mtbench, 10 questions per
  category) keeps its headline, the pooled interval, readable; bars cut at the edge say they are
  cut and print their finite ends (the user saw "too few requests for a bounded interval" beside
  a finite interval in TABLES.md);
- context.png says the same of a bar cut at a panel's edge;
- survival.png draws a MEASURED curve where the cells hold one, and says when they hold none;
- screen.png and depths.png keep the ring visible around the best-depth star.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.collections import LineCollection, PathCollection
from test_plot_truth import _depth_result, _screen_cell
from test_plots import _cells, _result

from specreplay import api
from specreplay.render.files import render
from specreplay.render.markdown import figure_block, figure_label
from specreplay.render.plots import (
    context_figure,
    depth_figure,
    forest_figure,
    screen_figure,
    survival_figure,
    survival_gap,
)
from specreplay.results.model import Cell, Delta, Label, Level, Result, Role, Survival

MEDUSA = Path(__file__).parent / "data" / "medusa-mtbench"
STEM = "temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3.jsonl"


@pytest.fixture(scope="module")
def medusa() -> Result:
    """Vicuna 13B against 7B on 80 MT-Bench questions, 8 categories of 10 (about 1 s)."""
    return api.interval(
        MEDUSA / f"medusa-vicuna-7b-v1.3-{STEM}",
        MEDUSA / f"medusa-vicuna-13b-v1.3-{STEM}",
        question_file=MEDUSA / "question.jsonl",
        n_boot=200,
    )


def _forest(result: Result) -> Any:
    """The forest figure exactly as :func:`~specreplay.render.files.render` asks for it."""
    margin = result.options["margin"]
    return forest_figure(
        result.cells,
        role=Role.B_VS_A,
        relative=margin["kind"] == "relative",
        margin=float(margin["margin"]),
        title="t",
        buckets=result.options.get("buckets"),
    )


def _rel(d: Delta) -> tuple[float, float, float]:
    """Δ/R_a and its interval in % (the forest plot's unit with a relative margin)."""
    assert d.rel is not None and d.rel_lo is not None and d.rel_hi is not None
    return 100.0 * d.rel, 100.0 * d.rel_lo, 100.0 * d.rel_hi


def _rows(result: Result) -> dict[str, tuple[float, float, float]]:
    """Per drawn row label (as the y ticks spell it), its (Δ, lo, hi) in %."""
    out = {}
    for c in result.cells:
        d = c.delta(Role.B_VS_A)
        if c.level in (Level.POOLED, Level.FAMILY) and d is not None:
            out[f"{c.family or 'pooled'}  (n={c.n_requests})"] = _rel(d)
    return out


def _read_forest(fig: Any) -> dict[str, Any]:
    """The forest axis as drawn: x limits, bars and dots by row label, cut texts, footnote."""
    ax = fig.axes[0]
    ticks = zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)
    labels = {round(y): t.get_text() for y, t in ticks}
    (bars,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    (dots,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    return {
        "ax": ax,
        "xlim": ax.get_xlim(),
        "bars": {labels[round(s[0][1])]: (s[0][0], s[1][0]) for s in bars.get_segments()},
        "dots": {labels[round(y)]: x for x, y in dots.get_offsets()},
        "cut": {t.get_gid(): t.get_text() for t in ax.texts if str(t.get_gid()).startswith("cut")},
        "foot": " ".join(t.get_text() for t in fig.texts).replace("\n", " "),
    }


def test_medusa_forest_axis_keeps_the_pooled_interval_readable(medusa: Result) -> None:
    """The 10-question categories no longer stretch the axis: the pooled bar, the headline,
    takes at least a sixth of the axis before padding (5% a side); it took 4% before."""
    want = _rows(medusa)
    fig = _forest(medusa)
    try:
        got = _read_forest(fig)
    finally:
        plt.close(fig)
    left, right = got["xlim"]
    _, plo, phi = want["pooled  (n=80)"]
    assert got["bars"]["pooled  (n=80)"] == pytest.approx((plo, phi), rel=1e-12)
    assert (phi - plo) / (right - left) >= (1.0 / 6.0) / 1.1 - 1e-12
    for label, (point, lo, hi) in want.items():  # every dot is drawn inside the axis
        assert got["dots"][label] == pytest.approx(point, rel=1e-12)
        assert left < point < right, label
        assert got["bars"][label] == pytest.approx((lo, hi), rel=1e-12)
    # the widest categories run past the edge (extraction: −76% to +15% of R_a)
    cut = {lb for lb, (_, lo, hi) in want.items() if lo < left or hi > right}
    assert "extraction  (n=10)" in cut and "pooled  (n=80)" not in cut
    # a category fits only if its bar leaves the pooled bar a sixth of the axis: the narrowest
    # 10-question bar (the small-cell hull at 1 − α/2) is drawn whole exactly when it does
    widths = sorted((hi - lo, lb) for lb, (_, lo, hi) in want.items() if lb != "pooled  (n=80)")
    narrow_lo, narrow_hi = want[widths[0][1]][1:]
    span = max(narrow_hi, phi, 0.0) - min(narrow_lo, plo, 0.0)
    assert (widths[0][1] not in cut) == ((phi - plo) / span >= 1.0 / 6.0)


def test_a_cut_bar_says_it_is_cut_and_prints_its_finite_ends(
    medusa: Result, tmp_path: Path
) -> None:
    """Each bar past the edge has an arrowhead and its interval written beside the axis as
    TABLES.md prints it; the footnote says "cut", not "too few requests for a bounded
    interval" (every interval here is finite)."""
    want = _rows(medusa)
    render(medusa, tmp_path)
    tables = (tmp_path / "TABLES.md").read_text(encoding="utf-8")
    fig = _forest(medusa)
    try:
        got = _read_forest(fig)
        arrows = [
            (line.get_marker(), line.get_xdata()[0])
            for line in got["ax"].get_lines()
            if line.get_marker() in ("<", ">")
        ]
    finally:
        plt.close(fig)
    left, right = got["xlim"]
    cut = {lb: iv for lb, iv in want.items() if iv[1] < left or iv[2] > right}
    assert len(cut) >= 2
    assert set(got["cut"]) == {f"cut: {lb}" for lb in cut}
    for label, (_, lo, hi) in cut.items():
        ends = f"[{lo:+.2f}%, {hi:+.2f}%]"
        assert got["cut"][f"cut: {label}"] == f"cut: {ends}"
        assert ends in tables  # the same interval TABLES.md gives the cell
    assert sorted(arrows) == sorted(
        [("<", left) for _, lo, _ in cut.values() if lo < left]
        + [(">", right) for _, _, hi in cut.values() if hi > right]
    )
    n = len(cut)
    assert f"{n} bars are cut at the edge of the plot" in got["foot"]
    assert "finite" in got["foot"]
    assert "too few requests" not in got["foot"] and "no bounded interval" not in got["foot"]


def test_only_an_end_at_infinity_is_called_unbounded(medusa: Result) -> None:
    """A studentized interval of one-request replicates (an end at −1e300) is the only bar
    the footnote calls unbounded; its text shows the infinite end as ∞."""

    def unbounded(c: Cell) -> Cell:
        if c.family != "extraction":
            return c
        return dataclasses.replace(
            c, deltas=tuple(dataclasses.replace(d, rel_lo=-1e300) for d in c.deltas)
        )

    result = dataclasses.replace(medusa, cells=tuple(unbounded(c) for c in medusa.cells))
    fig = _forest(result)
    try:
        got = _read_forest(fig)
    finally:
        plt.close(fig)
    hi = _rows(medusa)["extraction  (n=10)"][2]
    assert got["cut"]["cut: extraction  (n=10)"] == f"cut: [−∞, {hi:+.2f}%]"
    finite = len(got["cut"]) - 1
    assert f"{finite} bars are cut at the edge" in got["foot"]
    assert "1 bar has no bounded interval" in got["foot"]


def test_context_names_a_cut_bar_and_its_finite_ends() -> None:
    """A bar wider than the panel is cut at its edge with its ends written; it was called
    "interval unbounded (too few requests)" whatever its ends."""
    wide = ("<4K", "base")

    def widen(c: Cell) -> Cell:
        if (c.level, c.bucket) != (Level.BUCKET, wide[0]):
            return c
        f = c.arms[wide[1]]
        assert f.R is not None
        arms = {**c.arms, wide[1]: dataclasses.replace(f, lo=f.R - 10.0, hi=f.R + 10.0)}
        return dataclasses.replace(c, arms=arms)

    result = _result(tuple(widen(c) for c in _cells()))
    r = next(
        c.arms[wide[1]].R for c in result.cells if (c.level, c.bucket) == (Level.BUCKET, wide[0])
    )
    assert r is not None
    fig = context_figure(result)
    try:
        notes = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}
        top = fig.axes[0].get_ylim()[1]
    finally:
        plt.close(fig)
    note = notes["cut: all families"].replace("\n", " ")
    assert r + 10.0 > top  # the bar does run off the panel
    assert f"base at <4K: [{r - 10.0:+.4f}, {r + 10.0:+.4f}]" in note
    assert "wider than the panel" in note
    assert "too few requests" not in note and "unbounded" not in note
    assert set(notes) == {"cut: all families"}


def _with_measured_survival(result: Result) -> Result:
    """Add a MEASURED survival curve (arm ``base (MEASURED)``) to the pooled and family cells."""

    def add(c: Cell) -> Cell:
        if c.level not in (Level.POOLED, Level.FAMILY):
            return c
        extra = tuple(
            Survival("base (MEASURED)", j, 0.9**j - 0.002 * c.n_requests, Label.MEASURED, None)
            for j in range(1, 5)
        )
        return dataclasses.replace(c, survival=c.survival + extra)

    return dataclasses.replace(result, cells=tuple(add(c) for c in result.cells))


def test_survival_draws_the_measured_curve_where_the_cells_hold_one() -> None:
    result = _with_measured_survival(_result(_cells()))
    fig = survival_figure(result)
    try:
        pooled = next(ax for ax in fig.axes if ax.get_title() == "pooled")
        solid = [ln for ln in pooled.get_lines() if ln.get_linestyle() == "-"]
        legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
        title = fig._suptitle.get_text()
    finally:
        plt.close(fig)
    cell = next(c for c in result.cells if c.level == Level.POOLED)
    want = [s.value for s in cell.survival if s.arm == "base (MEASURED)"]
    (line,) = solid  # the MEASURED line style, once
    assert list(line.get_xdata()) == [0, 1, 2, 3]  # positions 1..4, one tick each
    assert list(line.get_ydata()) == pytest.approx(want, rel=1e-15)
    assert "base (MEASURED)" in legend
    assert survival_gap(result) is None and "No MEASURED" not in title
    caption = figure_block("survival.png", figure_label(result, "survival.png"), result=result)
    assert "MEASURED" in caption and "No MEASURED" not in caption


def test_survival_says_when_the_result_holds_no_measured_curve() -> None:
    """A requalification's MEASURED figure is R alone (context.png draws it): survival.png
    cannot draw a MEASURED curve, and says so rather than leave it out unexplained."""
    result = _result(_cells())
    assert any(f.label == Label.MEASURED for c in result.cells for f in c.arms.values())
    fig = survival_figure(result)
    try:
        styles = {ln.get_linestyle() for ax in fig.axes for ln in ax.get_lines()}
        title = fig._suptitle.get_text()
    finally:
        plt.close(fig)
    assert "-" not in styles  # nothing MEASURED is drawn
    gap = survival_gap(result)
    assert gap is not None and gap in title and "context.png" in gap
    block = figure_block("survival.png", figure_label(result, "survival.png"), result=result)
    assert gap in block


def _ring_and_star(ax: Any, ring: str, star: str) -> tuple[Any, Any]:
    lines = {ln.get_gid(): ln for ln in ax.get_lines() if ln.get_gid()}
    return lines[ring], lines[star]


def _assert_both_show(ring: Any, star: Any) -> None:
    """The ring and the star mark one point, the hollow ring above and around the star."""
    assert (list(ring.get_xdata()), list(ring.get_ydata())) == (
        list(star.get_xdata()),
        list(star.get_ydata()),
    )
    assert ring.get_marker() == "o" and ring.get_markerfacecolor() == "none"
    assert star.get_marker() == "*"
    assert ring.get_zorder() > star.get_zorder()
    # the ring's inner edge (diameter less one edge width) clears the star's extent
    assert ring.get_markersize() - ring.get_markeredgewidth() >= star.get_markersize()


def test_screen_ring_stays_visible_around_the_best_depth_star() -> None:
    cell = _screen_cell("w0", 4, 8192)  # depth 4 ranks first
    assert cell.screen is not None
    cell = dataclasses.replace(cell, screen=dataclasses.replace(cell.screen, cap=4))
    result = dataclasses.replace(_result((cell,), "screen"), arms=("w0",))
    fig = screen_figure(result)
    try:
        (ax,) = [a for a in fig.axes if a.get_visible()]
        ring, star = _ring_and_star(ax, "cap: w0", "best: w0")
    finally:
        plt.close(fig)
    assert list(star.get_xdata()) == [4] and list(star.get_ydata()) == [400.0]
    _assert_both_show(ring, star)


def test_depths_ring_stays_visible_around_the_best_depth_star() -> None:
    result = _depth_result()  # arm a@3: its own depth 3
    pooled = dataclasses.replace(result.cells[0], best_depth={"a@3": 3})
    result = dataclasses.replace(result, cells=(pooled,))
    fig = depth_figure(result)
    try:
        ax = next(a for a in fig.axes if "tokens/s" in a.get_title())
        ring, star = _ring_and_star(
            ax, "pooled tokens_per_s: ring a@3", "pooled tokens_per_s: star a@3"
        )
    finally:
        plt.close(fig)
    assert list(star.get_xdata()) == [3]
    _assert_both_show(ring, star)
