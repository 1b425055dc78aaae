"""PNG plots where a picture reads better than a table (matplotlib, Agg backend, imported lazily).

Each plot is two functions: a pure one that picks the figures it draws from the typed result
(``forest_rows``, ``context_series``, ``survival_series``: what the tests check) and one that
draws them. Every plot names in its title or footnote how to read it, and every figure its label
(MEASURED / SIMULATED / ESTIMATED).

Design decisions:

- Context buckets are ordered by their numeric lower edge, read from the run's bucket
  specification (``options["buckets"]``, read here: renderers import no statistics), never by
  their names as strings (``<4K`` would sort after ``32K-64K``); a name the specification does not
  hold is parsed as a range itself (``4K-16K``), and one that is no range goes last.
- The forest plot draws pooled, bucket (``pooled · B``), family and family × bucket
  (``F · B``) cells. A cell whose delta is null stays as a row with its reason written where the
  bar would be (``— 3 requests < --min-requests 10``): a reader looking for a slice learns why it
  has no bar instead of wondering whether it was forgotten. Only past
  :data:`FOREST_MAX_ROWS` rows are null rows dropped, and a footnote counts them.
- The forest plot draws each cell's unadjusted interval (``Delta.lo``/``hi``, or ``rel_lo``/
  ``rel_hi`` with a relative margin) while its colour is the verdict, which compares
  Holm-adjusted p-values (:mod:`specreplay.stats.compare`); the footnote says so, since a grey
  bar can exclude 0 and still be INCONCLUSIVE.
- A cell whose delta is flagged ``small_sample`` (below the size at which the calibration study
  shows nominal coverage) is drawn with a hollow dot, and the legend says so.
- The forest plot's x axis is set for the headline, the pooled interval: it holds the margin
  band, 0, every dot and the pooled bar, then the other bars narrowest first, each whole, while
  the pooled bar keeps at least :data:`_HEADLINE_SHARE` of the axis (a sixth; the band's width
  stands in when it is wider than the pooled bar, the median bar's without a pooled row). A bar
  left out is cut at the edge with an arrowhead and its interval written right of the axis as
  TABLES.md prints it; only an end at ±∞ (:data:`_UNBOUNDED`) is called unbounded.
- ``context.png`` draws each arm's R by bucket (``Cell.arms``: R and its default interval,
  ``ArmFigure.lo``/``hi``), one panel for all families pooled and one per family; the arms are
  the run's named arms and any MEASURED figure (a requalification's "(analytic)" and importance
  diagnostics are left to the tables). A figure without an interval is drawn as a point alone.
- ``survival.png`` draws P(A ≥ j) by position per arm (``Cell.survival``), pooled and per family;
  the model holds no interval for survival, so none is drawn, and the title says so. A MEASURED
  curve is drawn wherever the cells hold one (a requalification holds the archive's, as
  ``ARM (MEASURED)``); a result with a MEASURED arm but no MEASURED curve to draw (none held, or
  every value null) says so, and why, in the title and caption (:func:`survival_gap`).
- ``depths.png`` draws R (and, with ``--cost``, tokens/s, its cost model named) by fixed depth.
  A sweep with ``--policy`` adds each policy to the pooled panels at E[L], the positions it
  drafts per round on average (in-sample, as policies.png): a policy above the fixed depths'
  curve at its E[L] drafts better than a fixed depth of that length. So the demo's
  ``sweep/depths.png`` and ``policies/depths.png`` differ by what ``--policy`` adds, and both
  carry the cost model when the run had one; tokens/s against τ stays in policies.png.
- A ring (a reference depth, the screen's nominal cap) and a star (the best depth) at one point
  both show: the hollow ring is wider and drawn above the smaller star.
- Layout (issue 18, item 3): forest.png, context.png and survival.png are placed from their
  texts' sizes (:mod:`specreplay.render.layout`), not by ``tight_layout``, each figure made at
  the resolution it is saved at so that one renderer measures and draws its texts. The forest
  legend takes one row while it fits the figure's width, else as few rows as fit, the figure
  growing by each row (five entries, a small-sample one among them, were cut at both sides in
  one row). context.png and survival.png write their x and y labels once for the grid (the
  panels share both axes); each panel keeps its title and its own tick labels. depths.png,
  screen.png and policies.png, off the requalify's path, keep ``tight_layout``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from specreplay.render import layout
from specreplay.render.canvas import new_figure, write_png
from specreplay.render.interval_text import NOMINAL
from specreplay.render.policy_plot import policy_caption, policy_figure
from specreplay.results.model import Cell, DepthFigure, Label, Level, Result, Role
from specreplay.timing import stage

__all__ = [
    "FOREST_MAX_ROWS",
    "PLOT_CAPTIONS",
    "SMALL_SAMPLE_LEGEND",
    "ArmSeries",
    "ForestRow",
    "Panel",
    "bucket_order",
    "context_figure",
    "context_plot",
    "context_series",
    "depth_figure",
    "depth_plot",
    "drawn_labels",
    "forest_figure",
    "forest_plot",
    "forest_rows",
    "plot_caption",
    "policy_plot",
    "screen_figure",
    "screen_plot",
    "survival_figure",
    "survival_gap",
    "survival_plot",
    "survival_series",
]

SMALL_SAMPLE_LEGEND: Final[str] = (
    f"small sample (below the nominal-coverage size: study coverage < {NOMINAL:.0%})"
)
"""The forest plot's legend entry for the hollow dots of small-sample cells."""

FOREST_MAX_ROWS: Final[int] = 60
"""Past this many rows the forest plot drops its null rows (a footnote counts them)."""

PLOT_CAPTIONS: dict[str, str] = {
    "forest.png": "Paired delta per cell (pooled, context buckets, families, family · bucket) with"
    " its unadjusted 95% interval (the run's method, by default cr2-eff-hall); colour: the"
    " Holm-adjusted verdict; shaded band:"
    " the equivalence margin; a hollow dot: a small-sample cell; a '—' row says why the cell has"
    " no delta.",
    "depths.png": "R (and, with a cost model, tokens/s) by fixed depth per arm, with 95%"
    " intervals; ring: the arm's own depth; star: the best depth under the cost model.",
    "policies.png": "Adaptive drafting per arm, pooled: tokens/s (ESTIMATED) against the"
    " threshold τ of each stop rule drawn, with its 95% interval as a band; dashed: the"
    " best fixed depth's tokens/s; dash-dot: each depth-by-bucket policy's.",
    "screen.png": "Screened tokens/s by draft depth per batch x context cell; band: the assumption"
    " envelope.",
    "context.png": "R by context bucket per arm (solid: MEASURED, dashed: SIMULATED) with 95%"
    " intervals (the run's method, by default cr2-eff-hall), all families pooled and per family;"
    " a falling line: fewer tokens"
    " per round at longer contexts.",
    "survival.png": "Per-position survival P(A ≥ j) by draft position j per arm, pooled and per"
    " family: the share of rounds retaining at least j drafted tokens.",
}
"""One-line caption of each PNG a run can write (REPORT.md embeds each with its caption)."""


FOREST_WIDTH: Final[float] = 9.0
"""Width of forest.png in inches (its height grows with its rows)."""
FOREST_DPI: Final[int] = 110
"""Resolution of forest.png (the figure is made at it: :mod:`.layout`)."""
_FOOT_BOTTOM: Final[float] = 0.08
"""Inches below the forest plot's footnote."""

_VERDICT_COLORS: Final[dict[str, str]] = {
    "EQUIVALENT": "tab:green",
    "DIFFERENT": "tab:red",
    "INCONCLUSIVE": "tab:gray",
}
_NO_VERDICT: Final[str] = "black"
_NUMBER: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kK]?)\s*$")  # a --buckets token count
_BIG: Final[int] = 2**63 - 1  # the upper edge of a ``>=LO`` range
_NOTE_ROOM: Final[float] = 0.45
"""Share of the forest plot's axis kept right of the band for null rows' reasons."""
_HEADLINE_SHARE: Final[float] = 1.0 / 6.0
"""The least share of the forest plot's axis (before padding) the pooled interval keeps."""
_UNBOUNDED: Final[float] = 1e150
"""An interval end this far out is unbounded: a studentized t* of ±1e300 (``stats.studentized``:
a replicate that drew one request) times any SE above 1e-150; no finite interval of tokens per
round reaches it."""


@dataclass(frozen=True)
class ForestRow:
    """One row of the forest plot: a cell's delta, or the reason it has none.

    ``point``, ``lo`` and ``hi`` are in the plot's unit (% of R_a when relative); all three are
    None, and ``note`` says why, when the delta is null. ``group`` numbers the block the row is
    in (0: pooled and its buckets; then one per family), between which the plot rules a line.
    ``small_sample``: the delta is flagged small sample (below the size at which the
    calibration study shows nominal coverage); its dot is drawn hollow.
    """

    label: str
    level: Level
    point: float | None
    lo: float | None
    hi: float | None
    verdict: str | None
    note: str | None
    group: int
    small_sample: bool = False


@dataclass(frozen=True)
class ArmSeries:
    """One arm's curve in a panel: value ``y`` (None: not computed) and interval at each ``x``."""

    arm: str
    label: Label
    x: tuple[str, ...]
    y: tuple[float | None, ...]
    lo: tuple[float | None, ...]
    hi: tuple[float | None, ...]


@dataclass(frozen=True)
class Panel:
    """One panel of ``context.png`` or ``survival.png``: its cell, x tick labels and curves."""

    title: str
    ticks: tuple[str, ...]
    series: tuple[ArmSeries, ...]


def _tokens(text: str) -> int | None:
    """Return a token count as ``--buckets`` spells it (``4096``, ``4K`` = 4096), else None."""
    m = _NUMBER.match(text)
    if m is None:
        return None
    value = float(m.group(1)) * (1024 if m.group(2) else 1)
    return int(value) if value == int(value) else None


def _lower_edge(rng: str) -> int | None:
    """Return the lower edge of a bucket range (``LO-HI``, ``<HI``, ``>=LO``), else None."""
    rng = rng.strip()
    lo: int | None
    hi: int | None
    if rng.startswith(">="):
        lo, hi = _tokens(rng[2:]), _BIG
    elif rng.startswith("<"):
        lo, hi = 0, _tokens(rng[1:])
    elif "-" in rng:
        a, _, b = rng.partition("-")
        lo, hi = _tokens(a), _tokens(b)
    else:
        return None
    return lo if lo is not None and hi is not None and lo < hi else None


def _spec_edges(spec: str | None) -> dict[str, int]:
    """Return each bucket's lower edge in a ``--buckets`` specification (``NAME:RANGE,…``).

    The run checked the specification when it was made; one that does not read here (a results.json
    edited by hand) gives no edges, and the names are then ordered as ranges themselves.
    """
    edges: dict[str, int] = {}
    for raw in (spec or "").split(","):
        if not raw.strip():
            continue
        name, sep, rng = raw.strip().rpartition(":")
        lo = _lower_edge(rng) if sep and name.strip() else None
        if lo is None:
            return {}
        edges[name.strip()] = lo
    return edges


def bucket_order(names: Sequence[str], spec: str | None = None) -> list[str]:
    """Return the distinct bucket ``names`` by numeric lower edge (see the module docstring).

    ``spec`` is the run's bucket specification (``result.options["buckets"]``).

    Examples
    --------
    >>> bucket_order([">=64K", "16K-32K", "<4K", "32K-64K", "4K-16K"])
    ['<4K', '4K-16K', '16K-32K', '32K-64K', '>=64K']
    >>> bucket_order(["long", "short"], "short:<4K,long:>=4K")
    ['short', 'long']
    """
    edges = _spec_edges(spec)

    def key(name: str) -> tuple[int, int]:
        lo = edges[name] if name in edges else _lower_edge(name.rpartition(":")[2])
        return (1, 0) if lo is None else (0, lo)

    return sorted(dict.fromkeys(names), key=key)


def _cell_buckets(cells: Sequence[Cell], spec: str | None) -> list[str]:
    """Return the bucket names of the bucket cells, in numeric order."""
    return bucket_order([c.bucket for c in cells if c.level == Level.BUCKET and c.bucket], spec)


def _families(cells: Sequence[Cell]) -> list[str]:
    """Family names in the order the cells first name them."""
    fams = (c.family for c in cells if c.level in (Level.FAMILY, Level.FAMILY_BUCKET))
    return list(dict.fromkeys(f for f in fams if f is not None))


def _short(why: str, limit: int = 60) -> str:
    """Return a null reason short enough for a row: up to its first colon, at most ``limit``."""
    text = why if len(why) <= limit else why.split(":")[0]
    return "— " + (text if len(text) <= limit else text[: limit - 1] + "…")


def forest_rows(
    cells: Sequence[Cell], role: Role, *, relative: bool, buckets: str | None = None
) -> list[ForestRow]:
    """Return the forest plot's rows, top to bottom, of the ``role`` delta of each cell.

    Pooled, then (with more than one bucket) each bucket as ``pooled · B``; then per family
    the family and its ``F · B`` cells; buckets by numeric lower edge (``buckets``: the run's
    bucket specification). Values are Δ, or Δ/R_a in % when ``relative``. Cells without a
    delta of ``role`` are left out; a null delta gives a row with its reason in ``note``.
    """
    order = _cell_buckets(cells, buckets)
    by_key = {(c.level, c.family, c.bucket): c for c in cells}
    split = len(order) > 1
    blocks: list[list[Cell | None]] = [
        [by_key.get((Level.POOLED, None, None))]
        + ([by_key.get((Level.BUCKET, None, b)) for b in order] if split else [])
    ]
    for fam in _families(cells):
        blocks.append(
            [by_key.get((Level.FAMILY, fam, None))]
            + ([by_key.get((Level.FAMILY_BUCKET, fam, b)) for b in order] if split else [])
        )
    rows: list[ForestRow] = []
    for group, block in enumerate(blocks):
        rows += [r for c in block if c is not None and (r := _row(c, role, relative, group))]
    return rows


def _row(cell: Cell, role: Role, relative: bool, group: int) -> ForestRow | None:
    """Return the forest row of one cell (None when the cell has no delta of ``role``)."""
    d = cell.delta(role)
    if d is None:
        return None
    where = "pooled" if cell.family is None else cell.family
    name = where if cell.bucket is None else f"{where} · {cell.bucket}"
    label = f"{name}  (n={cell.n_requests})"
    vals = (d.rel, d.rel_lo, d.rel_hi) if relative else (d.point, d.lo, d.hi)
    if d.null_reason is not None or any(v is None for v in vals):
        note = _short(d.null_reason or cell.null_reason or "not computed")
        return ForestRow(label, cell.level, None, None, None, None, note, group)
    scale = 100.0 if relative else 1.0
    point, lo, hi = (float(v) * scale for v in vals if v is not None)
    why = None if d.verdict is not None else _short(d.verdict_null_reason or "no verdict")
    return ForestRow(label, cell.level, point, lo, hi, d.verdict, why, group, bool(d.small_sample))


def _fit_rows(rows: list[ForestRow], max_rows: int) -> tuple[list[ForestRow], int]:
    """Drop the null rows when there are more than ``max_rows``; return the rows and the count."""
    if len(rows) <= max_rows:
        return rows, 0
    kept = [r for r in rows if r.point is not None]
    return kept, len(rows) - len(kept)


def forest_plot(
    cells: tuple[Cell, ...],
    path: Path,
    *,
    role: Role,
    relative: bool,
    margin: float,
    title: str,
    buckets: str | None = None,
) -> None:
    """Draw the ``role`` delta (relative, in %, when ``relative``) per cell into ``path``.

    The figure is :func:`forest_figure`'s.
    """
    fig = forest_figure(
        cells, role=role, relative=relative, margin=margin, title=title, buckets=buckets
    )
    _save(fig, path, dpi=FOREST_DPI)


def forest_figure(
    cells: tuple[Cell, ...],
    *,
    role: Role,
    relative: bool,
    margin: float,
    title: str,
    buckets: str | None = None,
) -> Any:
    """Return the forest plot of the ``role`` delta per cell as a matplotlib figure.

    Rows from :func:`forest_rows`; colour: the verdict; band: the equivalence margin; legend
    and a footnote on how the verdict relates to the bar drawn (see the module docstring). A
    null row's reason is written beside the band, never over it.
    """
    rows, dropped = _fit_rows(
        forest_rows(cells, role, relative=relative, buckets=buckets), FOREST_MAX_ROWS
    )
    foot = _forest_footnote(
        cells, role, dropped, *_forest_clipped(rows, margin * (100.0 if relative else 1.0))
    )
    n = max(len(rows), 1)
    row_in = 0.24 if n <= 30 else 0.2
    text_in = 0.13 * (foot.count("\n") + 1) + 0.1
    foot_in = text_in + 0.5  # the footnote, the legend above it, the x label above that
    fig = new_figure(FOREST_WIDTH, n * row_in + 1.0 + foot_in, dpi=FOREST_DPI)
    ax = fig.subplots()
    scale = 100.0 if relative else 1.0
    m = margin * scale
    unit = "%" if relative else " tokens/round"
    ax.axvspan(-m, m, color="tab:green", alpha=0.12)
    ax.axvline(0.0, color="black", lw=0.8)
    notes = _forest_rows_draw(ax, rows, m)
    _forest_xlim(ax, rows, m, "%" if relative else "")
    ax.set_xlabel(
        f"Δ = R_b − R_a, retained tokens per round ({'% of R_a' if relative else 'tokens/round'})",
        fontsize=8,
    )
    ax.set_title(
        f"{title}\nHow to read: a row per cell; colour = verdict (legend); green band = the"
        " margin; '—': no bar, and why",
        fontsize=9,
    )
    _fit_legend(fig, _forest_legend(rows, m, unit))
    fig.text(0.01, 0.0, foot, fontsize=7, va="bottom", ha="left", color="0.25", gid="footnote")
    _place_forest(fig, ax)
    _fit_notes(fig, ax, notes, m)
    return fig


def _fit_legend(fig: Any, handles: list[Any]) -> None:
    """Add the forest plot's legend below it, in one row if the figure is wide enough.

    Else in as few rows as fit (a legend too wide for the figure was cut at both sides), the
    figure growing by each row added.
    """
    width = float(fig.get_figwidth())
    ncol, one_row = len(handles), 0.0
    while True:
        legend = fig.legend(
            handles=handles,
            loc="lower center",
            ncol=ncol,
            fontsize=7,
            frameon=False,
            borderaxespad=0.0,
        )
        w, h = layout.extent(fig, legend)
        one_row = one_row or h
        if ncol == 1 or w <= width - 2 * layout.PAD:
            break
        legend.remove()
        ncol -= 1
    if h > one_row:
        fig.set_size_inches(width, float(fig.get_figheight()) + h - one_row)


def _place_forest(fig: Any, ax: Any) -> None:
    """Lay out the forest plot from its texts' sizes (:mod:`.layout`).

    Bottom up: the footnote, the legend (:func:`_fit_legend`), the x label and tick labels,
    the axis; above it the title; left of it the row labels, right of it each cut bar's
    interval.
    """
    legend = fig.legends[0]
    foot = next(t for t in fig.texts if t.get_gid() == "footnote")
    height = float(fig.get_figheight())
    foot_h = layout.extent(fig, foot)[1]
    foot.set_y(_FOOT_BOTTOM / height)
    legend_y = _FOOT_BOTTOM + foot_h + layout.LABEL_GAP
    legend.set_bbox_to_anchor((0.5, legend_y / height), transform=fig.transFigure)
    cuts = [t for t in ax.texts if str(t.get_gid()).startswith("cut: ")]
    right = layout.widest(fig, cuts) + 7.0 / 72.0 if cuts else 0.0  # xytext: 7 points
    below = layout.extent(fig, ax.xaxis.label)[1] + layout.LABEL_GAP
    below += layout.tallest(fig, ax.get_xticklabels()) + layout.TICK
    layout.place(
        fig,
        layout.Margins(
            left=layout.PAD + layout.widest(fig, ax.get_yticklabels()) + layout.TICK,
            right=layout.PAD + right,
            top=layout.PAD + layout.extent(fig, ax.title)[1] + layout.TITLE_GAP,
            bottom=legend_y + layout.extent(fig, legend)[1] + layout.PAD + below,
        ),
    )


def _save(fig: Any, path: Path, *, dpi: int) -> None:
    """Write ``fig`` to ``path`` as a PNG (:func:`~specreplay.render.canvas.write_png`).

    ``fig.tight_layout()`` leaves a placeholder layout engine on the figure, and ``savefig``
    draws a figure that has any layout engine once more, without rendering, before it draws
    it (matplotlib ≥ 3.6, ``FigureCanvasBase.print_figure``): the placeholder does nothing in
    that pass, so it is removed first (a third of a plot's time; the PNG is the same).
    """
    import matplotlib
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # None means "no engine" under these two settings (else the rc file's engine)
        with matplotlib.rc_context(
            {"figure.autolayout": False, "figure.constrained_layout.use": False}
        ):
            fig.set_layout_engine(None)
    with stage("plots: drawing and saving"):
        write_png(fig, path, dpi=dpi)


def _forest_rows_draw(ax: Any, rows: list[ForestRow], m: float) -> list[Any]:
    """Draw the bars, points, null-row reasons, block rules and row labels of a forest plot.

    Return the text artists of the null-row reasons: they start right of the margin band ±``m``
    (:func:`_forest_limits` leaves room there), and :func:`_fit_notes` fits them after layout.
    """
    n = len(rows)
    ys = [n - 1 - i for i in range(n)]
    drawn = [(y, r) for y, r in zip(ys, rows, strict=True) if r.point is not None]
    cols = [_VERDICT_COLORS.get(r.verdict or "", _NO_VERDICT) for _, r in drawn]
    # one collection for the intervals and one for the points (two artists, not two per row)
    ax.hlines(
        [y for y, _ in drawn], [r.lo for _, r in drawn], [r.hi for _, r in drawn], colors=cols, lw=2
    )
    # small-sample cells: a hollow dot (edge in the verdict colour), the others filled
    faces = ["white" if r.small_sample else c for (_, r), c in zip(drawn, cols, strict=True)]
    ax.scatter(
        [r.point for _, r in drawn], [y for y, _ in drawn], c=faces, edgecolors=cols, s=16, zorder=3
    )
    notes = []
    for y, r in zip(ys, rows, strict=True):
        if r.point is None and r.note:
            notes.append(
                ax.text(
                    m,
                    y,
                    " " + r.note,
                    fontsize=7,
                    va="center",
                    ha="left",
                    color="0.35",
                    style="italic",
                    clip_on=True,
                )
            )
    for i in range(1, n):
        if rows[i].group != rows[i - 1].group:
            ax.axhline(ys[i] + 0.5, color="0.8", lw=0.6)
    ax.set_yticks(ys)
    ax.set_yticklabels([r.label for r in rows], fontsize=7 if n > 30 else 8)
    for tick, r in zip(ax.get_yticklabels(), rows, strict=True):
        if r.level in (Level.POOLED, Level.FAMILY):
            tick.set_fontweight("bold")
    ax.set_ylim(-0.7, n - 0.3)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.3)
    return notes


def _fit_notes(fig: Any, ax: Any, notes: list[Any], m: float) -> None:
    """Fit each null-row reason between the band's right edge and the axis' right edge.

    A reason wider than that room is wrapped onto two lines, then set smaller, then cut with an
    ellipsis: it never runs over the band, the bars or out of the plot.
    """
    import textwrap

    if not notes:
        return
    renderer = fig.canvas.get_renderer()
    room = ax.transData.transform((ax.get_xlim()[1], 0.0))[0]
    room -= ax.transData.transform((m, 0.0))[0]
    for note in notes:
        full = note.get_text()
        tries = [(full, 7.0), (textwrap.fill(full, (len(full) + 1) // 2 + 1), 7.0)]
        tries += [(tries[1][0], 6.0)]
        tries += [
            (textwrap.fill(full[:k] + "…", (k + 2) // 2 + 1), 6.0)
            for k in range(len(full) - 2, 3, -4)
        ]
        for text, size in tries:
            note.set_text(text)
            note.set_fontsize(size)
            if note.get_window_extent(renderer).width <= room:
                break


def _forest_legend(rows: list[ForestRow], m: float, unit: str) -> list[Any]:
    """Legend handles: each verdict colour (and "no verdict" when drawn) and the margin band."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Line2D([], [], color=c, lw=2, marker="o", ms=4, label=v) for v, c in _VERDICT_COLORS.items()
    ]
    if any(r.point is not None and r.verdict is None for r in rows):
        handles.append(
            Line2D([], [], color=_NO_VERDICT, lw=2, marker="o", ms=4, label="no verdict")
        )
    if any(r.point is not None and r.small_sample for r in rows):
        handles.append(
            Line2D(
                [],
                [],
                color=_NO_VERDICT,
                lw=0,
                marker="o",
                ms=4,
                mfc="white",
                label=SMALL_SAMPLE_LEGEND,
            )
        )
    handles.append(Patch(color="tab:green", alpha=0.12, label=f"equivalence margin ±{m:g}{unit}"))
    return handles


def _bounded(r: ForestRow) -> bool:
    """Whether the row has a bar whose both ends are finite (:data:`_UNBOUNDED`)."""
    return (
        r.lo is not None and r.hi is not None and abs(r.lo) < _UNBOUNDED and abs(r.hi) < _UNBOUNDED
    )


def _headline(rows: list[ForestRow]) -> ForestRow | None:
    """Return the pooled row when it has a bounded bar: the headline the axis is set for."""
    return next((r for r in rows if r.level == Level.POOLED and _bounded(r)), None)


def _forest_window(rows: list[ForestRow], m: float) -> tuple[float, float]:
    """Return the span the forest axis holds before padding (module docstring).

    Always: the margin ±``m``, 0, every dot and the headline's bar. Then the other bounded bars,
    narrowest first, each one whole while the span stays within the budget: the headline's
    width (or the band's, if wider; the median bar's without a headline) over
    :data:`_HEADLINE_SHARE`. Bars left out run past the edge.
    """
    import statistics

    xs = [-m, m, 0.0, *(r.point for r in rows if r.point is not None)]
    head = _headline(rows)
    bars = sorted(
        (r for r in rows if _bounded(r) and r is not head),
        key=lambda r: float(r.hi or 0.0) - float(r.lo or 0.0),
    )
    if head is not None and head.lo is not None and head.hi is not None:
        xs += [head.lo, head.hi]
        ref = head.hi - head.lo
    else:
        ref = statistics.median([float(r.hi or 0.0) - float(r.lo or 0.0) for r in bars] or [0.0])
    budget = max(ref, 2.0 * m) / _HEADLINE_SHARE
    left, right = min(xs), max(xs)
    for r in bars:
        lo, hi = min(left, float(r.lo or 0.0)), max(right, float(r.hi or 0.0))
        if hi - lo <= budget:
            left, right = lo, hi
    return left, right


def _forest_limits(rows: list[ForestRow], m: float) -> tuple[float, float]:
    """Return x limits: :func:`_forest_window` padded by 5% each side.

    With a null row, the right limit leaves at least :data:`_NOTE_ROOM` of the axis right of
    the band for its reason.
    """
    lo, hi = _forest_window(rows, m)
    pad = 0.05 * (hi - lo)
    left, right = lo - pad, hi + pad
    if any(r.point is None and r.note for r in rows):
        right = max(right, (m - _NOTE_ROOM * left) / (1.0 - _NOTE_ROOM))
    return left, right


def _forest_cut(rows: list[ForestRow], m: float) -> list[ForestRow]:
    """Return the rows whose bar runs past the x limits (:func:`_forest_limits`)."""
    left, right = _forest_limits(rows, m)
    return [
        r for r in rows if r.lo is not None and r.hi is not None and (r.lo < left or r.hi > right)
    ]


def _forest_clipped(rows: list[ForestRow], m: float) -> tuple[int, int]:
    """Return how many bars run past the x limits: (with finite ends, with an unbounded end)."""
    cut = _forest_cut(rows, m)
    bounded = sum(1 for r in cut if _bounded(r))
    return bounded, len(cut) - bounded


def _end_text(x: float, unit: str) -> str:
    """Return one end of a cut bar as TABLES.md prints it (``-76.38%``, ``+0.4636``)."""
    if abs(x) >= _UNBOUNDED:
        return "−∞" if x < 0 else "+∞"
    return f"{x:+.2f}%" if unit == "%" else f"{x:+.4f}"


def _forest_xlim(ax: Any, rows: list[ForestRow], m: float, unit: str) -> None:
    """Set the x limits (:func:`_forest_limits`); mark each cut bar and write its interval.

    An arrowhead at the edge marks the cut end; the bar's interval is written right of the
    axis on its row (``gid``: ``cut: <row label>``), its ends as TABLES.md prints them (``unit``
    ``%``: in % of R_a), an unbounded end as ∞.
    """
    left, right = _forest_limits(rows, m)
    ax.set_xlim(left, right)
    n = len(rows)
    for i, r in enumerate(rows):
        if r.lo is None or r.hi is None or (r.lo >= left and r.hi <= right):
            continue
        colour = _VERDICT_COLORS.get(r.verdict or "", _NO_VERDICT)
        for cut, edge, mark in ((r.lo < left, left, "<"), (r.hi > right, right, ">")):
            if cut:
                ax.plot([edge], [n - 1 - i], marker=mark, color=colour, ms=6, clip_on=False)
        ax.annotate(
            f"cut: [{_end_text(r.lo, unit)}, {_end_text(r.hi, unit)}]",
            xy=(1.0, n - 1 - i),
            xycoords=("axes fraction", "data"),
            xytext=(7, 0),
            textcoords="offset points",
            fontsize=6.5,
            va="center",
            ha="left",
            color=colour,
            annotation_clip=False,
            gid=f"cut: {r.label}",
        )


def _forest_footnote(
    cells: Sequence[Cell], role: Role, dropped: int, clipped: int = 0, unbounded: int = 0
) -> str:
    """How the bar and the colour relate (the verdict rule of :mod:`specreplay.stats.compare`)."""
    import textwrap

    deltas = [d for c in cells if (d := c.delta(role)) is not None and d.null_reason is None]
    d = next((x for x in deltas if x.tost is not None), None)  # every computed delta has one
    level = d.level if d is not None else 0.95
    alpha = d.tost.alpha if d is not None and d.tost is not None else 0.05
    method = d.method if d is not None else "studentized"
    adjusted = d is not None and d.adjusted
    text = (
        f"Bar: the cell's {'' if adjusted else 'unadjusted '}{level:.0%} {method} interval of Δ; "
        f"dot: Δ; colour: the cell's verdict. The verdict is not read off the bar: it uses "
        f"p-values Holm-adjusted within each level (pooled; buckets; families; family × bucket; "
        f"m = cells of the level with a delta). EQUIVALENT if the Holm-adjusted equivalence "
        f"(TOST) p < α = {alpha:g} (for one cell alone: its {1 - 2 * alpha:.0%} interval lies "
        f"inside the band); otherwise DIFFERENT if the Holm-adjusted p of Δ = 0 is < α; "
        f"otherwise INCONCLUSIVE. So a grey bar can exclude 0 (significant before the "
        f"adjustment) and still be INCONCLUSIVE. A row with '—' has no delta; the text says why."
    )
    if clipped:
        text += (
            f" {clipped} {'bar is' if clipped == 1 else 'bars are'} cut at the edge of the plot"
            " (arrowhead) so that the pooled interval stays readable; each such interval is"
            " finite and written right of the plot, as in TABLES.md."
        )
    if unbounded:
        text += (
            f" {unbounded} {'bar has' if unbounded == 1 else 'bars have'} no bounded interval"
            " (an end at ±∞: too few requests in the resamples); its ends right of the plot."
        )
    if dropped:
        text += f" {dropped} cells without a delta are not drawn (too many rows)."
    return "\n".join(textwrap.wrap(text, 135))


def _plotted_arms(result: Result) -> list[str]:
    """Return the run's named arms, then any arm with a MEASURED figure (module docstring)."""
    measured = [a for c in result.cells for a, f in c.arms.items() if f.label == Label.MEASURED]
    return list(dict.fromkeys([*result.arms, *measured]))


def _arm_series(arm: str, cells: Sequence[Cell | None], x: Sequence[str]) -> ArmSeries | None:
    """One arm's R (and interval) in each of ``cells``; None when it has no R anywhere."""
    figs = [c.arms.get(arm) if c is not None else None for c in cells]
    if all(f is None or f.R is None for f in figs):
        return None
    label = next(f.label for f in figs if f is not None and f.R is not None)
    return ArmSeries(
        arm,
        label,
        tuple(x),
        tuple(f.R if f is not None else None for f in figs),
        tuple(f.lo if f is not None and f.R is not None else None for f in figs),
        tuple(f.hi if f is not None and f.R is not None else None for f in figs),
    )


def context_series(result: Result) -> list[Panel]:
    """Per panel (all families pooled, then each family), each arm's R by context bucket.

    Buckets in numeric order (the bucket cells'); empty when the run has fewer than two bucket
    cells. A tick label gives the bucket and the cell's requests (``-`` when there is no cell).
    """
    cells = result.cells
    order = _cell_buckets(cells, result.options.get("buckets"))
    if len(order) < 2:
        return []
    by_key = {(c.level, c.family, c.bucket): c for c in cells}
    arms = _plotted_arms(result)
    panels: list[Panel] = []
    for fam in [None, *_families(cells)]:
        level = Level.BUCKET if fam is None else Level.FAMILY_BUCKET
        row = [by_key.get((level, fam, b)) for b in order]
        ticks = tuple(
            f"{b}\nn={c.n_requests if c is not None else '-'}"
            for b, c in zip(order, row, strict=True)
        )
        series = tuple(s for a in arms if (s := _arm_series(a, row, order)) is not None)
        if series:
            panels.append(Panel("all families" if fam is None else fam, ticks, series))
    return panels


def survival_series(result: Result, *, max_families: int = 8) -> list[Panel]:
    """Per panel, each arm's P(A ≥ j) by position j (``Cell.survival``; no interval).

    Panels: pooled, then each family unless there are more than ``max_families``.
    """
    cells = [c for c in result.cells if c.level == Level.POOLED and c.survival]
    fams = [c for c in result.cells if c.level == Level.FAMILY and c.survival]
    if len(fams) <= max_families:
        cells += fams
    panels: list[Panel] = []
    for c in cells:
        arms = list(dict.fromkeys(s.arm for s in c.survival))
        positions = sorted({s.position for s in c.survival})
        x = tuple(str(j) for j in positions)
        series = []
        for arm in arms:
            at = {s.position: s for s in c.survival if s.arm == arm}
            ys = tuple(at[j].value if j in at else None for j in positions)
            if all(y is None for y in ys):
                continue
            label = next(s.label for s in at.values() if s.value is not None)
            none = tuple(None for _ in positions)
            series.append(ArmSeries(arm, label, x, ys, none, none))
        if series:
            panels.append(Panel(c.name, x, tuple(series)))
    return panels


PANELS_DPI: Final[int] = 100
"""Resolution of context.png and survival.png (the figure is made at it: :mod:`.layout`)."""

_STYLE: Final[dict[Label, str]] = {Label.MEASURED: "-", Label.SIMULATED: "--", Label.ESTIMATED: ":"}
_MARKERS: Final[tuple[str, ...]] = ("o", "s", "^", "D", "v", "P", "X")


def _panels_figure(
    panels: list[Panel], *, title: str, xlabel: str, ylabel: str, dodge: bool
) -> Any:
    """Return ``panels`` drawn (one axis each; per arm a colour and marker; line style by label).

    With ``dodge`` the arms' points are spread a little along x so that their error bars do
    not hide one another (without error bars that would only slant coinciding curves apart).
    """
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(4.4 * ncols, 3.3 * nrows + 1.3, dpi=PANELS_DPI)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    arms = list(dict.fromkeys((s.arm, s.label) for p in panels for s in p.series))
    colour = {a: f"C{i % 10}" for i, a in enumerate(arms)}
    width = 0.25 / max(len(arms), 1) if dodge else 0.0
    for ax, panel in zip(axes.ravel(), panels, strict=False):
        for s in panel.series:
            k = arms.index((s.arm, s.label))
            size = 6.0 - 3.0 * k / max(len(arms), 1)  # later arms smaller: coinciding ones show
            shift = (k - (len(arms) - 1) / 2) * width
            _draw_series(ax, s, shift, colour[(s.arm, s.label)], _MARKERS[k % len(_MARKERS)], size)
        ax.set_xticks(range(len(panel.ticks)))
        ax.set_xticklabels(panel.ticks, fontsize=7)
        ax.set_title(panel.title, fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.yaxis.set_tick_params(labelleft=True)
        ax.grid(alpha=0.3)
    lo, hi, wild = _y_limits(panels)
    axes[0][0].set_ylim(lo, hi)  # shared by every panel
    for ax, panel in zip(axes.ravel(), panels, strict=False):
        if panel.title in wild:
            ax.text(
                0.5,
                0.98,
                _cut_note(wild[panel.title]),
                transform=ax.transAxes,
                ha="center",
                va="top",
                fontsize=6.5,
                color="0.35",
                gid=f"cut: {panel.title}",
            )
    from matplotlib.lines import Line2D

    handles = [
        Line2D(
            [],
            [],
            color=colour[a],
            ls=_STYLE.get(a[1], "-"),
            marker=_MARKERS[k % len(_MARKERS)],
            ms=5,
            mfc="none",
            label=_arm_label(*a),
        )
        for k, a in enumerate(arms)
    ]
    top = fig.suptitle(title, fontsize=9, y=1.0 - layout.PAD / fig.get_figheight())
    # one x and one y label for the grid: every panel has the same axes (and shares its y)
    labels = (fig.supxlabel(xlabel, fontsize=8, va="bottom"), fig.supylabel(ylabel, fontsize=8))
    fig.legend(
        handles=handles,
        loc="lower center",
        ncol=min(len(handles), 3),
        fontsize=7,
        frameon=False,
        borderaxespad=0.0,
    )
    _place_panels(fig, [ax for ax in axes.ravel() if ax.get_visible()], (top, *labels), nrows)
    return fig


def _place_panels(fig: Any, shown: list[Any], texts: tuple[Any, Any, Any], nrows: int) -> None:
    """Lay out :func:`_panels_figure`'s grid from its texts' sizes (:mod:`.layout`).

    ``texts``: the figure's title, x label and y label. Top down: the title, each row's panel
    titles, the panels, their x tick labels; below the grid the x label and the legend; left
    of each panel its y tick labels, left of the grid the y label.
    """
    title, xlabel, ylabel = texts
    width, height = (float(v) for v in fig.get_size_inches())
    ncols = min(3, len(shown))
    legend = fig.legends[0]
    legend_h = layout.extent(fig, legend)[1]
    label_h = layout.extent(fig, xlabel)[1]
    xlabel.set_y((layout.PAD + legend_h + layout.LABEL_GAP) / height)
    legend.set_bbox_to_anchor((0.5, layout.PAD / height), transform=fig.transFigure)
    ylabel.set_x(layout.PAD / width)
    xticks = layout.tallest(fig, layout.tick_labels(shown, "x")) + layout.TICK
    titles = layout.tallest(fig, (ax.title for ax in shown)) + layout.TITLE_GAP
    under = legend_h + layout.LABEL_GAP + label_h + layout.LABEL_GAP  # below the x ticks
    side = layout.PAD + layout.extent(fig, ylabel)[0] + layout.LABEL_GAP + layout.TICK
    yticks = 0.0
    for _ in range(2):  # the y ticks are picked by the panels' height: measured once placed
        yticks = max(yticks, layout.widest(fig, layout.tick_labels(shown[:1], "y")))
        layout.place(
            fig,
            layout.Margins(
                left=side + yticks,
                right=layout.PAD,
                top=layout.PAD + layout.extent(fig, title)[1] + layout.PAD + titles,
                bottom=layout.PAD + under + xticks,
                wgap=yticks + layout.TICK + layout.PAD,
                hgap=xticks + layout.PAD + titles,
            ),
            nrows,
            ncols,
        )


def _y_limits(
    panels: list[Panel],
) -> tuple[float, float, dict[str, list[tuple[str, str, float, float]]]]:
    """Return y limits holding every point and every interval no wider than twice its value.

    A wider interval (a studentized one whose replicates drew one request, t* = ±1e300, or a
    finite one that wide) runs off the panel rather than squash every curve; per panel title,
    each such interval is returned as (arm, x, lo, hi) for :func:`_cut_note`.
    """
    vals: list[float] = []
    wild: dict[str, list[tuple[str, str, float, float]]] = {}
    for p in panels:
        for s in p.series:
            for x, y, lo, hi in zip(s.x, s.y, s.lo, s.hi, strict=True):
                if y is None:
                    continue
                vals.append(y)
                ends = [e for e in (lo, hi) if e is not None]
                inside = [e for e in ends if abs(e - y) <= 2.0 * max(abs(y), 1e-9)]
                vals += inside
                if len(inside) < len(ends):
                    cut = (s.arm, x, y if lo is None else lo, y if hi is None else hi)
                    wild.setdefault(p.title, []).append(cut)
    if not vals:
        return 0.0, 1.0, wild
    pad = 0.06 * (max(vals) - min(vals)) or 0.05 * max(abs(max(vals)), 1.0)
    return min(vals) - pad, max(vals) + pad, wild


def _cut_note(cuts: list[tuple[str, str, float, float]]) -> str:
    """Say which bars of a panel run off it and why, each with its ends (∞: unbounded)."""
    import textwrap

    ends = "; ".join(
        f"{arm} at {x}: [{_end_text(lo, '')}, {_end_text(hi, '')}]" for arm, x, lo, hi in cuts
    )
    unbounded = any(abs(e) >= _UNBOUNDED for _, _, lo, hi in cuts for e in (lo, hi))
    why = "interval wider than the panel" + (
        "; ∞: no bounded interval, too few requests" if unbounded else ""
    )
    return "\n".join(textwrap.wrap(f"bars cut at the panel's edge ({why}): {ends}", 80))


def _arm_label(arm: str, label: Label) -> str:
    """Return the arm's legend entry with its label (once, when the arm's name already has it)."""
    return arm if arm.endswith(f"({label.value})") else f"{arm} ({label.value})"


def _draw_series(
    ax: Any, s: ArmSeries, shift: float, colour: str, marker: str, size: float
) -> None:
    """One arm's points joined by a line (label's style), with error bars where it has them."""
    xs = [i + shift for i, y in enumerate(s.y) if y is not None]
    ys = [float(y) for y in s.y if y is not None]
    lo = [
        float(y) - float(lo) if lo is not None else 0.0
        for y, lo in zip(s.y, s.lo, strict=True)
        if y is not None
    ]
    hi = [
        float(hi) - float(y) if hi is not None else 0.0
        for y, hi in zip(s.y, s.hi, strict=True)
        if y is not None
    ]
    ax.errorbar(
        xs,
        ys,
        yerr=[lo, hi] if any(lo) or any(hi) else None,
        color=colour,
        ls=_STYLE.get(s.label, "-"),
        marker=marker,
        ms=size,
        mfc="none",
        capsize=2,
        lw=1.2,
    )


def _style_key(panels: list[Panel]) -> str:
    """Return how line styles read, for the labels of the series drawn only."""
    drawn = {s.label for p in panels for s in p.series}
    names = {Label.MEASURED: "solid", Label.SIMULATED: "dashed", Label.ESTIMATED: "dotted"}
    return ", ".join(f"{names[lb]} = {lb.value}" for lb in Label if lb in drawn)


def drawn_labels(result: Result, name: str) -> list[str]:
    """Return the labels of the series a plot of ``result`` draws, in Label order.

    ``context.png`` and ``survival.png``: the labels of the arms they draw (a MEASURED survival
    whose every value is null draws no curve, so its plot is SIMULATED only); other plots: none
    here (their label is the main delta's or the depth figures', see
    :func:`specreplay.render.markdown.figure_label`).
    """
    panels = {"context.png": context_series, "survival.png": survival_series}.get(name)
    if panels is None:
        return []
    drawn = {s.label for p in panels(result) for s in p.series}
    return [lb.value for lb in Label if lb in drawn]


def plot_caption(name: str, result: Result | None = None) -> str:
    """Return the one-line caption of the plot ``name`` (of ``result``: naming what it draws).

    ``context.png``'s line styles are named for the labels drawn only, ``policies.png``'s series
    likewise (:func:`~specreplay.render.policy_plot.policy_caption`); ``survival.png``'s names a
    missing MEASURED curve (:func:`survival_gap`), ``depths.png``'s the policies it draws; every
    other caption is :data:`PLOT_CAPTIONS`'.
    """
    if name == "policies.png" and result is not None:
        return policy_caption(result)
    caption = PLOT_CAPTIONS.get(name, f"Figure {name} of this run (no caption recorded for it).")
    if name == "survival.png" and result is not None and (gap := survival_gap(result)):
        caption += " " + gap
    if name == "depths.png" and result is not None and _depth_policies_drawn(result):
        # no brackets: REPORT.md uses the caption as the image's alt text
        caption += (
            " Pooled panels: each --policy at its mean drafted positions per round, E_L, in-sample."
        )
    if name == "context.png" and result is not None:
        key = _style_key(context_series(result)).replace(" = ", ": ")
        caption = caption.replace("(solid: MEASURED, dashed: SIMULATED)", f"({key})")
    return caption


def context_figure(result: Result) -> Any:
    """Return R by context bucket per arm, pooled and per family (:func:`context_series`)."""
    level = next((f.level for c in result.cells for f in c.arms.values() if f.level), None)
    band = f"{level:.0%} interval" if level is not None else "no interval"
    panels = context_series(result)
    return _panels_figure(
        panels,
        title="R (retained tokens per round) by context bucket, per arm, with its "
        f"{band} (bars).\nHow to read: a line falling to the right means the arm retains fewer "
        f"tokens per round at longer contexts; {_style_key(panels)}; a point\n"
        "without a bar: too few requests for an interval (see n under each bucket).",
        xlabel="context bucket (target context length); n = requests in the cell",
        ylabel="R, tokens per round",
        dodge=True,
    )


def context_plot(result: Result, path: Path) -> None:
    """Draw :func:`context_figure` into ``path``."""
    _save(context_figure(result), path, dpi=PANELS_DPI)


def survival_gap(result: Result) -> str | None:
    """Say that the survival plot has no MEASURED curve while the result has a MEASURED arm.

    A MEASURED curve is drawn wherever ``Cell.survival`` holds one (:func:`survival_series`);
    a result whose MEASURED figure is R alone has none to draw, nor one whose MEASURED survival
    is null at every position (a requalification's under ``--sample-requests``: the pooled
    cell's reason is given), and the plot says so rather than leave it unexplained.
    """
    drawn = {s.label for p in survival_series(result) for s in p.series}
    measured = any(f.label == Label.MEASURED for c in result.cells for f in c.arms.values())
    if Label.MEASURED in drawn or not measured:
        return None
    nulls = [
        s.null_reason
        for c in sorted(result.cells, key=lambda c: c.level != Level.POOLED)
        for s in c.survival
        if s.label == Label.MEASURED and s.null_reason
    ]
    if nulls:
        return f"No MEASURED curve: its P(A ≥ j) is null ({nulls[0]})."
    return (
        "No MEASURED curve: this result holds P(A ≥ j) for its SIMULATED arms only (its"
        " MEASURED figure is R, drawn in context.png)."
    )


def survival_figure(result: Result) -> Any:
    """Return P(A ≥ j) by position j per arm, pooled and per family (:func:`survival_series`).

    Every arm with survival figures is drawn, MEASURED ones included (solid); a missing MEASURED
    curve is named in the title (:func:`survival_gap`).
    """
    gap = survival_gap(result)
    return _panels_figure(
        survival_series(result),
        title="Per-position survival P(A ≥ j): share of rounds that retained at least j drafted"
        " tokens (no interval in the results).\nHow to read: the curve falls with j; a higher "
        "curve keeps drafts longer; R = 1 + the curve's sum over j; coinciding arms overlap "
        f"(see the markers).{'' if gap is None else chr(10) + gap}",
        xlabel="draft position j",
        ylabel="P(A ≥ j)",
        dodge=False,
    )


def survival_plot(result: Result, path: Path) -> None:
    """Draw :func:`survival_figure` into ``path``."""
    _save(survival_figure(result), path, dpi=PANELS_DPI)


def depth_plot(result: Result, path: Path) -> None:
    """Draw :func:`depth_figure` into ``path``."""
    _save(depth_figure(result), path, dpi=100)


def depth_figure(result: Result) -> Any:
    """Return R by depth per arm and cell (pooled, then each family) with its 95% interval.

    Each arm's own (reference) depth is ringed; depths past the recorded positions are shaded
    and labelled UNSUPPORTED rather than drawn; with a cost model a pooled tokens/s panel
    (ESTIMATED, in tokens per second) marks each arm's best depth with a star. Every panel's y
    axis names its unit.
    """
    pooled = result.pooled
    cost = any(f.tokens_per_s is not None for f in pooled.depths)
    label = pooled.depths[0].label.value if pooled.depths else "SIMULATED"
    panels: list[tuple[Cell, str]] = [(pooled, "R")] + ([(pooled, "tokens_per_s")] if cost else [])
    panels += [(c, "R") for c in result.cells if c.level == Level.FAMILY and c.depths]
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(4.6 * ncols, 3.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    for ax, (cell, key) in zip(axes.ravel(), panels, strict=False):
        _depth_panel(ax, result, cell, key)
        what = f"R, tokens per round ({label})" if key == "R" else "tokens/s (ESTIMATED)"
        if key != "R" and result.options.get("cost"):
            what += f"\ncost model {result.options['cost']}"
        ax.set_title(f"{cell.name}: {what}", fontsize=9)
        unit = "R (tokens per round)" if key == "R" else "tokens/s (tokens per second)"
        ax.set_ylabel(unit, fontsize=8)
    axes[0][0].legend(fontsize=7, title="arm (ring: its own depth)", title_fontsize=7)
    used = result.options.get("estimator_used")
    model = result.options.get("cost")
    extra = f"; star: best depth under the cost model {model or ''}".rstrip() if cost else ""
    if _depth_policies_drawn(result):
        extra += "\npooled panels: each --policy at E[L], its mean drafted positions (in-sample)"
    fig.suptitle(f"Depth sweep: value and 95% interval by fixed depth ({used}){extra}", fontsize=10)
    fig.tight_layout()
    return fig


def _depth_policies_drawn(result: Result) -> bool:
    """Whether depths.png draws policies (a sweep with ``--policy``: some policy with E[L], R)."""
    return bool(result.cells) and any(_policy_points(result.pooled, a, "R") for a in result.arms)


_POLICY_MARKERS: Final[dict[str, str]] = {"stop-below": "v", "stop-cum": "^"}
"""A policy's marker in depths.png by its family; any other family (depth-by-bucket): ``D``."""


def _policy_points(
    cell: Cell, arm: str, key: str
) -> dict[str, list[tuple[float, float, float, float]]]:
    """Return ``arm``'s policies of ``cell`` with E[L] and ``key``, by family: (E[L], y, lo, hi).

    ``key`` is ``R`` or ``tokens_per_s``; a missing interval end is the value itself.
    """
    low, high = ("lo", "hi") if key == "R" else ("tokens_per_s_lo", "tokens_per_s_hi")
    out: dict[str, list[tuple[float, float, float, float]]] = {}
    for f in cell.policies:
        y = getattr(f, key)
        if f.arm != arm or not f.supported or f.E_L is None or y is None:
            continue
        lo, hi = getattr(f, low), getattr(f, high)
        out.setdefault(f.policy.partition(":")[0], []).append(
            (f.E_L, y, y if lo is None else lo, y if hi is None else hi)
        )
    return out


def _draw_policies(ax: Any, cell: Cell, arm: str, key: str, colour: str) -> None:
    """Draw ``arm``'s policies in a pooled panel of depths.png: a point at E[L] per policy.

    A policy drafts E[L] positions per round on average, so it stands on the depth axis where
    a fixed depth drafting as many would; above the fixed depths' curve it does better than a
    fixed depth of that length, in-sample (whether a policy pays: the held-out verdict, TABLES.md).
    """
    for family, pts in _policy_points(cell, arm, key).items():
        bars = ax.errorbar(
            [p[0] for p in pts],
            [p[1] for p in pts],
            yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
            fmt=_POLICY_MARKERS.get(family, "D"),
            ms=5,
            mfc="none",
            capsize=2,
            lw=0.8,
            color=colour,
            label=f"{family} at E[L] (in-sample)",
        )
        bars.lines[0].set_gid(f"{cell.name} {key}: {arm} {family}")  # the points, not the caps


def _depth_panel(ax: Any, result: Result, cell: Cell, key: str) -> None:
    """One cell's curves of ``key`` by depth, every arm, reference ringed, UNSUPPORTED shaded."""
    for arm in result.arms:
        xs, ys, lo, hi = _series(cell.depths, arm, key)
        line = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=arm)
        ref = int(arm.rsplit("@", 1)[1]) if "@" in arm else result.options.get("reference_depth")
        at = [y for x, y in zip(xs, ys, strict=True) if x == ref]
        if at and ref is not None:
            _ring(ax, float(ref), at[0], line[0].get_color(), gid=f"{cell.name} {key}: ring {arm}")
        best = (cell.best_depth or {}).get(arm)
        if key != "R" and best is not None:
            at = [y for x, y in zip(xs, ys, strict=True) if x == best]
            if at:
                _star(ax, best, at[0], line[0].get_color(), gid=f"{cell.name} {key}: star {arm}")
        if cell.level == Level.POOLED:
            _draw_policies(ax, cell, arm, key, line[0].get_color())
    unsupported = sorted({f.depth for f in cell.depths if not f.supported})
    if unsupported:
        ax.axvspan(min(unsupported) - 0.5, max(unsupported) + 0.5, color="0.9", zorder=0)
        mid = (min(unsupported) + max(unsupported)) / 2
        ax.text(
            mid,
            0.5,
            "UNSUPPORTED\n(not recorded)",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="center",
            color="0.4",
            fontsize=8,
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # depths are whole positions
    drawn = cell.level == Level.POOLED and any(_policy_points(cell, a, key) for a in result.arms)
    where = "; a policy: at E[L]" if drawn else ""
    ax.set_xlabel(f"fixed depth d (drafted positions per round){where}", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


_RING_MS: Final[float] = 15.0
_STAR_MS: Final[float] = 8.0
"""A ring and a star at one point both show: the ring (drawn above, hollow) clears the star."""


def _ring(ax: Any, x: float, y: float | None, colour: str, *, gid: str) -> None:
    """Ring the point (x, y): hollow, wider than :func:`_star`'s star, drawn above it."""
    ax.plot([x], [y], "o", ms=_RING_MS, mfc="none", mew=1.4, color=colour, zorder=4, gid=gid)


def _star(ax: Any, x: float, y: float | None, colour: str, *, gid: str) -> None:
    """Star the point (x, y), small enough to sit inside :func:`_ring`'s ring."""
    ax.plot([x], [y], "*", ms=_STAR_MS, color=colour, zorder=3, gid=gid)


def _series(
    figs: tuple[DepthFigure, ...], arm: str, key: str
) -> tuple[list[int], list[float], list[float], list[float]]:
    """Depths, values and error-bar lengths of ``key`` (``R`` or ``tokens_per_s``) of one arm."""
    xs: list[int] = []
    ys: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    low, high = ("lo", "hi") if key == "R" else ("tokens_per_s_lo", "tokens_per_s_hi")
    for f in figs:
        y = getattr(f, key)
        if f.arm != arm or not f.supported or y is None:
            continue
        xs.append(f.depth)
        ys.append(float(y))
        lo.append(float(y) - float(getattr(f, low) if getattr(f, low) is not None else y))
        hi.append(float(getattr(f, high) if getattr(f, high) is not None else y) - float(y))
    return xs, ys, lo, hi


def policy_plot(result: Result, path: Path) -> None:
    """Draw :func:`~specreplay.render.policy_plot.policy_figure` into ``path``."""
    _save(policy_figure(result), path, dpi=100)


def screen_plot(result: Result, path: Path) -> None:
    """Draw :func:`screen_figure` into ``path``."""
    _save(screen_figure(result), path, dpi=110)


def screen_figure(result: Result) -> Any:
    """Return, per batch × context cell of a screen, the central rate by depth and its envelope.

    One small panel per cell (batch across, context down): the central tokens/s per depth as a
    line, the assumption envelope as a band, the nominal cap ringed and the best-ranked depth
    starred; depths UNSUPPORTED (past the trained block or the cap) are left out and named in the
    panel. Each panel's title names its worker(s); a panel of several workers has a legend, and
    the figure's title names every worker screened.
    """
    from matplotlib.ticker import MaxNLocator

    cells = [c for c in result.cells if c.screen is not None]
    batches = sorted({c.batch for c in cells if c.batch is not None})
    contexts = sorted({c.context for c in cells if c.context is not None})
    size = (max(3.2 * len(batches), 6.4), 2.6 * max(len(contexts), 1) + 0.6)  # title fits
    fig = new_figure(*size)
    axes = fig.subplots(len(contexts) or 1, len(batches) or 1, squeeze=False)
    for ax in axes.ravel():
        ax.set_visible(False)
    for c in cells:
        if c.context is None or c.batch is None:
            continue
        ax = axes[contexts.index(c.context)][batches.index(c.batch)]
        ax.set_visible(True)
        ok = [d for d in c.depths if d.supported and d.tokens_per_s is not None]
        xs = [d.depth for d in ok]
        ax.plot(xs, [d.tokens_per_s for d in ok], marker="o", ms=3, label=c.worker)
        lo = [d.tokens_per_s_lo if d.tokens_per_s_lo is not None else d.tokens_per_s for d in ok]
        hi = [d.tokens_per_s_hi if d.tokens_per_s_hi is not None else d.tokens_per_s for d in ok]
        ax.fill_between(xs, lo, hi, alpha=0.2)
        best = [d for d in ok if d.rank == 1]
        if best:
            _star(ax, best[0].depth, best[0].tokens_per_s, "C3", gid=f"best: {c.worker}")
        cap = c.screen.cap if c.screen is not None else None
        if cap is not None and cap in xs:
            y = next(d.tokens_per_s for d in ok if d.depth == cap)
            _ring(ax, cap, y, "k", gid=f"cap: {c.worker}")
        gone = [d.depth for d in c.depths if not d.supported]
        here = [x for x in cells if (x.batch, x.context) == (c.batch, c.context)]
        workers = ", ".join(dict.fromkeys(x.worker or "—" for x in here))
        title = f"worker {workers}: batch {c.batch}, context {c.context}"
        if gone:
            title += f"\nUNSUPPORTED: depth {min(gone)}..{max(gone)}"
        ax.set_title(title, fontsize=8)
        if len(here) > 1:
            ax.legend(fontsize=6, title="worker", title_fontsize=6)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft depth d", fontsize=8)
        ax.set_ylabel("tokens/s (ESTIMATED)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    workers = ", ".join(dict.fromkeys(c.worker or "—" for c in cells))
    fig.suptitle(
        f"Depth screen of worker {workers}: central rate (line), assumption envelope\n"
        "(band), best rank (star), nominal cap (ring)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
