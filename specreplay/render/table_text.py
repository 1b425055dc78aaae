"""The two helpers every table renderer shares: a figure's text and a Markdown table.

A leaf module (it imports nothing of the package), so any renderer can use it;
:mod:`specreplay.render.tables` re-exports both names.
"""

from __future__ import annotations

__all__ = ["fmt", "markdown_table"]


def fmt(value: float | None, digits: int = 4) -> str:
    """Format a figure for a table: ``—`` for null."""
    return "—" if value is None else f"{value:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """Render a Markdown table (first column left-aligned, the others right-aligned)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells))
        return "| " + " | ".join(padded) + " |"

    sep = "|" + "|".join(
        ("-" * (w + 2)) if i == 0 else ("-" * (w + 1) + ":") for i, w in enumerate(widths)
    )
    return "\n".join([line(header), sep + "|", *[line(r) for r in rows]])
