"""The figure every plot draws on, and how it is written as a PNG (matplotlib, imported lazily).

Issue 18, item 3 ("plots and files" ≤ 0.5 s, matplotlib's import included) measured where a
plot's time goes; the decisions taken here:

- A plot is a bare :class:`matplotlib.figure.Figure` on an Agg canvas, not a pyplot figure:
  no backend is chosen, no figure manager registered, nothing has to be closed (a figure is
  freed when it is no longer referenced), and ``matplotlib.pyplot`` is never imported.
- A PNG is written with zlib level :data:`PNG_COMPRESS_LEVEL` (1) instead of Pillow's 6: at the
  2,000,000-position requalify's plots, encoding took 33–38 ms per plot at level 6 and 20–24 ms
  at level 1, and the files are within ±11 % of their size (about 150 KB each). The pixels are
  the same; zlib's level changes only how hard it searches for repeats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

__all__ = ["PNG_COMPRESS_LEVEL", "new_figure", "write_png"]

PNG_COMPRESS_LEVEL: Final[int] = 1
"""zlib level of every PNG written (module docstring)."""


def new_figure(width: float, height: float, *, dpi: int = 100) -> Any:
    """Return an empty figure of ``width`` × ``height`` inches on its own Agg canvas.

    ``dpi`` is the one the PNG is written at: texts measured for the layout
    (:mod:`specreplay.render.layout`) are then measured by the renderer that draws them, and
    matplotlib's text-metrics cache serves both.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def write_png(fig: Any, path: Path, *, dpi: int) -> None:
    """Draw ``fig`` once and write it to ``path`` as a PNG at ``dpi`` (zlib level 1)."""
    fig.savefig(path, dpi=dpi, format="png", pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
