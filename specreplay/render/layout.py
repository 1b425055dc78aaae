"""Margins of a plot from the size of its texts, measured once: what ``tight_layout`` did, cheaper.

Issue 18, item 3 measured ``fig.tight_layout()`` at a quarter of the requalify's plotting time
(0.39–0.48 s CPU of 1.5–1.7 s for forest, context and survival at 2,000,000 positions): it asks
every artist of every panel for its extent (each error bar, each tick), computing the ticks once
for the layout and again for the drawing. Here only the texts that take room beside a panel
are measured (its tick labels, title, axis and figure labels, the legend), with the renderer the
PNG is drawn with, so that matplotlib's text-metrics cache serves the drawing too; the margins
follow from those sizes and the same paddings as ``tight_layout``'s (:data:`PAD`: 1.08 × the
10-point font, between the figure's edge and a text and between two panels' texts).

Terms: a *margin* is in inches from the figure's edge to the panels' edge; *gaps* are between
two panels. The y tick labels are measured after a first placement and again after the final
one (the locator picks its ticks by the panel's height), keeping the wider.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "LABEL_GAP",
    "PAD",
    "TICK",
    "TITLE_GAP",
    "Margins",
    "extent",
    "place",
    "tallest",
    "tick_labels",
    "widest",
]

PAD: Final[float] = 1.08 * 10.0 / 72.0
"""Inches between the figure's edge and a text, and between two panels' texts (tight_layout's
default ``pad=1.08`` of the 10-point font size)."""

TICK: Final[float] = (3.5 + 3.5) / 72.0
"""Inches from a panel's edge to its tick labels: the tick's length and its label's pad (the
rc defaults ``xtick.major.size`` and ``xtick.major.pad``, 3.5 points each)."""

LABEL_GAP: Final[float] = 4.0 / 72.0
"""Inches between an axis label and its tick labels (the rc default ``axes.labelpad``)."""

TITLE_GAP: Final[float] = 6.0 / 72.0
"""Inches between a panel's title and its top edge (the rc default ``axes.titlepad``)."""


@dataclass(frozen=True)
class Margins:
    """Where the panels of a figure go, in inches: four margins and the gaps between panels."""

    left: float
    right: float
    top: float
    bottom: float
    wgap: float = 0.0
    hgap: float = 0.0


def extent(fig: Any, artist: Any) -> tuple[float, float]:
    """Return the (width, height) of ``artist`` in inches, as the PNG draws it."""
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return float(box.width) / fig.dpi, float(box.height) / fig.dpi


def widest(fig: Any, artists: Iterable[Any]) -> float:
    """Return the largest width in inches of ``artists`` with text (0 when none has any)."""
    return max((extent(fig, a)[0] for a in artists if a.get_text()), default=0.0)


def tallest(fig: Any, artists: Iterable[Any]) -> float:
    """Return the largest height in inches of ``artists`` with text (0 when none has any)."""
    return max((extent(fig, a)[1] for a in artists if a.get_text()), default=0.0)


def place(fig: Any, m: Margins, nrows: int = 1, ncols: int = 1) -> None:
    """Place ``fig``'s grid of ``nrows`` × ``ncols`` panels by the margins ``m`` (inches).

    A panel keeps at least a tenth of the figure's width and height: texts too large for the
    figure then run over one another rather than turn a panel inside out.
    """
    width, height = (float(v) for v in fig.get_size_inches())
    left, right = _fit(m.left, m.right, m.wgap, ncols, width)
    bottom, top = _fit(m.bottom, m.top, m.hgap, nrows, height)
    panel_w = (width - left - right - (ncols - 1) * m.wgap) / ncols
    panel_h = (height - bottom - top - (nrows - 1) * m.hgap) / nrows
    fig.subplots_adjust(
        left=left / width,
        right=1.0 - right / width,
        bottom=bottom / height,
        top=1.0 - top / height,
        wspace=m.wgap / max(panel_w, 1e-9),
        hspace=m.hgap / max(panel_h, 1e-9),
    )


def _fit(low: float, high: float, gap: float, n: int, size: float) -> tuple[float, float]:
    """Shrink two margins, keeping their ratio, until each of ``n`` panels keeps a tenth."""
    room = size - (n - 1) * gap - n * 0.1 * size
    if low + high <= room or low + high <= 0.0:
        return low, high
    scale = max(room, 0.0) / (low + high)
    return low * scale, high * scale


def tick_labels(axes: Sequence[Any], which: str) -> list[Any]:
    """Return the major tick labels of ``axes`` on the ``x`` or ``y`` axis (ticks computed)."""
    return [t for ax in axes for t in getattr(ax, f"get_{which}ticklabels")()]
