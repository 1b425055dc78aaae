"""PNG plots where a picture reads better than a table (matplotlib, Agg backend, imported lazily).

The forest plot shows, per cell (pooled, then each family with its buckets when there is more than
one bucket), the paired delta with its 95% studentized interval and, shaded, the
equivalence margin: a reader sees at once which cells are inside the margin, which exclude zero,
and which are too wide to tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specreplay.results.model import Cell, DepthFigure, Level, Result, Role

__all__ = ["PLOT_CAPTIONS", "depth_plot", "forest_plot", "screen_plot"]

PLOT_CAPTIONS: dict[str, str] = {
    "forest.png": "Paired delta per cell with its 95% studentized interval; the shaded band is the"
    " equivalence margin.",
    "depths.png": "R (and, with a cost model, tokens/s) by fixed draft depth per arm, with 95%"
    " intervals; ring: the arm's own depth.",
    "screen.png": "Screened tokens/s by draft depth per batch x context cell; band: the assumption"
    " envelope.",
}
"""One-line caption of each PNG a run can write (REPORT.md embeds each with its caption)."""


def forest_plot(
    cells: tuple[Cell, ...],
    path: Path,
    *,
    role: Role,
    relative: bool,
    margin: float,
    title: str,
) -> None:
    """Draw the ``role`` delta (relative, in %, when ``relative``) per cell into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows: list[tuple[str, float, float, float, str | None]] = []
    n_buckets = sum(1 for c in cells if c.level == Level.BUCKET)
    levels = (
        (Level.POOLED, Level.FAMILY, Level.FAMILY_BUCKET)
        if n_buckets > 1
        else (Level.POOLED, Level.FAMILY)
    )
    order = [c for c in cells if c.level in levels]
    order.sort(key=lambda c: (c.family is not None, c.family or "", c.bucket or ""))
    scale = 100.0 if relative else 1.0
    for c in order:
        d = c.delta(role)
        if d is None:
            continue
        name = (
            "pooled"
            if c.level == Level.POOLED
            else (str(c.family) if c.bucket is None else f"   {c.bucket}")
        )
        vals = (d.rel, d.rel_lo, d.rel_hi) if relative else (d.point, d.lo, d.hi)
        if d.null_reason is not None or vals[0] is None or vals[1] is None or vals[2] is None:
            rows.append((f"{name} (—)", float("nan"), float("nan"), float("nan"), None))
            continue
        rows.append((name, vals[0] * scale, vals[1] * scale, vals[2] * scale, d.verdict))
    colors = {"EQUIVALENT": "tab:green", "DIFFERENT": "tab:red", "INCONCLUSIVE": "tab:gray"}
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(rows) + 1.6))
    m = margin * scale
    ax.axvspan(
        -m, m, color="tab:green", alpha=0.12, label=f"margin ±{m:g}{'%' if relative else ''}"
    )
    ax.axvline(0.0, color="black", lw=0.8)
    # one collection for the intervals and one for the points (two artists, not two per row)
    ys = [len(rows) - 1 - i for i in range(len(rows))]
    cols = [colors.get(r[4] or "", "tab:gray") for r in rows]
    ax.hlines(ys, [r[2] for r in rows], [r[3] for r in rows], colors=cols, lw=2)
    ax.scatter([r[1] for r in rows], ys, c=cols, s=16, zorder=3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in reversed(rows)], fontsize=8)
    unit = "% of R_a" if relative else "tokens/round"
    ax.set_xlabel(f"Δ retained tokens per round ({unit}), 95% studentized interval")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def depth_plot(result: Result, path: Path) -> None:
    """Draw R by depth per arm and cell (pooled, then each family) with its 95% interval.

    Each arm's own (reference) depth is ringed; depths past the recorded positions are shaded
    and labelled UNSUPPORTED rather than drawn; with a cost model a pooled tokens/s panel
    (ESTIMATED) marks each arm's best depth with a star.
    """
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pooled = result.pooled
    cost = any(f.tokens_per_s is not None for f in pooled.depths)
    label = pooled.depths[0].label.value if pooled.depths else "SIMULATED"
    panels: list[tuple[Cell, str]] = [(pooled, "R")] + ([(pooled, "tokens_per_s")] if cost else [])
    panels += [(c, "R") for c in result.cells if c.level == Level.FAMILY and c.depths]
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), squeeze=False)
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    for ax, (cell, key) in zip(axes.ravel(), panels, strict=False):
        _depth_panel(ax, result, cell, key)
        what = f"R, tokens per round ({label})" if key == "R" else "tokens/s (ESTIMATED)"
        ax.set_title(f"{cell.name}: {what}", fontsize=9)
    axes[0][0].legend(fontsize=7, title="arm (ring: its own depth)", title_fontsize=7)
    used = result.options.get("estimator_used")
    extra = "; star: best depth under the cost model" if cost else ""
    fig.suptitle(f"Depth sweep: value and 95% interval by fixed depth ({used}){extra}",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)


def _depth_panel(ax: Any, result: Result, cell: Cell, key: str) -> None:
    """One cell's curves of ``key`` by depth, every arm, reference ringed, UNSUPPORTED shaded."""
    for arm in result.arms:
        xs, ys, lo, hi = _series(cell.depths, arm, key)
        line = ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=arm)
        ref = int(arm.rsplit("@", 1)[1]) if "@" in arm else result.options.get("reference_depth")
        at = [y for x, y in zip(xs, ys, strict=True) if x == ref]
        if at:
            ax.plot([ref], at, "o", ms=10, mfc="none", color=line[0].get_color())
        best = (cell.best_depth or {}).get(arm)
        if key != "R" and best is not None:
            at = [y for x, y in zip(xs, ys, strict=True) if x == best]
            ax.plot([best], at, "*", ms=13, color=line[0].get_color())
    unsupported = sorted({f.depth for f in cell.depths if not f.supported})
    if unsupported:
        ax.axvspan(min(unsupported) - 0.5, max(unsupported) + 0.5, color="0.9", zorder=0)
        mid = (min(unsupported) + max(unsupported)) / 2
        ax.text(mid, 0.5, "UNSUPPORTED\n(not recorded)", transform=ax.get_xaxis_transform(),
                ha="center", va="center", color="0.4", fontsize=8)  # fmt: skip
    ax.set_xlabel("fixed draft depth d (positions per round)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)


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


def screen_plot(result: Result, path: Path) -> None:
    """Draw, per batch × context cell of a screen, the central rate by depth and its envelope.

    One small panel per cell (batch across, context down): the central tokens/s per depth as a
    line, the assumption envelope as a band, the nominal cap ringed and the best-ranked depth
    starred; depths UNSUPPORTED (past the trained block or the cap) are left out and named in the
    panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cells = [c for c in result.cells if c.screen is not None]
    batches = sorted({c.batch for c in cells if c.batch is not None})
    contexts = sorted({c.context for c in cells if c.context is not None})
    size = (3.2 * max(len(batches), 1), 2.6 * max(len(contexts), 1))
    fig, axes = plt.subplots(len(contexts) or 1, len(batches) or 1, squeeze=False, figsize=size)
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
            ax.plot([best[0].depth], [best[0].tokens_per_s], "*", ms=12, color="C3")
        cap = c.screen.cap if c.screen is not None else None
        if cap is not None and cap in xs:
            ax.plot([cap], [next(d.tokens_per_s for d in ok if d.depth == cap)], "o", ms=10,
                    mfc="none", color="k")  # fmt: skip
        gone = [d.depth for d in c.depths if not d.supported]
        title = f"batch {c.batch}, context {c.context}"
        if gone:
            title += f"\nUNSUPPORTED: depth {min(gone)}..{max(gone)}"
        ax.set_title(title, fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("draft depth d", fontsize=8)
        ax.set_ylabel("tokens/s (ESTIMATED)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Depth screen: central rate (line), assumption envelope (band), best rank (star),"
                 " nominal cap (ring)", fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
