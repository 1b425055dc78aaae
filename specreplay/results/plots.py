"""PNG plots where a picture reads better than a table (matplotlib, Agg backend, imported lazily).

The forest plot shows, per cell (pooled, then each family with its buckets when there is more than
one bucket), the paired delta with its 95% expanded percentile interval and, shaded, the
equivalence margin: a reader sees at once which cells are inside the margin, which exclude zero,
and which are too wide to tell.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.results.model import Cell, Level, Role

__all__ = ["forest_plot"]


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
    ax.set_xlabel(f"Δ retained tokens per round ({unit}), 95% expanded percentile interval")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
