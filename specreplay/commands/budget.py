"""``specreplay budget``: break-even added cost of a gain, and a sensitivity table.

See docs/methods.md#the-budget-break-even-cost.

:mod:`specreplay.pipelines.budget` checks the options and builds the result (:func:`budget_run`,
the Python API's ``budget``); :func:`run_budget` writes and renders it.
"""

from __future__ import annotations

from pathlib import Path

from specreplay.pipelines.budget import budget_inputs, budget_run
from specreplay.pipelines.options import DEFAULT_X_GRID, BudgetOptions
from specreplay.render.files import outputs_line, write_all
from specreplay.render.tables import budget_tables
from specreplay.results.output import check_out, output_dir

__all__ = ["DEFAULT_X_GRID", "BudgetOptions", "budget_inputs", "budget_run", "run_budget"]


def run_budget(opts: BudgetOptions, *, out: Path, force: bool) -> str:
    """Compute the budget, write results.json and TABLES.md into ``out``; return the text."""
    inputs = budget_inputs(opts)
    check_out(out, force=force, inputs=inputs)
    result = budget_run(opts)  # every input is read and checked before any write
    with output_dir(out, force=force, inputs=inputs) as tmp:
        files = write_all(result, tmp)
    return f"{budget_tables(result)}\n{outputs_line(out, files)}"
