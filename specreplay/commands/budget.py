"""``specreplay budget``: break-even added cost of a gain, and a sensitivity table (SPEC §3.7)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specreplay.errors import SpecReplayError
from specreplay.pipelines.budget import (
    budget_result,
    cells_from_requalify,
    direct_cell,
    sensitivity_rows,
)
from specreplay.pipelines.document import input_files
from specreplay.render.files import outputs_line, write_all
from specreplay.render.tables import budget_tables
from specreplay.results.io import read_result
from specreplay.results.model import Cell, Result, Sensitivity
from specreplay.results.output import check_out, output_dir

__all__ = ["DEFAULT_X_GRID", "BudgetOptions", "budget_inputs", "budget_run", "run_budget"]

DEFAULT_X_GRID = "0,1,3"
"""Extra costs (ms per round) of the sensitivity table: the seed's columns."""


@dataclass(frozen=True)
class BudgetOptions:
    """Every option of ``specreplay budget`` but the output folder.

    Either ``base`` (R_0) and ``delta_lo`` (Δ_lo) or ``source`` (a requalify results.json);
    ``price_ms`` is T; ``known_ms`` the known added costs; ``rate``, ``tau_ms`` and ``gain`` (all
    three or none) ask for the sensitivity table over ``x_grid`` (comma-separated ms).
    """

    price_ms: float
    base: float | None = None
    delta_lo: float | None = None
    known_ms: tuple[float, ...] = ()
    source: Path | None = None
    rate: float | None = None
    tau_ms: float | None = None
    gain: float | None = None
    x_grid: str = DEFAULT_X_GRID

    def to_json(self, grid: tuple[float, ...] | None) -> dict[str, Any]:
        """Return the ``options`` entry of results.json."""
        return {
            "base": self.base,
            "delta_lo": self.delta_lo,
            "price_ms": self.price_ms,
            "known_ms": list(self.known_ms),
            "from": str(self.source) if self.source is not None else None,
            "rate": self.rate,
            "tau_ms": self.tau_ms,
            "gain": self.gain,
            "x_grid": list(grid) if grid is not None else None,
        }


def budget_run(opts: BudgetOptions) -> Result:
    """Compute the budget cells (and the sensitivity table, when asked for); return the result."""
    grid = _check(opts)
    inputs = budget_inputs(opts)
    cells, arms = _cells(opts)
    sens: tuple[Sensitivity, ...] | None = None
    if grid is not None:
        assert opts.rate is not None and opts.tau_ms is not None and opts.gain is not None
        sens = sensitivity_rows(opts.rate, opts.tau_ms, opts.gain, grid)
    return budget_result(
        cells, sens, inputs=input_files([(p, None) for p in inputs]),
        options=opts.to_json(grid), arms=arms,
    )  # fmt: skip


def budget_inputs(opts: BudgetOptions) -> list[Path]:
    """Return the file a budget reads: ``--from`` (a folder's results.json), or none."""
    if opts.source is None:
        return []
    return [opts.source / "results.json" if opts.source.is_dir() else opts.source]


def run_budget(opts: BudgetOptions, *, out: Path, force: bool) -> str:
    """Compute the budget, write results.json and TABLES.md into ``out``; return the text."""
    _check(opts)
    inputs = budget_inputs(opts)
    check_out(out, force=force, inputs=inputs)
    result = budget_run(opts)  # every input is read and checked before any write
    with output_dir(out, force=force, inputs=inputs) as tmp:
        files = write_all(result, tmp)
    return f"{budget_tables(result)}\n{outputs_line(out, files)}"


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


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SpecReplayError(f"{name}: {value:g} should be a positive number")


def _check(opts: BudgetOptions) -> tuple[float, ...] | None:
    """Check the options; return the sensitivity grid (None when no table is asked for)."""
    _positive("--price-ms", opts.price_ms)
    _positive("--base", opts.base)
    for k in opts.known_ms:
        if not (math.isfinite(k) and k >= 0):
            raise SpecReplayError(f"--known: {k:g} should be a cost ≥ 0 ms")
    direct = (opts.base is not None, opts.delta_lo is not None)
    if opts.source is not None and any(direct):
        raise SpecReplayError("--from reads R_0 and Δ_lo: give it without --base and --delta-lo")
    if opts.source is None and not all(direct):
        raise SpecReplayError("give --base and --delta-lo, or --from a requalify results.json")
    if opts.delta_lo is not None and not math.isfinite(opts.delta_lo):
        raise SpecReplayError(f"--delta-lo: {opts.delta_lo:g} should be a finite number")
    sens = {"--rate": opts.rate, "--tau-ms": opts.tau_ms, "--gain": opts.gain}
    given = [k for k, v in sens.items() if v is not None]
    if not given:
        return None
    if len(given) < 3:
        missing = [k for k in sens if k not in given]
        raise SpecReplayError(f"the sensitivity table needs {', '.join(missing)} too")
    _positive("--rate", opts.rate)
    _positive("--tau-ms", opts.tau_ms)
    assert opts.gain is not None
    if not (math.isfinite(opts.gain) and opts.gain > -1):
        raise SpecReplayError(f"--gain: {opts.gain:g} should be a relative gain > -1")
    return _grid(opts.x_grid)


def _grid(text: str) -> tuple[float, ...]:
    try:
        grid = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SpecReplayError(
            f"--x-grid: {text!r} should be comma-separated ms, e.g. 0,1,3"
        ) from None
    if not grid or any(not (math.isfinite(x) and x >= 0) for x in grid):
        raise SpecReplayError(f"--x-grid: {text!r} should list extra costs ≥ 0 ms")
    return grid
