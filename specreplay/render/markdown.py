"""Small Markdown helpers shared by the REPORT.md renderers (:mod:`report`, :mod:`demo_story`).

The TABLES.md renderers (:mod:`specreplay.render.tables` and friends) write text meant for a
terminal as much as for a Markdown viewer: a heading line, then lines of prose with no blank line
between them. REPORT.md reuses that text unchanged in content; :func:`md_blocks` only inserts the
blank lines a Markdown viewer needs so two lines of prose do not run into one paragraph, and
:func:`demote` pushes its headings under the report's own. Figures are embedded by their file
name, relative to the report, so a run folder can be moved or copied and still display.
"""

from __future__ import annotations

from collections.abc import Sequence

from specreplay.render.plots import drawn_labels, plot_caption
from specreplay.results.model import Delta, Label, Result, Role

__all__ = [
    "bullets",
    "demote",
    "figure_block",
    "figure_label",
    "labels_of",
    "main_delta",
    "md_blocks",
    "num",
    "pct",
    "split_assumptions",
]


def num(x: float | None, digits: int = 4) -> str:
    """Format a signed figure: ``—`` for null; tiny non-zero values in scientific notation."""
    if x is None:
        return "—"
    if x != 0.0 and abs(x) < 10.0 ** (-digits):
        return f"{x:+.2e}"
    return f"{x:+.{digits}f}"


def pct(x: float | None, digits: int = 3) -> str:
    """Format a signed share in percent: ``—`` for null."""
    return "—" if x is None else f"{100.0 * x:+.{digits}f}%"


def _kind(line: str) -> str:
    if line.startswith("|"):
        return "table"
    if line.startswith("#"):
        return "heading"
    if line.startswith(("- ", "* ", "  ")):
        return "list"
    if line.startswith("```"):
        return "fence"
    return "prose"


def md_blocks(text: str) -> str:
    """Return ``text`` with a blank line between blocks of a different kind and between prose lines.

    A Markdown viewer joins consecutive prose lines into one paragraph and wants a blank line
    before a table; lines of a table, of a list, or inside a fenced block are left together.
    """
    out: list[str] = []
    prev = ""
    fenced = False
    for line in text.rstrip("\n").split("\n"):
        kind = _kind(line)
        if line and prev and not fenced and (kind != _kind(prev) or kind in ("prose", "heading")):
            out.append("")
        if kind == "fence":
            fenced = not fenced
        out.append(line)
        prev = line
    return "\n".join(out)


def demote(text: str, top: int) -> str:
    """Return ``text`` with its headings shifted so the highest is of level ``top`` (3: ###)."""
    levels = [len(ln) - len(ln.lstrip("#")) for ln in text.split("\n") if ln.startswith("#")]
    if not levels:
        return text
    shift = top - min(levels)
    return "\n".join(
        "#" * shift + ln if ln.startswith("#") and shift > 0 else ln for ln in text.split("\n")
    )


def split_assumptions(text: str) -> str:
    """Return a TABLES.md text without its closing ``Assumptions:`` list (REPORT.md has its own).

    The list is the last block of the text: an ``Assumptions:`` line followed only by blank lines
    and ``- `` items. Text without one is returned unchanged.
    """
    lines = text.rstrip("\n").split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i] == "Assumptions:":
            rest = lines[i + 1 :]
            if all(not ln or ln.startswith("- ") for ln in rest):
                return "\n".join(lines[:i]).rstrip("\n") + "\n"
            break
    return text


def labels_of(result: Result) -> list[str]:
    """Return the labels of the figures of the result's cells (MEASURED, SIMULATED, ESTIMATED)."""
    seen: set[Label] = set()
    for c in result.cells:
        seen.update(a.label for a in c.arms.values())
        seen.update(d.label for d in c.deltas)
        seen.update(d.label for d in c.depths)
        seen.update(s.label for s in c.survival)
        if c.budget is not None:
            seen.add(c.budget.label)
    return [lb.value for lb in Label if lb in seen]


def figure_block(name: str, label: str, *, folder: str = "", result: Result | None = None) -> str:
    """Embed one PNG with its label and one-line caption (a fallback when none is recorded).

    ``folder`` is the PNG's folder relative to the report (``requalify/``), empty beside it;
    ``result`` the run the PNG draws, so that the caption names only what it draws
    (:func:`~specreplay.render.plots.plot_caption`).
    """
    caption = plot_caption(name, result)
    alt = caption.rstrip(".")
    return f"![{alt}]({folder}{name})\n\n*{folder}{name}* ({label}): {caption}"


def main_delta(result: Result) -> Delta | None:
    """Return the pooled delta a run is about (its verdict or its forest plot), or None."""
    if not result.cells:
        return None
    roles = (Role.CANDIDATE_VS_BASELINE, Role.B_VS_A, Role.DEPTH_VS_REFERENCE)
    return next((d for r in roles if (d := result.pooled.delta(r)) is not None), None)


def figure_label(result: Result, name: str) -> str:
    """Return the label(s) of what a plot draws; every label of the run for an unknown plot."""
    if name == "forest.png" and (main := main_delta(result)) is not None:
        return main.label.value
    if name == "screen.png":
        return "ESTIMATED rates from MEASURED counters"
    if name in ("context.png", "survival.png") and (drawn := drawn_labels(result, name)):
        return " and ".join(drawn)
    if name == "policies.png":
        return "tokens/s ESTIMATED"
    if name == "depths.png" and result.cells and result.pooled.depths:
        cost = "; tokens/s ESTIMATED" if result.options.get("cost") else ""
        return f"R {result.pooled.depths[0].label.value}{cost}"
    return " and ".join(labels_of(result)) or "—"


def bullets(items: Sequence[str]) -> str:
    """Return a Markdown list of ``items`` (one line each)."""
    return "\n".join(f"- {x}" for x in items)
