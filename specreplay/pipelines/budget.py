"""The budget pipeline: break-even costs per cell and the sensitivity rows.

See docs/methods.md#the-budget-break-even-cost.

:func:`budget_run` reads ``--from`` and returns the typed result (the Python API's ``budget``;
:meth:`~specreplay.pipelines.options.BudgetOptions.build` checks the options); the demo builds its
budget chapter with :func:`budget_result` from its requalification.

Budget figures go under ``cells`` (docs/outputs.md#resultsjson: ``budget`` writes its figures
there): one cell per slice, its :class:`~specreplay.results.model.Budget` holding R_0, Δ_lo, the
price, the known costs and the two ESTIMATED figures of docs/methods.md#the-budget-break-even-cost.
Given on the command line (``--base``/``--delta-lo``) there is one pooled cell with no arms
(``n_requests`` 0: no requests were read). Read from a requalify results.json (``--from``) there is
one cell per pooled and family cell of that run, carrying the reference arm's :class:`ArmFigure`
(R_0) and the ``candidate-vs-reference`` :class:`Delta` (Δ_lo = its ``lo``) as the source holds
them. The sensitivity table r_0·(1 + g)·τ/(τ + x) is ``Result.sensitivity``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.pipelines.document import input_files, new_result
from specreplay.pipelines.options import DEFAULT_X_GRID, BudgetOptions
from specreplay.results.io import read_result
from specreplay.results.model import (
    ArmFigure,
    Budget,
    Cell,
    Delta,
    InputFile,
    Label,
    Level,
    Result,
    Role,
    Sensitivity,
)
from specreplay.stats.budget import break_even, sensitivity

__all__ = [
    "DEFAULT_X_GRID",
    "BudgetOptions",
    "budget_inputs",
    "budget_result",
    "budget_run",
    "cells_from_requalify",
    "direct_cell",
    "sensitivity_rows",
]

_LEVELS = (Level.POOLED, Level.FAMILY)


def _budget(
    r0: float | None,
    delta_lo: float | None,
    price_ms: float,
    known_ms: Sequence[float],
    why_null: str | None,
) -> Budget:
    reason: str | None
    if why_null is not None or r0 is None or delta_lo is None:
        be, rem, reason = None, None, why_null or "R_0 or Δ_lo is null"
    else:
        fig = break_even(r0, delta_lo, price_ms, known_ms)
        be, rem, reason = fig.break_even_ms, fig.remaining_ms, fig.null_reason
    return Budget(
        r0=r0,
        delta_lo=delta_lo,
        price_ms=price_ms,
        known_ms=sum(known_ms),
        break_even_ms=be,
        remaining_ms=rem,
        label=Label.ESTIMATED,
        null_reason=reason,
    )


def direct_cell(r0: float, delta_lo: float, price_ms: float, known_ms: Sequence[float]) -> Cell:
    """Return the one pooled cell of a budget given on the command line."""
    return Cell(
        level=Level.POOLED,
        family=None,
        bucket=None,
        n_requests=0,
        arms={},
        budget=_budget(r0, delta_lo, price_ms, known_ms, None),
    )


def cells_from_requalify(
    source: Result, path: str, price_ms: float, known_ms: Sequence[float]
) -> tuple[Cell, ...]:
    """Return a budget cell per pooled and family cell of a requalify result read from ``path``.

    Δ_lo is the cell's ``candidate-vs-reference`` delta's ``lo`` and R_0 its reference arm's R
    (the delta's arm a). A cell whose delta is null keeps a null budget with that reason.

    Raises
    ------
    SpecReplayError
        When ``source`` is not a requalify result, or its pooled cell has no
        ``candidate-vs-reference`` delta (the run had no ``--reference``).
    """
    if source.command != "requalify":
        raise SpecReplayError(
            f"--from {path}: a {source.command!r} results.json; budget reads a requalify one"
        )
    if source.pooled.delta(Role.CANDIDATE_VS_REFERENCE) is None:
        raise SpecReplayError(
            f"--from {path}: no candidate-vs-reference delta (run requalify with --reference)"
        )
    cells = []
    for c in source.cells:
        if c.level not in _LEVELS:
            continue
        d = c.delta(Role.CANDIDATE_VS_REFERENCE)
        if d is None:
            why: str | None = "no candidate-vs-reference delta in this cell"
            arms: dict[str, ArmFigure] = {}
            deltas: tuple[Delta, ...] = ()
            r0, lo = None, None
        else:
            ref = c.arms.get(d.a)
            r0 = ref.R if ref is not None else None
            lo = d.lo
            why = _null_why(d.null_reason, lo, ref.null_reason if ref is not None else "absent")
            arms = {d.a: ref} if ref is not None else {}
            deltas = (d,)
        cells.append(
            Cell(
                level=c.level,
                family=c.family,
                bucket=c.bucket,
                n_requests=c.n_requests,
                arms=arms,
                deltas=deltas,
                budget=_budget(r0, lo, price_ms, known_ms, why),
            )
        )
    return tuple(cells)


def _null_why(delta_reason: str | None, lo: float | None, ref_reason: str | None) -> str | None:
    if lo is None:
        return f"candidate-vs-reference delta null: {delta_reason or 'no interval'}"
    if ref_reason is not None:
        return f"reference R null: {ref_reason}"
    return None


def sensitivity_rows(
    rate: float, tau_ms: float, gain: float, grid: Sequence[float]
) -> tuple[Sensitivity, ...]:
    """Return the sensitivity rows r_0·(1 + g)·τ/(τ + x) over the grid of x.

    See docs/methods.md#the-budget-break-even-cost.
    """
    return tuple(
        Sensitivity(
            rate=rate,
            tau_ms=tau_ms,
            gain=gain,
            extra_ms=p.extra_ms,
            rate_with_extra=p.rate,
            rel_change=p.rel_change,
            label=Label.ESTIMATED,
        )
        for p in sensitivity(rate, tau_ms, gain, grid)
    )


def budget_result(
    cells: tuple[Cell, ...],
    sens: tuple[Sensitivity, ...] | None,
    *,
    inputs: tuple[InputFile, ...],
    options: dict[str, Any],
    arms: Sequence[str] = (),
) -> Result:
    """Return the ``budget`` result (seed 0: nothing is drawn)."""
    return new_result(
        command="budget",
        seed=0,
        inputs=inputs,
        options=options,
        assumptions=[
            "ESTIMATED: break-even added cost x = T·Δ_lo/R_0 ms per round, from "
            '(R_0 + Δ_lo)/(T + x) = R_0/T (docs/methods.md, "The budget: break-even cost"); '
            "remaining = x − Σ known costs.",
            "The price T is taken as given (not an observed matched mean); the known costs are "
            "a conditional cost model, and costs not listed are not assigned a value.",
            "Sensitivity rows transplant the relative gain g onto a historical population "
            "(rate r_0, τ ms per round): r_0·(1 + g)·τ/(τ + x); sensitivities, not forecasts.",
        ],
        arms=arms,
        cells=cells,
        sensitivity=sens,
    )


# -------------------------------------------------------------------------------------------------
# The run: options checked, ``--from`` read


def budget_run(opts: BudgetOptions) -> Result:
    """Compute the budget cells (and the sensitivity table, when asked for); return the result."""
    inputs = budget_inputs(opts)
    cells, arms = _cells(opts)
    sens: tuple[Sensitivity, ...] | None = None
    if opts.x_grid is not None:
        assert opts.rate is not None and opts.tau_ms is not None and opts.gain is not None
        sens = sensitivity_rows(opts.rate, opts.tau_ms, opts.gain, opts.x_grid)
    files = input_files([(p, None) for p in inputs])
    return budget_result(cells, sens, inputs=files, options=opts.to_json(), arms=arms)


def budget_inputs(opts: BudgetOptions) -> list[Path]:
    """Return the file a budget reads: ``--from`` (a folder's results.json), or none."""
    if opts.source is None:
        return []
    return [opts.source / "results.json" if opts.source.is_dir() else opts.source]


def _cells(opts: BudgetOptions) -> tuple[tuple[Cell, ...], tuple[str, ...]]:
    if opts.source is None:
        assert opts.base is not None and opts.delta_lo is not None
        return (direct_cell(opts.base, opts.delta_lo, opts.price_ms, opts.known_ms),), ()
    source = _read_source(opts.source)
    cells = cells_from_requalify(source, str(opts.source), opts.price_ms, opts.known_ms)
    arms = tuple(dict.fromkeys(a for c in cells for a in c.arms))
    return cells, arms


def _read_source(path: Path) -> Result:
    if path.is_dir():
        path = path / "results.json"
    try:
        return read_result(path)
    except SpecReplayError as err:
        raise SpecReplayError(f"--from: {err.message}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecReplayError(f"--from {path}: unreadable: {exc}") from None
