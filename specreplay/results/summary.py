"""A result's repr, and a cell's: what it is and its verdicts in at most :data:`MAX_LINES` lines.

The dataclass repr of a :class:`~specreplay.results.model.Result` spelled out every field of every
cell: tens of thousands of characters on one line for a small run (issue 16, item 8). This one
says which command made the result, its arms, how many cells of which level it holds, the pooled
verdict(s) with the interval on the margin's scale (the scale the verdict was judged on) and each
figure's label, then where the rest is (``.pooled``, ``.cells``, ``.to_polars(VIEW)``,
``.to_arviz()``). A :class:`~specreplay.results.model.Cell` (``result.pooled``, ``result.cells[i]``;
up to 17,000 characters in a requalification) likewise: its name and size, R of each arm with its
label, its deltas, how many figures of each other kind it holds. Long names are cut with ``…``
so that no line passes :data:`WIDTH` characters.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from specreplay.results.model import REPRS, Cell, Delta, Result

__all__ = ["MAX_LINES", "WIDTH", "cell_repr", "result_repr"]

MAX_LINES = 20
"""The most lines a result's repr takes."""
WIDTH = 140
"""The longest line a result's repr prints (a cut name or reason ends with ``…``)."""
MAX_DELTAS = 8
"""Pooled deltas listed one a line; the rest are counted (``to_polars("deltas")`` has them)."""
VIEWS_HINT = "cells, arms, deltas, depths, survival, law_tests"


def _cut(text: str, width: int = WIDTH) -> str:
    """Return ``text`` cut to ``width`` characters, ending with ``…`` when cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _names(names: list[str], width: int) -> str:
    """Join ``names`` with commas; past ``width``, the first few and how many in all."""
    joined = ", ".join(names)
    if len(joined) <= width:
        return joined
    shown: list[str] = []
    for name in names:
        if len(", ".join([*shown, name])) > width - 12:
            break
        shown.append(name)
    return f"{', '.join(shown)}, … ({len(names)} in all)"


def _relative_margin(result: Result) -> bool:
    """Whether the run's margin is relative to R_a (the default, ``0.5%``)."""
    margin = result.options.get("margin")
    return not (isinstance(margin, dict) and margin.get("kind") == "absolute")


def _interval(d: Delta, relative: bool) -> str:
    """Return Δ (or Δ/R_a) with its interval, on the margin's scale (3 significant digits)."""
    if relative and d.rel is not None:
        lo, hi = d.rel_lo, d.rel_hi
        span = f" [{100 * lo:+.3g}%, {100 * hi:+.3g}%]" if lo is not None and hi is not None else ""
        return f"Δ/R_a {100 * d.rel:+.3g}%{span}"
    if d.point is None:
        return "Δ null"
    span = f" [{d.lo:+.4g}, {d.hi:+.4g}]" if d.lo is not None and d.hi is not None else ""
    return f"Δ {d.point:+.4g}{span} tokens/round"


def _delta_line(d: Delta, relative: bool, repeated: bool) -> str:
    """Return one pooled delta: role, verdict (or why none), interval, level, label, estimator.

    ``repeated``: another pooled delta has the same role, so the line names arm a too.
    """
    name = d.role.value
    if d.depth is not None:
        name += f" (depth {d.depth})"
    elif repeated:
        name += f" [{d.a}]"
    if d.point is None and d.rel is None:
        return _cut(f"  {name}: null ({d.null_reason})")
    if d.verdict is not None:
        verdict = d.verdict
    else:  # the reason's head: "diagnostic", "depth sweep" (to_polars("deltas") has it whole)
        verdict = (d.verdict_null_reason or "no verdict").split(":")[0]
    estimator = f", {d.estimator}" if d.estimator else ""
    at = f"at {100 * d.level:g}%"
    return _cut(f"  {name}: {verdict}; {_interval(d, relative)} {at}; {d.label.value}{estimator}")


def _cells_line(result: Result) -> str:
    """Return how many cells, by level, and the pooled cell's request count."""
    if not result.cells:
        return "  cells: none"
    levels = Counter(c.level.value for c in result.cells)
    parts = ", ".join(f"{n} {level}" for level, n in levels.items())
    pooled = result.pooled.n_requests
    return _cut(f"  cells: {len(result.cells)} ({parts}); pooled: {pooled} requests")


def _headline(result: Result) -> list[str]:
    """Return the run's headline verdict (requalify: with its reason), when it has one."""
    rq = result.requalification
    if rq is not None:
        why = rq.because if rq.verdict is not None else rq.null_reason
        return [_cut(f"  verdict: {rq.verdict or 'null'} ({rq.label.value}): {why}")]
    if result.verdict is not None:
        return [f"  verdict: {result.verdict} (pooled)"]
    return []


def _delta_lines(result: Result) -> list[str]:
    """Return each pooled delta's line (at most :data:`MAX_DELTAS`), the rest counted."""
    deltas = result.pooled.deltas if result.cells else ()
    if not deltas:
        return []
    relative = _relative_margin(result)
    roles = Counter(d.role for d in deltas)
    lines = ["  pooled deltas (Δ = R_b − R_a; the interval on the margin's scale):"]
    lines += [_delta_line(d, relative, roles[d.role] > 1) for d in deltas[:MAX_DELTAS]]
    if len(deltas) > MAX_DELTAS:
        lines.append(f"  … {len(deltas) - MAX_DELTAS} more pooled deltas: .to_polars('deltas')")
    return lines


def _other_lines(result: Result) -> list[str]:
    """Return what a command without deltas found: law tests, best depths, archive, budget."""
    lines = []
    if result.law_tests:
        failed = [t.arm for t in result.law_tests if getattr(t, "passed", None) is False]
        fails = f": {_names(failed, WIDTH - 40)}" if failed else ""
        lines.append(_cut(f"  law tests: {len(result.law_tests)}, {len(failed)} failed{fails}"))
    if result.cells and result.pooled.best_depth:
        best = [f"{arm} @{d}" for arm, d in result.pooled.best_depth.items()]
        lines.append(_cut(f"  pooled best depth: {_names(best, WIDTH - 22)}"))
    if result.archive is not None:
        a = result.archive
        lines.append(
            f"  archive: {a.rows} rows, {a.requests} requests, {a.rounds} rounds, {a.files} file(s)"
        )
    budget = result.pooled.budget if result.cells else None
    if budget is not None and budget.break_even_ms is not None:
        lines.append(
            f"  pooled break-even added cost: {budget.break_even_ms:.4g} ms/round "
            f"({budget.label.value})"
        )
    return lines


def _more_line(result: Result) -> list[str]:
    """Return where the rest is."""
    arviz = ", .to_arviz()" if result.replicates is not None else ""
    return [
        f"  more: .verdict, .pooled, .cells, .options{arviz}",
        f"        .to_polars(VIEW), VIEW one of {VIEWS_HINT}",
    ]


def result_repr(result: Result) -> str:
    """Return the repr of ``result`` (module docstring): at most :data:`MAX_LINES` lines.

    Parameters
    ----------
    result : Result
        Any command's result.

    Returns
    -------
    str
        ``Result(COMMAND, specreplay VERSION, seed SEED)`` then indented lines.
    """
    head = f"Result({result.command}, specreplay {result.version}, seed {result.seed})"
    arms = f"  arms: {_names(list(result.arms), WIDTH - 8)}" if result.arms else "  arms: none"
    body: list[Any] = [
        *_headline(result),
        arms,
        _cells_line(result),
        *_delta_lines(result),
        *_other_lines(result),
    ]
    more = _more_line(result)
    room = MAX_LINES - 1 - len(more)
    if len(body) > room:
        body = [*body[: room - 1], "  …"]
    return "\n".join([head, *body, *more])


_HELD = ("depths", "policies", "survival", "offpath", "importance")
"""A cell's tuples of other figures, counted on one line."""


def _arm_line(name: str, cell: Cell) -> str:
    """Return R of one arm in ``cell``: the figure, its interval when it has one, its label."""
    f = cell.arms[name]
    if f.R is None:
        return _cut(f"  R {name}: null ({f.null_reason})")
    span = f" [{f.lo:.4f}, {f.hi:.4f}]" if f.lo is not None and f.hi is not None else ""
    estimator = f", {f.estimator}" if f.estimator else ""
    return _cut(f"  R {name}: {f.R:.4f}{span}; {f.label.value}{estimator}; {f.n_rounds} rounds")


def cell_repr(cell: Cell) -> str:
    """Return the repr of ``cell`` (module docstring): at most :data:`MAX_LINES` lines.

    Each delta's interval is on its equivalence margin's scale (Δ/R_a unless the margin was
    absolute).
    """
    size = f"{cell.n_requests} requests" + (
        f"; null: {cell.null_reason}" if cell.null_reason else ""
    )
    lines = [_cut(f"Cell({cell.name}, {size})")]
    arms = list(cell.arms)
    lines += [_arm_line(a, cell) for a in arms[:MAX_DELTAS]]
    if len(arms) > MAX_DELTAS:
        lines.append(f"  … {len(arms) - MAX_DELTAS} more arms: .arms")
    roles = Counter(d.role for d in cell.deltas)
    for d in cell.deltas[:MAX_DELTAS]:
        relative = d.tost is None or d.tost.kind != "absolute"
        lines.append(_delta_line(d, relative, roles[d.role] > 1))
    if len(cell.deltas) > MAX_DELTAS:
        lines.append(f"  … {len(cell.deltas) - MAX_DELTAS} more deltas: .deltas")
    held = [f"{len(getattr(cell, k))} {k}" for k in _HELD if getattr(cell, k)]
    if cell.requalification is not None:
        held.append(f"requalification {cell.requalification.verdict or 'null'}")
    if cell.budget is not None:
        held.append("budget")
    if held:
        lines.append(_cut(f"  also: {', '.join(held)}"))
    lines.append("  more: .arms[ARM], .delta(ROLE), and each field named above (.survival, …)")
    if len(lines) > MAX_LINES:
        lines = [*lines[: MAX_LINES - 2], "  …", lines[-1]]
    return "\n".join(lines)


REPRS.update(Result=result_repr, Cell=cell_repr)
